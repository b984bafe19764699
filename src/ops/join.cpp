// ops::run_join: the radix and fragment-and-replicate joins on flows (see join.hpp).
#include "dfi/ops/join.hpp"

#include <algorithm>
#include <barrier>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/common/thread_group.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/kernels/join_table.hpp"
#include "join_parts.hpp"

namespace dfi::ops {

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

namespace {

using detail::build_flow;
using detail::Clock;
using detail::probe_flow;
using detail::RankJoin;
using detail::join_ranks;
using detail::probe_batch;

// Partitioning thread `thread` of the radix join: both fragments into the two shuffle flows.
void radix_partition(RankJoin& join, int thread, const Fragment& build, const Fragment& probe) {
  fabric::Worker worker(join.node.fabric(), join.spec.name + " partition " + std::to_string(thread));
  struct Side {
    std::string flow;
    const Relation& relation;
    const Fragment& fragment;
  };
  for (const Side& side : {Side{build_flow(join.spec), join.spec.build, build},
                           Side{probe_flow(join.spec), join.spec.probe, probe}}) {
    flow::SourceOptions options;
    options.expected_schema = side.relation.schema;
    options.open_timeout = join.options.open_timeout;
    flow::ShuffleSource source(join.node, worker, side.flow, thread, options);
    join.check(source.push_bulk(side.fragment.tuples, side.fragment.count),
               "pushing into", side.flow);
    join.check(source.close(), "closing", side.flow);
  }
  JoinResult part;
  part.shipped_probe_tuples = probe.count;
  join.add(part);
}

// Join thread `thread` of the radix join: build from its build-flow target, probe from its
// probe-flow target.
void radix_join(RankJoin& join, int thread) {
  const std::string build_name = build_flow(join.spec);
  const std::string probe_name = probe_flow(join.spec);
  // Both targets open at once, so the probe flow's sources can connect while the build runs.
  flow::ShuffleTarget build_in(join.node, build_name, thread, join.spec.build.schema,
                               join.options.open_timeout);
  flow::ShuffleTarget probe_in(join.node, probe_name, thread, join.spec.probe.schema,
                               join.options.open_timeout);
  kernels::JoinTable table(join.build_layout);
  flow::TupleBatch batch;
  for (;;) {
    join.check(build_in.consume(batch), "consuming", build_name);
    if (batch.empty()) break;
    table.add(batch.data, batch.count);
  }
  table.build();
  JoinResult part;
  part.build_tuples = table.size();
  part.build_seconds = join.since_start();
  std::vector<Match> pairs;
  for (;;) {
    join.check(probe_in.consume(batch), "consuming", probe_name);
    if (batch.empty()) break;
    probe_batch(join, table, batch.data, batch.count, thread, pairs, part);
  }
  join.add(part);
}

// Partitioning thread of the fragment-and-replicate join: the build fragment to every rank.
void replicate_partition(RankJoin& join, int thread, const Fragment& build) {
  fabric::Worker worker(join.node.fabric(), join.spec.name + " partition " + std::to_string(thread));
  const std::string name = build_flow(join.spec);
  flow::ReplicateSourceOptions options;
  options.expected_schema = join.spec.build.schema;
  options.open_timeout = join.options.open_timeout;
  flow::ReplicateSource source(join.node, worker, name, thread, options);
  join.check(source.push_bulk(build.tuples, build.count), "pushing into", name);
  join.check(source.close(), "closing", name);
}

// Join thread 0 of the fragment-and-replicate join: the rank's table from the whole build side.
void replicate_build(RankJoin& join, kernels::JoinTable& table) {
  const std::string name = build_flow(join.spec);
  flow::ReplicateTargetOptions options;
  options.expected_schema = join.spec.build.schema;
  options.open_timeout = join.options.open_timeout;
  flow::ReplicateTarget in(join.node, name, 0, options);
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

JoinResult run_radix(RankJoin& join, std::span<const Fragment> build,
                     std::span<const Fragment> probe) {
  ThreadGroup threads;
  for (int t = 0; t < join.spec.threads; ++t) threads.start([&join, t] { radix_join(join, t); });
  for (int t = 0; t < join.spec.threads; ++t) {
    threads.start([&join, t, &build, &probe] { radix_partition(join, t, build[t], probe[t]); });
  }
  threads.join();
  return join.result;
}

JoinResult run_fragment_replicate(RankJoin& join, std::span<const Fragment> build,
                                  std::span<const Fragment> probe) {
  kernels::JoinTable table(join.build_layout);
  // Join threads wait here until thread 0 built the table (or failed: then they leave).
  std::barrier built(join.spec.threads);
  bool build_failed = false;  // written by thread 0 before the barrier, read after it
  ThreadGroup threads;
  for (int t = 0; t < join.spec.threads; ++t) {
    threads.start([&, t] {
      if (t == 0) {
        try {
          replicate_build(join, table);
        } catch (...) {
          build_failed = true;
          built.arrive_and_wait();
          throw;
        }
      }
      built.arrive_and_wait();
      if (build_failed) return;
      JoinResult part;
      if (t == 0) {
        part.build_tuples = table.size();
        part.build_seconds = join.since_start();
      }
      std::vector<Match> pairs;
      probe_batch(join, table, static_cast<const std::byte*>(probe[t].tuples), probe[t].count, t,
                  pairs, part);
      join.add(part);
    });
  }
  for (int t = 0; t < join.spec.threads; ++t) {
    threads.start([&, t] { replicate_partition(join, t, build[t]); });
  }
  threads.join();
  return join.result;
}

}  // namespace

std::string_view join_algorithm_name(JoinAlgorithm algorithm) {
  switch (algorithm) {
    case JoinAlgorithm::radix: return "radix";
    case JoinAlgorithm::fragment_replicate: return "fragment-replicate";
    case JoinAlgorithm::grace: return "grace";
  }
  return "?";
}

JoinAlgorithm parse_join_algorithm(std::string_view text) {
  if (text == "radix") return JoinAlgorithm::radix;
  if (text == "fragment-replicate" || text == "fr") return JoinAlgorithm::fragment_replicate;
  if (text == "grace") return JoinAlgorithm::grace;
  throw Error(Errc::invalid_argument, "join algorithm '" + std::string(text) +
                                          "': expected radix, fragment-replicate or grace");
}

JoinResult& JoinResult::operator+=(const JoinResult& other) {
  build_tuples += other.build_tuples;
  probe_tuples += other.probe_tuples;
  shipped_probe_tuples += other.shipped_probe_tuples;
  matches += other.matches;
  checksum += other.checksum;
  seconds = std::max(seconds, other.seconds);
  build_seconds = std::max(build_seconds, other.build_seconds);
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

JoinResult run_join(cluster::Node& node, const JoinSpec& spec, std::span<const Fragment> build,
                    std::span<const Fragment> probe, const JoinRunOptions& options) {
  spec.validate(node.size());
  const std::size_t threads = static_cast<std::size_t>(spec.threads);
  if (build.size() != threads || probe.size() != threads) {
    throw Error(Errc::invalid_argument,
                "join '" + spec.name + "': " + std::to_string(build.size()) + " build and " +
                    std::to_string(probe.size()) + " probe fragments for " +
                    std::to_string(threads) + " threads (one of each per thread)");
  }
  if (node.rank() >= join_ranks(spec, node.size())) {
    throw Error(Errc::invalid_argument, "join '" + spec.name + "': rank " +
                                            std::to_string(node.rank()) + " does not take part (ranks 0.." +
                                            std::to_string(join_ranks(spec, node.size()) - 1) + ")");
  }
  RankJoin join{node, spec, options, detail::layout_of(spec.build), detail::layout_of(spec.probe), Clock::now(), {}, {}};
  JoinResult result;
  switch (spec.algorithm) {
    case JoinAlgorithm::radix: result = run_radix(join, build, probe); break;
    case JoinAlgorithm::fragment_replicate: result = run_fragment_replicate(join, build, probe); break;
    case JoinAlgorithm::grace: result = detail::run_grace(join, build, probe); break;
  }
  result.seconds = join.since_start();
  return result;
}

JoinResult gather_join_results(cluster::Node& node, const JoinSpec& spec, const JoinResult& mine) {
  std::ostringstream record;
  record.precision(17);
  record << mine.build_tuples << ' ' << mine.probe_tuples << ' ' << mine.shipped_probe_tuples << ' ' << mine.matches << ' '
         << mine.checksum << ' ' << mine.seconds << ' ' << mine.build_seconds;
  const int ranks = join_ranks(spec, node.size());
  const std::vector<std::string> records =
      detail::exchange_records(node, "ops/join/" + spec.name + "/result/", ranks, record.str());
  JoinResult all;
  for (int r = 0; r < ranks; ++r) {
    std::istringstream in(records[r]);
    JoinResult part;
    in >> part.build_tuples >> part.probe_tuples >> part.shipped_probe_tuples >> part.matches >> part.checksum >> part.seconds >>
        part.build_seconds;
    if (!in) {
      throw Error(Errc::protocol, "join '" + spec.name + "': malformed result record of rank " +
                                      std::to_string(r));
    }
    all += part;
  }
  return all;
}

}  // namespace dfi::ops
