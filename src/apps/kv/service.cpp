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

// Ring bytes for `tuples` tuples of `width` in one segment, with the 16 B footer.
std::uint32_t segment_for(std::size_t tuples, std::size_t width) {
  return static_cast<std::uint32_t>(tuples * width + 16);
}

// Tuples the leader may send to one follower in one round: a round's requests, the batch that
// crossed the limit, and the heartbeat.
std::size_t round_tuples(const ServiceOptions& o) { return o.round_requests + o.window + 1; }

// A flow of the service: shuffles route by explicit target (the leader, a client by its index).
flow::FlowSpec spec(const std::string& name, flow::FlowType type, flow::Schema schema) {
  flow::FlowSpec s;
  s.name = name;
  s.type = type;
  s.schema = std::move(schema);
  if (type == flow::FlowType::shuffle) s.routing = flow::Routing::explicit_target;
  return s;
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
  const std::vector<flow::SourceRef> clients = client_threads(o, node.size());
  const Names names(o.name);
  const flow::SourceRef leader_source{0, 0};
  const flow::TargetRef leader_target{0, 0};

  // Every ring holds what may be outstanding on it, so no push ever waits for ring space while
  // its peer is alive: a client's window of requests (one segment per flush in the worst case),
  // the leader's replies to one client, max_rounds_in_flight rounds to a follower, and a
  // follower's answers (one per consumed segment) to everything it may consume between two
  // drains of the leader.
  const bool nopaxos = o.protocol == Protocol::nopaxos;
  flow::FlowSpec requests = spec(names.requests, nopaxos ? flow::FlowType::replicate : flow::FlowType::shuffle,
                                 request_schema());
  requests.sources = clients;
  requests.targets = {leader_target};
  if (nopaxos) {
    // The ordered unreliable multicast: every replica, one global order from the sequencer.
    for (int r = 1; r < o.replicas; ++r) requests.targets.push_back({r, 0});
    requests.type_options.get<flow::ReplicateOptions>().ordered = true;
  }
  requests.options.segments = static_cast<std::uint32_t>(o.window + 1);
  requests.options.segment_bytes = segment_for(o.window, sizeof(Request)) + (nopaxos ? 8 : 0);  // + sequence word
  requests.options.stall_timeout = o.timeout;
  flow::create_flow(node, requests);

  flow::FlowSpec replies = spec(names.replies, flow::FlowType::shuffle, reply_schema());
  replies.sources = {leader_source};
  for (int r = 1; nopaxos && r < o.replicas; ++r) replies.sources.push_back({r, 0});
  for (const flow::SourceRef& c : clients) replies.targets.push_back({c.rank, c.thread});
  replies.options.segments = static_cast<std::uint32_t>(o.window + 1);
  replies.options.segment_bytes = segment_for(o.window, sizeof(Reply));
  replies.options.stall_timeout = o.timeout;
  flow::create_flow(node, replies);

  if (o.protocol != Protocol::paxos) return;
  const std::size_t accept_tuples_per_segment = 64;
  const std::size_t segments_per_round = (round_tuples(o) + accept_tuples_per_segment - 1) / accept_tuples_per_segment + 1;
  const std::size_t accept_segments = o.max_rounds_in_flight * segments_per_round + 1;
  flow::FlowSpec accept = spec(names.accept, flow::FlowType::replicate, accept_schema());
  accept.sources = {leader_source};
  for (int r = 1; r < o.replicas; ++r) accept.targets.push_back({r, 0});
  accept.options.segments = static_cast<std::uint32_t>(accept_segments);
  // The replicate segment header (one word) comes on top of the tuples.
  accept.options.segment_bytes = segment_for(accept_tuples_per_segment, sizeof(Accept)) + 8;
  accept.options.stall_timeout = o.timeout;
  flow::create_flow(node, accept);

  flow::FlowSpec accepted = spec(names.accepted, flow::FlowType::shuffle, accepted_schema());
  for (int r = 1; r < o.replicas; ++r) accepted.sources.push_back({r, 0});
  accepted.targets = {leader_target};
  accepted.options.segments = static_cast<std::uint32_t>(2 * accept_segments + segments_per_round + 2);
  accepted.options.segment_bytes = segment_for(1, sizeof(Accepted));
  accepted.options.stall_timeout = o.timeout;
  flow::create_flow(node, accepted);
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

 private:
  std::unordered_map<std::uint64_t, Value> map_;
};

bool is_write(std::uint32_t op) {
  return op == static_cast<std::uint32_t>(Op::put) || op == static_cast<std::uint32_t>(Op::del);
}

flow::SourceOptions source_options(const flow::Schema& schema, const ServiceOptions& o) {
  flow::SourceOptions options;
  options.expected_schema = schema;
  options.open_timeout = o.timeout;
  return options;
}

// The leader (rank 0), both protocols, on the calling thread.
//
// Multi-Paxos state: rounds sent (round_) and chosen (chosen_: held by a majority), the slots
// sent (last_slot_) and committed (commit_: the last slot of the last chosen round), the writes
// sent but not applied (writes_, slots applied_+1 ..), the reads waiting for their round
// (reads_), the last slot of every round in flight (rounds_), and the last round each follower
// holds (follower_round_).
class Leader {
 public:
  Leader(cluster::Node& node, const ServiceOptions& o, const Names& names)
      : node_(node),
        o_(o),
        names_(names),
        paxos_(o.protocol == Protocol::paxos),
        clients_(client_threads(o, node.size()).size()),
        worker_(node.fabric(), "kv-leader"),
        requests_(node, names.requests, 0, request_schema(), o.timeout),
        replies_(node, worker_, names.replies, 0, source_options(reply_schema(), o)) {
    if (paxos_) {
      accepted_.emplace(node, names.accepted, 0, accepted_schema(), o.timeout);
      flow::ReplicateSourceOptions options;
      options.expected_schema = accept_schema();
      options.open_timeout = o.timeout;
      accept_.emplace(node, worker_, names.accept, 0, options);
      follower_round_.assign(static_cast<std::size_t>(o.replicas - 1), 0);
      scratch_ = follower_round_;
    }
  }

  ReplicaStats run() {
    Backoff backoff(BackoffSettings::from_config(), 0x6b76);
    auto last_progress = std::chrono::steady_clock::now();
    for (;;) {
      bool progress = intake();
      if (paxos_) progress |= collect_answers();
      flush_replies();
      if (requests_.end() && writes_.empty() && reads_.empty()) break;
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
          throw Error(Errc::timeout, std::string(kKind) + " '" + o_.name + "' (rank 0): no majority of the " +
                                         std::to_string(o_.replicas) + " replicas answered round " +
                                         std::to_string(chosen_ + 1) + " on flow '" + names_.accepted + "' within " +
                                         std::to_string(o_.timeout.count()) + " ms");
        }
      }
      backoff.pause();
    }
    if (paxos_) finish_followers();
    check(replies_.close(), "close", names_.replies);
    stats_.slots = paxos_ ? applied_ : stats_.writes;
    stats_.keys = store_.size();
    stats_.digest = store_.digest();
    return stats_;
  }

 private:
  void check(const Status& s, const char* action, const std::string& flow) {
    cluster::check_call(s, kKind, o_.name, node_.rank(), action, flow);
  }

  void malformed(const std::string& what, const std::string& flow) {
    throw Error(Errc::protocol, std::string(kKind) + " '" + o_.name + "' (rank 0): " + what + " on flow '" + flow + "'");
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
        if (!paxos_) {
          execute(r);
        } else if (is_write(r.op)) {
          writes_.push_back(r);
          const Accept a{.view = 0, .round = round, .slot = ++last_slot_, .commit = commit_, .request = r};
          check(accept_->push(&a, sizeof a), "push to", names_.accept);
          wrote = true;
        } else {
          reads_.push_back({round, r});
        }
      }
      took += batch.count;
    }
    if (took == 0 || !paxos_) return took > 0;
    if (!wrote) {
      const Accept heartbeat{.view = 0, .round = round, .slot = 0, .commit = commit_, .request = {}};
      check(accept_->push(&heartbeat, sizeof heartbeat), "push to", names_.accept);
    }
    check(accept_->flush(), "flush", names_.accept);
    round_ = round;
    rounds_.push_back({round, last_slot_});
    ++stats_.rounds;
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
        if (a.follower >= follower_round_.size() || a.round > round_) [[unlikely]] {
          malformed("answer of follower " + std::to_string(a.follower) + " for round " + std::to_string(a.round) +
                        " (sent " + std::to_string(round_) + ")",
                    names_.accepted);
        }
        follower_round_[a.follower] = std::max(follower_round_[a.follower], a.round);
      }
      any = true;
    }
    if (!any) return false;
    // A majority is the leader and replicas/2 followers: the (replicas/2)-th highest follower round.
    scratch_ = follower_round_;
    const std::size_t need = static_cast<std::size_t>(o_.replicas / 2);
    std::nth_element(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(need - 1), scratch_.end(),
                     std::greater<>());
    const std::uint64_t chosen = scratch_[need - 1];
    if (chosen <= chosen_) return true;
    chosen_ = chosen;
    while (!rounds_.empty() && rounds_.front().round <= chosen_) {
      commit_ = rounds_.front().last_slot;
      rounds_.pop_front();
    }
    while (applied_ < commit_) {
      execute(writes_.front());
      writes_.pop_front();
      ++applied_;
    }
    while (!reads_.empty() && reads_.front().round <= chosen_) {
      execute(reads_.front().request);
      reads_.pop_front();
    }
    return true;
  }

  // Executes `r` against the store and queues its reply.
  void execute(const Request& r) {
    Reply reply{.client = r.client, .seq = r.seq};
    if (r.op == static_cast<std::uint32_t>(Op::get)) {
      if (const Value* v = store_.find(r.key)) {
        reply.value = *v;
      } else {
        reply.status = static_cast<std::uint32_t>(ReplyStatus::not_found);
      }
      ++stats_.reads;
    } else {
      const bool existed = store_.apply(r);
      if (r.op == static_cast<std::uint32_t>(Op::del) && !existed) {
        reply.status = static_cast<std::uint32_t>(ReplyStatus::not_found);
      }
      ++stats_.writes;
    }
    check(replies_.push_to(r.client, &reply, sizeof reply), "push to", names_.replies);
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
    const Accept last{.view = 0, .round = round_ + 1, .slot = 0, .commit = commit_, .request = {}};
    check(accept_->push(&last, sizeof last), "push to", names_.accept);
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
  const Names& names_;
  const bool paxos_;
  const std::size_t clients_;
  fabric::Worker worker_;
  flow::ShuffleTarget requests_;
  flow::ShuffleSource replies_;
  std::optional<flow::ShuffleTarget> accepted_;
  std::optional<flow::ReplicateSource> accept_;
  Store store_;
  ReplicaStats stats_;
  bool replied_ = false;
  std::uint64_t round_ = 0;
  std::uint64_t chosen_ = 0;
  std::uint64_t last_slot_ = 0;
  std::uint64_t commit_ = 0;
  std::uint64_t applied_ = 0;
  detail::Fifo<Request> writes_{1024};
  detail::Fifo<PendingRead> reads_{1024};
  detail::Fifo<RoundEnd> rounds_{64};
  std::vector<std::uint64_t> follower_round_;
  std::vector<std::uint64_t> scratch_;
};

// A Multi-Paxos follower (ranks 1 .. replicas-1) on the calling thread.
ReplicaStats run_follower(cluster::Node& node, const ServiceOptions& o, const Names& names) {
  const std::uint64_t follower = static_cast<std::uint64_t>(node.rank() - 1);
  fabric::Worker worker(node.fabric(), "kv-follower");
  flow::ReplicateTarget accept(node, names.accept, 0,
                               {.expected_schema = accept_schema(), .open_timeout = o.timeout, .worker = &worker});
  flow::ShuffleSource accepted(node, worker, names.accepted, 0, source_options(accepted_schema(), o));
  auto check = [&](const Status& s, const char* action, const std::string& flow) {
    cluster::check_call(s, kKind, o.name, node.rank(), action, flow);
  };
  auto malformed = [&](const std::string& what) {
    throw Error(Errc::protocol, std::string(kKind) + " '" + o.name + "' (rank " + std::to_string(node.rank()) +
                                    "): " + what + " on flow '" + names.accept + "'");
  };

  Store store;
  ReplicaStats stats;
  detail::Fifo<Request> log(1024);  // slots applied+1 .. last_slot
  std::uint64_t last_slot = 0, last_round = 0, commit = 0, applied = 0;
  for (;;) {
    flow::ReplicateBatch batch;
    Status s = accept.consume(batch, o.timeout);
    if (s.code() == Errc::timeout) continue;  // the clients are quiet; a dead leader is peer_failed
    check(s, "consume from", names.accept);
    if (batch.end) break;
    if (batch.gap()) malformed("a gap (the flow is not ordered)");
    for (const Accept& a : batch.as<Accept>()) {
      if (a.view != 0 || a.round < last_round || a.commit > std::max(last_slot, a.slot)) [[unlikely]] {
        malformed("accept of view " + std::to_string(a.view) + ", round " + std::to_string(a.round) + ", commit " +
                  std::to_string(a.commit) + " after round " + std::to_string(last_round));
      }
      if (a.slot != 0) {
        if (a.slot != last_slot + 1) [[unlikely]] {
          malformed("slot " + std::to_string(a.slot) + " after slot " + std::to_string(last_slot));
        }
        log.push_back(a.request);
        last_slot = a.slot;
      }
      last_round = a.round;
      commit = std::max(commit, a.commit);
    }
    while (applied < commit) {
      store.apply(log.front());
      log.pop_front();
      ++applied;
      ++stats.writes;
    }
    ++stats.rounds;
    const Accepted answer{.view = 0, .follower = follower, .round = last_round, .slot = last_slot};
    check(accepted.push_to(0, &answer, sizeof answer), "push to", names.accepted);
    check(accepted.flush(), "flush", names.accepted);
  }
  check(accepted.close(), "close", names.accepted);
  stats.slots = applied;
  stats.keys = store.size();
  stats.digest = store.digest();
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
      if (leader) check(replies.push_to(r.client, &reply, sizeof reply), "push to", names.replies);
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
  const Names names(options.name);
  if (options.protocol == Protocol::nopaxos) return run_nopaxos_replica(node, options, names);
  if (node.rank() == 0) return Leader(node, options, names).run();
  return run_follower(node, options, names);
}

}  // namespace dfi::apps::kv
