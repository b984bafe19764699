// The replicated key-value service: its flows and the replicas' loops (service.hpp).
#include "dfi/apps/kv/service.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/cluster/records.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/registry/client.hpp"
#include "names.hpp"
#include "records.hpp"
#include "replies.hpp"
#include "views.hpp"

namespace dfi::apps::kv {

std::string_view protocol_name(Protocol protocol) noexcept {
  switch (protocol) {
    case Protocol::paxos: return "paxos";
    case Protocol::nopaxos: return "nopaxos";
    case Protocol::unreplicated: break;
  }
  return "unreplicated";
}

Protocol parse_protocol(std::string_view name) {
  if (name == "paxos") return Protocol::paxos;
  if (name == "nopaxos") return Protocol::nopaxos;
  if (name == "unreplicated") return Protocol::unreplicated;
  throw Error(Errc::invalid_argument,
              "kv: unknown protocol '" + std::string(name) + "' (paxos, nopaxos or unreplicated)");
}

namespace {

using flow::Column;
using flow::Type;

std::vector<Column> request_columns(std::size_t value_bytes) {
  return {{"client", Type::uint64}, {"seq", Type::uint64}, {"key", Type::uint64},
          {"op", Type::uint32},     {"pad", Type::uint32}, {"value", Type::chars, static_cast<std::uint32_t>(value_bytes)}};
}

}  // namespace

flow::Schema request_schema(std::size_t value_bytes) { return flow::Schema(request_columns(value_bytes)); }

flow::Schema reply_schema(std::size_t value_bytes) {
  return flow::Schema({{"client", Type::uint64},
                       {"seq", Type::uint64},
                       {"status", Type::uint32},
                       {"count", Type::uint32},
                       {"epoch", Type::uint32},
                       {"pad", Type::uint32},
                       {"value", Type::chars, static_cast<std::uint32_t>(value_bytes)}});
}

flow::Schema accept_schema(std::size_t value_bytes) {
  std::vector<Column> columns = {
      {"view", Type::uint64}, {"round", Type::uint64}, {"slot", Type::uint64}, {"commit", Type::uint64}};
  for (Column c : request_columns(value_bytes)) {
    c.name = "request_" + c.name;
    columns.push_back(c);
  }
  return flow::Schema(std::move(columns));
}

flow::Schema accepted_schema() {
  return flow::Schema(
      {{"view", Type::uint64}, {"follower", Type::uint64}, {"round", Type::uint64}, {"slot", Type::uint64}});
}

std::vector<flow::SourceRef> client_threads(const ServiceOptions& options, int cluster_size) {
  std::vector<flow::SourceRef> clients;
  for (int rank = options.replicas; rank < cluster_size; ++rank) {
    for (int t = 0; t < options.client_threads; ++t) clients.push_back({rank, t});
  }
  return clients;
}

void check_options(const ServiceOptions& o, int cluster_size) {
  auto bad = [&](const std::string& what) {
    return Error(Errc::invalid_argument, "kv service '" + o.name + "': " + what);
  };
  if (o.name.empty() || o.name.find('/') != std::string::npos || o.name.find('.') != std::string::npos) {
    throw bad("the name must be non-empty and contain no '/' or '.'");
  }
  if (o.replicas < 1 || o.replicas >= cluster_size) {
    throw bad("replicas must be 1 .. " + std::to_string(cluster_size - 1) + " on a cluster of " +
              std::to_string(cluster_size) + " ranks (the other ranks are clients); got " +
              std::to_string(o.replicas));
  }
  if (o.protocol == Protocol::unreplicated && o.replicas != 1) {
    throw bad("the unreplicated service has exactly one replica (got " + std::to_string(o.replicas) + ")");
  }
  if (o.protocol != Protocol::unreplicated && o.replicas < 2) {
    throw bad(std::string(o.protocol == Protocol::paxos ? "Multi-Paxos" : "NOPaxos") +
              " needs at least 2 replicas (got " + std::to_string(o.replicas) + ")");
  }
  if (o.client_threads < 1) throw bad("client threads must be at least 1");
  if (o.window < 1 || o.window > 4096) throw bad("window must be 1 .. 4096 (got " + std::to_string(o.window) + ")");
  if (o.max_rounds_in_flight < 1) throw bad("rounds in flight must be at least 1");
  if (o.round_requests < 1) throw bad("round requests must be at least 1");
  if (o.value_bytes < kMinValueBytes || o.value_bytes > kMaxValueBytes || o.value_bytes % 8 != 0) {
    throw bad("value bytes must be a multiple of 8 in " + std::to_string(kMinValueBytes) + " .. " +
              std::to_string(kMaxValueBytes) + " (got " + std::to_string(o.value_bytes) + ")");
  }
  if (o.gap_timeout.count() < 1 || o.retry_timeout.count() < 1) {
    throw bad("the gap and retry timeouts must be at least 1 ms (got " + std::to_string(o.gap_timeout.count()) +
              " and " + std::to_string(o.retry_timeout.count()) + ")");
  }
  if (o.on_sequence && o.protocol == Protocol::nopaxos && o.sequencer == flow::Sequencer::stamp) {
    throw bad("the on_sequence test seam (kv bench --fault) needs the counter sequencer: with stamp, clients take no "
              "sequence number");
  }
}

void create_service(cluster::Node& node, const ServiceOptions& o) {
  check_options(o, node.size());
  // Before the flows: whoever finds a flow of the service finds its width.
  node.registry().publish(Names(o.name).value_bytes, std::to_string(o.value_bytes) + " " + std::to_string(node.rank()),
                          /*replace=*/true);
  detail::open_view(node, o, detail::first_view(o));
}

void check_value_bytes(cluster::Node& node, const ServiceOptions& o) {
  const std::string record = Names(o.name).value_bytes;
  std::string text;
  try {
    text = node.wait_for(record, o.timeout);
  } catch (const Error& e) {
    if (e.code() != Errc::timeout) throw;
    throw Error(Errc::timeout, "kv service '" + o.name + "' (rank " + std::to_string(node.rank()) +
                                   "): the service was not created within " + std::to_string(o.timeout.count()) +
                                   " ms (no record '" + record + "')");
  }
  std::istringstream in(text);
  std::size_t bytes = 0;
  int creator = -1;
  if (!(in >> bytes >> creator)) {
    throw Error(Errc::protocol, "kv service '" + o.name + "': malformed record '" + record + "': '" + text + "'");
  }
  if (bytes != o.value_bytes) {
    throw Error(Errc::invalid_argument, "kv service '" + o.name + "': rank " + std::to_string(node.rank()) + " uses " +
                                            std::to_string(o.value_bytes) + "-byte values, the service (created by rank " +
                                            std::to_string(creator) + ") " + std::to_string(bytes) +
                                            "-byte values: start every replica and client with the same value size");
  }
}

namespace detail {
void throw_record_width(std::size_t tuple_bytes, std::size_t expected) {
  throw Error(Errc::protocol, "kv: a tuple of " + std::to_string(tuple_bytes) + " bytes where " +
                                  std::to_string(expected) + " were due (a flow of another value width)");
}
}  // namespace detail

namespace {

constexpr const char* kKind = "kv service";

// The replica's copy of the data: key -> value. The values live in one arena of value_bytes-wide
// places (freed places are reused); the index is a std::unordered_map with reserved buckets. A
// put of a new key allocates its index node (the store grows) and, now and then, a bigger arena;
// nothing else on the apply path allocates.
class Store {
 public:
  explicit Store(std::size_t value_bytes) : value_bytes_(value_bytes) { index_.reserve(1 << 16); }

  // Applies a write (put: `value`, value_bytes long); returns whether the key existed before.
  bool apply(std::uint32_t op, std::uint64_t key, const char* value) {
    if (op == static_cast<std::uint32_t>(Op::put)) {
      auto [it, inserted] = index_.try_emplace(key, 0);
      if (inserted) it->second = place();
      std::memcpy(at(it->second), value, value_bytes_);
      return !inserted;
    }
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    free_.push_back(it->second);
    index_.erase(it);
    return true;
  }
  // Applies write `r` (its value follows it: value_of).
  bool apply(const Request& r) { return apply(r.op, r.key, value_of(r)); }
  // The value of `key` (value_bytes long), null when absent.
  const char* find(std::uint64_t key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : at(it->second);
  }
  // An order-independent digest of the contents (FNV-1a of each pair, summed).
  std::uint64_t digest() const {
    std::uint64_t sum = 0;
    for_each([&](std::uint64_t key, const char* value) {
      std::uint64_t h = 0xcbf29ce484222325ull ^ key;
      for (std::size_t i = 0; i < value_bytes_; ++i) h = (h ^ static_cast<unsigned char>(value[i])) * 0x100000001b3ull;
      sum += h;
    });
    return sum;
  }
  std::size_t size() const noexcept { return index_.size(); }
  // f(key, value) for every pair.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& [key, where] : index_) f(key, at(where));
  }

 private:
  std::size_t place() {
    if (!free_.empty()) {
      const std::size_t p = free_.back();
      free_.pop_back();
      return p;
    }
    arena_.resize(arena_.size() + value_bytes_);
    return arena_.size() / value_bytes_ - 1;
  }
  char* at(std::size_t p) noexcept { return arena_.data() + p * value_bytes_; }
  const char* at(std::size_t p) const noexcept { return arena_.data() + p * value_bytes_; }

  std::size_t value_bytes_;
  std::unordered_map<std::uint64_t, std::size_t> index_;
  std::vector<char> arena_;
  std::vector<std::size_t> free_;
};

bool is_write(std::uint32_t op) {
  return op == static_cast<std::uint32_t>(Op::put) || op == static_cast<std::uint32_t>(Op::del);
}

// Which writes of every client were applied, and the result of each: one place per client and
// request number modulo `window`, holding the number of the last write applied there and whether
// it found its key. A write sent again — after a view change (its reply was lost with the old
// view), or (NOPaxos) after its slot became a NO-OP — is applied once and answered with the
// result of its first application, even when later writes of its client were applied before it.
// A place is safe to reuse: a client numbers its requests consecutively and sends number
// s + window only after every copy of s was answered (client.cpp), and copies of one client's
// requests reach a replica in the order they were sent (one ring per view and client; a log
// proposed again keeps its order), so no copy of s arrives after s + window was applied.
class ClientTable {
 public:
  ClientTable(std::size_t clients, std::size_t window, std::size_t value_bytes)
      : window_(window),
        places_per_chunk_(std::min<std::size_t>(value_bytes / sizeof(std::uint64_t), 64)),
        value_bytes_(value_bytes),
        seq_(clients * window, 0),
        missing_(clients * window, 0) {}

  bool applied(const Request& r) const { return seq_[place(r.client, r.seq)] == r.seq; }
  // The reply status of the applied write `r`.
  std::uint32_t status(const Request& r) const {
    return static_cast<std::uint32_t>(missing_[place(r.client, r.seq)] != 0 ? ReplyStatus::not_found : ReplyStatus::ok);
  }
  void record(const Request& r, bool not_found) {
    seq_[place(r.client, r.seq)] = r.seq;
    missing_[place(r.client, r.seq)] = not_found ? 1 : 0;
  }

  std::size_t clients() const noexcept { return seq_.size() / window_; }
  std::size_t window() const noexcept { return window_; }
  // The state transfer of a new view moves the places of client `c` in chunks of as many as a
  // value holds numbers (value_bytes / 8, at most 64): their numbers in `seqs` (a value), their
  // results in the low bits of `bits`.
  std::size_t chunks() const noexcept { return (window_ + places_per_chunk_ - 1) / places_per_chunk_; }
  void chunk(std::size_t c, std::size_t chunk, char* seqs, std::uint64_t& bits) const {
    std::memset(seqs, 0, value_bytes_);
    bits = 0;
    for (std::size_t i = 0; i < places_per_chunk_ && chunk * places_per_chunk_ + i < window_; ++i) {
      const std::size_t at = c * window_ + chunk * places_per_chunk_ + i;
      std::memcpy(seqs + i * sizeof(std::uint64_t), &seq_[at], sizeof(std::uint64_t));
      if (missing_[at] != 0) bits |= std::uint64_t{1} << i;
    }
  }
  void load(std::size_t c, std::size_t chunk, const char* seqs, std::uint64_t bits) {
    for (std::size_t i = 0; i < places_per_chunk_ && chunk * places_per_chunk_ + i < window_; ++i) {
      const std::size_t at = c * window_ + chunk * places_per_chunk_ + i;
      std::memcpy(&seq_[at], seqs + i * sizeof(std::uint64_t), sizeof(std::uint64_t));
      missing_[at] = static_cast<std::uint8_t>((bits >> i) & 1);
    }
  }

 private:
  std::size_t place(std::uint64_t client, std::uint64_t seq) const { return client * window_ + seq % window_; }

  std::size_t window_;
  std::size_t places_per_chunk_;
  std::size_t value_bytes_;
  std::vector<std::uint64_t> seq_;
  std::vector<std::uint8_t> missing_;
};

// What a Multi-Paxos replica keeps across views: the store and client table after slots
// 1 .. applied, and its log of slots applied+1 .. last_slot. In the leader's log, `pad` = 1 marks
// a request received in the current view, which it answers once applied; the accept flow carries
// pad = 0.
// Applies write `r` to `store` once (a copy sent again finds its first result in `table`);
// returns its reply status.
std::uint32_t apply_once(Store& store, ClientTable& table, ReplicaStats& stats, const Request& r) {
  if (table.applied(r)) return table.status(r);
  const bool existed = store.apply(r);
  const bool not_found = r.op == static_cast<std::uint32_t>(Op::del) && !existed;
  table.record(r, not_found);
  ++stats.writes;
  return static_cast<std::uint32_t>(not_found ? ReplyStatus::not_found : ReplyStatus::ok);
}

struct ReplicaState {
  ReplicaState(std::size_t clients, std::size_t window, std::size_t value_bytes)
      : store(value_bytes), table(clients, window, value_bytes), log(value_bytes, 1024) {}

  // Applies the oldest log entry (which the caller then pops); returns its reply status.
  std::uint32_t apply_front() {
    ++applied;
    return apply_once(store, table, stats, log.front());
  }

  Store store;
  ClientTable table;
  detail::RecordFifo<Request> log;  // each request with its value
  std::uint64_t applied = 0;
  std::uint64_t last_slot = 0;
  ReplicaStats stats;
};

// The state transfer that opens every view (round 0 of the accept flow): these operations in the
// request's op field, after Op's.
enum StateOp : std::uint32_t {
  kStateBegin = 10,   // key: the leader's applied slot
  kStatePair = 11,    // key, value: one pair of its store
  kStateClient = 12,  // client, key (chunk), value (8 places' numbers), seq (their results: ClientTable::chunk)
  kStateEnd = 13,     // key: the applied slot again
};

enum class Outcome { finished, broken };

// Sends a replica's state — its store and client table after slot `applied` — as the requests
// of state operations (kStateBegin, kStatePair..., kStateClient..., kStateEnd), one `push` each:
// Multi-Paxos's round 0 and NOPaxos's START-VIEW. `extra` travels in kStateBegin's seq (NOPaxos:
// the NO-OPs so far).
template <class Push>
void push_state(const Store& store, const ClientTable& table, std::uint64_t applied, std::uint64_t extra,
                std::size_t value_bytes, Push&& push) {
  detail::Record<Request> r(value_bytes);  // once per state transfer
  Request h{};
  h.op = kStateBegin;
  h.key = applied;
  h.seq = extra;
  r.set(h, nullptr);
  push(r.head());
  store.for_each([&](std::uint64_t key, const char* value) {
    h = {};
    h.op = kStatePair;
    h.key = key;
    r.set(h, value);
    push(r.head());
  });
  for (std::size_t c = 0; c < table.clients(); ++c) {
    for (std::size_t chunk = 0; chunk < table.chunks(); ++chunk) {
      h = {};
      h.op = kStateClient;
      h.client = c;
      h.key = chunk;
      table.chunk(c, chunk, r.value(), h.seq);
      r.head() = h;
      push(r.head());
    }
  }
  h = {};
  h.op = kStateEnd;
  h.key = applied;
  r.set(h, nullptr);
  push(r.head());
}

// Collects a state that push_state sent, aside: the receiver takes it only once it arrived whole
// (a leader that dies halfway leaves the receiver's state as it was).
class StateReceiver {
 public:
  StateReceiver(std::size_t clients, std::size_t window, std::size_t value_bytes)
      : clients_(clients), window_(window), value_bytes_(value_bytes) {}

  // Takes one state operation (its value follows it: value_of); true when it completed a state (then store(), table() and
  // applied() hold it). Throws dfi::Error(protocol) through `malformed(what)` on a broken one.
  template <class Malformed>
  bool take(const Request& r, Malformed&& malformed) {
    switch (r.op) {
      case kStateBegin:
        store_.emplace(value_bytes_);
        table_.emplace(clients_, window_, value_bytes_);
        applied_ = r.key;
        extra_ = r.seq;
        return false;
      case kStatePair:
        if (!store_) malformed("state before its beginning");
        (void)store_->apply(static_cast<std::uint32_t>(Op::put), r.key, value_of(r));
        return false;
      case kStateClient:
        if (!table_ || r.client >= table_->clients() || r.key >= table_->chunks()) {
          malformed("client state of client " + std::to_string(r.client));
        }
        table_->load(r.client, r.key, value_of(r), r.seq);
        return false;
      case kStateEnd:
        if (!store_ || r.key != applied_) malformed("end of a state that did not begin");
        return true;
      default: malformed("state operation " + std::to_string(r.op));
    }
    return false;
  }
  Store& store() { return *store_; }
  ClientTable& table() { return *table_; }
  std::uint64_t applied() const noexcept { return applied_; }
  std::uint64_t extra() const noexcept { return extra_; }
  // Forgets the state taken (after the receiver moved it out, or chose not to).
  void reset() {
    store_.reset();
    table_.reset();
  }

 private:
  std::size_t clients_, window_, value_bytes_;
  std::optional<Store> store_;
  std::optional<ClientTable> table_;
  std::uint64_t applied_ = 0;
  std::uint64_t extra_ = 0;
};

flow::SourceOptions source_options(const flow::Schema& schema, const ServiceOptions& o) {
  flow::SourceOptions options;
  options.expected_schema = schema;
  options.open_timeout = o.timeout;
  return options;
}

// The leader's end of the accept flow, and a follower's.
flow::ReplicateSourceOptions accept_source_options(const ServiceOptions& o) {
  flow::ReplicateSourceOptions options;
  options.expected_schema = accept_schema(o.value_bytes);
  options.open_timeout = o.timeout;
  return options;
}


flow::ReplicateTargetOptions accept_target_options(const ServiceOptions& o, fabric::Worker& worker) {
  return {.expected_schema = accept_schema(o.value_bytes), .open_timeout = o.timeout, .worker = &worker};
}

// How long a replica or client waits for the failure detector to confirm that a flow call which
// failed with peer_failed was a view member's death.
constexpr std::chrono::milliseconds kVerdictWait{3000};

// This replica was cut off from the cluster (`why`) in view `where`: the others count it as dead.
[[noreturn]] void throw_cut_off(cluster::Node& node, const ServiceOptions& o, const std::string& where,
                                const std::string& why) {
  throw Error(Errc::peer_failed, std::string(kKind) + " '" + o.name + "' (rank " + std::to_string(node.rank()) +
                                     "): cut off from the cluster in " + where + " (" + why +
                                     "); the other members go on without this replica, which leaves the service");
}

// Runs `body` (one view's work); an error that a member's death explains is the view breaking.
template <class Body>
Outcome run_view(cluster::Node& node, const ServiceOptions& o, const detail::View& view, Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    const bool may_be_death = e.code() == Errc::peer_failed || e.code() == Errc::flow_failed ||
                              e.code() == Errc::timeout || e.code() == Errc::not_found;
    // Cut off (a partition): the others count this replica as dead and go on without it.
    if (std::string why = node.cut_off(); may_be_death && !why.empty()) throw_cut_off(node, o, detail::describe(view), why);
    if (may_be_death && detail::view_breaks_within(node, view, kVerdictWait)) return Outcome::broken;
    throw;
  }
}

// The leader of one view (unreplicated: the only replica), on the calling thread.
//
// Multi-Paxos: it opens the view with round 0 (its state: store, client table) and round 1 (its
// log, proposed again in this view), then takes requests: every write gets the next log slot, and
// the requests that arrived go out as one *round* of Accept tuples on the replicate flow (a
// read-only round sends one heartbeat tuple). Rounds sent (round_) and chosen (chosen_: held by a
// majority of the replicas), the slot committed (commit_: the last slot of the last chosen
// round), the reads waiting for their round (reads_), the last slot of every round in flight
// (rounds_), and the last round each follower holds (follower_round_).
class Leader {
 public:
  Leader(cluster::Node& node, const ServiceOptions& o, const detail::View& view, ReplicaState& state)
      : node_(node),
        o_(o),
        view_(view),
        names_(o.name, view.number),
        paxos_(o.protocol == Protocol::paxos),
        clients_(client_threads(o, node.size()).size()),
        state_(state),
        worker_(node.fabric(), "kv-leader"),
        requests_(node, names_.requests, 0, request_schema(o.value_bytes), o.timeout),
        replies_(node, worker_, o, view.number),
        accept_out_(o.value_bytes),
        reply_out_(o.value_bytes) {
    // A client that dies is its own loss, not the service's: its requests that arrived are
    // still served (a write it sent may be applied), then its stream ends; replies to it are
    // dropped (ReplyFlows).
    requests_.end_dead_sources();
    if (paxos_) {
      accepted_.emplace(node, names_.accepted, 0, accepted_schema(), o.timeout);
      accept_.emplace(node, worker_, names_.accept, 0, accept_source_options(o));
      follower_round_.assign(view.followers.size(), 0);
      scratch_ = follower_round_;
    }
  }
  // A view left before its end leaves its flows without an end of stream: their peers must not
  // take the silence for the service's end (they learn of the new view from the registry). The
  // replies' flows: ~ReplyFlows.
  ~Leader() {
    if (finished_) return;
    if (accept_) accept_->abandon();
  }
  Leader(const Leader&) = delete;
  Leader& operator=(const Leader&) = delete;

  Outcome run() {
    if (paxos_) open_rounds();
    Backoff backoff(node_.poll_backoff(), 0x6b76);
    auto last_progress = std::chrono::steady_clock::now();
    for (std::uint64_t pass = 1;; ++pass) {
      bool progress = intake();
      if (paxos_) progress |= collect_answers();
      flush_replies();
      if (requests_.end() && state_.log.empty() && reads_.empty()) break;
      // A follower that died breaks the view even while the others keep answering.
      if (paxos_ && (pass & 63) == 0 && detail::view_broken(node_, view_)) return Outcome::broken;
      if (progress) {
        backoff.reset();
        continue;
      }
      // Idle: clients may be quiet for as long as they like, followers may not keep a round.
      if ((backoff.rounds() & 255) == 255) {
        const auto now = std::chrono::steady_clock::now();
        if (round_ == chosen_) {
          last_progress = now;
        } else if (now - last_progress > o_.timeout) {
          throw Error(Errc::timeout, std::string(kKind) + " '" + o_.name + "' (rank " + std::to_string(node_.rank()) +
                                         "): no majority of the " + std::to_string(o_.replicas) +
                                         " replicas answered round " + std::to_string(chosen_ + 1) + " on flow '" +
                                         names_.accepted + "' within " + std::to_string(o_.timeout.count()) + " ms");
        }
      }
      backoff.pause();
    }
    if (paxos_) finish_followers();
    if (Status c = replies_.close(); !c) check(c, "close", replies_.flow(replies_.failed()));
    finished_ = true;
    return Outcome::finished;
  }

 private:
  void check(const Status& s, const char* action, const std::string& flow) {
    cluster::check_call(s, kKind, o_.name, node_.rank(), action, flow);
  }

  void malformed(const std::string& what, const std::string& flow) {
    throw Error(Errc::protocol, std::string(kKind) + " '" + o_.name + "' (rank " + std::to_string(node_.rank()) +
                                    "): " + what + " on flow '" + flow + "'");
  }

  // Pushes accept `a` with the value of its request (null: zeros).
  void push_accept(const Accept& a, const char* value) {
    accept_out_.set(a, value);
    check(accept_->push(accept_out_.data(), accept_out_.bytes()), "push to", names_.accept);
  }

  // Round 0: the state after the applied slots; round 1: the log after them, proposed again in
  // this view (the requests in it were received in an earlier view: their clients send them
  // again, and only those copies are answered).
  void open_rounds() {
    const std::uint64_t applied = state_.applied;
    Accept a{.view = view_.number, .round = 0, .slot = 0, .commit = applied, .request = {}};
    push_state(state_.store, state_.table, applied, 0, o_.value_bytes, [&](const Request& r) {
      a.request = r;
      push_accept(a, value_of(r));
    });
    a.round = 1;
    for (std::size_t i = 0; i < state_.log.size(); ++i) {
      state_.log[i].pad = 0;
      a.slot = applied + 1 + i;
      a.request = state_.log[i];
      push_accept(a, value_of(state_.log[i]));
    }
    if (state_.log.empty()) {
      a.slot = 0;
      a.request = {};
      push_accept(a, nullptr);
    }
    check(accept_->flush(), "flush", names_.accept);
    round_ = 1;
    rounds_.push_back({1, state_.last_slot});
    commit_ = applied;
    ++state_.stats.rounds;
  }

  // Takes the requests that arrived (at most a round's worth): unreplicated, executes them;
  // Multi-Paxos, sends them as the next round, unless max_rounds_in_flight are outstanding.
  bool intake() {
    if (requests_.end() || (paxos_ && round_ - chosen_ >= o_.max_rounds_in_flight)) return false;
    const std::uint64_t round = round_ + 1;
    std::size_t took = 0;
    bool wrote = false;
    while (took < o_.round_requests) {
      flow::TupleBatch batch;
      Status s = requests_.try_consume(batch);
      if (s.code() == Errc::retry) break;
      check(s, "consume from", names_.requests);
      if (batch.empty()) break;  // every client closed
      for (const Request& r : detail::records<Request>(batch, o_.value_bytes)) {
        if (r.client >= clients_ || r.op < 1 || r.op > 3) [[unlikely]] {
          malformed("request with client " + std::to_string(r.client) + " and op " + std::to_string(r.op),
                    names_.requests);
        }
        if (!is_write(r.op)) {
          if (paxos_) {
            reads_.push_back({round, r});
          } else {
            answer_read(r);
          }
          continue;
        }
        Request entry = r;
        entry.pad = 1;  // received in this view: answered once applied
        state_.log.push_back(entry, value_of(r));
        ++state_.last_slot;
        if (!paxos_) {
          apply_log(state_.last_slot);
          continue;
        }
        Accept a{.view = view_.number, .round = round, .slot = state_.last_slot, .commit = commit_, .request = r};
        a.request.pad = 0;
        push_accept(a, value_of(r));
        wrote = true;
      }
      took += batch.count;
    }
    if (took == 0 || !paxos_) return took > 0;
    if (!wrote) push_accept({.view = view_.number, .round = round, .slot = 0, .commit = commit_, .request = {}}, nullptr);
    check(accept_->flush(), "flush", names_.accept);
    round_ = round;
    rounds_.push_back({round, state_.last_slot});
    ++state_.stats.rounds;
    return true;
  }

  // Multi-Paxos: takes the followers' answers; once a round is held by a majority, applies its
  // writes in slot order and answers its reads.
  bool collect_answers() {
    bool any = false;
    for (;;) {
      flow::TupleBatch batch;
      Status s = accepted_->try_consume(batch);
      if (s.code() == Errc::retry) break;
      check(s, "consume from", names_.accepted);
      if (batch.empty()) break;
      for (const Accepted& a : batch.as<Accepted>()) {
        if (a.view != view_.number || a.follower >= follower_round_.size() || a.round > round_) [[unlikely]] {
          malformed("answer of follower " + std::to_string(a.follower) + " in view " + std::to_string(a.view) +
                        " for round " + std::to_string(a.round) + " (sent " + std::to_string(round_) + ")",
                    names_.accepted);
        }
        follower_round_[a.follower] = std::max(follower_round_[a.follower], a.round);
      }
      any = true;
    }
    if (!any) return false;
    // A majority is the leader and replicas/2 followers: the (replicas/2)-th highest follower round.
    const std::size_t need = static_cast<std::size_t>(o_.replicas / 2);
    if (follower_round_.size() < need) return true;  // decide_view never opens such a view
    scratch_ = follower_round_;
    std::nth_element(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(need - 1), scratch_.end(),
                     std::greater<>());
    const std::uint64_t chosen = scratch_[need - 1];
    if (chosen <= chosen_) return true;
    chosen_ = chosen;
    while (!rounds_.empty() && rounds_.front().round <= chosen_) {
      commit_ = rounds_.front().last_slot;
      rounds_.pop_front();
    }
    apply_log(commit_);
    while (!reads_.empty() && reads_.front().round <= chosen_) {
      answer_read(reads_.front().request);
      reads_.pop_front();
    }
    return true;
  }

  // Applies the log up to `slot`, answering the requests received in this view.
  void apply_log(std::uint64_t slot) {
    while (state_.applied < slot) {
      const Request r = state_.log.front();
      const std::uint32_t status = state_.apply_front();
      state_.log.pop_front();
      if (r.pad != 0) reply(r, status, nullptr);
    }
  }

  void answer_read(const Request& r) {
    const char* v = state_.store.find(r.key);
    ++state_.stats.reads;
    reply(r, static_cast<std::uint32_t>(v != nullptr ? ReplyStatus::ok : ReplyStatus::not_found), v);
  }

  // Answers `r` with `value` (null: zeros).
  void reply(const Request& r, std::uint32_t status, const char* value) {
    reply_out_.set({.client = r.client, .seq = r.seq, .status = status, .count = 0, .epoch = 0, .pad = 0}, value);
    if (Status p = replies_.push(r.client, reply_out_.data(), reply_out_.bytes()); !p) [[unlikely]] {
      check(p, "push to", replies_.flow(r.client));
    }
    ++state_.stats.answered;
    replied_ = true;
  }

  void flush_replies() {
    if (!replied_) return;
    if (Status f = replies_.flush(); !f) check(f, "flush", replies_.flow(replies_.failed()));
    replied_ = false;
  }

  // After the last request: a heartbeat carrying the final commit slot, the end of the accept
  // flow, and the followers' last answers up to the end of theirs.
  void finish_followers() {
    push_accept({.view = view_.number, .round = round_ + 1, .slot = 0, .commit = commit_, .request = {}}, nullptr);
    check(accept_->close(), "close", names_.accept);
    for (;;) {
      flow::TupleBatch batch;
      check(accepted_->consume(batch, o_.timeout), "consume from", names_.accepted);
      if (batch.empty()) break;
    }
  }

  struct PendingRead {
    std::uint64_t round;
    Request request;
  };
  struct RoundEnd {
    std::uint64_t round;
    std::uint64_t last_slot;
  };

  cluster::Node& node_;
  const ServiceOptions& o_;
  const detail::View& view_;
  const Names names_;
  const bool paxos_;
  const std::size_t clients_;
  ReplicaState& state_;
  fabric::Worker worker_;
  flow::ShuffleTarget requests_;
  detail::ReplyFlows replies_;
  std::optional<flow::ShuffleTarget> accepted_;
  std::optional<flow::ReplicateSource> accept_;
  detail::Record<Accept> accept_out_;  // the tuple being pushed
  detail::Record<Reply> reply_out_;
  bool replied_ = false;
  bool finished_ = false;
  std::uint64_t round_ = 0;
  std::uint64_t chosen_ = 0;
  std::uint64_t commit_ = 0;
  detail::RecordFifo<PendingRead> reads_{0, 1024};  // no value: a read needs none
  detail::RecordFifo<RoundEnd> rounds_{0, 64};
  std::vector<std::uint64_t> follower_round_;
  std::vector<std::uint64_t> scratch_;
};

// A Multi-Paxos follower of one view, on the calling thread.
Outcome run_follower(cluster::Node& node, const ServiceOptions& o, const detail::View& view, ReplicaState& state) {
  const Names names(o.name, view.number);
  const auto me = std::find(view.followers.begin(), view.followers.end(), node.rank());
  const auto follower = static_cast<std::uint64_t>(me - view.followers.begin());
  fabric::Worker worker(node.fabric(), "kv-follower");
  flow::ReplicateTarget accept(node, names.accept, 0, accept_target_options(o, worker));
  flow::ShuffleSource accepted(node, worker, names.accepted, 0, source_options(accepted_schema(), o));
  // Left before its end (a broken view, an error): no end of stream (see ~Leader).
  struct Abandon {
    flow::ShuffleSource& flow;
    bool armed = true;
    ~Abandon() {
      if (armed) flow.abandon();
    }
  } abandon{accepted};
  auto check = [&](const Status& s, const char* action, const std::string& flow) {
    cluster::check_call(s, kKind, o.name, node.rank(), action, flow);
  };
  auto malformed = [&](const std::string& what) {
    throw Error(Errc::protocol, std::string(kKind) + " '" + o.name + "' (rank " + std::to_string(node.rank()) +
                                    "): " + what + " on flow '" + names.accept + "'");
  };

  // The leader's state (round 0) is collected aside and replaces ours only once it is whole and
  // ahead of ours: a leader that dies halfway leaves this replica's state as it was.
  StateReceiver staged(state.table.clients(), state.table.window(), o.value_bytes);
  std::uint64_t last_round = 0, commit = 0, answered_round = 0;
  const auto idle_wait = std::chrono::milliseconds(20);
  for (;;) {
    flow::ReplicateBatch batch;
    Status s = accept.consume(batch, idle_wait);
    if (s.code() == Errc::timeout) {
      // The clients are quiet, or the leader stopped because another member died.
      if (detail::view_broken(node, view)) return Outcome::broken;
      continue;
    }
    check(s, "consume from", names.accept);
    if (batch.end) break;
    if (batch.gap()) malformed("a gap (the flow is not ordered)");
    for (const Accept& a : detail::records<Accept>(batch, o.value_bytes)) {
      if (a.view != view.number || a.round < last_round) [[unlikely]] {
        malformed("accept of view " + std::to_string(a.view) + ", round " + std::to_string(a.round) + " in view " +
                  std::to_string(view.number) + " after round " + std::to_string(last_round));
      }
      last_round = a.round;
      if (a.round == 0) {
        if (staged.take(a.request, malformed)) {
          const std::uint64_t staged_applied = staged.applied();
          if (staged_applied > state.applied) {
            // Our log up to the leader's applied slot is in its state; what follows stays.
            while (state.applied < staged_applied && !state.log.empty()) {
              state.log.pop_front();
              ++state.applied;
            }
            state.applied = staged_applied;
            state.last_slot = std::max(state.last_slot, staged_applied);
            state.store = std::move(staged.store());
            state.table = std::move(staged.table());
          }
          staged.reset();
        }
        continue;
      }
      if (a.slot != 0) {
        if (a.slot > state.last_slot + 1) [[unlikely]] {
          malformed("slot " + std::to_string(a.slot) + " after slot " + std::to_string(state.last_slot));
        }
        if (a.slot == state.last_slot + 1) {  // else held already: the same request
          if (a.request.client >= state.table.clients() || !is_write(a.request.op)) [[unlikely]] {
            malformed("write of client " + std::to_string(a.request.client) + " with op " + std::to_string(a.request.op));
          }
          state.log.push_back(a.request, value_of(a.request));
          state.last_slot = a.slot;
        }
      }
      commit = std::max(commit, a.commit);
    }
    if (commit > state.last_slot) [[unlikely]] {
      malformed("commit slot " + std::to_string(commit) + " beyond the last slot held, " + std::to_string(state.last_slot));
    }
    while (state.applied < commit) {
      (void)state.apply_front();
      state.log.pop_front();
    }
    if (last_round == 0 || last_round == answered_round) continue;  // the state is not a round to answer
    ++state.stats.rounds;
    answered_round = last_round;
    const Accepted answer{.view = view.number, .follower = follower, .round = last_round, .slot = state.last_slot};
    check(accepted.push_to(0, &answer, sizeof answer), "push to", names.accepted);
    check(accepted.flush(), "flush", names.accepted);
  }
  abandon.armed = false;
  check(accepted.close(), "close", names.accepted);
  return Outcome::finished;
}

// A replica's report at the end: its counters, the slots it applied and its store's contents.
ReplicaStats final_stats(ReplicaStats stats, std::uint64_t slots, const Store& store, const detail::View& view) {
  stats.slots = slots;
  stats.keys = store.size();
  stats.digest = store.digest();
  stats.view = view.number;
  return stats;
}

// Enters the views after `broken` until one opens with a live leader (views.hpp): publishes this
// replica's record (`state`: its log length first) for each, and opens the view it leads after
// `take_over(view)` prepared its state.
template <class TakeOver>
detail::View enter_next_view(cluster::Node& node, const ServiceOptions& o, std::uint64_t broken,
                             const std::string& state, TakeOver&& take_over) {
  for (std::uint64_t number = broken + 1;; ++number) {
    try {
      detail::publish_view_state(node, o, number, state);
    } catch (const Error& e) {
      // The registry refuses a rank it counts as dead (its connection was closed: a partition).
      if (e.code() != Errc::peer_failed) throw;
      std::string why = node.cut_off();
      if (why.empty()) why = e.what();
      throw_cut_off(node, o, "view " + std::to_string(broken), why);
    }
    detail::View view = detail::decide_view(node, o, number);
    if (view.leader == node.rank()) {
      take_over(view);
      detail::open_view(node, o, view);
      return view;
    }
    if (detail::wait_view_open(node, o, view)) return view;
  }
}

// A Multi-Paxos or unreplicated replica, through every view until the service ends.
ReplicaStats run_paxos_replica(cluster::Node& node, const ServiceOptions& o) {
  ReplicaState state(client_threads(o, node.size()).size(), o.window, o.value_bytes);
  detail::View view = detail::first_view(o);
  for (;;) {
    const Outcome outcome = run_view(node, o, view, [&] {
      if (view.leader == node.rank()) return Leader(node, o, view, state).run();
      return run_follower(node, o, view, state);
    });
    if (outcome == Outcome::finished) break;
    if (o.protocol != Protocol::paxos) {
      throw Error(Errc::peer_failed, std::string(kKind) + " '" + o.name + "' (rank " + std::to_string(node.rank()) +
                                         "): a member of " + detail::describe(view) + " died");
    }
    view = enter_next_view(node, o, view.number, std::to_string(state.last_slot), [](const detail::View&) {});
  }
  return final_stats(state.stats, state.applied, state.store, view);
}

// One request of a NOPaxos replica's log, with the sequence number (the slot) it arrived in. The
// leader keeps the slots a follower may still ask for (a NO-OP slot as one entry with op 0); a
// follower keeps its writes until the leader declares their slots decided (kGapSync).
struct SlotRequest {
  std::uint64_t slot = 0;
  Request request;  // op 0: a NO-OP
};

// Sequence numbers between two kGapSync of the leader (it also sends one when it is idle).
constexpr std::uint64_t kSyncEvery = 64;

// What a NOPaxos replica keeps across views. Every view is a session of its own: a new ordered
// requests flow (its sequencer at the view's leader) whose sequence numbers start at 1. `session`
// is the view whose START-VIEW state this replica took (view 0: the empty start), `held` the last
// sequence number of that session it holds, `log` its writes of the session not applied yet (a
// follower's) and `noops` every number of the session it knows to be a NO-OP (decided, held or
// not reached yet).
struct NopaxosState {
  NopaxosState(std::size_t clients, std::size_t window, std::size_t value_bytes)
      : store(value_bytes), table(clients, window, value_bytes), log(value_bytes, 1024) {}

  std::uint32_t apply_write(const Request& r) { return apply_once(store, table, stats, r); }

  // The replica's record for a view change (views.hpp: the longest log leads): its log's length
  // as one number ordered by session first (a later session's state holds every earlier one's
  // merged log), then the session's NO-OPs.
  std::string view_state() const {
    std::string text = std::to_string((session << 32) | held);
    for (std::uint64_t n : noops) {
      text += ' ';
      text += std::to_string(n);
    }
    return text;
  }

  Store store;
  ClientTable table;
  ReplicaStats stats;
  std::uint64_t session = 0;
  std::uint64_t held = 0;
  detail::RecordFifo<SlotRequest> log;  // each request with its value
  std::vector<std::uint64_t> noops;
};

// The new leader of `view` (NOPaxos view change, Li et al. §5.2.3 and §5.2.4), before it opens
// the view: it holds the longest log of the survivors (decide_view), and every survivor's log is
// a prefix of the session's one sequence (a replica never skips a number). It merges them: a
// number that any survivor of its session knows as a NO-OP is one (a NO-OP is committed only once
// replicas/2 followers hold it, so one of them survives; no client completed a request at such a
// number: the leader, whose answer completes it, did not have it); every other write it holds is
// applied (the client table applies a write sent again once). The merged state is the new
// view's, which START-VIEW sends to the followers.
void nopaxos_take_over(NopaxosState& state, const detail::View& view) {
  std::vector<std::uint64_t> noops = state.noops;
  for (const std::optional<std::string>& record : view.states) {
    if (!record) continue;
    std::istringstream in(*record);
    std::uint64_t key = 0, n = 0;
    in >> key;
    if ((key >> 32) != state.session) continue;  // an earlier session's log: ours holds it merged
    while (in >> n) noops.push_back(n);
  }
  std::sort(noops.begin(), noops.end());
  noops.erase(std::unique(noops.begin(), noops.end()), noops.end());
  while (!state.log.empty()) {
    const SlotRequest& e = state.log.front();
    if (e.request.op != 0 && !std::binary_search(noops.begin(), noops.end(), e.slot)) (void)state.apply_write(e.request);
    state.log.pop_front();
  }
  // The NO-OPs of the merged log count once each, as the followers will have counted them.
  const std::uint64_t held = state.held;
  state.stats.noops = state.stats.noops - std::min<std::uint64_t>(state.stats.noops, state.noops.size()) +
                      static_cast<std::uint64_t>(std::count_if(noops.begin(), noops.end(), [&](std::uint64_t n) { return n <= held; }));
  state.session = view.number;
  state.held = 0;
  state.noops.clear();
}

// A NOPaxos replica of one view, on the calling thread (view 0: every rank 0 .. replicas-1, rank 0
// leads).
//
// Normal case: every replica consumes the requests in the ordered flow's one global order (the
// sequence number of a segment is its log slot). The leader executes each request and sends its
// result; a follower logs the writes and acknowledges each segment with one tuple. A client
// completes a request with the leader's answer and replicas/2 followers' (a majority, see
// client.cpp).
//
// Gap agreement (Li et al., OSDI 2016, §5.2.3), on the accept / accepted flows of Multi-Paxos:
//  - The leader, on a gap at sequence number n (a client died holding it, or its segment came
//    too late — the flow reports the same gap wherever the segment reached no replica), commits
//    a NO-OP for n: it sends kGapCommit(n) to the followers and consumes nothing after n until
//    replicas/2 of them answered kGapCommitted(n) (with itself a majority).
//  - A follower with a gap at n asks the leader (kGapAt(n)) and consumes nothing after n until
//    the leader decides: kGapCommit(n), or kGapFill(n) with the leader's requests of n (the
//    segment reached the leader and not this follower: the leader keeps it). It never skips n.
//  - A follower that holds n and receives kGapCommit(n) replaces n with a NO-OP; one that has
//    not reached n yet keeps the decision and applies it when it gets there. It answers
//    kGapCommitted(n) once it holds every number up to n.
//  - A follower applies its writes only up to the leader's kGapSync(n) (every number up to n is
//    decided: the leader sent each kGapCommit before it), so no write it applied is ever
//    replaced. Its kGapSynced answer tells the leader which slots it may forget.
// The leader never answers a request of a NO-OP slot (it did not have it); a client whose
// request got no majority within retry_timeout sends it again (client.cpp), and the client
// table applies every write once.
//
// A dead client ends its stream of the requests flow (its missing numbers become gaps) and its
// replies are dropped. A dead replica breaks the view (any member: the clients' multicast reaches
// every member, and a client frees a request's place once every member answered): the survivors
// enter the next view (run_nopaxos_replica), whose leader merges the logs (nopaxos_take_over) and
// opens it with START-VIEW, its state, on the accept flow; a follower takes no request of the new
// session before it took that state whole.
class NopaxosReplica {
 public:
  NopaxosReplica(cluster::Node& node, const ServiceOptions& o, const detail::View& view, NopaxosState& state)
      : node_(node),
        o_(o),
        view_(view),
        names_(o.name, view_.number),
        leader_(node.rank() == view_.leader),
        clients_(client_threads(o, node.size()).size()),
        state_(state),
        store_(state.store),
        table_(state.table),
        stats_(state.stats),
        log_(state.log),
        worker_(node.fabric(), "kv-replica"),
        requests_(node, names_.requests, 0,
                  {.expected_schema = request_schema(o.value_bytes), .open_timeout = o.timeout, .worker = &worker_}),
        replies_(node, worker_, o, view_.number),
        accept_out_(o.value_bytes),
        reply_out_(o.value_bytes),
        held_(o.value_bytes, 1024),
        fill_(o.value_bytes, 64) {
    // A client that dies is its own loss: its replies are dropped (ReplyFlows; its requests
    // stream ends).
    if (leader_) {
      accepted_.emplace(node, names_.accepted, 0, accepted_schema(), o.timeout);
      accept_.emplace(node, worker_, names_.accept, 0, accept_source_options(o));
      follower_synced_.assign(view_.followers.size(), 0);
      follower_committed_.assign(view_.followers.size(), 0);
    } else {
      const auto me = std::find(view_.followers.begin(), view_.followers.end(), node.rank());
      follower_ = static_cast<std::uint64_t>(me - view_.followers.begin());
      decisions_.emplace(node, names_.accept, 0, accept_target_options(o, worker_));
      answers_.emplace(node, worker_, names_.accepted, 0, source_options(accepted_schema(), o));
    }
  }
  // Left before its end (a broken view, an error): no end of stream on its flows (see ~Leader).
  // What it holds of the session stays in the state, for the view change.
  ~NopaxosReplica() {
    if (state_.session == view_.number) state_.held = next_ - 1;
    if (finished_) return;
    if (accept_) accept_->abandon();
    if (answers_) answers_->abandon();
  }
  NopaxosReplica(const NopaxosReplica&) = delete;
  NopaxosReplica& operator=(const NopaxosReplica&) = delete;

  Outcome run() {
    if (leader_) {
      lead();
    } else {
      follow();
    }
    finished_ = true;
    return Outcome::finished;
  }

 private:
  // ---- both roles ----

  void check(const Status& s, const char* action, const std::string& flow) {
    cluster::check_call(s, kKind, o_.name, node_.rank(), action, flow);
  }

  [[noreturn]] void malformed(const std::string& what, const std::string& flow) {
    throw Error(Errc::protocol, std::string(kKind) + " '" + o_.name + "' (rank " + std::to_string(node_.rank()) +
                                    "): " + what + " on flow '" + flow + "'");
  }

  // Every 64th pause of a wait: a member of the view that died breaks it (run_view confirms).
  void check_view(const Backoff& backoff) {
    if ((backoff.rounds() & 63) != 63 || !detail::view_broken(node_, view_)) [[likely]] return;
    throw Error(Errc::peer_failed, std::string(kKind) + " '" + o_.name + "' (rank " + std::to_string(node_.rank()) +
                                       "): a member of " + detail::describe(view_) + " died");
  }

  // Takes the result of try_consume on the requests flow: false when there is nothing to use
  // (nothing there yet, or a client died: its ring ended and the flow goes on without it).
  bool consumed(const Status& s) {
    if (s) return true;
    if (s.code() == Errc::retry) return false;
    if (s.code() == Errc::peer_failed && !detail::view_broken(node_, view_)) return false;
    check(s, "consume from", names_.requests);
    return false;
  }

  // Sequence number n is due next; anything else is a broken flow.
  void expect_next(std::uint64_t n) {
    if (n != next_) [[unlikely]] {
      malformed("sequence number " + std::to_string(n) + " where " + std::to_string(next_) + " was due",
                names_.requests);
    }
  }

  // A segment is one client's consecutive requests, sent as one copy (one epoch): the
  // follower's acknowledgement covers them as a range.
  void check_segment(detail::Records<Request> segment, const std::string& flow) {
    for (std::size_t i = 0; i < segment.size(); ++i) {
      const Request& r = segment[i];
      if (r.client >= clients_ || r.op < 1 || r.op > 3 || r.client != segment[0].client ||
          r.seq != segment[0].seq + i || r.pad != segment[0].pad) [[unlikely]] {
        malformed("malformed request with client " + std::to_string(r.client) + ", seq " + std::to_string(r.seq) +
                      ", copy " + std::to_string(r.pad) + " and op " + std::to_string(r.op),
                  flow);
      }
    }
  }

  std::uint32_t apply_write(const Request& r) { return state_.apply_write(r); }

  void flush_replies() {
    if (!replied_) return;
    if (Status f = replies_.flush(); !f) check(f, "flush", replies_.flow(replies_.failed()));
    replied_ = false;
  }

  // Pushes the reply in reply_out_ to its client.
  void push_reply() {
    const std::size_t client = reply_out_.head().client;
    if (Status p = replies_.push(client, reply_out_.data(), reply_out_.bytes()); !p) [[unlikely]] {
      check(p, "push to", replies_.flow(client));
    }
    replied_ = true;
  }

  void close_replies() {
    if (Status c = replies_.close(); !c) check(c, "close", replies_.flow(replies_.failed()));
  }

  // ---- the leader ----

  void lead() {
    Backoff backoff(node_.poll_backoff(), 0x6e70);
    if (view_.number > 0) start_view();
    for (;;) {
      const bool served = serve_followers();
      flow::ReplicateBatch batch;
      if (!consumed(requests_.try_consume(batch))) {
        // Idle: the followers may apply what is decided.
        if (decided_ > synced_sent_) send_sync();
        flush_replies();
        if (served) {
          backoff.reset();
        } else {
          backoff.pause();
          check_view(backoff);
        }
        continue;
      }
      backoff.reset();
      if (batch.end) break;
      if (batch.gap()) {
        expect_next(batch.sequence);
        for (std::uint64_t i = 0; i < batch.gap_count; ++i) commit_gap(batch.sequence + i);
      } else {
        execute(batch);
      }
      if (decided_ - synced_sent_ >= kSyncEvery) send_sync();
      flush_replies();
    }
    // The end: the last sync, then the followers' questions until each has closed its answers.
    if (decided_ > synced_sent_) send_sync();
    const Deadline deadline(o_.timeout);
    while (!accepted_->end()) {
      if (serve_followers()) {
        backoff.reset();
        continue;
      }
      if ((backoff.rounds() & 255) == 255 && deadline.expired()) {
        throw Error(Errc::timeout, std::string(kKind) + " '" + o_.name + "' (rank " + std::to_string(node_.rank()) +
                                       "): the followers did not close flow '" + names_.accepted + "' within " +
                                       std::to_string(o_.timeout.count()) + " ms of the last request");
      }
      backoff.pause();
      check_view(backoff);
    }
    check(accept_->close(), "close", names_.accept);
    close_replies();
  }

  // START-VIEW: the state this leader merged (nopaxos_take_over) goes to the followers first on
  // the accept flow; the writes applied and the NO-OPs so far travel with it (every replica
  // reports the same counts at the end).
  void start_view() {
    Accept a{.view = view_.number, .round = kStartView, .slot = 0, .commit = 0, .request = {}};
    push_state(store_, table_, stats_.writes, stats_.noops, o_.value_bytes, [&](const Request& r) {
      a.request = r;
      push_decision(a, value_of(r));
    });
    check(accept_->flush(), "flush", names_.accept);
  }

  // Executes the segment due next and answers every request in it.
  void execute(const flow::ReplicateBatch& batch) {
    expect_next(batch.sequence);
    const detail::Records<Request> segment = detail::records<Request>(batch, o_.value_bytes);
    check_segment(segment, names_.requests);
    if (segment.empty()) [[unlikely]] held_.push_back({next_, Request{}}, nullptr);  // nothing to hold: as a NO-OP
    for (const Request& r : segment) {
      const Reply reply{.client = r.client, .seq = r.seq, .status = 0, .count = 0, .epoch = r.pad, .pad = 0};
      if (is_write(r.op)) {
        reply_out_.set(reply, nullptr);
        reply_out_.head().status = apply_write(r);
      } else {
        const char* v = store_.find(r.key);
        reply_out_.set(reply, v);
        if (v == nullptr) reply_out_.head().status = static_cast<std::uint32_t>(ReplyStatus::not_found);
        ++stats_.reads;
      }
      push_reply();
      ++stats_.answered;
      held_.push_back({next_, r}, value_of(r));
    }
    replied_ = true;
    decided_ = next_++;
    ++stats_.rounds;
    if (!wanted_.empty()) [[unlikely]] answer_wanted();
  }

  // Gap agreement at sequence number n (due next), which the leader does not have: a NO-OP.
  void commit_gap(std::uint64_t n) {
    push_decision({.view = view_.number, .round = kGapCommit, .slot = n, .commit = 0, .request = {}}, nullptr);
    check(accept_->flush(), "flush", names_.accept);
    held_.push_back({n, Request{}}, nullptr);
    state_.noops.push_back(n);
    decided_ = next_++;
    ++stats_.noops;
    if (!wanted_.empty()) answer_wanted();
    // Nothing after n before a majority holds the NO-OP: the leader and replicas/2 followers.
    const std::size_t need = static_cast<std::size_t>(o_.replicas / 2);
    const Deadline deadline(o_.timeout);
    Backoff backoff(node_.poll_backoff(), 0x6770);
    for (;;) {
      std::size_t have = 0;
      for (std::uint64_t c : follower_committed_) have += c >= n ? 1 : 0;
      if (have >= need) return;
      if (serve_followers()) {
        backoff.reset();
        continue;
      }
      if ((backoff.rounds() & 255) == 255 && deadline.expired()) {
        throw Error(Errc::timeout, std::string(kKind) + " '" + o_.name + "' (rank " + std::to_string(node_.rank()) +
                                       "): " + std::to_string(have) + " of the " + std::to_string(need) +
                                       " followers needed answered the NO-OP of sequence number " + std::to_string(n) +
                                       " on flow '" + names_.accepted + "' within " + std::to_string(o_.timeout.count()) +
                                       " ms");
      }
      backoff.pause();
      check_view(backoff);
    }
  }

  // Pushes decision `a` with the value of its request (null: zeros).
  void push_decision(const Accept& a, const char* value) {
    accept_out_.set(a, value);
    check(accept_->push(accept_out_.data(), accept_out_.bytes()), "push to", names_.accept);
  }

  // Every sequence number up to decided_ is decided: the followers may apply them.
  void send_sync() {
    push_decision({.view = view_.number, .round = kGapSync, .slot = decided_, .commit = 0, .request = {}}, nullptr);
    check(accept_->flush(), "flush", names_.accept);
    synced_sent_ = decided_;
  }

  // Takes the followers' answers and questions; true when there were any.
  bool serve_followers() {
    bool any = false;
    bool pushed = false;
    for (;;) {
      flow::TupleBatch batch;
      Status s = accepted_->try_consume(batch);
      if (s.code() == Errc::retry) break;
      check(s, "consume from", names_.accepted);
      if (batch.empty()) break;  // every follower closed: the end
      any = true;
      for (const Accepted& a : batch.as<Accepted>()) {
        if (a.view != view_.number || a.follower >= follower_synced_.size() || (a.slot == 0 && a.round != kGapSynced))
            [[unlikely]] {
          malformed("answer of follower " + std::to_string(a.follower) + " in view " + std::to_string(a.view) +
                        " about sequence number " + std::to_string(a.slot),
                    names_.accepted);
        }
        switch (a.round) {
          case kGapAt: pushed |= answer_gap(a.slot); break;
          case kGapCommitted:
            follower_committed_[a.follower] = std::max(follower_committed_[a.follower], a.slot);
            break;
          case kGapSynced:
            follower_synced_[a.follower] = std::max(follower_synced_[a.follower], a.slot);
            forget_synced();
            break;
          default: malformed("answer " + std::to_string(a.round) + " of follower " + std::to_string(a.follower), names_.accepted);
        }
      }
    }
    if (pushed) check(accept_->flush(), "flush", names_.accept);
    return any;
  }

  // A follower has a gap at n: sends the decision for n once the leader has made it (its
  // requests of n, or the NO-OP again); true when it pushed one.
  bool answer_gap(std::uint64_t n) {
    if (n >= next_) {
      wanted_.push_back(n);  // decided when the leader gets there
      return false;
    }
    // held_ is in slot order: the first entry of slot n.
    std::size_t lo = 0, hi = held_.size();
    while (lo < hi) {
      const std::size_t mid = (lo + hi) / 2;
      if (held_[mid].slot < n) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo == held_.size() || held_[lo].slot != n) {
      malformed("a follower asked for sequence number " + std::to_string(n) +
                    ", which every follower had reported holding",
                names_.accepted);
    }
    if (held_[lo].request.op == 0) {
      push_decision({.view = view_.number, .round = kGapCommit, .slot = n, .commit = 0, .request = {}}, nullptr);
      return true;
    }
    std::size_t count = 0;
    while (lo + count < held_.size() && held_[lo + count].slot == n) ++count;
    for (std::size_t i = 0; i < count; ++i) {
      push_decision({.view = view_.number,
                     .round = kGapFill,
                     .slot = n,
                     .commit = (static_cast<std::uint64_t>(count) << 32) | i,
                     .request = held_[lo + i].request},
                    value_of(held_[lo + i].request));
    }
    return true;
  }

  // The questions about numbers the leader has decided since they were asked.
  void answer_wanted() {
    bool pushed = false;
    for (std::size_t i = 0; i < wanted_.size();) {
      if (wanted_[i] < next_) {
        pushed |= answer_gap(wanted_[i]);
        wanted_[i] = wanted_.back();
        wanted_.pop_back();
      } else {
        ++i;
      }
    }
    if (pushed) check(accept_->flush(), "flush", names_.accept);
  }

  // Forgets the slots that every follower holds.
  void forget_synced() {
    const std::uint64_t all = *std::min_element(follower_synced_.begin(), follower_synced_.end());
    while (!held_.empty() && held_.front().slot <= all) held_.pop_front();
  }

  // ---- a follower ----

  void follow() {
    Backoff backoff(node_.poll_backoff(), 0x6670 + follower_);
    if (view_.number > 0) take_start_view(backoff);
    for (;;) {
      bool progress = serve_leader();
      if (waiting_) {
        // A gap at next_: nothing after it before the leader's decision.
        if (!progress && (backoff.rounds() & 255) == 255 && waiting_since_.expired()) {
          throw Error(Errc::timeout, std::string(kKind) + " '" + o_.name + "' (rank " + std::to_string(node_.rank()) +
                                         "): no decision for sequence number " + std::to_string(next_) +
                                         " from the leader on flow '" + names_.accept + "' within " +
                                         std::to_string(o_.timeout.count()) + " ms");
        }
      } else if (next_ < gap_end_) {
        gap_at_next();
        progress = true;
      } else {
        flow::ReplicateBatch batch;
        if (consumed(requests_.try_consume(batch))) {
          progress = true;
          if (batch.end) break;
          expect_next(batch.sequence);
          if (batch.gap()) {
            gap_end_ = batch.sequence + batch.gap_count;
            gap_at_next();
          } else if (take_noop_ahead(next_)) {
            ++next_;  // its NO-OP decision came first
          } else {
            const detail::Records<Request> segment = detail::records<Request>(batch, o_.value_bytes);
            check_segment(segment, names_.requests);
            hold(segment);
          }
        }
      }
      flush_replies();
      flush_answers();
      if (progress) {
        backoff.reset();
      } else {
        backoff.pause();
        check_view(backoff);
      }
    }
    // The end: the leader's sync of the last number, then the end of its decisions.
    const Deadline deadline(o_.timeout);
    while (commit_ + 1 < next_) {
      if (serve_leader()) {
        backoff.reset();
        continue;
      }
      if ((backoff.rounds() & 255) == 255 && deadline.expired()) {
        throw Error(Errc::timeout, std::string(kKind) + " '" + o_.name + "' (rank " + std::to_string(node_.rank()) +
                                       "): the leader synced sequence number " + std::to_string(commit_) + " of " +
                                       std::to_string(next_ - 1) + " on flow '" + names_.accept + "' within " +
                                       std::to_string(o_.timeout.count()) + " ms of the last request");
      }
      backoff.pause();
      check_view(backoff);
    }
    apply_committed();
    flush_answers();
    check(answers_->close(), "close", names_.accepted);
    for (;;) {
      flow::ReplicateBatch batch;
      check(decisions_->consume(batch, o_.timeout), "consume from", names_.accept);
      if (batch.end) break;
    }
    close_replies();
  }

  // START-VIEW (a view after the first): the leader's state, taken whole before any request of
  // the new session (an acknowledgement of one is a promise that this replica's log holds it,
  // which only a replica of the new session can keep). It replaces this replica's state and
  // log: the leader merged every survivor's log into it.
  void take_start_view(Backoff& backoff) {
    StateReceiver staged(table_.clients(), table_.window(), o_.value_bytes);
    const Deadline deadline(o_.timeout);
    for (;;) {
      flow::ReplicateBatch batch;
      Status s = decisions_->try_consume(batch);
      if (s.code() == Errc::retry) {
        if ((backoff.rounds() & 255) == 255 && deadline.expired()) {
          throw Error(Errc::timeout, std::string(kKind) + " '" + o_.name + "' (rank " + std::to_string(node_.rank()) +
                                         "): no START-VIEW of " + detail::describe(view_) + " on flow '" + names_.accept +
                                         "' within " + std::to_string(o_.timeout.count()) + " ms");
        }
        backoff.pause();
        check_view(backoff);
        continue;
      }
      check(s, "consume from", names_.accept);
      if (batch.end || batch.gap()) [[unlikely]] malformed("the end or a gap before START-VIEW", names_.accept);
      backoff.reset();
      const detail::Records<Accept> decisions = detail::records<Accept>(batch, o_.value_bytes);
      for (std::size_t i = 0; i < decisions.size(); ++i) {
        const Accept& a = decisions[i];
        if (a.view != view_.number || a.round != kStartView) [[unlikely]] {
          malformed("decision " + std::to_string(a.round) + " of view " + std::to_string(a.view) + " before START-VIEW",
                    names_.accept);
        }
        if (!staged.take(a.request, [&](const std::string& what) { malformed(what, names_.accept); })) continue;
        if (i + 1 != decisions.size()) [[unlikely]] malformed("decisions after START-VIEW in its segment", names_.accept);
        store_ = std::move(staged.store());
        table_ = std::move(staged.table());
        stats_.writes = staged.applied();
        stats_.noops = staged.extra();
        log_.clear();
        state_.noops.clear();
        state_.session = view_.number;
        state_.held = 0;
        return;
      }
    }
  }

  // next_ is missing here: its NO-OP is decided already, or the follower asks the leader.
  void gap_at_next() {
    if (take_noop_ahead(next_)) {
      ++next_;
      return;
    }
    answer({.view = view_.number, .follower = follower_, .round = kGapAt, .slot = next_});
    waiting_ = true;
    waiting_since_ = Deadline(o_.timeout);
    fill_.clear();
  }

  // Whether the leader committed a NO-OP for n, which the follower reached now: then it answers
  // kGapCommitted(n) (it holds every number up to n).
  bool take_noop_ahead(std::uint64_t n) {
    if (noop_ahead_.empty() || noop_ahead_.front() != n) [[likely]] return false;
    noop_ahead_.erase(noop_ahead_.begin());
    answer({.view = view_.number, .follower = follower_, .round = kGapCommitted, .slot = n});
    return true;
  }

  // Logs the writes of segment next_ and acknowledges it to its client.
  void hold(detail::Records<Request> segment) {
    for (const Request& r : segment) {
      if (is_write(r.op)) log_.push_back({next_, r}, value_of(r));
    }
    if (!segment.empty()) {
      reply_out_.set({.client = segment.back().client,
                      .seq = segment.back().seq,
                      .status = static_cast<std::uint32_t>(ReplyStatus::ack),
                      .count = static_cast<std::uint32_t>(segment.size()),
                      .epoch = segment.front().pad,
                      .pad = 0},
                     nullptr);
      push_reply();
    }
    ++next_;
    ++stats_.rounds;
    if (commit_ >= next_ - 1) apply_committed();
  }

  // Takes the leader's decisions; true when there were any.
  bool serve_leader() {
    bool any = false;
    for (;;) {
      flow::ReplicateBatch batch;
      Status s = decisions_->try_consume(batch);
      if (s.code() == Errc::retry) break;
      check(s, "consume from", names_.accept);
      if (batch.end || batch.gap()) [[unlikely]] malformed("the end or a gap before this follower's end", names_.accept);
      any = true;
      for (const Accept& a : detail::records<Accept>(batch, o_.value_bytes)) {
        if (a.view != view_.number || a.slot == 0) [[unlikely]] {
          malformed("decision " + std::to_string(a.round) + " of view " + std::to_string(a.view) +
                        " about sequence number " + std::to_string(a.slot),
                    names_.accept);
        }
        switch (a.round) {
          case kGapCommit: gap_commit(a.slot); break;
          case kGapFill: gap_fill(a); break;
          case kGapSync:
            commit_ = std::max(commit_, a.slot);
            apply_committed();
            answer({.view = view_.number, .follower = follower_, .round = kGapSynced, .slot = next_ - 1});
            break;
          default: malformed("decision " + std::to_string(a.round), names_.accept);
        }
      }
    }
    flush_answers();
    return any;
  }

  // GAP-COMMIT(n): n is a NO-OP.
  void gap_commit(std::uint64_t n) {
    if (n > last_noop_) {  // the leader sends a decision again to a follower that asks
      last_noop_ = n;
      ++stats_.noops;
      state_.noops.push_back(n);
    }
    if (n < next_) {
      // Held already: the writes of n become NO-OPs. None is applied: the sync that would apply
      // them comes after this decision (a decision sent again may come after it: n <= commit_,
      // and n holds NO-OPs already).
      for (std::size_t i = log_.size(); i-- > 0 && log_[i].slot >= n;) {
        if (log_[i].slot == n) log_[i].request.op = 0;
      }
      answer({.view = view_.number, .follower = follower_, .round = kGapCommitted, .slot = n});
    } else if (n == next_ && waiting_) {
      waiting_ = false;
      answer({.view = view_.number, .follower = follower_, .round = kGapCommitted, .slot = n});
      ++next_;
    } else if (std::find(noop_ahead_.begin(), noop_ahead_.end(), n) == noop_ahead_.end()) {
      // Not reached yet: decided when the follower gets there (decisions come in order).
      noop_ahead_.push_back(n);
      std::sort(noop_ahead_.begin(), noop_ahead_.end());
    }
  }

  // One of the leader's requests of slot n (its index and the slot's count in `commit`).
  void gap_fill(const Accept& a) {
    if (!waiting_ || a.slot != next_) return;  // a slot it holds (another follower asked)
    const std::uint64_t count = a.commit >> 32, index = a.commit & 0xffffffffu;
    if (index == 0) fill_.clear();
    if (index != fill_.size()) return;  // a series it joined half-way; the one it asked for follows
    fill_.push_back(a.request, value_of(a.request));
    if (fill_.size() < count) return;
    check_segment(fill_.records(), names_.accept);
    waiting_ = false;
    ++stats_.filled;
    hold(fill_.records());
  }

  void apply_committed() {
    while (!log_.empty() && log_.front().slot <= commit_) {
      if (log_.front().request.op != 0) (void)apply_write(log_.front().request);
      log_.pop_front();
    }
  }

  void answer(const Accepted& a) {
    check(answers_->push_to(0, &a, sizeof a), "push to", names_.accepted);
    answered_ = true;
  }
  void flush_answers() {
    if (!answered_) return;
    check(answers_->flush(), "flush", names_.accepted);
    answered_ = false;
  }

  cluster::Node& node_;
  const ServiceOptions& o_;
  const detail::View& view_;
  const Names names_;
  const bool leader_;
  const std::size_t clients_;
  NopaxosState& state_;
  Store& store_;
  ClientTable& table_;
  ReplicaStats& stats_;
  detail::RecordFifo<SlotRequest>& log_;  // writes not applied yet (a follower's)
  fabric::Worker worker_;
  flow::ReplicateTarget requests_;
  detail::ReplyFlows replies_;
  detail::Record<Accept> accept_out_;  // the tuple being pushed
  detail::Record<Reply> reply_out_;
  bool replied_ = false;
  bool finished_ = false;
  std::uint64_t next_ = 1;  // the sequence number due next
  // The leader: its decisions to the followers and their answers.
  std::optional<flow::ShuffleTarget> accepted_;
  std::optional<flow::ReplicateSource> accept_;
  std::uint64_t decided_ = 0;      // every number up to it is decided
  std::uint64_t synced_sent_ = 0;  // the last kGapSync
  detail::RecordFifo<SlotRequest> held_;  // each request with its value
  std::vector<std::uint64_t> wanted_;  // numbers followers asked for before the leader got there
  std::vector<std::uint64_t> follower_synced_;
  std::vector<std::uint64_t> follower_committed_;
  // A follower: the leader's decisions and its answers.
  std::uint64_t follower_ = 0;
  std::optional<flow::ReplicateTarget> decisions_;
  std::optional<flow::ShuffleSource> answers_;
  bool answered_ = false;
  std::uint64_t commit_ = 0;             // the leader's last kGapSync
  std::uint64_t last_noop_ = 0;
  std::vector<std::uint64_t> noop_ahead_;  // NO-OPs decided for numbers not reached yet
  std::uint64_t gap_end_ = 0;              // a gap event's numbers next_ .. gap_end_-1
  bool waiting_ = false;                   // for the leader's decision about next_
  Deadline waiting_since_{std::chrono::milliseconds(0)};
  detail::RecordFifo<Request> fill_;  // the leader's requests of next_ so far, with their values
};

// A NOPaxos replica, through every view until the service ends.
ReplicaStats run_nopaxos_replica(cluster::Node& node, const ServiceOptions& o) {
  NopaxosState state(client_threads(o, node.size()).size(), o.window, o.value_bytes);
  detail::View view = detail::first_view(o);
  for (;;) {
    const Outcome outcome = run_view(node, o, view, [&] { return NopaxosReplica(node, o, view, state).run(); });
    if (outcome == Outcome::finished) break;
    view = enter_next_view(node, o, view.number, state.view_state(),
                           [&](const detail::View& next) { nopaxos_take_over(state, next); });
  }
  return final_stats(state.stats, state.stats.writes, state.store, view);
}

}  // namespace

ReplicaStats run_replica(cluster::Node& node, const ServiceOptions& options) {
  check_options(options, node.size());
  if (node.rank() >= options.replicas) {
    throw Error(Errc::invalid_argument, std::string(kKind) + " '" + options.name + "': rank " +
                                            std::to_string(node.rank()) + " is a client, not a replica");
  }
  check_value_bytes(node, options);
  if (options.protocol == Protocol::nopaxos) return run_nopaxos_replica(node, options);
  return run_paxos_replica(node, options);
}

}  // namespace dfi::apps::kv
