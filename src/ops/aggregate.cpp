// ops::run_aggregation: RDMA and hierarchical aggregation on a combiner flow (see aggregate.hpp).
#include "dfi/ops/aggregate.hpp"

#include <algorithm>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>

#include "dfi/cluster/node.hpp"
#include "dfi/common/thread_group.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/kernels/hash.hpp"
#include "open_gate.hpp"
#include "records.hpp"

namespace dfi::ops {

namespace {

using Clock = std::chrono::steady_clock;

std::string partials_flow(const AggregationSpec& spec) { return spec.name + ".partials"; }

int aggregation_ranks(const AggregationSpec& spec, int cluster_size) {
  return spec.ranks == 0 ? cluster_size : spec.ranks;
}

flow::FlowSpec flow_spec(const AggregationSpec& spec, int cluster_size) {
  flow::FlowSpec f;
  f.name = partials_flow(spec);
  f.type = flow::FlowType::combiner;
  f.schema = spec.schema;
  f.key_column = spec.key;
  f.options = spec.flow_options;
  f.type_options = flow::CombinerOptions{.aggregates = spec.aggregates};
  const int ranks = aggregation_ranks(spec, cluster_size);
  for (int r = 0; r < ranks; ++r) {
    for (int t = 0; t < spec.threads; ++t) {
      f.sources.push_back({r, t});
      if (spec.algorithm == AggregateAlgorithm::rdma) f.targets.push_back({r, t});
    }
  }
  if (spec.algorithm == AggregateAlgorithm::hierarchical) f.targets.push_back({0, 0});
  return f;
}

void check(const AggregationSpec& spec, int rank, const Status& status, const char* action,
           const std::string& flow) {
  detail::check_call(status, "aggregation", spec.name, rank, action, flow);
}

}  // namespace

std::string_view aggregate_algorithm_name(AggregateAlgorithm algorithm) {
  return algorithm == AggregateAlgorithm::rdma ? "rdma" : "hierarchical";
}

AggregateAlgorithm parse_aggregate_algorithm(std::string_view text) {
  if (text == "rdma") return AggregateAlgorithm::rdma;
  if (text == "hierarchical") return AggregateAlgorithm::hierarchical;
  throw Error(Errc::invalid_argument, "aggregation algorithm '" + std::string(text) +
                                          "': expected rdma or hierarchical");
}

AggregationResult& AggregationResult::operator+=(const AggregationResult& other) {
  input_tuples += other.input_tuples;
  groups += other.groups;
  checksum += other.checksum;
  shipped_rows += other.shipped_rows;
  passed_tuples += other.passed_tuples;
  seconds = std::max(seconds, other.seconds);
  open_seconds = std::max(open_seconds, other.open_seconds);
  return *this;
}

void AggregationSpec::validate(int cluster_size) const {
  auto bad = [&](const std::string& what) {
    return Error(Errc::invalid_argument, "aggregation '" + name + "': " + what);
  };
  detail::check_common("aggregation", name, threads, ranks, cluster_size);
  if (cache_groups < 1) throw bad("cache_groups must be at least 1");
  if (!(pass_through_below >= 0 && pass_through_below <= 1)) {
    throw bad("pass_through_below must be in [0, 1] (got " + std::to_string(pass_through_below) + ")");
  }
  if (schema.column_count() == 0) throw bad("no input schema");
  // The flow's own validation names the rest (key column, aggregates, ring shape).
  try {
    flow_spec(*this, cluster_size).validate(cluster_size);
  } catch (const Error& e) {
    throw bad(e.what());
  }
}

flow::Schema AggregationSpec::result_schema() const {
  return flow::combiner_result_schema(flow_spec(*this, std::max(1, ranks)));
}

void create_aggregation(cluster::Node& node, const AggregationSpec& spec) {
  spec.validate(node.size());
  flow::create_flow(node, flow_spec(spec, node.size()));
}

namespace {

void check_fragments(const AggregationSpec& spec, std::span<const Fragment> input) {
  if (input.size() != static_cast<std::size_t>(spec.threads)) {
    throw Error(Errc::invalid_argument, "aggregation '" + spec.name + "': " + std::to_string(input.size()) +
                                            " fragments for " + std::to_string(spec.threads) +
                                            " threads (one per thread)");
  }
}

// Post-aggregation threads on this rank: rdma every thread of every rank, hierarchical rank 0's
// thread 0.
int target_threads(const AggregationSpec& spec, int rank) {
  if (spec.algorithm == AggregateAlgorithm::rdma) return spec.threads;
  return rank == 0 ? 1 : 0;
}

}  // namespace

// What one rank's threads share. The threads start in Aggregation's constructor, open their end
// of the flow and wait at the gate; Aggregation::run sets the fragments and the start and
// releases them.
struct Aggregation::State {
  State(cluster::Node& n, const AggregationSpec& s, const AggregationRunOptions& o)
      : node(n),
        spec(s),
        options(o),
        name(partials_flow(s)),
        row_width(s.result_schema().tuple_bytes()),
        gate(s.threads + target_threads(s, n.rank())),
        done(s.threads + target_threads(s, n.rank())) {
    for (int t = 0; t < s.threads; ++t) writing.emplace_back(1);
    streamed.assign(static_cast<std::size_t>(s.threads), 0);
    threads.on_failure([this] { abandon(); });
  }
  // Releases threads still waiting for run(), then `threads` joins them.
  ~State() { abandon(); }
  void abandon() {
    gate.abandon();
    for (Countdown& w : writing) w.abandon();
    stopped.abandon();
    done.abandon();
    released.abandon();
  }

  void check(const Status& status, const char* action) const {
    ops::check(spec, node.rank(), status, action, name);
  }
  void add(const AggregationResult& part) {
    std::lock_guard lock(mutex);
    result += part;
  }

  // Post-aggregation thread t: merges the partial rows of its target, then finalizes its groups.
  //
  // It polls its target lazily (no CPU to speak of: with few groups nothing is shipped before
  // the sources close, and targets polling at full rate took the aggregation threads' cores)
  // until rows stream in (flow::CombinerTarget::streaming(), or its own rank's aggregation
  // thread t shipped before its close) or every source closed, and only then consume()s, which
  // waits at full rate. Lazily means: sleep, then merge whatever has arrived without waiting
  // (merge_arrived, which also returns ring credits and notices a dead source). The sleep is
  // kIdleCheck while aggregation thread t still aggregates (it ends early when that thread first
  // writes: a shipment, a pass-through or its close; see wait_for_rows), then kCloseCheck: after
  // its own thread closed, a target only waits for the other ranks' closes, and kCloseCheck is
  // how late it may see the last one.
  //
  // No wait is circular: before its first write an aggregation thread only reads its fragment
  // into its table and waits for nobody, so its first write comes after finite local work unless
  // it fails, and a failure abandons. A remote source that fills its ring to a lazy target waits
  // for credits at most one sleep longer than it would with a polling target, and the target
  // then consumes at full rate, so neither the source's pipelining nor its stall timeout depends
  // on how long this rank's aggregation takes. A rank that dies fails this rank's aggregation
  // threads when they write (peer_failed, which abandons) and merge_arrived or consume() when its
  // sources had not closed. A flow that stalls while the target polls lazily (nothing merged,
  // no source closed for the flow's stall timeout) is handed to consume(), which reports it after
  // another stall timeout.
  void post_aggregate(int t) {
    flow::CombinerTarget in(node, name, t, spec.schema, options.open_timeout);
    if (!gate.opened()) return;
    if (!wait_for_rows(in, t)) return;  // abandoned: a thread failed
    AggregationResult part;
    flow::TupleBatch batch;
    for (;;) {
      check(in.consume(batch), "consuming");
      if (batch.empty()) break;
      for (std::size_t i = 0; i < batch.count; ++i) {
        part.checksum += kernels::fold_tuple(batch.tuple(i), row_width);
      }
      part.groups += batch.count;
      if (options.sink) options.sink(t, batch);
    }
    add(part);
    done.count_down();
    released.wait();  // then `in` closes its rings (see `released`)
  }

  // post_aggregate's lazy poll: true once the target should consume() (rows stream in, every
  // source closed, or a stall), false if abandoned.
  bool wait_for_rows(flow::CombinerTarget& in, int t) {
    Countdown& own = writing[static_cast<std::size_t>(t)];
    bool own_closed = false;  // aggregation thread t's first write was its close
    std::uint64_t seen = 0;   // rows merged and sources closed, at the last change
    Clock::time_point changed = Clock::now();
    for (;;) {
      if (!own_closed) {
        if (const std::optional<bool> first_write = own.wait_for(kIdleCheck)) {
          if (!*first_write) return false;
          // Written by aggregation thread t before it counted `own` down.
          if (streamed[static_cast<std::size_t>(t)] != 0) return true;
          own_closed = true;
        }
      } else if (stopped.wait_for(kCloseCheck)) {
        return false;  // only abandon() releases `stopped`
      }
      check(in.merge_arrived(), "consuming");
      if (in.streaming() || in.sources_closed()) return true;
      const std::uint64_t now_seen = in.counters().rows + in.counters().segments;
      if (now_seen != seen) {
        seen = now_seen;
        changed = Clock::now();
      } else if (own_closed && Clock::now() - changed > in.stall_timeout()) {
        return true;
      }
    }
  }
  static constexpr std::chrono::milliseconds kIdleCheck{5};
  static constexpr std::chrono::milliseconds kCloseCheck{1};

  // Aggregation thread t: its fragment into its source (rdma: a cache-sized table shipped when
  // full; hierarchical: an unbounded table shipped at close).
  void aggregate(int t) {
    fabric::Worker worker(node.fabric(), spec.name + " aggregate " + std::to_string(t));
    flow::CombinerSourceOptions source_options;
    source_options.expected_schema = spec.schema;
    source_options.open_timeout = options.open_timeout;
    source_options.ship_tuples = 0;  // ship when the table is full (and at close)
    source_options.local_groups = spec.algorithm == AggregateAlgorithm::rdma
                                      ? spec.cache_groups
                                      : std::numeric_limits<std::size_t>::max();
    if (spec.algorithm == AggregateAlgorithm::rdma) source_options.pass_through_below = spec.pass_through_below;
    // Runs on this thread, in the first shipment, pass-through or close (closing tells which).
    bool closing = false;
    source_options.before_first_write = [this, t, &closing] {
      if (!closing) streamed[static_cast<std::size_t>(t)] = 1;
      writing[static_cast<std::size_t>(t)].count_down();
    };
    flow::CombinerSource out(node, worker, name, t, source_options);
    if (!gate.opened()) return;
    const Fragment& fragment = input[static_cast<std::size_t>(t)];
    check(out.push_bulk(fragment.tuples, fragment.count), "pushing into");
    closing = true;
    check(out.close(), "closing");
    AggregationResult part;
    part.input_tuples = out.counters().tuples;
    part.shipped_rows = out.counters().rows;
    part.passed_tuples = out.counters().passed;
    add(part);
    done.count_down();
    released.wait();  // then `out` and `worker` close their connections (see `released`)
  }

  cluster::Node& node;
  const AggregationSpec spec;
  const AggregationRunOptions options;
  const std::string name;       // the flow
  const std::size_t row_width;  // of a result row
  // Written by Aggregation::run before it releases the threads; read by them after opened().
  std::span<const Fragment> input;
  detail::OpenGate gate;
  std::deque<Countdown> writing;  // per thread t: its source started writing (post_aggregate(t) waits)
  // Per thread t: its source's first write came before its close (set before writing[t] counts
  // down, read after).
  std::vector<char> streamed;
  Countdown stopped{1};  // never counted down: abandon() releases post_aggregate's sleeps
  // Counted down by each thread once its part of the result is in `result` (an aggregation
  // thread's source closed, a post-aggregation thread's groups finalized): run() returns then.
  // What is left for the threads is to destroy their flow ends (endpoints closed and flushed,
  // memory deregistered: a few ms per target over tcp), which ~Aggregation waits for, as the
  // constructor did their open.
  Countdown done;
  // Counted down by run() once this rank's result is complete: only then do the threads destroy
  // their flow ends. A thread whose part is done sooner (a source that closed while other ranks
  // still aggregate) waits blocked, so its teardown does not take CPU from the ranks still
  // aggregating: over tcp the flush-closes of rdma's four connections per source were a few ms
  // of CPU per rank inside the other ranks' run. No wait is circular: run() waits for `done`
  // only, and a teardown that waits for a peer still in its run is bounded by that run.
  Countdown released{1};
  std::mutex mutex;
  AggregationResult result;  // guarded by mutex
  ThreadGroup threads;       // last: joined before what its threads use is destroyed
};

Aggregation::Aggregation(cluster::Node& node, const AggregationSpec& spec, const AggregationRunOptions& options) {
  spec.validate(node.size());
  if (node.rank() >= aggregation_ranks(spec, node.size())) {
    throw Error(Errc::invalid_argument, "aggregation '" + spec.name + "': rank " + std::to_string(node.rank()) +
                                            " does not take part (ranks 0.." +
                                            std::to_string(aggregation_ranks(spec, node.size()) - 1) + ")");
  }
  const Clock::time_point start = Clock::now();
  state_ = std::make_unique<State>(node, spec, options);
  State& state = *state_;
  for (int t = 0; t < target_threads(spec, node.rank()); ++t) state.threads.start([&state, t] { state.post_aggregate(t); });
  for (int t = 0; t < spec.threads; ++t) state.threads.start([&state, t] { state.aggregate(t); });
  if (!state.gate.wait_open()) {
    state.threads.join();  // rethrows the first thread's error
    throw Error(Errc::fatal, "aggregation '" + spec.name + "': opening its flow was abandoned without an error");
  }
  open_seconds_ = std::chrono::duration<double>(Clock::now() - start).count();
}

Aggregation::~Aggregation() = default;

AggregationResult Aggregation::run(std::span<const Fragment> input) {
  State& state = *state_;
  if (ran_) {
    throw Error(Errc::invalid_argument,
                "aggregation '" + state.spec.name + "': run() called twice (an Aggregation runs once)");
  }
  check_fragments(state.spec, input);
  ran_ = true;
  state.input = input;
  const Clock::time_point start = Clock::now();
  state.gate.release();
  if (!state.done.wait()) {
    state.threads.join();  // rethrows the first thread's error
    throw Error(Errc::fatal, "aggregation '" + state.spec.name + "': abandoned without an error");
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  state.released.count_down();
  AggregationResult result;
  {
    std::lock_guard lock(state.mutex);
    result = state.result;
  }
  result.seconds = seconds;
  result.open_seconds = open_seconds_;
  return result;
}

AggregationResult run_aggregation(cluster::Node& node, const AggregationSpec& spec, std::span<const Fragment> input,
                                  const AggregationRunOptions& options) {
  check_fragments(spec, input);
  return Aggregation(node, spec, options).run(input);
}

AggregationResult gather_aggregation_results(cluster::Node& node, const AggregationSpec& spec,
                                             const AggregationResult& mine) {
  std::ostringstream record;
  record.precision(17);
  record << mine.input_tuples << ' ' << mine.groups << ' ' << mine.checksum << ' ' << mine.shipped_rows
         << ' ' << mine.seconds << ' ' << mine.open_seconds << ' ' << mine.passed_tuples;
  const int ranks = aggregation_ranks(spec, node.size());
  const std::vector<std::string> records =
      detail::exchange_records(node, "ops/aggregate/" + spec.name + "/result/", ranks, record.str());
  AggregationResult all;
  for (int r = 0; r < ranks; ++r) {
    std::istringstream in(records[r]);
    AggregationResult part;
    in >> part.input_tuples >> part.groups >> part.checksum >> part.shipped_rows >> part.seconds >> part.open_seconds >> part.passed_tuples;
    if (!in) {
      throw Error(Errc::protocol, "aggregation '" + spec.name + "': malformed result record of rank " +
                                      std::to_string(r));
    }
    all += part;
  }
  return all;
}

}  // namespace dfi::ops
