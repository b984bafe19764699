// apps::rsi timestamps — the paper's pre-assigned bit-vector timestamp service (001 §4.2).
//
// Timestamps 1, 2, 3, ... are dealt round robin to the `clients` clients: client i (0-based)
// owns timestamps i+1, i+1+clients, i+1+2*clients, ... and uses them in order, without asking
// anybody: a transaction that writes takes the client's next one as its commit id when it
// commits. Bit t-1 of a vector in the service's memory says that timestamp t is finished (its
// transaction committed and installed, or aborted, or the client skipped it): its owner sets it
// with one remote fetch-add. The read timestamp (a transaction's snapshot) is the highest t such
// that bits 1..t are all set: every version with a commit id <= t is installed, none is still
// being written. A client that leaves sets its retirement word to its next unused timestamp; its
// bits from there on count as set, so it does not hold everybody's snapshot back.
//
// The paper assumes that clients progress at about the same rate; where they do not, the read
// timestamp waits for the slowest, and every version a faster client installs stays newer than
// everybody's snapshot until the slowest catches up. So a client skips (the bit-skipping the
// paper leaves open, 001 §4.2): when it finds itself holding the read timestamp back (its own
// next timestamp is the first unfinished one) it marks its timestamps up to the highest finished
// one it saw as finished, and a commit id is always above everything its transaction read. A
// skipped timestamp was never used, so no version carries it; skipping costs one fetch-add per
// vector word.
//
// Words of the service (cluster::SharedWords, hosted by one rank): [clients retirement words]
// [vector words]. Timestamps are not reused: a run has `bits` of them in all (an error says so
// when they run out; the paper's wrap-around bookkeeping is not implemented).
//
//   host:    TimestampService::host(node, "bank", clients, bits);
//   client:  Timestamps ts(node, worker, "bank", host_rank, i, clients, timeout);
//            std::uint64_t snapshot = 0, cid = 0;
//            ts.snapshot(snapshot); ... reads ...; ts.take(newest_read, cid); ... ts.finish(cid);
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dfi/cluster/shared_words.hpp"
#include "dfi/common/error.hpp"

namespace dfi::fabric {
class Worker;
}
namespace dfi::cluster {
class Node;
}

namespace dfi::apps::rsi {

// The hosting side: owns the words; read_timestamp() is for the host's own thread.
class TimestampService {
 public:
  // Hosts the service of table `table` for `clients` clients and `bits` timestamps (rounded up to
  // whole words) in this process, published as "rsi/<table>/timestamps". Throws dfi::Error:
  // invalid_argument (no clients, no bits), already_exists.
  static TimestampService host(cluster::Node& node, const std::string& table, std::size_t clients,
                               std::uint64_t bits);
  // The highest consecutive finished timestamp, read locally (for progress reports and checks).
  std::uint64_t read_timestamp() const;
  // Number of clients the service was hosted for.
  std::size_t clients() const noexcept { return clients_; }

 private:
  cluster::SharedWords words_;
  std::size_t clients_ = 0;
};

// One client's view of the service. Owned by the thread owning `worker`.
class Timestamps {
 public:
  // Attaches client `client` (< clients) to the service of `table` on `host_rank`; waits up to
  // `timeout` for it. Throws dfi::Error: timeout, invalid_argument (client out of range),
  // peer_failed.
  Timestamps(cluster::Node& node, fabric::Worker& worker, const std::string& table, int host_rank,
             std::size_t client, std::size_t clients, std::chrono::milliseconds timeout);

  // The read timestamp for a transaction (read_timestamp()); when this client holds it back,
  // skips first (see above) and reads it again. Errors: peer_failed.
  Status snapshot(std::uint64_t& snapshot);
  // This client's next timestamp above `above` (a commit id must exceed the snapshot and every
  // commit id its transaction read); skips the ones at or below it. Errors: invalid_argument
  // when the vector's timestamps are used up (naming the table and the size), peer_failed.
  Status take(std::uint64_t above, std::uint64_t& timestamp);
  // Marks `timestamp` (one this client took with begin()) finished: one remote fetch-add that sets
  // its bit. Errors: peer_failed (the service's rank died).
  Status finish(std::uint64_t timestamp);
  // The read timestamp: the highest consecutive finished timestamp. Reads the retirement words
  // and the vector from the last known read timestamp on (a get each). Errors: peer_failed.
  Status read_timestamp(std::uint64_t& timestamp);
  // Leaves: timestamps this client would take from now on count as finished. Errors: peer_failed.
  Status retire();
  // Retires client `client`, which died, for it: all its timestamps count as finished (unless it
  // had retired itself). Safe because a dead client's versions are either never installed or
  // installed by recovery while their records stay locked (no reader sees them before). Errors:
  // peer_failed, invalid_argument (no such client).
  Status retire_dead(std::size_t client);

  // This client's index.
  std::size_t client() const noexcept { return client_; }

 private:
  std::string table_;
  cluster::SharedWords words_;
  std::size_t client_ = 0;
  std::size_t clients_ = 0;
  std::uint64_t bits_ = 0;
  std::uint64_t next_ = 0;      // the next timestamp this client takes
  std::uint64_t known_ = 0;     // read timestamp known so far (only grows)
  std::vector<std::uint64_t> scratch_;  // retirement words, then a window of the vector
  std::size_t window_first_ = 0;        // the window's first vector word, and its words
  std::size_t window_count_ = 0;

  // Marks this client's timestamps below `limit` finished (one fetch-add per word) and moves
  // next_ to its first one at or above `limit`.
  Status skip_to(std::uint64_t limit);
};

// The scan shared by the service and its clients: the highest t >= `from` such that timestamps
// 1..t are finished, given `retired` (clients words) and the vector words starting at word
// `first_word` (`words`). Stops at the first unfinished timestamp or the end of `words`.
std::uint64_t consecutive_finished(std::uint64_t from, const std::uint64_t* retired, std::size_t clients,
                                   const std::uint64_t* words, std::size_t first_word, std::size_t count);

}  // namespace dfi::apps::rsi
