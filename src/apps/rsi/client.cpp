#include "dfi/apps/rsi/client.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "dfi/cluster/node.hpp"
#include "dfi/cluster/shared_words.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/apps/rsi/commit_log.hpp"
#include "dfi/apps/rsi/storage.hpp"
#include "two_pc_wire.hpp"

namespace dfi::apps::rsi {

std::string_view protocol_name(Protocol protocol) noexcept { return protocol == Protocol::rsi ? "rsi" : "2pc"; }

Protocol parse_protocol(std::string_view name) {
  if (name == "rsi") return Protocol::rsi;
  if (name == "2pc") return Protocol::two_pc;
  throw Error(Errc::invalid_argument, "rsi: unknown protocol '" + std::string(name) + "' (expected rsi or 2pc)");
}

Client::Client(Protocol protocol, cluster::Node& node, fabric::Worker& worker, const Table& table,
               const ClientOptions& options)
    : protocol_(protocol),
      table_(table),
      options_(options),
      name_(std::string(protocol_name(protocol)) + " client " + std::to_string(options.client) + " of table '" +
            table.name() + "'"),
      timestamps_(node, worker, table.name(), options.timestamp_rank, options.client, options.clients,
                  options.timeout),
      payload_stride_(table.payload_words()) {
  entries_.reserve(kMaxRecordsPerTxn);
  payloads_.resize(kMaxRecordsPerTxn * payload_stride_);
}

Status Client::server_error(std::size_t server, const Status& status) const {
  return {status.code() == Errc::ok ? Errc::fatal : status.code(),
          name_ + ": storage server " + std::to_string(server) + " (rank " +
              std::to_string(table_.spec().servers[server]) + "): " + status.message()};
}

Status Client::begin() {
  if (left_ || open_) {
    return {Errc::invalid_argument, name_ + ": begin " + (left_ ? "after leave()" : "while a transaction is open")};
  }
  if (Status s = before_begin(); !s) return s;
  if (Status s = timestamps_.snapshot(snapshot_); !s) return {s.code(), name_ + ": timestamp service: " + s.message()};
  entries_.clear();
  timestamp_ = 0;
  open_ = true;
  return {};
}

// Closes the open transaction with `status` (an abort is a retry); marks its commit id finished
// when it took one, unless the client failed.
Status Client::end(Status status) {
  open_ = false;
  if (timestamp_ != 0 && (status.is_ok() || status.code() == Errc::retry)) {
    if (Status s = timestamps_.finish(timestamp_); !s) return {s.code(), name_ + ": timestamp service: " + s.message()};
  }
  return status;
}

// A version newer than the snapshot: a later snapshot serves if it covers `newest` and every
// record read so far (the new one included) is still the version read — each was then the
// latest at or below the later snapshot when it was checked again.
Status Client::refresh_snapshot(std::uint64_t newest) {
  std::uint64_t later = 0;
  if (Status s = timestamps_.snapshot(later); !s) return {s.code(), name_ + ": timestamp service: " + s.message()};
  if (later < newest) return Status(Errc::retry);
  std::uint64_t headers[kMaxRecordsPerTxn];
  if (Status s = load_headers(headers); !s) return s;
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    if (headers[e] != entries_[e].header) return Status(Errc::retry);
  }
  snapshot_ = later;
  return {};
}

std::size_t Client::find(std::uint64_t id) const noexcept {
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    if (entries_[e].id == id) return e;
  }
  return entries_.size();
}

Status Client::add_entries(const std::uint64_t* ids, std::size_t n, bool header_only) {
  if (entries_.size() + n > kMaxRecordsPerTxn) {
    return {Errc::invalid_argument, name_ + ": more than " + std::to_string(kMaxRecordsPerTxn) + " records in one transaction"};
  }
  const std::size_t first = entries_.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (ids[i] >= table_.spec().records) {
      entries_.resize(first);
      return {Errc::invalid_argument, name_ + ": record " + std::to_string(ids[i]) + " outside the table's " +
                                          std::to_string(table_.spec().records)};
    }
    Entry entry;
    entry.id = ids[i];
    entry.where = table_.locate(ids[i]);
    entries_.push_back(entry);
  }
  Status s = fetch_entries(first, header_only);
  std::uint64_t newest = 0;
  for (std::size_t e = first; s.is_ok() && e < entries_.size(); ++e) {
    if (locked(entries_[e].header)) s = Status(Errc::retry);
    newest = std::max(newest, commit_id(entries_[e].header));
  }
  if (s.is_ok() && newest > snapshot_) s = refresh_snapshot(newest);
  if (!s) {
    if (s.code() == Errc::retry) ++counters_.snapshots;
    return end(std::move(s));
  }
  return {};
}

Status Client::fetch_entries(std::size_t first, bool header_only) {
  for (std::size_t e = first; e < entries_.size(); ++e) {
    Entry& entry = entries_[e];
    Status s = header_only ? load_header(entry.where, entry.header) : fetch(entry.where, entry.header, payload(e));
    if (!s) return s;
    if (locked(entry.header)) return {};  // the caller aborts
  }
  return {};
}

// A read_many / insert_many call: a transaction open, one buffer per record.
Status Client::check_call(const char* what, std::span<const std::uint64_t> ids, std::size_t buffers) const {
  if (!open_) {
    return {Errc::invalid_argument, name_ + ": " + what + " of record " +
                                        (ids.empty() ? std::string("(none)") : std::to_string(ids[0])) + " outside a transaction"};
  }
  if (ids.size() != buffers) {
    return {Errc::invalid_argument, name_ + ": " + what + " of " + std::to_string(ids.size()) + " records with " +
                                        std::to_string(buffers) + " buffers"};
  }
  return {};
}

Status Client::read(std::uint64_t id, void* out) {
  void* const outs[1] = {out};
  return read_many(std::span(&id, 1), outs);
}

Status Client::read_many(std::span<const std::uint64_t> ids, std::span<void* const> out) {
  if (Status s = check_call("read", ids, out.size()); !s) return s;
  std::uint64_t missing[kMaxRecordsPerTxn];
  std::size_t m = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (find(ids[i]) < entries_.size() || std::find(missing, missing + m, ids[i]) != missing + m) continue;
    if (m == kMaxRecordsPerTxn) {
      return {Errc::invalid_argument, name_ + ": more than " + std::to_string(kMaxRecordsPerTxn) + " records in one transaction"};
    }
    missing[m++] = ids[i];
  }
  if (m != 0) {
    if (Status s = add_entries(missing, m, /*header_only=*/false); !s) return s;
  }
  for (std::size_t i = 0; i < ids.size(); ++i) std::memcpy(out[i], payload(find(ids[i])), table_.spec().payload_bytes);
  return {};
}

Status Client::insert(std::uint64_t id, const void* in) {
  const void* const ins[1] = {in};
  return insert_many(std::span(&id, 1), ins);
}

Status Client::insert_many(std::span<const std::uint64_t> ids, std::span<const void* const> in) {
  if (Status s = check_call("insert", ids, in.size()); !s) return s;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (find(ids[i]) < entries_.size() || std::find(ids.begin(), ids.begin() + i, ids[i]) != ids.begin() + i) {
      return {Errc::invalid_argument, name_ + ": insert of record " + std::to_string(ids[i]) + " that the transaction has already"};
    }
  }
  const std::size_t first = entries_.size();
  if (Status s = add_entries(ids.data(), ids.size(), /*header_only=*/true); !s) return s;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(payload(first + i), in[i], table_.spec().payload_bytes);
    entries_[first + i].written = true;
  }
  return {};
}

Status Client::write(std::uint64_t id, const void* in) {
  if (!open_) return {Errc::invalid_argument, name_ + ": write of record " + std::to_string(id) + " outside a transaction"};
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    if (entries_[e].id == id) {
      std::memcpy(payload(e), in, table_.spec().payload_bytes);
      entries_[e].written = true;
      return {};
    }
  }
  return {Errc::invalid_argument, name_ + ": write of record " + std::to_string(id) + " that the transaction did not read"};
}

Status Client::commit() {
  if (!open_) return {Errc::invalid_argument, name_ + ": commit outside a transaction"};
  bool writes = false;
  std::uint64_t newest = snapshot_;
  for (const Entry& e : entries_) {
    writes = writes || e.written;
    newest = std::max(newest, commit_id(e.header));
  }
  Status s;
  if (writes) {
    s = timestamps_.take(newest, timestamp_);
    if (!s && s.code() != Errc::invalid_argument) s = Status(s.code(), name_ + ": timestamp service: " + s.message());
    if (s) s = commit_writes(timestamp_);
  }
  if (s.is_ok()) ++counters_.commits;
  if (s.code() == Errc::retry) ++counters_.conflicts;
  return end(std::move(s));
}

Status Client::retire_dead_client(std::size_t client) {
  if (Status s = timestamps_.retire_dead(client); !s) return {s.code(), name_ + ": timestamp service: " + s.message()};
  return {};
}

Status Client::recover_dead() {
  if (open_) return {Errc::invalid_argument, name_ + ": recover_dead while a transaction is open"};
  return recover_dead_now();
}

Status Client::abort() {
  if (!open_) return {Errc::invalid_argument, name_ + ": abort outside a transaction"};
  return end(Status());
}

Status Client::leave() {
  if (open_) return {Errc::invalid_argument, name_ + ": leave while a transaction is open"};
  if (left_) return {};
  left_ = true;
  if (Status s = timestamps_.retire(); !s) return {s.code(), name_ + ": timestamp service: " + s.message()};
  return {};
}

namespace {

// RSI: every record operation is one-sided, through one SharedWords per storage server.
class RsiClient final : public Client {
 public:
  RsiClient(cluster::Node& node, fabric::Worker& worker, const Table& table, const ClientOptions& options)
      : Client(Protocol::rsi, node, worker, table, options),
        node_(node),
        worker_(worker),
        log_(node, worker, table.name(), options.timestamp_rank, options.client, options.clients,
             table.spec().payload_bytes, options.timeout),
        watch_(node.fabric()),
        blocks_(table.servers()),
        slots_(kMaxRecordsPerTxn * table.slot_words()) {
    for (std::size_t s = 0; s < table.servers(); ++s) {
      blocks_[s].attach(node, worker, Table::block_record(table.name(), s), table.spec().servers[s], options.timeout);
    }
  }

 private:
  // One ordered read of the whole slot, header first, trailer last (table.hpp: the header
  // unlocked and equal to the trailer means no payload word was read while it was written).
  Status fetch(const Location& where, std::uint64_t& header, void* out) override {
    if (Status s = blocks_[where.server].load_words(where.word, slots_.data(), table_.slot_words()); !s) {
      return server_error(where.server, s);
    }
    return check_slot(where, slots_.data(), header, out);
  }

  // The reads of all new entries in flight together: one round trip.
  Status fetch_entries(std::size_t first, bool header_only) override {
    const std::size_t slot = table_.slot_words();
    const std::size_t n = entries_.size() - first;
    hold_all();
    for (std::size_t k = 0; k < n; ++k) {
      const Entry& entry = entries_[first + k];
      requests_[k] = blocks_[entry.where.server].load_words_async(entry.where.word, &slots_[k * slot], header_only ? 1 : slot);
    }
    release_all();
    if (Status s = wait_requests(n, [&](std::size_t k) { return entries_[first + k].where.server; }); !s) return s;
    for (std::size_t k = 0; k < n; ++k) {
      Entry& entry = entries_[first + k];
      if (header_only) {
        entry.header = slots_[k * slot];
        if (locked(entry.header)) return recover_if_dead_owner(entry.where, entry.header);
      } else if (Status s = check_slot(entry.where, &slots_[k * slot], entry.header, payload(first + k)); !s || locked(entry.header)) {
        return s;
      }
    }
    return {};
  }

  // A slot as read: its header, and unless locked its payload copied to `out`. Errc::retry when
  // the trailer says a write was under way.
  Status check_slot(const Location& where, const std::uint64_t* words, std::uint64_t& header, void* out) {
    header = words[0];
    if (locked(header)) return recover_if_dead_owner(where, header);  // the caller aborts
    if (words[table_.slot_words() - 1] != commit_id(header)) return Status(Errc::retry);  // installed meanwhile: maybe torn
    std::memcpy(out, words + 1, table_.spec().payload_bytes);
    return {};
  }

  Status load_header(const Location& where, std::uint64_t& header) override {
    if (Status s = blocks_[where.server].load_words(where.word, &header, 1); !s) return server_error(where.server, s);
    return {};
  }

  Status load_headers(std::uint64_t* headers) override {
    hold_all();
    for (std::size_t e = 0; e < entries_.size(); ++e) {
      requests_[e] = blocks_[entries_[e].where.server].load_words_async(entries_[e].where.word, &headers[e], 1);
    }
    release_all();
    return wait_requests(entries_.size(), [this](std::size_t e) { return entries_[e].where.server; });
  }

  // Operations issued between hold_all() and release_all() go to each server as one message
  // where the transport emulates them (SharedWords::hold). A failure to send shows in the waits.
  void hold_all() {
    for (cluster::SharedWords& block : blocks_) block.hold();
  }
  void release_all() {
    for (cluster::SharedWords& block : blocks_) (void)block.release();
  }

  // Waits for requests_[0, n); the first failure, naming the server of request i (server_of(i)).
  template <typename ServerOf>
  Status wait_requests(std::size_t n, ServerOf server_of) {
    Status failure;
    for (std::size_t i = 0; i < n; ++i) {
      Status s = requests_[i].wait();
      if (!s && failure.is_ok()) failure = server_error(server_of(i), s);
    }
    return failure;
  }

  // Issues the install of a locked record into requests_[3k .. 3k+2]: the trailer (`*cid`, which
  // must stay untouched until they are done), the payload `words`, then the header: a
  // compare-and-swap from `lock` to the commit id, whose old value goes to olds_[k]. One
  // connection applies them in that order (SharedWords::store_words_async), which is the
  // writer's side of the slot's seqlock (table.hpp).
  void issue_install(std::size_t k, const Location& where, const std::uint64_t* words, const std::uint64_t* cid,
                     std::uint64_t lock) {
    cluster::SharedWords& block = blocks_[where.server];
    requests_[3 * k] = block.store_words_async(where.word + 1 + table_.payload_words(), cid, 1);
    requests_[3 * k + 1] = block.store_words_async(where.word + 1, words, table_.payload_words());
    requests_[3 * k + 2] = block.compare_swap_async(where.word, lock, *cid, &olds_[k]);
  }

  Status commit_writes(std::uint64_t cid) override {
    // The written entries, in order.
    std::size_t n = 0;
    for (std::size_t e = 0; e < entries_.size(); ++e) {
      if (entries_[e].written) written_[n++] = e;
    }
    auto server_of = [this](std::size_t i) { return entries_[written_[i]].where.server; };
    // Validate and lock: one compare-and-swap per written record, all in flight together.
    hold_all();
    for (std::size_t i = 0; i < n; ++i) {
      const Entry& entry = entries_[written_[i]];
      requests_[i] = blocks_[entry.where.server].compare_swap_async(entry.where.word, entry.header, mine(entry), &olds_[i]);
    }
    release_all();
    Status failure;
    bool conflict = false;
    for (std::size_t i = 0; i < n; ++i) {
      Status s = requests_[i].wait();
      held_[i] = s.is_ok() && olds_[i] == entries_[written_[i]].header;
      if (!s && failure.is_ok()) failure = server_error(server_of(i), s);
      conflict = conflict || (s.is_ok() && !held_[i]);
    }
    if (!failure || conflict) {
      // Release what this call locked (together), then recover records found locked by a dead
      // client (slow path).
      std::uint64_t unlocked[kMaxRecordsPerTxn];
      std::size_t k = 0;
      hold_all();
      for (std::size_t i = 0; i < n; ++i) {
        if (!held_[i]) continue;
        const Entry& entry = entries_[written_[i]];
        unlocks_[k] = i;
        requests_[k] = blocks_[entry.where.server].compare_swap_async(entry.where.word, mine(entry), entry.header, &unlocked[k]);
        ++k;
      }
      release_all();
      Status released = wait_requests(k, [&](std::size_t j) { return server_of(unlocks_[j]); });
      for (std::size_t i = 0; i < n && failure.is_ok(); ++i) {
        if (!held_[i] && locked(olds_[i])) failure = recover_if_dead_owner(entries_[written_[i]].where, olds_[i]);
      }
      if (failure.is_ok()) failure = Status(Errc::retry);
      if (!released && failure.code() == Errc::retry) failure = released;
      return failure;
    }
    stage(CommitStage::locked);
    // The commit record: once stored the transaction is committed, whoever installs it.
    log_.start(cid);
    for (std::size_t e = 0; e < entries_.size(); ++e) {
      if (entries_[e].written) log_.add(entries_[e].id, entries_[e].header, payload(e));
    }
    if (Status s = log_.publish(); !s) return log_error(s);
    stage(CommitStage::logged);
    // Install every record (trailer, payload, then the header with the new commit id, which
    // releases the lock), all in flight together. With the test seam set, the first record is
    // installed before the others are issued, so that CommitStage::installing is a point where
    // some but not all are.
    cid_ = cid;
    const std::size_t first = options_.at_commit_stage != nullptr ? std::min<std::size_t>(n, 1) : n;
    for (std::size_t begin = 0; begin < n;) {
      const std::size_t end = begin == 0 ? first : n;
      hold_all();
      for (std::size_t i = begin; i < end; ++i) {
        const Entry& entry = entries_[written_[i]];
        issue_install(i - begin, entry.where, payload_words(written_[i]), &cid_, mine(entry));
      }
      release_all();
      if (Status s = wait_requests(3 * (end - begin), [&](std::size_t j) { return server_of(begin + j / 3); }); !s) return s;
      for (std::size_t i = begin; i < end; ++i) {
        const Entry& entry = entries_[written_[i]];
        if (olds_[i - begin] != mine(entry)) {
          return server_error(entry.where.server, Status(Errc::fatal, "the lock of record " + std::to_string(entry.id) +
                                                                          " was lost while installing it"));
        }
      }
      if (begin == 0) stage(CommitStage::installing);
      begin = end;
    }
    return {};
  }

  // The lock word of `entry` held by this client.
  std::uint64_t mine(const Entry& entry) const noexcept { return lock_word(commit_id(entry.header), options_.client); }
  void stage(CommitStage at) const {
    if (options_.at_commit_stage != nullptr) options_.at_commit_stage(at, options_.client);
  }
  Status log_error(const Status& status) const {
    return {status.code(), name_ + ": commit log (rank " + std::to_string(options_.timestamp_rank) + "): " + status.message()};
  }

  Status before_begin() override {
    if (!watch_.changed()) return {};
    return recover_dead_clients();
  }
  Status recover_dead_now() override { return recover_dead_clients(); }

  // Some rank was declared dead: retire the timestamps of the clients it ran and recover every
  // record they hold locked (client.hpp). Rare, so it may allocate and scan the whole table.
  Status recover_dead_clients() {
    std::vector<int> ranks;
    if (Status s = log_.ranks(ranks); !s) return log_error(s);
    std::vector<bool>& dead = dead_;
    dead.assign(ranks.size(), false);
    bool any = false;
    for (std::size_t c = 0; c < ranks.size(); ++c) {
      dead[c] = c != options_.client && ranks[c] >= 0 && !watch_.reason(ranks[c]).empty();
      if (!dead[c]) continue;
      any = true;
      if (Status s = retire_dead_client(c); !s) return s;
    }
    if (!any) return {};
    std::vector<std::pair<std::uint64_t, std::uint64_t>> held;  // (record id, header)
    try {
      scan_table(node_, worker_, table_, options_.timeout, [&](std::uint64_t id, std::uint64_t header, std::span<const std::byte>) {
        if (locked(header)) held.emplace_back(id, header);
      });
    } catch (const Error& e) {
      return {e.code(), name_ + ": recovery: " + e.what()};
    }
    std::vector<CommitLog::Record> records(ranks.size());
    std::vector<bool> read(ranks.size(), false);
    for (const auto& [id, header] : held) {
      const std::size_t owner = lock_owner(header);
      if (owner >= dead.size() || !dead[owner]) continue;                               // its owner finishes it
      if (recovering(header) && lock_recoverer(header) < dead.size() && !dead[lock_recoverer(header)]) continue;
      if (!read[owner]) {
        if (Status s = log_.read(owner, records[owner]); !s) return log_error(s);
        read[owner] = true;
      }
      if (Status s = recover_record(id, header, records[owner]); !s) return s;
    }
    return {};
  }

  // A record found locked by a client known dead since the last recovery: its lock landed after
  // that recovery's scan (over TCP a dead client's last compare-and-swap may still be in flight
  // when its rank is declared dead), so recover it now. Slow path: allocates.
  Status recover_if_dead_owner(const Location& where, std::uint64_t header) {
    const std::size_t holder = recovering(header) ? lock_recoverer(header) : lock_owner(header);
    if (holder >= dead_.size() || !dead_[holder]) return {};
    CommitLog::Record record;
    if (Status s = log_.read(lock_owner(header), record); !s) return log_error(s);
    return recover_record((where.word / table_.slot_words()) * table_.servers() + where.server, header, record);
  }

  // Rolls record `id`, locked as `header` by a dead owner whose commit record is `record`, forward
  // (the record lists it: committed) or back. Another recoverer winning a compare-and-swap first
  // is fine: the record is then its business.
  Status recover_record(std::uint64_t id, std::uint64_t header, const CommitLog::Record& record) {
    const Location where = table_.locate(id);
    cluster::SharedWords& block = blocks_[where.server];
    std::size_t e = record.count;
    if (record.valid) {
      for (e = 0; e < record.count; ++e) {
        if (record.id(e) == id && commit_id(record.old_header(e)) == commit_id(header)) break;
      }
    }
    std::uint64_t old = 0;
    if (e == record.count && recovering(header)) {  // only a committed record is ever taken over
      return server_error(where.server, Status(Errc::protocol, "record " + std::to_string(id) +
                                                                   " is being recovered but its owner's commit record does not list it"));
    }
    if (e == record.count) {  // not committed: roll back
      if (Status s = block.compare_swap(where.word, header, commit_id(header), &old); !s) return server_error(where.server, s);
      if (old == header) ++counters_.rolled_back;
      return {};
    }
    // Committed: take the lock over, install the logged payload (as a commit does), then the
    // new commit id.
    const std::uint64_t taken = recovering_word(header, options_.client);
    if (Status s = block.compare_swap(where.word, header, taken, &old); !s) return server_error(where.server, s);
    if (old != header) return {};
    const std::uint64_t cid = record.cid;
    block.hold();
    issue_install(0, where, record.payload(e), &cid, taken);
    (void)block.release();  // a failure shows in the waits
    if (Status s = wait_requests(3, [&](std::size_t) { return where.server; }); !s) return s;
    if (olds_[0] != taken) {
      return server_error(where.server, Status(Errc::protocol, "record " + std::to_string(id) +
                                                                   " changed while this client recovered it"));
    }
    ++counters_.rolled_forward;
    return {};
  }

  cluster::Node& node_;
  fabric::Worker& worker_;
  CommitLog log_;
  fabric::FailureWatch watch_;
  std::vector<bool> dead_;  // clients found dead by the last recovery
  std::vector<cluster::SharedWords> blocks_;
  std::vector<std::uint64_t> slots_;  // slots read together (kMaxRecordsPerTxn of them)
  // Operations of one step in flight together, and their results.
  std::array<fabric::Request, 3 * kMaxRecordsPerTxn> requests_;
  std::array<std::uint64_t, kMaxRecordsPerTxn> olds_{};
  std::array<std::size_t, kMaxRecordsPerTxn> written_{};  // entries written by the transaction
  std::array<std::size_t, kMaxRecordsPerTxn> unlocks_{};
  std::array<bool, kMaxRecordsPerTxn> held_{};
  std::uint64_t cid_ = 0;  // the trailer the installs store
};

// 2PC: every record operation is a request that the storage server's CPU answers.
class TwoPcClient final : public Client {
 public:
  TwoPcClient(cluster::Node& node, fabric::Worker& worker, const Table& table, const ClientOptions& options)
      : Client(Protocol::two_pc, node, worker, table, options),
        worker_(worker),
        backoff_(node.poll_backoff()) {
    const std::size_t servers = table.servers();
    const std::size_t slot = table.slot_words();
    requests_.assign(servers, std::vector<std::uint64_t>(wire::kRequestHead + kMaxRecordsPerTxn * std::max<std::size_t>(slot, 2)));
    replies_.assign(servers, std::vector<std::uint64_t>(wire::kReplyHead + wire::max_reads(table.payload_words()) *
                                                                               (1 + table.payload_words())));
    lengths_.assign(servers, 0);
    answered_.assign(servers, false);
    involved_.assign(servers, false);
    voted_yes_.assign(servers, false);
    scratch_.resize(slot);
    for (std::size_t s = 0; s < servers; ++s) {
      const int rank = table.spec().servers[s];
      const std::string address = node.wait_for(StorageServer::two_pc_record(table.name(), s), options.timeout);
      endpoints_.push_back(worker.connect(rank, address));
    }
    worker.set_am_handler(wire::kReplyAm, [this](const fabric::AmMessage& message, fabric::AmReplier&) {
      const std::size_t n = message.data.size() / sizeof(std::uint64_t);
      if (n < wire::kReplyHead) return;
      std::uint64_t head[wire::kReplyHead];
      std::memcpy(head, message.data.data(), sizeof head);
      if (head[0] != tag_ || head[1] >= replies_.size() || answered_[head[1]]) return;  // stale or foreign
      std::vector<std::uint64_t>& reply = replies_[head[1]];
      std::memcpy(reply.data(), message.data.data(), std::min(n, reply.size()) * sizeof(std::uint64_t));
      answered_[head[1]] = true;
      ++answers_;
    });
  }
  ~TwoPcClient() override {
    // The worker may outlive this client: its handler must not reach a destroyed one.
    worker_.set_am_handler(wire::kReplyAm, [](const fabric::AmMessage&, fabric::AmReplier&) {});
  }

 private:
  // Request buffer of `server`, started for `op`.
  void start(std::size_t server, wire::Op op, std::uint64_t cid) {
    std::vector<std::uint64_t>& r = requests_[server];
    r[0] = op;
    r[1] = tag_;
    r[2] = cid;
    r[3] = 0;
    lengths_[server] = wire::kRequestHead;
  }
  void add(std::size_t server, std::uint64_t word, const void* data, std::size_t words) {
    std::vector<std::uint64_t>& r = requests_[server];
    r[lengths_[server]++] = word;
    if (words != 0) std::memcpy(&r[lengths_[server]], data, words * sizeof(std::uint64_t));  // a read has none
    lengths_[server] += words;
    ++r[3];
  }
  // Sends the started requests of the involved servers and waits for all their answers.
  Status exchange() {
    answers_ = 0;
    std::size_t expected = 0;
    for (std::size_t s = 0; s < involved_.size(); ++s) {
      answered_[s] = false;
      if (!involved_[s]) continue;
      ++expected;
      if (lengths_[s] * sizeof(std::uint64_t) > fabric::kMaxAmBytes) {
        return {Errc::invalid_argument, name_ + ": a request of " + std::to_string(lengths_[s] * sizeof(std::uint64_t)) +
                                            " bytes to storage server " + std::to_string(s) + " exceeds one message (" +
                                            std::to_string(fabric::kMaxAmBytes) + " bytes): fewer or smaller records"};
      }
      if (Status st = endpoints_[s].am_send(wire::kRequestAm, std::as_bytes(std::span(requests_[s].data(), lengths_[s]))); !st) {
        return server_error(s, st);
      }
    }
    const Deadline deadline(options_.timeout);
    Backoff backoff(backoff_, tag_);
    for (unsigned rounds = 1; answers_ < expected; ++rounds) {
      if (worker_.progress() != 0) continue;
      if (rounds % 64 == 0) {
        for (std::size_t s = 0; s < involved_.size(); ++s) {
          if (!involved_[s] || answered_[s]) continue;
          if (Status st = endpoints_[s].status(); !st) return server_error(s, st);
          if (deadline.expired()) {
            return server_error(s, Status(Errc::timeout, "no answer within " + std::to_string(options_.timeout.count()) + " ms"));
          }
        }
      }
      backoff.pause([this](std::chrono::microseconds d) { worker_.wait_for_event(d, /*idle=*/true); });
    }
    for (std::size_t s = 0; s < involved_.size(); ++s) {
      if (involved_[s] && replies_[s][2] == wire::kBadRequest) {
        return server_error(s, Status(Errc::protocol, "the server rejected a request as malformed"));
      }
    }
    return {};
  }

  Status fetch(const Location& where, std::uint64_t& header, void* out) override {
    ++tag_;
    std::fill(involved_.begin(), involved_.end(), false);
    involved_[where.server] = true;
    start(where.server, wire::kRead, 0);
    add(where.server, where.word, nullptr, 0);
    if (Status s = exchange(); !s) return s;
    const std::vector<std::uint64_t>& reply = replies_[where.server];
    header = reply[wire::kReplyHead];
    std::memcpy(out, &reply[wire::kReplyHead + 1], table_.spec().payload_bytes);
    return {};
  }

  Status load_header(const Location& where, std::uint64_t& header) override {
    return fetch(where, header, scratch_.data());
  }

  // One read request per involved server (up to wire::max_reads records each), all in flight
  // together; more records than that take more rounds.
  Status fetch_entries(std::size_t first, bool header_only) override {
    const std::size_t per_record = 1 + table_.payload_words();
    const std::size_t cap = wire::max_reads(table_.payload_words());
    for (std::size_t next = first; next < entries_.size();) {
      ++tag_;
      std::fill(involved_.begin(), involved_.end(), false);
      std::fill(lengths_.begin(), lengths_.end(), 0);
      std::size_t end = next;
      for (; end < entries_.size(); ++end) {
        const std::size_t server = entries_[end].where.server;
        if (!involved_[server]) start(server, wire::kRead, 0);
        if (requests_[server][3] == cap) break;  // that server's request is full: next round
        involved_[server] = true;
        add(server, entries_[end].where.word, nullptr, 0);
      }
      if (Status s = exchange(); !s) return s;
      std::fill(lengths_.begin(), lengths_.end(), 0);  // reused below as each reply's read position
      for (std::size_t e = next; e < end; ++e) {
        Entry& entry = entries_[e];
        const std::vector<std::uint64_t>& reply = replies_[entry.where.server];
        const std::size_t at = wire::kReplyHead + lengths_[entry.where.server]++ * per_record;
        entry.header = reply[at];
        if (!header_only) std::memcpy(payload(e), &reply[at + 1], table_.spec().payload_bytes);
      }
      next = end;
    }
    return {};
  }

  Status commit_writes(std::uint64_t cid) override {
    // Phase 1: prepare every involved server (its CPU validates and locks).
    ++tag_;
    std::fill(involved_.begin(), involved_.end(), false);
    for (const Entry& e : entries_) {
      if (!e.written) continue;
      if (!involved_[e.where.server]) start(e.where.server, wire::kPrepare, cid);
      involved_[e.where.server] = true;
      add(e.where.server, e.where.word, &e.header, 1);
    }
    if (Status s = exchange(); !s) return s;
    bool yes = true;
    for (std::size_t s = 0; s < involved_.size(); ++s) yes = yes && (!involved_[s] || replies_[s][2] == wire::kOk);
    // Phase 2: commit everywhere, or abort where the server locked.
    ++tag_;
    const std::size_t payload_words = table_.payload_words();
    for (std::size_t s = 0; s < involved_.size(); ++s) voted_yes_[s] = involved_[s] && replies_[s][2] == wire::kOk;
    std::fill(involved_.begin(), involved_.end(), false);
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      if (!e.written || !voted_yes_[e.where.server]) continue;
      if (!involved_[e.where.server]) start(e.where.server, yes ? wire::kCommit : wire::kAbort, cid);
      involved_[e.where.server] = true;
      if (yes) {
        add(e.where.server, e.where.word, payload(i), payload_words);
      } else {
        add(e.where.server, e.where.word, &e.header, 1);
      }
    }
    if (Status s = exchange(); !s) return s;
    return yes ? Status() : Status(Errc::retry);
  }

  fabric::Worker& worker_;
  BackoffSettings backoff_;
  std::vector<fabric::Endpoint> endpoints_;
  std::vector<std::vector<std::uint64_t>> requests_;
  std::vector<std::size_t> lengths_;  // words of each server's request
  std::vector<std::vector<std::uint64_t>> replies_;
  std::vector<bool> answered_;
  std::vector<bool> involved_;
  std::vector<bool> voted_yes_;
  std::vector<std::uint64_t> scratch_;  // a payload load_header does not need
  std::uint64_t tag_ = 0;
  std::size_t answers_ = 0;
};

}  // namespace

std::unique_ptr<Client> Client::open(Protocol protocol, cluster::Node& node, fabric::Worker& worker, const Table& table,
                                     const ClientOptions& options) {
  if (protocol == Protocol::rsi) return std::make_unique<RsiClient>(node, worker, table, options);
  return std::make_unique<TwoPcClient>(node, worker, table, options);
}

}  // namespace dfi::apps::rsi
