// apps::rsi::CommitLog — per-client redo records that let other clients recover the records a
// dead RSI client held locked (the "beyond the paper"; src/README.md §9).
//
// A client that dies between locking its write set and releasing it would block those records
// forever. So every lock word names its owner (table.hpp: lock_word), and before a client
// installs anything it writes a commit record into its own slot of the table's log, hosted in
// the memory of the timestamp service's rank (a storage server), with one put and one flush:
//
//   slot = [checksum][commit id][count] count x ([record id][header read][new payload words])
//
// The flush completing is the commit point. Whoever recovers a record locked by a dead owner
// reads the owner's slot: when it holds a valid record (the checksum matches: a put cut short by
// the owner's death does not) that lists this record with the commit id the lock word carries,
// the owner's transaction committed and the record is rolled forward (its new payload written,
// then the header set to the new commit id); otherwise the transaction had not committed and the
// record is rolled back (the header unlocked, old version intact). A (record, old commit id) pair
// is locked at most once by a transaction that commits (the record's commit id moves on), so a
// stale record from the owner's earlier transaction never matches a later lock.
//
// Words of the log: [clients rank words (rank + 1 of each client, set when it attaches)]
// [clients slots]. Each client writes only its own slot; others only read it.
//
//   host:    cluster::SharedWords log = CommitLog::host(node, "bank", clients, payload_bytes);
//   client:  CommitLog log(node, worker, "bank", host_rank, i, clients, payload_bytes, timeout);
//            log.start(cid); log.add(id, header, payload) ...; log.publish();   // committed
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
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

class CommitLog {
 public:
  // A commit record as read back: valid() when complete (checksum matched).
  struct Record {
    std::uint64_t cid = 0;
    std::size_t count = 0;
    bool valid = false;
    // Entry `e`: the record id, the header its owner read (commit id of the old version), and
    // the new payload (payload_words words).
    std::uint64_t id(std::size_t e) const noexcept { return words[3 + e * entry_words]; }
    std::uint64_t old_header(std::size_t e) const noexcept { return words[3 + e * entry_words + 1]; }
    const std::uint64_t* payload(std::size_t e) const noexcept { return &words[3 + e * entry_words + 2]; }
    std::vector<std::uint64_t> words;  // the slot as read
    std::size_t entry_words = 0;
  };

  // Hosts the log of table `table` for `clients` clients and payloads of `payload_bytes`, as
  // "rsi/<table>/log". The returned words must live until every client is done. Throws
  // dfi::Error: invalid_argument (no clients, more than kMaxClients), already_exists.
  static cluster::SharedWords host(cluster::Node& node, const std::string& table, std::size_t clients,
                                   std::size_t payload_bytes);

  // Attaches client `client` to the log of `table` on `host_rank` and records this rank as the
  // client's (a put and a flush). Throws dfi::Error: timeout, peer_failed, invalid_argument
  // (client out of range), protocol (the log's size does not match clients and payload).
  CommitLog(cluster::Node& node, fabric::Worker& worker, const std::string& table, int host_rank, std::size_t client,
            std::size_t clients, std::size_t payload_bytes, std::chrono::milliseconds timeout);

  // Builds a commit record in local memory: start, then one add per written record (at most
  // kMaxRecordsPerTxn), then publish. No allocation.
  void start(std::uint64_t cid) noexcept;
  void add(std::uint64_t id, std::uint64_t old_header, const void* payload) noexcept;
  // Writes the record into this client's slot with one put and waits for the flush: from then on
  // the transaction is committed, whoever installs it. Errors: peer_failed (the log's rank).
  Status publish();

  // The rank of every client (-1 for one that never attached), with one get. Errors: peer_failed.
  Status ranks(std::vector<int>& ranks);
  // Reads client `client`'s slot into `record` (allocates: recovery only). Errors: peer_failed.
  Status read(std::size_t client, Record& record);

  std::size_t clients() const noexcept { return clients_; }

 private:
  cluster::SharedWords words_;
  std::size_t client_ = 0;
  std::size_t clients_ = 0;
  std::size_t entry_words_ = 0;
  std::vector<std::uint64_t> record_;  // the record being built (a whole slot)
  std::size_t length_ = 0;             // its words so far
};

}  // namespace dfi::apps::rsi
