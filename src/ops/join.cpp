// ops::Join and run_join (the threads of a rank, opened before the run), and the radix and
// fragment-and-replicate joins on flows (see join.hpp).
#include "dfi/ops/join.hpp"

#include <algorithm>
#include <bit>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/common/thread_group.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/kernels/hash_partition.hpp"
#include "dfi/kernels/join_table.hpp"
#include "join_parts.hpp"

namespace dfi::ops {

detail::ShuffleSources::ShuffleSources(RankJoin& join, int thread)
    : worker(join.node.fabric(), join.worker_name(thread)),
      build_name(build_flow(join.spec)),
      probe_name(probe_flow(join.spec)),
      build(join.node, worker, build_name, thread, join.open_options<flow::SourceOptions>(join.spec.build.schema)),
      probe(join.node, worker, probe_name, thread, join.open_options<flow::SourceOptions>(join.spec.probe.schema)) {}

detail::ShuffleTargets::ShuffleTargets(const RankJoin& join, int thread)
    : build_name(build_flow(join.spec)),
      probe_name(probe_flow(join.spec)),
      build(join.node, build_name, thread, join.spec.build.schema, join.options.open_timeout),
      probe(join.node, probe_name, thread, join.spec.probe.schema, join.options.open_timeout) {}

void detail::probe_batch(const RankJoin& join, const kernels::JoinTable& table, const std::byte* tuples,
                         std::size_t count, int thread, std::vector<Match>& pairs, JoinResult& out) {
  const std::size_t width = join.probe_layout.tuple_bytes;
  const std::size_t key_offset = join.probe_layout.key_offset;
  const bool sink = static_cast<bool>(join.options.sink);
  std::uint64_t checksum = 0;
  pairs.clear();
  // The probe tuple's fold is computed once, at its first partner (pairs of one probe tuple are
  // reported one after the other).
  const std::byte* folded = nullptr;
  std::uint64_t probe_fold = 0;
  const std::uint64_t matches = table.probe_batch(
      tuples, count, width, key_offset,
      [&](const std::byte* probe, const std::byte* build, std::uint64_t build_fold) {
        if (probe != folded) {
          probe_fold = kernels::fold_tuple(probe, width);
          folded = probe;
        }
        checksum += kernels::pair_checksum(build_fold, probe_fold);
        if (sink) pairs.push_back({build, probe});
      });
  out.probe_tuples += count;
  out.matches += matches;
  out.checksum += checksum;
  if (sink && !pairs.empty()) join.options.sink(thread, pairs);
}

void detail::join_partition(const RankJoin& join, const std::byte* build, std::size_t build_count,
                            const std::byte* probe, std::size_t probe_count, int thread, JoinResult& out) {
  const kernels::JoinTable::Layout& build_layout = join.build_layout;
  const kernels::JoinTable::Layout& probe_layout = join.probe_layout;
  const std::size_t wanted = join.spec.grace_partitions > 0
                                 ? static_cast<std::size_t>(join.spec.grace_partitions)
                                 : (build_count + kGracePartitionTuples - 1) / kGracePartitionTuples;
  const std::size_t partitions = std::bit_ceil(std::max<std::size_t>(1, wanted));
  std::vector<std::byte> build_parts(build_count * build_layout.tuple_bytes);
  std::vector<std::byte> probe_parts(probe_count * probe_layout.tuple_bytes);
  const std::vector<std::size_t> build_at =
      kernels::hash_partition(build, build_count, build_layout, partitions, build_parts.data());
  const std::vector<std::size_t> probe_at =
      kernels::hash_partition(probe, probe_count, probe_layout, partitions, probe_parts.data());
  std::vector<Match> pairs;
  for (std::size_t p = 0; p < partitions; ++p) {
    const std::size_t probes = probe_at[p + 1] - probe_at[p];
    if (probes == 0) continue;
    kernels::JoinTable table(build_layout);
    table.add(build_parts.data() + build_at[p] * build_layout.tuple_bytes, build_at[p + 1] - build_at[p]);
    table.build();
    const std::byte* probe_tuples = probe_parts.data() + probe_at[p] * probe_layout.tuple_bytes;
    probe_batch(join, table, probe_tuples, probes, thread, pairs, out);
  }
  out.build_tuples += build_count;  // (probe_batch counted the probe tuples)
}

namespace {

using detail::build_flow;
using detail::Clock;
using detail::probe_flow;
using detail::RankJoin;
using detail::join_ranks;
using detail::probe_batch;

// Partitioning thread `thread` of the radix join: both fragments into the two shuffle flows.
void radix_partition(RankJoin& join, int thread) {
  detail::ShuffleSources out(join, thread);
  if (!join.opened()) return;
  const Fragment& build = join.build[static_cast<std::size_t>(thread)];
  const Fragment& probe = join.probe[static_cast<std::size_t>(thread)];
  join.check(out.build.push_bulk(build.tuples, build.count), "pushing into", out.build_name);
  join.check(out.build.close(), "closing", out.build_name);
  join.check(out.probe.push_bulk(probe.tuples, probe.count), "pushing into", out.probe_name);
  join.check(out.probe.close(), "closing", out.probe_name);
  JoinResult part;
  part.shipped_probe_tuples = probe.count;
  join.add(part);
}

// Join thread `thread` of the radix join: build from its build-flow target, probe from its
// probe-flow target.
void radix_join(RankJoin& join, int thread) {
  detail::ShuffleTargets in(join, thread);
  kernels::JoinTable table(join.build_layout);
  if (!join.opened()) return;
  flow::TupleBatch batch;
  for (;;) {
    join.check(in.build.consume(batch), "consuming", in.build_name);
    if (batch.empty()) break;
    table.add(batch.data, batch.count);
  }
  table.build();
  JoinResult part;
  part.build_tuples = table.size();
  part.build_seconds = join.since_start();
  std::vector<Match> pairs;
  for (;;) {
    join.check(in.probe.consume(batch), "consuming", in.probe_name);
    if (batch.empty()) break;
    probe_batch(join, table, batch.data, batch.count, thread, pairs, part);
  }
  join.add(part);
}

class RadixThreads : public detail::JoinThreads {
 public:
  explicit RadixThreads(RankJoin& join) : join_(join) {}
  void start(ThreadGroup& group) override {
    for (int t = 0; t < join_.spec.threads; ++t) group.start([this, t] { radix_join(join_, t); });
    for (int t = 0; t < join_.spec.threads; ++t) group.start([this, t] { radix_partition(join_, t); });
  }

 private:
  RankJoin& join_;
};

// Partitioning thread of the fragment-and-replicate join: the build fragment to every rank.
void replicate_partition(RankJoin& join, int thread) {
  fabric::Worker worker(join.node.fabric(), join.worker_name(thread));
  const std::string name = build_flow(join.spec);
  flow::ReplicateSource source(join.node, worker, name, thread,
                               join.open_options<flow::ReplicateSourceOptions>(join.spec.build.schema));
  if (!join.opened()) return;
  const Fragment& build = join.build[static_cast<std::size_t>(thread)];
  join.check(source.push_bulk(build.tuples, build.count), "pushing into", name);
  join.check(source.close(), "closing", name);
}

// Join thread 0 of the fragment-and-replicate join: the rank's table from the whole build side.
void replicate_build(RankJoin& join, flow::ReplicateTarget& in, kernels::JoinTable& table) {
  const std::string name = build_flow(join.spec);
  flow::ReplicateBatch batch;
  for (;;) {
    join.check(in.consume(batch), "consuming", name);
    if (batch.end) break;
    if (batch.gap()) {  // unordered flows have no sequence numbers; never expected
      join.check(Status(Errc::protocol, "a gap event in an unordered flow"), "consuming", name);
    }
    table.add(batch.data, batch.count);
  }
  table.build();
}

// Join thread t of the fragment-and-replicate join: thread 0 builds the rank's table, then every
// thread probes its own probe fragment against it.
class FragmentReplicateThreads : public detail::JoinThreads {
 public:
  explicit FragmentReplicateThreads(RankJoin& join) : join_(join), table_(join.build_layout) {}
  void start(ThreadGroup& group) override {
    for (int t = 0; t < join_.spec.threads; ++t) group.start([this, t] { join(t); });
    for (int t = 0; t < join_.spec.threads; ++t) group.start([this, t] { replicate_partition(join_, t); });
  }
  void abandon() override { built_.abandon(); }

 private:
  void join(int thread) {
    JoinResult part;
    if (thread == 0) {
      const std::string name = build_flow(join_.spec);
      flow::ReplicateTarget in(join_.node, name, 0,
                               join_.open_options<flow::ReplicateTargetOptions>(join_.spec.build.schema));
      if (!join_.opened()) return;
      replicate_build(join_, in, table_);
      part.build_tuples = table_.size();
      part.build_seconds = join_.since_start();
      built_.count_down();
    } else if (!join_.opened()) {
      return;
    }
    if (!built_.wait()) return;  // thread 0 failed: the group rethrows its error
    const Fragment& probe = join_.probe[static_cast<std::size_t>(thread)];
    std::vector<Match> pairs;
    probe_batch(join_, table_, static_cast<const std::byte*>(probe.tuples), probe.count, thread, pairs, part);
    join_.add(part);
  }

  RankJoin& join_;
  kernels::JoinTable table_;  // written by thread 0 until built_, then read by all
  Countdown built_{1};
};

void check_fragments(const JoinSpec& spec, std::span<const Fragment> build, std::span<const Fragment> probe) {
  const std::size_t threads = static_cast<std::size_t>(spec.threads);
  if (build.size() != threads || probe.size() != threads) {
    throw Error(Errc::invalid_argument,
                "join '" + spec.name + "': " + std::to_string(build.size()) + " build and " +
                    std::to_string(probe.size()) + " probe fragments for " +
                    std::to_string(threads) + " threads (one of each per thread)");
  }
}

}  // namespace

std::string_view join_algorithm_name(JoinAlgorithm algorithm) {
  switch (algorithm) {
    case JoinAlgorithm::radix: return "radix";
    case JoinAlgorithm::fragment_replicate: return "fragment-replicate";
    case JoinAlgorithm::grace: return "grace";
    case JoinAlgorithm::rrj: return "rrj";
  }
  return "?";
}

JoinAlgorithm parse_join_algorithm(std::string_view text) {
  if (text == "radix") return JoinAlgorithm::radix;
  if (text == "fragment-replicate" || text == "fr") return JoinAlgorithm::fragment_replicate;
  if (text == "grace") return JoinAlgorithm::grace;
  if (text == "rrj") return JoinAlgorithm::rrj;
  throw Error(Errc::invalid_argument, "join algorithm '" + std::string(text) +
                                          "': expected radix, fragment-replicate, grace or rrj");
}

JoinResult& JoinResult::operator+=(const JoinResult& other) {
  build_tuples += other.build_tuples;
  probe_tuples += other.probe_tuples;
  shipped_probe_tuples += other.shipped_probe_tuples;
  matches += other.matches;
  checksum += other.checksum;
  seconds = std::max(seconds, other.seconds);
  build_seconds = std::max(build_seconds, other.build_seconds);
  open_seconds = std::max(open_seconds, other.open_seconds);
  return *this;
}

void JoinSpec::validate(int cluster_size) const {
  auto bad = [&](const std::string& what) {
    return Error(Errc::invalid_argument, "join '" + name + "': " + what);
  };
  detail::check_common("join", name, threads, ranks, cluster_size);
  if (flow_options.mode != flow::Mode::bandwidth) throw bad("its flows must be in bandwidth mode");
  if (bloom && algorithm != JoinAlgorithm::grace) throw bad("the Bloom filter needs the grace algorithm");
  if (!(bloom_bits_per_key >= 1 && bloom_bits_per_key <= 64)) {
    throw bad("bloom_bits_per_key must be in [1, 64] (got " + std::to_string(bloom_bits_per_key) + ")");
  }
  if (grace_partitions < 0 || grace_partitions > kMaxGracePartitions) {
    throw bad("grace_partitions must be in [0, " + std::to_string(kMaxGracePartitions) + "] (got " +
              std::to_string(grace_partitions) + ")");
  }
  auto key_column = [&](const Relation& relation, const char* side) -> const flow::Column& {
    if (relation.schema.column_count() == 0) throw bad(std::string(side) + " relation has no schema");
    try {
      return relation.schema.column(relation.schema.index_of(relation.key));
    } catch (const Error&) {
      throw bad(std::string(side) + " key '" + relation.key + "' is not a column of " +
                relation.schema.describe());
    }
  };
  const flow::Column& build_key = key_column(build, "build");
  const flow::Column& probe_key = key_column(probe, "probe");
  if (build_key.type != probe_key.type || build_key.length != probe_key.length) {
    throw bad("key columns differ: build '" + build_key.name + "' is " +
              std::string(flow::type_name(build_key.type)) + ", probe '" + probe_key.name +
              "' is " + std::string(flow::type_name(probe_key.type)) +
              " (both must have the same type and width)");
  }
  if (build_key.type == flow::Type::float32 || build_key.type == flow::Type::float64) {
    throw bad("key '" + build_key.name + "' is a float (joins compare keys bytewise)");
  }
}

void create_join(cluster::Node& node, const JoinSpec& spec) {
  spec.validate(node.size());
  const int ranks = join_ranks(spec, node.size());
  std::vector<flow::SourceRef> sources;
  std::vector<flow::TargetRef> per_thread;
  for (int r = 0; r < ranks; ++r) {
    for (int t = 0; t < spec.threads; ++t) {
      sources.push_back({r, t});
      per_thread.push_back({r, t});
    }
  }
  if (spec.algorithm == JoinAlgorithm::rrj) {
    detail::create_rrj(node, spec);
    return;
  }
  flow::FlowSpec build;
  build.name = build_flow(spec);
  build.sources = sources;
  build.schema = spec.build.schema;
  build.key_column = spec.build.key;
  build.options = spec.flow_options;
  if (spec.algorithm != JoinAlgorithm::fragment_replicate) {
    build.targets = per_thread;
    flow::FlowSpec probe = build;
    probe.name = probe_flow(spec);
    probe.schema = spec.probe.schema;
    probe.key_column = spec.probe.key;
    flow::create_flow(node, build);
    flow::create_flow(node, probe);
    if (spec.algorithm == JoinAlgorithm::grace) detail::create_grace_flows(node, spec);
  } else {
    build.type = flow::FlowType::replicate;
    build.key_column.clear();
    for (int r = 0; r < ranks; ++r) build.targets.push_back({r, 0});
    flow::create_flow(node, build);
  }
}

struct Join::State {
  State(cluster::Node& node, const JoinSpec& spec, const JoinRunOptions& options) : join(node, spec, options) {
    switch (spec.algorithm) {
      case JoinAlgorithm::radix: algorithm = std::make_unique<RadixThreads>(join); break;
      case JoinAlgorithm::fragment_replicate:
        algorithm = std::make_unique<FragmentReplicateThreads>(join);
        break;
      case JoinAlgorithm::grace: algorithm = detail::grace_threads(join); break;
      case JoinAlgorithm::rrj: algorithm = detail::rrj_threads(join); break;
    }
    threads.on_failure([this] { abandon(); });
  }
  // Releases threads still waiting (for run(), or for a phase), then `threads` joins them.
  ~State() { abandon(); }
  void abandon() {
    join.abandon();
    algorithm->abandon();
  }

  RankJoin join;
  std::unique_ptr<detail::JoinThreads> algorithm;
  ThreadGroup threads;  // last: joined before what its threads use is destroyed
};

Join::Join(cluster::Node& node, const JoinSpec& spec, const JoinRunOptions& options) {
  spec.validate(node.size());
  if (node.rank() >= join_ranks(spec, node.size())) {
    throw Error(Errc::invalid_argument, "join '" + spec.name + "': rank " +
                                            std::to_string(node.rank()) + " does not take part (ranks 0.." +
                                            std::to_string(join_ranks(spec, node.size()) - 1) + ")");
  }
  const Clock::time_point start = Clock::now();
  state_ = std::make_unique<State>(node, spec, options);
  state_->algorithm->start(state_->threads);
  if (!state_->join.gate.wait_open()) {
    state_->threads.join();  // rethrows the first thread's error
    throw Error(Errc::fatal, "join '" + spec.name + "': opening its flows was abandoned without an error");
  }
  open_seconds_ = std::chrono::duration<double>(Clock::now() - start).count();
}

Join::~Join() = default;

JoinResult Join::run(std::span<const Fragment> build, std::span<const Fragment> probe) {
  RankJoin& join = state_->join;
  if (ran_) throw Error(Errc::invalid_argument, "join '" + join.spec.name + "': run() called twice (a Join runs once)");
  check_fragments(join.spec, build, probe);
  ran_ = true;
  join.build = build;
  join.probe = probe;
  join.start = Clock::now();
  state_->algorithm->before_run();
  join.gate.release();
  state_->threads.join();
  JoinResult result = join.result;
  result.seconds = join.since_start();
  result.open_seconds = open_seconds_;
  return result;
}

JoinResult run_join(cluster::Node& node, const JoinSpec& spec, std::span<const Fragment> build,
                    std::span<const Fragment> probe, const JoinRunOptions& options) {
  check_fragments(spec, build, probe);
  return Join(node, spec, options).run(build, probe);
}

JoinResult gather_join_results(cluster::Node& node, const JoinSpec& spec, const JoinResult& mine) {
  std::ostringstream record;
  record.precision(17);
  record << mine.build_tuples << ' ' << mine.probe_tuples << ' ' << mine.shipped_probe_tuples << ' ' << mine.matches << ' '
         << mine.checksum << ' ' << mine.seconds << ' ' << mine.build_seconds << ' ' << mine.open_seconds;
  const int ranks = join_ranks(spec, node.size());
  const std::vector<std::string> records =
      detail::exchange_records(node, "ops/join/" + spec.name + "/result/", ranks, record.str());
  JoinResult all;
  for (int r = 0; r < ranks; ++r) {
    std::istringstream in(records[r]);
    JoinResult part;
    in >> part.build_tuples >> part.probe_tuples >> part.shipped_probe_tuples >> part.matches >> part.checksum >> part.seconds >>
        part.build_seconds >> part.open_seconds;
    if (!in) {
      throw Error(Errc::protocol, "join '" + spec.name + "': malformed result record of rank " +
                                      std::to_string(r));
    }
    all += part;
  }
  return all;
}

}  // namespace dfi::ops
