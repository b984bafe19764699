// The replicated key-value service: its flows and the replicas' loops (service.hpp).
#include "dfi/apps/kv/service.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <span>
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
#include "fifo.hpp"
#include "names.hpp"
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

std::vector<Column> request_columns() {
  return {{"client", Type::uint64}, {"seq", Type::uint64}, {"key", Type::uint64},
          {"op", Type::uint32},     {"pad", Type::uint32}, {"value", Type::chars, kValueBytes}};
}

}  // namespace

flow::Schema request_schema() { return flow::Schema(request_columns()); }

flow::Schema reply_schema() {
  return flow::Schema({{"client", Type::uint64},
                       {"seq", Type::uint64},
                       {"status", Type::uint32},
                       {"pad", Type::uint32},
                       {"value", Type::chars, kValueBytes}});
}

flow::Schema accept_schema() {
  std::vector<Column> columns = {
      {"view", Type::uint64}, {"round", Type::uint64}, {"slot", Type::uint64}, {"commit", Type::uint64}};
  for (Column c : request_columns()) {
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
}

void create_service(cluster::Node& node, const ServiceOptions& o) {
  check_options(o, node.size());
  detail::open_view(node, o, detail::first_view(o));
}

namespace {

constexpr const char* kKind = "kv service";

// The replica's copy of the data: key -> value. std::unordered_map with reserved buckets: a put
// of a new key allocates its node (the store grows), nothing else on the apply path does.
class Store {
 public:
  Store() { map_.reserve(1 << 16); }

  // Applies a write; returns whether the key existed before.
  bool apply(const Request& r) {
    if (r.op == static_cast<std::uint32_t>(Op::put)) {
      auto [it, inserted] = map_.try_emplace(r.key, r.value);
      if (!inserted) it->second = r.value;
      return !inserted;
    }
    return map_.erase(r.key) > 0;
  }
  const Value* find(std::uint64_t key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }
  // An order-independent digest of the contents (FNV-1a of each pair, summed).
  std::uint64_t digest() const {
    std::uint64_t sum = 0;
    for (const auto& [key, value] : map_) {
      std::uint64_t h = 0xcbf29ce484222325ull ^ key;
      for (char c : value) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
      sum += h;
    }
    return sum;
  }
  std::size_t size() const noexcept { return map_.size(); }
  template <class F>
  void for_each(F&& f) const {
    for (const auto& [key, value] : map_) f(key, value);
  }

 private:
  std::unordered_map<std::uint64_t, Value> map_;
};

bool is_write(std::uint32_t op) {
  return op == static_cast<std::uint32_t>(Op::put) || op == static_cast<std::uint32_t>(Op::del);
}

// Which writes of every client were applied, and the result of each of its last `window`
// writes: a write that a client sends again after a view change (its reply was lost with the
// old view) is applied once and answered with the result of its first application. A client's
// writes are applied in the order of their numbers (one ring carries them in a view, and it
// sends them again in that order), so one number per client tells which were applied.
class ClientTable {
 public:
  ClientTable(std::size_t clients, std::size_t window)
      : window_(window), last_(clients, 0), missing_(clients * window, 0) {}

  bool applied(const Request& r) const { return r.seq <= last_[r.client]; }
  // The reply status of the applied write `r`.
  std::uint32_t status(const Request& r) const {
    return static_cast<std::uint32_t>(missing_[slot(r.client, r.seq)] != 0 ? ReplyStatus::not_found : ReplyStatus::ok);
  }
  void record(const Request& r, bool not_found) {
    last_[r.client] = r.seq;
    missing_[slot(r.client, r.seq)] = not_found ? 1 : 0;
  }

  std::size_t clients() const noexcept { return last_.size(); }
  std::size_t window() const noexcept { return window_; }
  std::uint64_t last(std::size_t client) const { return last_[client]; }
  // Results of client `c` in chunks of kValueBytes * 8 bits (the state transfer of a new view).
  static constexpr std::size_t kBitsPerChunk = kValueBytes * 8;
  std::size_t chunks() const noexcept { return (window_ + kBitsPerChunk - 1) / kBitsPerChunk; }
  Value chunk(std::size_t c, std::size_t chunk) const {
    Value bits{};
    for (std::size_t i = 0; i < kBitsPerChunk && chunk * kBitsPerChunk + i < window_; ++i) {
      if (missing_[c * window_ + chunk * kBitsPerChunk + i] != 0) bits[i / 8] = static_cast<char>(bits[i / 8] | (1 << (i % 8)));
    }
    return bits;
  }
  void load(std::size_t c, std::uint64_t last, std::size_t chunk, const Value& bits) {
    last_[c] = last;
    for (std::size_t i = 0; i < kBitsPerChunk && chunk * kBitsPerChunk + i < window_; ++i) {
      missing_[c * window_ + chunk * kBitsPerChunk + i] = (bits[i / 8] >> (i % 8)) & 1;
    }
  }

 private:
  std::size_t slot(std::uint64_t client, std::uint64_t seq) const { return client * window_ + seq % window_; }

  std::size_t window_;
  std::vector<std::uint64_t> last_;
  std::vector<std::uint8_t> missing_;
};

// What a Multi-Paxos replica keeps across views: the store and client table after slots
// 1 .. applied, and its log of slots applied+1 .. last_slot. In the leader's log, `pad` = 1 marks
// a request received in the current view, which it answers once applied; the accept flow carries
// pad = 0.
struct ReplicaState {
  ReplicaState(std::size_t clients, std::size_t window) : table(clients, window) {}

  // Applies the oldest log entry (which the caller then pops); returns its reply status.
  std::uint32_t apply_front() {
    const Request& r = log.front();
    ++applied;
    if (table.applied(r)) return table.status(r);
    const bool existed = store.apply(r);
    const bool not_found = r.op == static_cast<std::uint32_t>(Op::del) && !existed;
    table.record(r, not_found);
    ++stats.writes;
    return static_cast<std::uint32_t>(not_found ? ReplyStatus::not_found : ReplyStatus::ok);
  }

  Store store;
  ClientTable table;
  detail::Fifo<Request> log{1024};
  std::uint64_t applied = 0;
  std::uint64_t last_slot = 0;
  ReplicaStats stats;
};

// The state transfer that opens every view (round 0 of the accept flow): these operations in the
// request's op field, after Op's.
enum StateOp : std::uint32_t {
  kStateBegin = 10,   // key: the leader's applied slot
  kStatePair = 11,    // key, value: one pair of its store
  kStateClient = 12,  // client, seq (its last applied write), key (chunk), value (result bits)
  kStateEnd = 13,     // key: the applied slot again
};

enum class Outcome { finished, broken };

flow::SourceOptions source_options(const flow::Schema& schema, const ServiceOptions& o) {
  flow::SourceOptions options;
  options.expected_schema = schema;
  options.open_timeout = o.timeout;
  return options;
}

// How long a replica or client waits for the failure detector to confirm that a flow call which
// failed with peer_failed was a view member's death.
constexpr std::chrono::milliseconds kVerdictWait{3000};

// Runs `body` (one view's work); an error that a member's death explains is the view breaking.
template <class Body>
Outcome run_view(cluster::Node& node, const detail::View& view, Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    const bool may_be_death = e.code() == Errc::peer_failed || e.code() == Errc::flow_failed ||
                              e.code() == Errc::timeout || e.code() == Errc::not_found;
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
        requests_(node, names_.requests, 0, request_schema(), o.timeout),
        replies_(node, worker_, names_.replies, 0, source_options(reply_schema(), o)) {
    // A client that dies is its own loss, not the service's: its requests that arrived are
    // still served (a write it sent may be applied), then its stream ends; replies to it are
    // dropped.
    requests_.end_dead_sources();
    replies_.drop_for_dead_targets();
    if (paxos_) {
      accepted_.emplace(node, names_.accepted, 0, accepted_schema(), o.timeout);
      flow::ReplicateSourceOptions options;
      options.expected_schema = accept_schema();
      options.open_timeout = o.timeout;
      accept_.emplace(node, worker_, names_.accept, 0, options);
      follower_round_.assign(view.followers.size(), 0);
      scratch_ = follower_round_;
    }
  }
  // A view left before its end leaves its flows without an end of stream: their peers must not
  // take the silence for the service's end (they learn of the new view from the registry).
  ~Leader() {
    if (finished_) return;
    replies_.abandon();
    if (accept_) accept_->abandon();
  }
  Leader(const Leader&) = delete;
  Leader& operator=(const Leader&) = delete;

  Outcome run() {
    if (paxos_) open_rounds();
    Backoff backoff(BackoffSettings::from_config(), 0x6b76);
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
    check(replies_.close(), "close", names_.replies);
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

  void push_accept(const Accept& a) { check(accept_->push(&a, sizeof a), "push to", names_.accept); }

  // Round 0: the state after the applied slots; round 1: the log after them, proposed again in
  // this view (the requests in it were received in an earlier view: their clients send them
  // again, and only those copies are answered).
  void open_rounds() {
    const std::uint64_t applied = state_.applied;
    Accept a{.view = view_.number, .round = 0, .slot = 0, .commit = applied, .request = {}};
    a.request.op = kStateBegin;
    a.request.key = applied;
    push_accept(a);
    state_.store.for_each([&](std::uint64_t key, const Value& value) {
      a.request = {};
      a.request.op = kStatePair;
      a.request.key = key;
      a.request.value = value;
      push_accept(a);
    });
    for (std::size_t c = 0; c < state_.table.clients(); ++c) {
      for (std::size_t chunk = 0; chunk < state_.table.chunks(); ++chunk) {
        a.request = {};
        a.request.op = kStateClient;
        a.request.client = c;
        a.request.seq = state_.table.last(c);
        a.request.key = chunk;
        a.request.value = state_.table.chunk(c, chunk);
        push_accept(a);
      }
    }
    a.request = {};
    a.request.op = kStateEnd;
    a.request.key = applied;
    push_accept(a);
    a.round = 1;
    for (std::size_t i = 0; i < state_.log.size(); ++i) {
      state_.log[i].pad = 0;
      a.slot = applied + 1 + i;
      a.request = state_.log[i];
      push_accept(a);
    }
    if (state_.log.empty()) {
      a.slot = 0;
      a.request = {};
      push_accept(a);
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
      for (const Request& r : batch.as<Request>()) {
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
        state_.log.push_back(entry);
        ++state_.last_slot;
        if (!paxos_) {
          apply_log(state_.last_slot);
          continue;
        }
        Accept a{.view = view_.number, .round = round, .slot = state_.last_slot, .commit = commit_, .request = r};
        a.request.pad = 0;
        push_accept(a);
        wrote = true;
      }
      took += batch.count;
    }
    if (took == 0 || !paxos_) return took > 0;
    if (!wrote) push_accept({.view = view_.number, .round = round, .slot = 0, .commit = commit_, .request = {}});
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
    const Value* v = state_.store.find(r.key);
    ++state_.stats.reads;
    reply(r, static_cast<std::uint32_t>(v != nullptr ? ReplyStatus::ok : ReplyStatus::not_found), v);
  }

  void reply(const Request& r, std::uint32_t status, const Value* value) {
    Reply reply{.client = r.client, .seq = r.seq, .status = status};
    if (value != nullptr) reply.value = *value;
    check(replies_.push_to(r.client, &reply, sizeof reply), "push to", names_.replies);
    ++state_.stats.answered;
    replied_ = true;
  }

  void flush_replies() {
    if (!replied_) return;
    check(replies_.flush(), "flush", names_.replies);
    replied_ = false;
  }

  // After the last request: a heartbeat carrying the final commit slot, the end of the accept
  // flow, and the followers' last answers up to the end of theirs.
  void finish_followers() {
    push_accept({.view = view_.number, .round = round_ + 1, .slot = 0, .commit = commit_, .request = {}});
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
  flow::ShuffleSource replies_;
  std::optional<flow::ShuffleTarget> accepted_;
  std::optional<flow::ReplicateSource> accept_;
  bool replied_ = false;
  bool finished_ = false;
  std::uint64_t round_ = 0;
  std::uint64_t chosen_ = 0;
  std::uint64_t commit_ = 0;
  detail::Fifo<PendingRead> reads_{1024};
  detail::Fifo<RoundEnd> rounds_{64};
  std::vector<std::uint64_t> follower_round_;
  std::vector<std::uint64_t> scratch_;
};

// A Multi-Paxos follower of one view, on the calling thread.
Outcome run_follower(cluster::Node& node, const ServiceOptions& o, const detail::View& view, ReplicaState& state) {
  const Names names(o.name, view.number);
  const auto me = std::find(view.followers.begin(), view.followers.end(), node.rank());
  const auto follower = static_cast<std::uint64_t>(me - view.followers.begin());
  fabric::Worker worker(node.fabric(), "kv-follower");
  flow::ReplicateTarget accept(node, names.accept, 0,
                               {.expected_schema = accept_schema(), .open_timeout = o.timeout, .worker = &worker});
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
  std::optional<Store> staged_store;
  std::optional<ClientTable> staged_table;
  std::uint64_t staged_applied = 0;
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
    for (const Accept& a : batch.as<Accept>()) {
      if (a.view != view.number || a.round < last_round) [[unlikely]] {
        malformed("accept of view " + std::to_string(a.view) + ", round " + std::to_string(a.round) + " in view " +
                  std::to_string(view.number) + " after round " + std::to_string(last_round));
      }
      last_round = a.round;
      if (a.round == 0) {
        const Request& r = a.request;
        switch (r.op) {
          case kStateBegin:
            staged_store.emplace();
            staged_table.emplace(state.table.clients(), state.table.window());
            staged_applied = r.key;
            break;
          case kStatePair:
            if (!staged_store) malformed("state before its beginning");
            staged_store->apply({.client = 0, .seq = 0, .key = r.key, .op = static_cast<std::uint32_t>(Op::put), .pad = 0, .value = r.value});
            break;
          case kStateClient:
            if (!staged_table || r.client >= staged_table->clients() || r.key >= staged_table->chunks()) {
              malformed("client state of client " + std::to_string(r.client));
            }
            staged_table->load(r.client, r.seq, r.key, r.value);
            break;
          case kStateEnd:
            if (!staged_store || r.key != staged_applied) malformed("end of a state that did not begin");
            if (staged_applied > state.applied) {
              // Our log up to the leader's applied slot is in its state; what follows stays.
              while (state.applied < staged_applied && !state.log.empty()) {
                state.log.pop_front();
                ++state.applied;
              }
              state.applied = staged_applied;
              state.last_slot = std::max(state.last_slot, staged_applied);
              state.store = std::move(*staged_store);
              state.table = std::move(*staged_table);
            }
            staged_store.reset();
            staged_table.reset();
            break;
          default: malformed("state operation " + std::to_string(r.op));
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
          state.log.push_back(a.request);
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

// Enters the views after `broken` until one opens with a live leader (views.hpp): publishes this
// replica's log length for each, and opens the view it leads.
detail::View enter_next_view(cluster::Node& node, const ServiceOptions& o, std::uint64_t broken,
                             const ReplicaState& state) {
  for (std::uint64_t number = broken + 1;; ++number) {
    detail::publish_view_state(node, o, number, state.last_slot);
    detail::View view = detail::decide_view(node, o, number);
    if (view.leader == node.rank()) {
      detail::open_view(node, o, view);
      return view;
    }
    if (detail::wait_view_open(node, o, view)) return view;
  }
}

// A Multi-Paxos or unreplicated replica, through every view until the service ends.
ReplicaStats run_paxos_replica(cluster::Node& node, const ServiceOptions& o) {
  ReplicaState state(client_threads(o, node.size()).size(), o.window);
  detail::View view = detail::first_view(o);
  for (;;) {
    const Outcome outcome = run_view(node, view, [&] {
      if (view.leader == node.rank()) return Leader(node, o, view, state).run();
      return run_follower(node, o, view, state);
    });
    if (outcome == Outcome::finished) break;
    if (o.protocol != Protocol::paxos) {
      throw Error(Errc::peer_failed, std::string(kKind) + " '" + o.name + "' (rank " + std::to_string(node.rank()) +
                                         "): a member of " + detail::describe(view) + " died");
    }
    view = enter_next_view(node, o, view.number, state);
  }
  ReplicaStats stats = state.stats;
  stats.slots = state.applied;
  stats.keys = state.store.size();
  stats.digest = state.store.digest();
  stats.view = view.number;
  return stats;
}

// A NOPaxos replica (every rank 0 .. replicas-1; rank 0 leads) on the calling thread: consumes the
// requests in the ordered flow's global order, applies every write, and answers every request:
// the leader with its result, a follower with an acknowledgement.
ReplicaStats run_nopaxos_replica(cluster::Node& node, const ServiceOptions& o, const Names& names) {
  const bool leader = node.rank() == 0;
  const std::size_t clients = client_threads(o, node.size()).size();
  fabric::Worker worker(node.fabric(), "kv-replica");
  flow::ReplicateTarget requests(node, names.requests, 0,
                                 {.expected_schema = request_schema(), .open_timeout = o.timeout, .worker = &worker});
  flow::ShuffleSource replies(node, worker, names.replies, 0, source_options(reply_schema(), o));
  auto check = [&](const Status& s, const char* action, const std::string& flow) {
    cluster::check_call(s, kKind, o.name, node.rank(), action, flow);
  };
  Store store;
  ReplicaStats stats;
  std::uint64_t next_sequence = 1;
  for (;;) {
    flow::ReplicateBatch batch;
    Status s = requests.consume(batch, o.timeout);
    if (s.code() == Errc::timeout) continue;  // the clients are quiet; a dead peer is peer_failed
    check(s, "consume from", names.requests);
    if (batch.end) break;
    if (batch.gap()) {
      throw Error(Errc::gap, std::string(kKind) + " '" + o.name + "' (rank " + std::to_string(node.rank()) +
                                 "): sequence numbers " + std::to_string(batch.sequence) + " .. " +
                                 std::to_string(batch.sequence + batch.gap_count - 1) + " of flow '" +
                                 names.requests + "' reached no replica (NOPaxos gap agreement is not built yet)");
    }
    if (batch.sequence != next_sequence) [[unlikely]] {
      throw Error(Errc::protocol, std::string(kKind) + " '" + o.name + "' (rank " + std::to_string(node.rank()) +
                                      "): sequence number " + std::to_string(batch.sequence) + " where " +
                                      std::to_string(next_sequence) + " was due on flow '" + names.requests + "'");
    }
    ++next_sequence;
    const std::span<const Request> segment = batch.as<Request>();
    for (std::size_t i = 0; i < segment.size(); ++i) {
      const Request& r = segment[i];
      // A segment is one client's consecutive requests (the follower's acknowledgement covers
      // them as a range).
      if (r.client >= clients || r.op < 1 || r.op > 3 || r.client != segment[0].client ||
          r.seq != segment[0].seq + i) [[unlikely]] {
        throw Error(Errc::protocol, std::string(kKind) + " '" + o.name + "' (rank " + std::to_string(node.rank()) +
                                        "): malformed request with client " + std::to_string(r.client) + ", seq " +
                                        std::to_string(r.seq) + " and op " + std::to_string(r.op) + " on flow '" +
                                        names.requests + "'");
      }
      Reply reply{.client = r.client, .seq = r.seq};
      if (is_write(r.op)) {
        const bool existed = store.apply(r);
        if (r.op == static_cast<std::uint32_t>(Op::del) && !existed) {
          reply.status = static_cast<std::uint32_t>(ReplyStatus::not_found);
        }
        ++stats.writes;
      } else if (leader) {
        if (const Value* v = store.find(r.key)) {
          reply.value = *v;
        } else {
          reply.status = static_cast<std::uint32_t>(ReplyStatus::not_found);
        }
        ++stats.reads;
      }
      if (leader) {
        check(replies.push_to(r.client, &reply, sizeof reply), "push to", names.replies);
        ++stats.answered;
      }
    }
    if (!leader && !segment.empty()) {
      const Reply ack{.client = segment.back().client,
                      .seq = segment.back().seq,
                      .status = static_cast<std::uint32_t>(ReplyStatus::ack),
                      .pad = static_cast<std::uint32_t>(segment.size())};
      check(replies.push_to(ack.client, &ack, sizeof ack), "push to", names.replies);
    }
    check(replies.flush(), "flush", names.replies);
    ++stats.rounds;
  }
  check(replies.close(), "close", names.replies);
  stats.slots = stats.writes;
  stats.keys = store.size();
  stats.digest = store.digest();
  return stats;
}

}  // namespace

ReplicaStats run_replica(cluster::Node& node, const ServiceOptions& options) {
  check_options(options, node.size());
  if (node.rank() >= options.replicas) {
    throw Error(Errc::invalid_argument, std::string(kKind) + " '" + options.name + "': rank " +
                                            std::to_string(node.rank()) + " is a client, not a replica");
  }
  if (options.protocol == Protocol::nopaxos) return run_nopaxos_replica(node, options, Names(options.name));
  return run_paxos_replica(node, options);
}

}  // namespace dfi::apps::kv
