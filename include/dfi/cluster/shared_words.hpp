// cluster::SharedWords — 64-bit words in one rank's memory that other ranks read, add to, swap and
// write: the one shared-counter and remote-word service of DFI (the sequencer of ordered replicate
// flows, barrier counters, the timestamp bit-vector and the record blocks of apps/rsi).
//
//   host rank:   words.host(node, "flow/x/sequencer", 2);
//   every user:  words.attach(node, worker, "flow/x/sequencer", host_rank, timeout);
//                words.fetch_add(0, 1, &old);  words.load(0, value);
//   leaving:     each user sets a departure word of its own; the host keeps the words until
//                wait_for_departures() says every user left (or died, or time ran out).
//
// The host publishes the words' registered region under a registry record; users attach to it
// through an endpoint of their own worker (the host may attach to its own words too). Reads are
// Endpoint::load_word (a load where the region maps), additions Endpoint::fetch_add (by active
// message where atomics are emulated). The host's own reads are local loads. Owned by one thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/memory.hpp"

namespace dfi::fabric {
class Worker;
}

namespace dfi::cluster {

class Node;

class SharedWords {
 public:
  SharedWords() = default;
  SharedWords(SharedWords&&) = default;
  SharedWords& operator=(SharedWords&&) = default;

  // Allocates `count` zeroed words in this process, lets `fill` (if given) set their first
  // values (in `count` zeroed words of its own, which host() then stores into the hosted ones;
  // keep no pointer to them), and publishes them as `record`: nobody can attach before `fill`
  // returned. Throws
  // dfi::Error(already_exists) when the record exists.
  void host(Node& node, const std::string& record, std::size_t count,
            const std::function<void(std::uint64_t* words)>& fill = {});
  // Connects to the words rank `host_rank` published as `record`, through `worker` (the calling
  // thread's). Waits up to `timeout` for the record. Throws dfi::Error: timeout (naming the
  // record), peer_failed, protocol (a malformed record).
  void attach(Node& node, fabric::Worker& worker, const std::string& record, int host_rank,
              std::chrono::milliseconds timeout);
  // Drops the connection (not the hosted words).
  void detach();

  bool hosted() const noexcept { return region_.has_value(); }
  bool attached() const noexcept { return remote_.valid(); }

  // Word `index`: the host's local load where it hosts them, else Endpoint::load_word. Errors:
  // peer_failed (the host died), invalid_argument (no such word, not attached).
  Status load(std::size_t index, std::uint64_t& value);
  // Adds `add` to word `index` through the connection; `old` (may be null) receives the value
  // before. Errors: as load().
  Status fetch_add(std::size_t index, std::uint64_t add, std::uint64_t* old = nullptr);
  // Compare-and-swap of word `index`: becomes `desired` if it was `expected`; `old` (may be null)
  // receives the value before (== expected when it swapped). Errors: as load().
  Status compare_swap(std::size_t index, std::uint64_t expected, std::uint64_t desired,
                      std::uint64_t* old = nullptr);
  // Copies `bytes` starting at word `index` into `destination` (Endpoint::get; the host's own
  // copy where it hosts them). No order among the bytes of one read: a word written meanwhile may
  // be seen old or new. Errors: as load(), invalid_argument (past the last word).
  Status read(std::size_t index, void* destination, std::size_t bytes);
  // Writes `bytes` from `source` starting at word `index` (Endpoint::put: returns when `source`
  // may be reused; visible at the host after flush()). Errors: as read().
  Status write(std::size_t index, const void* source, std::size_t bytes);
  // Waits until everything added or written so far reached the host. Errors: peer_failed.
  Status flush();

  // Ordered reads and writes of several words and non-blocking compare-and-swap, for protocols
  // that issue many operations towards several hosts and complete them together (one round trip
  // instead of one per operation: apps/rsi's reads, locks and installs).
  //
  // Reads `count` words from word `index` into `values` (Endpoint::load_words): the first word is
  // read before every other and the last after every other, each with acquire order (the host's
  // own loads, in ascending order, where it hosts them). Errors: as read().
  Status load_words(std::size_t index, std::uint64_t* values, std::size_t count);
  // Non-blocking load_words: `values` holds the words once the Request is done.
  fabric::Request load_words_async(std::size_t index, std::uint64_t* values, std::size_t count);
  // Writes `count` words from `values` at word `index` in ascending order, each a release store,
  // before any word operation issued after it through this connection (Endpoint::store_words_async);
  // visible at the host once the Request is done. Errors: as write().
  fabric::Request store_words_async(std::size_t index, const std::uint64_t* values, std::size_t count);
  // Non-blocking compare_swap(): `*old` (required) receives the value before once the Request is
  // done. Errors: as load().
  fabric::Request compare_swap_async(std::size_t index, std::uint64_t expected, std::uint64_t desired,
                                     std::uint64_t* old);
  // Keeps the operations issued from now on to send them to the host as one message at
  // release() (Endpoint::hold_word_ops: where the transport emulates them, one message and one
  // reply for all). No effect unattached.
  void hold();
  // Sends what hold() kept. Errors: peer_failed.
  Status release();
  // The hosted words (host only; null elsewhere): for the host's own CPU, which must use atomic
  // accesses (std::atomic_ref) on words that peers change concurrently.
  std::uint64_t* local() const noexcept {
    return region_ ? static_cast<std::uint64_t*>(region_->data()) : nullptr;
  }
  // Number of words: hosted, or of the attached region.
  std::size_t size() const noexcept {
    return (region_ ? region_->size() : remote_.size()) / sizeof(std::uint64_t);
  }

  // Host: waits until every user i (0 <= i < ranks.size(), on rank ranks[i]) either set its
  // departure word `first + i` to non-zero or died, or `deadline` passes; true when every user
  // left. (One word per user, not one counter: a user that left and then exited must not count
  // twice.)
  bool wait_for_departures(Node& node, std::size_t first, const std::vector<int>& ranks,
                           const Deadline& deadline, const BackoffSettings& backoff);

 private:
  std::optional<fabric::MemoryRegion> region_;  // hosted words
  fabric::Endpoint endpoint_;                   // to the host's rank
  fabric::RemoteMemory remote_;
};

}  // namespace dfi::cluster
