#include "dfi/apps/rsi/timestamps.hpp"

#include <algorithm>
#include <atomic>

#include "dfi/apps/rsi/table.hpp"
#include "dfi/cluster/node.hpp"

namespace dfi::apps::rsi {
namespace {

constexpr std::size_t kWindowWords = 16;  // vector words a client reads per get

std::string service_record(const std::string& table) { return "rsi/" + table + "/timestamps"; }

std::size_t vector_words(std::uint64_t bits) { return static_cast<std::size_t>((bits + 63) / 64); }

}  // namespace

std::uint64_t consecutive_finished(std::uint64_t from, const std::uint64_t* retired, std::size_t clients,
                                   const std::uint64_t* words, std::size_t first_word, std::size_t count) {
  std::uint64_t t = from;
  for (;;) {
    const std::uint64_t bit = t;  // timestamp t + 1 is bit t
    const std::size_t word = static_cast<std::size_t>(bit / 64);
    if (word < first_word || word >= first_word + count) return t;
    if (bit % 64 == 0 && words[word - first_word] == ~std::uint64_t{0}) {
      t += 64;  // a whole word finished
      continue;
    }
    const bool set = ((words[word - first_word] >> (bit % 64)) & 1) != 0;
    const std::uint64_t retired_from = retired[bit % clients];
    if (!set && (retired_from == 0 || t + 1 < retired_from)) return t;
    ++t;
  }
}

TimestampService TimestampService::host(cluster::Node& node, const std::string& table, std::size_t clients,
                                        std::uint64_t bits) {
  if (bits > kCommitIdMask) {
    throw Error(Errc::invalid_argument, "rsi table '" + table + "': " + std::to_string(bits) +
                                            " timestamps do not fit the lock word's commit id (at most " +
                                            std::to_string(kCommitIdMask) + ")");
  }
  if (clients == 0 || bits == 0) {
    throw Error(Errc::invalid_argument, "rsi table '" + table + "': the timestamp service needs clients and bits (got " +
                                            std::to_string(clients) + " clients, " + std::to_string(bits) + " bits)");
  }
  TimestampService service;
  service.clients_ = clients;
  service.words_.host(node, service_record(table), clients + vector_words(bits));
  return service;
}

std::uint64_t TimestampService::read_timestamp() const {
  const std::uint64_t* words = words_.local();
  std::vector<std::uint64_t> retired(clients_);
  for (std::size_t i = 0; i < clients_; ++i) {
    retired[i] = std::atomic_ref(const_cast<std::uint64_t&>(words[i])).load(std::memory_order_acquire);
  }
  const std::size_t count = words_.size() - clients_;
  std::vector<std::uint64_t> vector(count);
  for (std::size_t i = 0; i < count; ++i) {
    vector[i] = std::atomic_ref(const_cast<std::uint64_t&>(words[clients_ + i])).load(std::memory_order_acquire);
  }
  return consecutive_finished(0, retired.data(), clients_, vector.data(), 0, count);
}

Timestamps::Timestamps(cluster::Node& node, fabric::Worker& worker, const std::string& table, int host_rank,
                       std::size_t client, std::size_t clients, std::chrono::milliseconds timeout)
    : table_(table), client_(client), clients_(clients), next_(client + 1) {
  if (client >= clients) {
    throw Error(Errc::invalid_argument, "rsi table '" + table + "': client " + std::to_string(client) +
                                            " of only " + std::to_string(clients) + " clients");
  }
  words_.attach(node, worker, service_record(table), host_rank, timeout);
  if (words_.size() <= clients) {
    throw Error(Errc::protocol, "rsi table '" + table + "': the timestamp service has " + std::to_string(words_.size()) +
                                    " words, not enough for " + std::to_string(clients) + " clients");
  }
  bits_ = static_cast<std::uint64_t>(words_.size() - clients) * 64;
  scratch_.resize(clients + kWindowWords);
}

Status Timestamps::snapshot(std::uint64_t& snapshot) {
  if (Status s = read_timestamp(snapshot); !s) return s;
  if (snapshot + 1 != next_) return {};
  // This client holds everybody back: skip to the highest finished timestamp in the window read.
  const std::uint64_t* window = scratch_.data() + clients_;
  std::uint64_t frontier = 0;
  for (std::size_t w = window_count_; w-- > 0 && frontier == 0;) {
    if (window[w] != 0) {
      frontier = (window_first_ + w) * 64 + (63 - static_cast<std::uint64_t>(__builtin_clzll(window[w]))) + 1;
    }
  }
  if (frontier <= next_) return {};  // nobody is ahead of this client
  if (Status s = skip_to(frontier); !s) return s;
  return read_timestamp(snapshot);
}

Status Timestamps::take(std::uint64_t above, std::uint64_t& timestamp) {
  if (next_ <= above) {
    if (Status s = skip_to(above + 1); !s) return s;
  }
  if (next_ > bits_) {
    return {Errc::invalid_argument, "rsi table '" + table_ + "': client " + std::to_string(client_) +
                                        " used up its timestamps (the vector has " + std::to_string(bits_) +
                                        " bits; raise --timestamps)"};
  }
  timestamp = next_;
  next_ += clients_;
  return {};
}

Status Timestamps::skip_to(std::uint64_t limit) {
  limit = std::min(limit, bits_ + 1);
  std::size_t word = 0;
  std::uint64_t mask = 0;
  for (; next_ < limit; next_ += clients_) {
    const std::uint64_t bit = next_ - 1;
    if (mask != 0 && bit / 64 != word) {
      if (Status s = words_.fetch_add(clients_ + word, mask); !s) return s;
      mask = 0;
    }
    word = static_cast<std::size_t>(bit / 64);
    mask |= std::uint64_t{1} << (bit % 64);
  }
  if (mask != 0) return words_.fetch_add(clients_ + word, mask);
  return {};
}

Status Timestamps::finish(std::uint64_t timestamp) {
  const std::uint64_t bit = timestamp - 1;
  return words_.fetch_add(clients_ + static_cast<std::size_t>(bit / 64), std::uint64_t{1} << (bit % 64));
}

Status Timestamps::read_timestamp(std::uint64_t& timestamp) {
  // The retirement words and the first window are read together (one round trip). Both only
  // grow, so whatever order they are read in, every timestamp found finished was finished by the
  // time of the later read.
  fabric::Request retired;
  words_.hold();  // both reads in one message where the transport emulates them
  if (clients_ <= fabric::kMaxWordOpWords) {
    retired = words_.load_words_async(0, scratch_.data(), clients_);
  } else if (Status s = words_.read(0, scratch_.data(), clients_ * sizeof(std::uint64_t)); !s) {
    (void)words_.release();
    return s;
  }
  const std::size_t total = words_.size() - clients_;
  for (;;) {
    const std::size_t first = static_cast<std::size_t>(known_ / 64);
    const std::size_t count = std::min(kWindowWords, total - first);
    std::uint64_t* window = scratch_.data() + clients_;
    fabric::Request read = words_.load_words_async(clients_ + first, window, count);
    (void)words_.release();  // a failure shows in the waits
    Status s = read.wait();
    if (Status r = retired.wait(); !r) return r;
    if (!s) return s;
    window_first_ = first;
    window_count_ = count;
    const std::uint64_t reached = consecutive_finished(known_, scratch_.data(), clients_, window, first, count);
    known_ = reached;
    // Stopped inside the window (an unfinished timestamp), or at the vector's end: done.
    if (reached < (first + count) * 64 || first + count >= total) break;
  }
  timestamp = known_;
  return {};
}

Status Timestamps::retire_dead(std::size_t client) {
  if (client >= clients_) {
    return {Errc::invalid_argument, "rsi table '" + table_ + "': no client " + std::to_string(client) + " to retire"};
  }
  return words_.compare_swap(client, 0, client + 1);
}

Status Timestamps::retire() {
  // A fetch-add, not a put: the word is 0 until now and only this client writes it.
  return words_.fetch_add(client_, next_);
}

}  // namespace dfi::apps::rsi
