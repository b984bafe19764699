// apps::rsi::Table — where every record of a transactional table lives (001 §4.2).
//
// A table is `records` fixed-size records spread over the storage servers' record blocks. Each
// record slot is one 64-bit header word, the payload (rounded up to whole words) and a trailer
// word holding the commit id of the payload in the slot:
//
//   header | payload ... | trailer
//
//   unlocked: commit id (bits 0..39) of the version in the slot, every other bit 0
//   locked:   lock bit (63) | owner (bits 51..61) | commit id of the version in the slot
//             (+ while a client recovers it: recovering bit (62) | recoverer (bits 40..50))
//
// so a client validates and locks a record with one compare-and-swap on the header: expected =
// the header it read (unlocked, commit id c), desired = lock_word(c, client). The owner in the
// lock word lets another client recover a record whose owner died (commit_log.hpp). One version
// per slot (n = 1 in the paper): a transaction whose snapshot is older than a record's version
// aborts.
//
// The trailer makes one read of the whole slot a consistent one (a seqlock with two version
// words): a writer that holds the lock sets the trailer to its new commit id before it writes
// any payload word, and unlocks the header (new commit id) after the last one; a reader loads
// header, payload and trailer in one ordered read (header first, trailer last:
// fabric::Endpoint::load_words) and keeps it only if the header is unlocked and its commit id
// equals the trailer. A payload word read while a writer changed it was read after the writer
// set the trailer (or before it unlocked the header), so the trailer (or the header) read
// differs. (Reading the header again after the payload would cost a round trip; a version word
// at the front only would not bracket the payload.)
//
// The dictionary (record id -> server, word offset) is the table's spec, published once in the
// registry: record id i lives on server i % servers, in slot i / servers of that server's block.
// Every client resolves a location with two integer operations, no lookup on the data path.
//
//   Table table = Table::create(node, {"bank", 1000, 8, {0, 1}});   // once, by any rank
//   Table table = Table::open(node, "bank", timeout);                // everybody else
//   Location where = table.locate(42);                               // {server 0, word 21*2}
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dfi::cluster {
class Node;
}

namespace dfi::apps::rsi {

inline constexpr std::uint64_t kLockBit = std::uint64_t{1} << 63;
inline constexpr std::uint64_t kRecoveringBit = std::uint64_t{1} << 62;
inline constexpr unsigned kCommitIdBits = 40;
inline constexpr std::uint64_t kCommitIdMask = (std::uint64_t{1} << kCommitIdBits) - 1;
inline constexpr unsigned kClientBits = 11;
inline constexpr std::size_t kMaxClients = std::size_t{1} << kClientBits;  // clients of one table
inline constexpr unsigned kRecovererShift = kCommitIdBits;
inline constexpr unsigned kOwnerShift = kCommitIdBits + kClientBits;

// The commit id of a header word, and whether it is locked.
constexpr std::uint64_t commit_id(std::uint64_t header) noexcept { return header & kCommitIdMask; }
constexpr bool locked(std::uint64_t header) noexcept { return (header & kLockBit) != 0; }
// The header of a record with commit id `cid` locked by client `owner` (< kMaxClients).
constexpr std::uint64_t lock_word(std::uint64_t cid, std::size_t owner) noexcept {
  return kLockBit | (std::uint64_t{owner} << kOwnerShift) | (cid & kCommitIdMask);
}
// The client holding a locked header.
constexpr std::size_t lock_owner(std::uint64_t header) noexcept {
  return static_cast<std::size_t>((header >> kOwnerShift) & (kMaxClients - 1));
}
// A locked header taken over by client `recoverer` to roll its owner's transaction forward.
constexpr std::uint64_t recovering_word(std::uint64_t header, std::size_t recoverer) noexcept {
  return (header & ~(std::uint64_t{kMaxClients - 1} << kRecovererShift)) | kRecoveringBit |
         (std::uint64_t{recoverer} << kRecovererShift);
}
constexpr bool recovering(std::uint64_t header) noexcept { return (header & kRecoveringBit) != 0; }
constexpr std::size_t lock_recoverer(std::uint64_t header) noexcept {
  return static_cast<std::size_t>((header >> kRecovererShift) & (kMaxClients - 1));
}

struct TableSpec {
  std::string name;                  // registry records are named after it: "rsi/<name>/..."
  std::uint64_t records = 0;         // record ids 0 .. records-1
  std::size_t payload_bytes = 8;     // bytes of one record's payload (1 .. kMaxPayloadBytes)
  std::vector<int> servers;          // ranks of the storage servers, in server-index order
};

// Largest payload of one record (a few records of this size fit one active message of the 2PC
// baseline).
inline constexpr std::size_t kMaxPayloadBytes = 2048;

struct Location {
  std::size_t server = 0;  // index into TableSpec::servers
  std::size_t word = 0;    // the header word's index in that server's block
};

// Immutable once created; copies are cheap enough for set-up and safe to share between threads.
class Table {
 public:
  Table() = default;  // no table; assign one from create() or open()
  // Validates `spec` and publishes it. Throws dfi::Error: invalid_argument (no name, no records,
  // payload size out of range, no server, a server outside the cluster or listed twice; the
  // message names the table and the problem), already_exists (a table of that name exists).
  static Table create(cluster::Node& node, TableSpec spec);
  // The table `name` as published; waits up to `timeout` for it. Throws dfi::Error: not_found
  // (not published within the timeout), protocol (a malformed record).
  static Table open(cluster::Node& node, const std::string& name, std::chrono::milliseconds timeout);

  // The table as created (or as published, for open). An empty spec for a default Table.
  const TableSpec& spec() const noexcept { return spec_; }
  const std::string& name() const noexcept { return spec_.name; }
  // Number of storage servers.
  std::size_t servers() const noexcept { return spec_.servers.size(); }
  // Words of one slot: the header, the payload and the trailer.
  std::size_t slot_words() const noexcept { return slot_words_; }
  // Words of one payload (payload_bytes rounded up); the payload starts at slot word 1 and the
  // trailer is slot word 1 + payload_words().
  std::size_t payload_words() const noexcept { return slot_words_ - 2; }
  // Words of server `server`'s block (its share of the records).
  std::size_t block_words(std::size_t server) const noexcept;
  // The index of `rank` among the servers, or -1.
  int server_index(int rank) const noexcept;
  // Where record `id` (< records) lives. No check: callers validate ids where they take them.
  Location locate(std::uint64_t id) const noexcept {
    const std::size_t n = spec_.servers.size();
    return {static_cast<std::size_t>(id % n), static_cast<std::size_t>(id / n) * slot_words_};
  }

  // Registry record names of this table.
  static std::string spec_record(const std::string& table);
  static std::string block_record(const std::string& table, std::size_t server);

 private:
  explicit Table(TableSpec spec);
  TableSpec spec_;
  std::size_t slot_words_ = 0;
};

}  // namespace dfi::apps::rsi
