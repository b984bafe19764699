// apps::rsi::Client — a transaction's client side, where the transaction logic runs (001 §4.2).
//
// One Client per thread, on the thread's own fabric::Worker (the 2PC client installs a handler
// for its replies on that worker: one client per worker). A transaction is
//
//   client.begin();                          // takes the snapshot (read timestamp)
//   client.read(id, &value);                 // Errc::retry: aborted (see below); begin again
//   client.write(id, &new_value);            // buffered until commit; only records read before
//   client.insert(id, &value);               // a pre-allocated free slot: reads only its header
//   client.commit();                         // ok: committed and visible; Errc::retry: aborted
//
// Snapshot isolation with one version per record (n = 1 in the paper): a read that finds the
// record locked aborts the transaction; so does one that finds a version newer than the
// snapshot, unless a later snapshot covers it and every record read so far is unchanged (each
// header is loaded again; then all reads are the latest versions at the later snapshot, and the
// transaction goes on with it — beyond the paper, which always aborts). Commit takes the
// client's next timestamp above everything read as commit id, validates and locks every written
// record, installs the new versions, unlocks, and marks the timestamp finished; a record changed
// since it was read makes commit release what it locked and abort (first committer wins).
// Either protocol:
//
//   Protocol::rsi     one-sided, the storage servers' CPUs do nothing: a read is one ordered
//                     load of the record's whole slot, header, payload and trailer (table.hpp: a
//                     version installed meanwhile is detected, not returned torn); commit is one
//                     compare-and-swap per written record (expected: the header read; new:
//                     lock_word(same commit id, this client)), then the commit record
//                     (commit_log.hpp: one ordered store), then per record the trailer, the
//                     payload and a compare-and-swap that installs the commit id and releases the
//                     lock (one connection applies them in that order). (The paper installs
//                     header and payload with one write; UCX gives no byte order inside one put,
//                     so a reader could see the new header with half the old payload:
//                     ../shared/UCX-NOTES.md.) Each step's operations — the reads of read_many,
//                     the locks, the installs — are issued together and completed together, and
//                     where the transport emulates them (tcp) the ones to one server travel as
//                     one message (cluster::SharedWords::hold): a bank transfer is 6 sequential
//                     round trips (snapshot, reads, locks, commit record, installs, finish).
//   Protocol::two_pc  traditional SI with two-phase commit over two-sided messages: a read is a
//                     request the server answers (read_many: one request per server, together);
//                     commit sends one prepare per involved server (its CPU validates and locks),
//                     then commit (install + unlock) or abort: 5 round trips per bank transfer.
//
// Recovery (RSI, beyond the paper): every lock word names its owner, and a client writes a
// commit record (commit_log.hpp: the new versions, one put + flush) after locking and before
// installing. When a client's begin() sees that some rank was declared dead (the cluster's
// liveness, fabric::FailureWatch: one atomic load per begin), it recovers the dead clients:
// retires their timestamps (so the read timestamp moves on) and scans the table for records
// they hold locked; each is rolled forward from the owner's commit record if that record lists
// it (the transaction had committed), or else rolled back (unlocked, old version intact). A
// roll-forward first takes the lock over (recovering bit + recoverer in the lock word, one
// compare-and-swap), so two recoverers never install the same record; a recoverer that dies
// mid-way is itself recovered the same way; a record met locked later by a client known dead
// (a lock still in flight when it died) is recovered on the spot. Owners on live ranks are never recovered: a lease
// for a live but silent client would need fencing its later writes (not done). 2PC-SI has no
// such recovery (a client dying between its commit messages is 2PC's blocking case).
//
// Both use the same timestamp service (the paper does the same for fairness). Return values of
// every call: ok; Errc::retry (bare, no message: the transaction aborted and is over — a
// conflict, not a failure); invalid_argument (no transaction open, record id out of range, more
// than kMaxRecordsPerTxn records, a write to a record not read, timestamps used up; 2PC: the
// records of one server do not fit one message, fabric::kMaxAmBytes); peer_failed /
// timeout naming the storage server or the timestamp service (the transaction is over; the
// client should stop); protocol (a malformed reply). Nothing on the data path allocates except
// error messages.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dfi/apps/rsi/table.hpp"
#include "dfi/apps/rsi/timestamps.hpp"
#include "dfi/common/error.hpp"

// fabric::Worker and cluster::Node: declared in timestamps.hpp.
namespace dfi::apps::rsi {

enum class Protocol { rsi, two_pc };

// "rsi" / "2pc".
std::string_view protocol_name(Protocol protocol) noexcept;
// Parses "rsi" / "2pc". Throws dfi::Error(invalid_argument) naming the accepted values.
Protocol parse_protocol(std::string_view name);

inline constexpr std::size_t kMaxRecordsPerTxn = 16;

// Points of an RSI commit, for the test seam ClientOptions::at_commit_stage.
enum class CommitStage {
  locked,      // every written record locked, no commit record yet
  logged,      // commit record written (committed), nothing installed
  installing,  // the first written record installed and unlocked, the others not yet
};

struct ClientOptions {
  std::size_t client = 0;    // this client's index, 0 .. clients-1 (its share of the timestamps)
  std::size_t clients = 1;   // clients of the table in all
  int timestamp_rank = 0;    // rank hosting the table's timestamp service
  std::chrono::milliseconds timeout{30000};  // waits for records and 2PC replies
  // Test seam: called by an RSI commit at each CommitStage with this client's index (a test
  // kills the process there). Null: nothing is called.
  void (*at_commit_stage)(CommitStage stage, std::size_t client) = nullptr;
};

struct ClientCounters {
  std::uint64_t commits = 0;
  std::uint64_t conflicts = 0;   // aborted at commit: a written record had changed or was locked
  std::uint64_t snapshots = 0;   // aborted at a read: the record was locked or newer than the snapshot
  std::uint64_t rolled_forward = 0;  // records of dead clients this client installed from their commit record
  std::uint64_t rolled_back = 0;     // records of dead clients this client unlocked (not committed)
  std::uint64_t aborts() const noexcept { return conflicts + snapshots; }
};

class Client {
 public:
  // Attaches to `table`'s storage servers and timestamp service. Throws dfi::Error: timeout or
  // not_found (a server or the service did not publish within the timeout), peer_failed,
  // invalid_argument (bad options).
  static std::unique_ptr<Client> open(Protocol protocol, cluster::Node& node, fabric::Worker& worker, const Table& table,
                                      const ClientOptions& options);
  virtual ~Client() = default;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Starts a transaction. Errors: invalid_argument (one is open, or after leave()), peer_failed
  // (the timestamp service).
  Status begin();
  // Reads record `id` into `payload` (payload_bytes of the table). A record read before in this
  // transaction is returned from the transaction's copy (with its writes).
  Status read(std::uint64_t id, void* payload);
  // Reads records `ids` into `payloads` (one buffer per id), as read() does each, fetching those
  // the transaction does not have yet together: RSI issues their reads at once and completes them
  // in one round trip; 2PC sends one request per storage server. The transaction aborts
  // (Errc::retry) as read() would for any of them. Errors also: invalid_argument (sizes differ).
  Status read_many(std::span<const std::uint64_t> ids, std::span<void* const> payloads);
  // Sets the transaction's new version of record `id` (read before in this transaction).
  Status write(std::uint64_t id, const void* payload);
  // Inserts record `id`, one the transaction did not read (a pre-allocated free slot): sets its
  // new version reading only its header (so commit validates that nobody wrote it meanwhile).
  // Errors as read(); invalid_argument for a record the transaction has already.
  Status insert(std::uint64_t id, const void* payload);
  // Inserts records `ids` with `payloads`, as insert() does each, reading their headers together
  // (as read_many). Errors as insert(), and for an id listed twice.
  Status insert_many(std::span<const std::uint64_t> ids, std::span<const void* const> payloads);
  // Commits. ok: installed and visible to transactions that begin from now on. Also
  // invalid_argument when this client's timestamps are used up.
  Status commit();
  // Abandons the open transaction (nothing was locked yet). Errors: peer_failed (the service).
  Status abort();
  // Leaves: no transaction may follow; this client's unused timestamps stop holding others'
  // snapshots back. Errors: peer_failed.
  Status leave();
  // Recovers what the clients declared dead by now hold locked, as begin() does after a death
  // (RSI: rolls their records forward or back, retires their timestamps); allowed after leave().
  // A client that dies after the others' last transaction is recovered this way: they wait for
  // every client to finish or die, then call it. 2PC: nothing to do (no such recovery; see the
  // top of this file). Errors: peer_failed (a storage server or the commit log), invalid_argument
  // (a transaction is open).
  Status recover_dead();

  // Commits and aborts so far (updated by begin/read/commit; read it from the owning thread).
  const ClientCounters& counters() const noexcept { return counters_; }
  // The protocol this client runs.
  Protocol protocol() const noexcept { return protocol_; }
  // "rsi client 3", used in every message.
  const std::string& name() const noexcept { return name_; }

 protected:
  struct Entry {
    std::uint64_t id = 0;
    Location where;
    std::uint64_t header = 0;  // as read (unlocked)
    bool written = false;
  };

  Client(Protocol protocol, cluster::Node& node, fabric::Worker& worker, const Table& table,
         const ClientOptions& options);

  // Reads the record at `where`: its header and, unless locked, its payload (payload_bytes).
  // Errc::retry when the record changed while it was read.
  virtual Status fetch(const Location& where, std::uint64_t& header, void* payload) = 0;
  // Reads the header word of the record at `where`.
  virtual Status load_header(const Location& where, std::uint64_t& header) = 0;
  // Fills the header (and unless `header_only` the payload copy) of entries_[first ..] as
  // fetch() / load_header() do; may stop at a locked one (the caller aborts). The default reads
  // them one after the other; RSI and 2PC read them together.
  virtual Status fetch_entries(std::size_t first, bool header_only);
  // Reads the header word of every entry into `headers` (entries_.size() of them); RSI reads
  // them all in one round trip.
  virtual Status load_headers(std::uint64_t* headers) {
    for (std::size_t e = 0; e < entries_.size(); ++e) {
      if (Status s = load_header(entries_[e].where, headers[e]); !s) return s;
    }
    return {};
  }
  // Validates, locks, installs (commit id `cid`) and unlocks every written entry. Errc::retry:
  // a conflict; everything this call locked is unlocked again.
  virtual Status commit_writes(std::uint64_t cid) = 0;
  // Called by begin() before it takes the snapshot (RSI: recovers dead clients' records).
  virtual Status before_begin() { return {}; }
  // recover_dead()'s work (RSI: recover_dead_clients).
  virtual Status recover_dead_now() { return {}; }
  // Marks every timestamp of client `client` (dead) finished, unless it retired itself.
  Status retire_dead_client(std::size_t client);

  // The payload copy of entry `e`.
  std::byte* payload(std::size_t e) noexcept { return reinterpret_cast<std::byte*>(payload_words(e)); }
  // The same copy as whole words (Table::payload_words of them).
  std::uint64_t* payload_words(std::size_t e) noexcept { return payloads_.data() + e * payload_stride_; }
  // Names server `server` in an error: "rsi client 3: storage server 1 (rank 2): <what>".
  Status server_error(std::size_t server, const Status& status) const;

  Protocol protocol_;
  Table table_;
  ClientOptions options_;
  std::string name_;
  std::vector<Entry> entries_;  // the open transaction's records (capacity kMaxRecordsPerTxn)
  ClientCounters counters_;

 private:
  Status end(Status status);
  Status refresh_snapshot(std::uint64_t newest);
  // Adds records ids[0, n) (not in the transaction yet) to it: their headers (and unless
  // `header_only` their payloads), read together.
  Status add_entries(const std::uint64_t* ids, std::size_t n, bool header_only);
  // Errors of a read_many / insert_many call before it reads anything.
  Status check_call(const char* what, std::span<const std::uint64_t> ids, std::size_t buffers) const;
  // The entry of record `id`, or entries_.size().
  std::size_t find(std::uint64_t id) const noexcept;

  Timestamps timestamps_;
  std::vector<std::uint64_t> payloads_;
  std::size_t payload_stride_ = 0;  // words
  bool open_ = false;
  bool left_ = false;
  std::uint64_t timestamp_ = 0;  // the open transaction's commit id, once commit took one
  std::uint64_t snapshot_ = 0;   // its read timestamp
};

}  // namespace dfi::apps::rsi
