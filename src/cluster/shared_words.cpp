#include "dfi/cluster/shared_words.hpp"

#include <atomic>
#include <cstring>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/registry/client.hpp"

namespace dfi::cluster {

void SharedWords::host(Node& node, const std::string& record, std::size_t count,
                       const std::function<void(std::uint64_t* words)>& fill) {
  region_.emplace(node.fabric(), count * sizeof(std::uint64_t));  // zeroed
  if (fill) {
    // Peers' operations on these words are applied by this process's threads (the progress
    // thread, where the transport emulates them) with atomic accesses. The registry record orders
    // them after the fill, but through other processes; release stores of the filled values make
    // that order one the memory model (and TSan) can see. The fill goes into memory of its own
    // first, so that this thread touches the words with those stores only: TSan checks an atomic
    // read-modify-write against earlier plain accesses to its word before it applies the
    // operation's acquire, so a plain read or write here would be reported as a race with a
    // peer's compare-and-swap that the release store does order.
    std::vector<std::uint64_t> filled(count);
    fill(filled.data());
    auto* words = static_cast<std::uint64_t*>(region_->data());
    for (std::size_t i = 0; i < count; ++i) std::atomic_ref(words[i]).store(filled[i], std::memory_order_release);
  }
  node.registry().publish(record, region_->descriptor().serialize());
}

void SharedWords::attach(Node& node, fabric::Worker& worker, const std::string& record, int host_rank,
                         std::chrono::milliseconds timeout) {
  const std::string descriptor = node.wait_for(record, timeout);
  endpoint_ = node.connect(worker, host_rank);
  remote_ = endpoint_.attach(fabric::RegionDescriptor::parse(descriptor));
}

void SharedWords::detach() {
  remote_ = fabric::RemoteMemory();
  endpoint_ = fabric::Endpoint();
}

Status SharedWords::load(std::size_t index, std::uint64_t& value) {
  if (region_) {
    if (index * sizeof value >= region_->size()) {
      return {Errc::invalid_argument, "shared words: no word " + std::to_string(index)};
    }
    value = std::atomic_ref(static_cast<std::uint64_t*>(region_->data())[index]).load(std::memory_order_acquire);
    return {};
  }
  if (!remote_.valid()) return {Errc::invalid_argument, "shared words: not attached"};
  return endpoint_.load_word(remote_, index * sizeof value, value);
}

Status SharedWords::fetch_add(std::size_t index, std::uint64_t add, std::uint64_t* old) {
  if (!remote_.valid()) return {Errc::invalid_argument, "shared words: not attached"};
  return endpoint_.fetch_add(remote_, index * sizeof(std::uint64_t), add, old);
}

Status SharedWords::compare_swap(std::size_t index, std::uint64_t expected, std::uint64_t desired,
                                 std::uint64_t* old) {
  if (!remote_.valid()) return {Errc::invalid_argument, "shared words: not attached"};
  return endpoint_.compare_swap(remote_, index * sizeof(std::uint64_t), expected, desired, old);
}

Status SharedWords::read(std::size_t index, void* destination, std::size_t bytes) {
  const std::size_t offset = index * sizeof(std::uint64_t);
  if (region_ && !remote_.valid()) {
    if (offset + bytes > region_->size()) {
      return {Errc::invalid_argument, "shared words: read of " + std::to_string(bytes) + " bytes at word " +
                                          std::to_string(index) + " passes the last word"};
    }
    std::memcpy(destination, static_cast<const std::byte*>(region_->data()) + offset, bytes);
    return {};
  }
  if (!remote_.valid()) return {Errc::invalid_argument, "shared words: not attached"};
  return endpoint_.get(destination, bytes, remote_, offset);
}

Status SharedWords::write(std::size_t index, const void* source, std::size_t bytes) {
  if (!remote_.valid()) return {Errc::invalid_argument, "shared words: not attached"};
  return endpoint_.put(source, bytes, remote_, index * sizeof(std::uint64_t));
}

Status SharedWords::flush() {
  if (!remote_.valid()) return {};
  return endpoint_.flush();
}

Status SharedWords::load_words(std::size_t index, std::uint64_t* values, std::size_t count) {
  return load_words_async(index, values, count).wait();
}

fabric::Request SharedWords::load_words_async(std::size_t index, std::uint64_t* values, std::size_t count) {
  if (region_ && !remote_.valid()) {
    if (count == 0 || (index + count) * sizeof(std::uint64_t) > region_->size()) {
      return fabric::Request::completed({Errc::invalid_argument, "shared words: load of " + std::to_string(count) +
                                                                     " words at word " + std::to_string(index) +
                                                                     " passes the last word"});
    }
    auto* words = static_cast<std::uint64_t*>(region_->data());
    for (std::size_t i = 0; i < count; ++i) values[i] = std::atomic_ref(words[index + i]).load(std::memory_order_acquire);
    return {};
  }
  if (!remote_.valid()) return fabric::Request::completed({Errc::invalid_argument, "shared words: not attached"});
  return endpoint_.load_words_async(remote_, index * sizeof(std::uint64_t), values, count);
}

fabric::Request SharedWords::store_words_async(std::size_t index, const std::uint64_t* values, std::size_t count) {
  if (!remote_.valid()) return fabric::Request::completed({Errc::invalid_argument, "shared words: not attached"});
  return endpoint_.store_words_async(values, count, remote_, index * sizeof(std::uint64_t));
}

fabric::Request SharedWords::compare_swap_async(std::size_t index, std::uint64_t expected, std::uint64_t desired,
                                                std::uint64_t* old) {
  if (!remote_.valid()) return fabric::Request::completed({Errc::invalid_argument, "shared words: not attached"});
  return endpoint_.compare_swap_async(remote_, index * sizeof(std::uint64_t), expected, desired, old);
}

void SharedWords::hold() {
  if (remote_.valid()) endpoint_.hold_word_ops();
}

Status SharedWords::release() {
  if (!remote_.valid()) return {};
  return endpoint_.release_word_ops();
}

bool SharedWords::wait_for_departures(Node& node, std::size_t first, const std::vector<int>& ranks,
                                      const Deadline& deadline, const BackoffSettings& backoff) {
  Backoff waiting(backoff, reinterpret_cast<std::uintptr_t>(this));
  for (;;) {
    std::size_t gone = 0;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      std::uint64_t left = 0;
      if (!load(first + i, left)) return false;
      if (left != 0 || !node.fabric().peer_failure(ranks[i]).empty()) ++gone;
    }
    if (gone >= ranks.size()) return true;
    if (deadline.expired()) return false;
    waiting.pause();
  }
}

}  // namespace dfi::cluster
