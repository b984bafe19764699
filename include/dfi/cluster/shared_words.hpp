// cluster::SharedWords — a few 64-bit words in one rank's memory that other ranks read and add to:
// the one shared-counter service of DFI (the sequencer of ordered replicate flows, barrier
// counters; a timestamp service or a sequencer of a replicated service next).
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

  // Allocates `count` zeroed words in this process and publishes them as `record`. Throws
  // dfi::Error(already_exists) when the record exists.
  void host(Node& node, const std::string& record, std::size_t count);
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
  // Waits until everything added so far reached the host. Errors: peer_failed.
  Status flush();

  // Host: waits until every user i (0 <= i < ranks.size(), on rank ranks[i]) either set its
  // departure word `first + i` to non-zero or died, or `deadline` passes. (One word per user, not
  // one counter: a user that left and then exited must not count twice.)
  void wait_for_departures(Node& node, std::size_t first, const std::vector<int>& ranks,
                           const Deadline& deadline, const BackoffSettings& backoff);

 private:
  std::optional<fabric::MemoryRegion> region_;  // hosted words
  fabric::Endpoint endpoint_;                   // to the host's rank
  fabric::RemoteMemory remote_;
};

}  // namespace dfi::cluster
