// What the join algorithms of ops/ share (join.cpp: ops::Join, radix and fragment-and-replicate;
// grace_join.cpp: the grace hash join; rrj_join.cpp: the RDMA radix join): the flow names, one
// rank's shared state, the interface of an algorithm's threads, the probe of a batch of probe
// tuples into the result and the local join of a materialised partition.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/common/thread_group.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/kernels/join_table.hpp"
#include "dfi/ops/join.hpp"
#include "open_gate.hpp"
#include "records.hpp"

namespace dfi::ops::detail {

using Clock = std::chrono::steady_clock;

inline std::string build_flow(const JoinSpec& spec) { return spec.name + ".build"; }
inline std::string probe_flow(const JoinSpec& spec) { return spec.name + ".probe"; }
inline std::string bloom_flow(const JoinSpec& spec) { return spec.name + ".bloom"; }

inline int join_ranks(const JoinSpec& spec, int cluster_size) {
  return spec.ranks == 0 ? cluster_size : spec.ranks;
}

inline kernels::JoinTable::Layout layout_of(const Relation& relation) {
  const std::size_t key = relation.schema.index_of(relation.key);
  return {relation.schema.tuple_bytes(), relation.schema.offset(key), relation.schema.column_bytes(key)};
}

// What one rank's threads share. The threads start in Join's constructor, open their flows,
// and call opened(); Join::run sets the fragments and the start time and releases them.
struct RankJoin {
  RankJoin(cluster::Node& n, const JoinSpec& s, const JoinRunOptions& o)
      : node(n),
        spec(s),
        options(o),
        build_layout(layout_of(s.build)),
        probe_layout(layout_of(s.probe)),
        gate(2 * s.threads) {}

  cluster::Node& node;
  const JoinSpec spec;
  const JoinRunOptions options;
  const kernels::JoinTable::Layout build_layout;
  const kernels::JoinTable::Layout probe_layout;
  // Written by Join::run before it releases the threads; read by them after opened().
  std::span<const Fragment> build;
  std::span<const Fragment> probe;
  Clock::time_point start;
  OpenGate gate;  // every thread of the rank (2 x threads) opens its flows; Join::run releases them
  std::mutex results_mutex;
  JoinResult result;  // guarded by results_mutex

  // Called once by every thread when its flows are open: waits for Join::run. False: the join
  // was abandoned (a thread failed, or the Join is destroyed unrun); the thread returns at once.
  // (A partitioning thread's worker is not progressed meanwhile: letting the progress thread
  // adopt it made no measurable difference to the run over tcp, 2 M x 2 M tuples or 4 x 4.)
  bool opened() { return gate.opened(); }
  void abandon() { gate.abandon(); }
  // Throws the join's error for a failed data-path call on `flow` ("consuming", "pushing into").
  void check(const Status& status, const char* action, const std::string& flow) const {
    check_call(status, "join", spec.name, node.rank(), action, flow);
  }
  void add(const JoinResult& part) {
    std::lock_guard lock(results_mutex);
    result += part;
  }
  double since_start() const { return std::chrono::duration<double>(Clock::now() - start).count(); }
  // The name of partitioning thread `thread`'s fabric worker.
  std::string worker_name(int thread) const { return spec.name + " partition " + std::to_string(thread); }
  // Open options of a source or target of the join's flows (flow::SourceOptions,
  // ReplicateSourceOptions, ReplicateTargetOptions): `schema` expected, the join's open timeout.
  template <class Options>
  Options open_options(const flow::Schema& schema) const {
    Options o;
    o.expected_schema = schema;
    o.open_timeout = options.open_timeout;
    return o;
  }
};

// A partitioning thread's end of the radix and grace joins' two shuffle flows: a fabric worker
// of its own (so the thread that constructs it must be the one that pushes) and its source of
// each flow, opened (connected to every target) by the constructor.
struct ShuffleSources {
  ShuffleSources(RankJoin& join, int thread);
  fabric::Worker worker;
  const std::string build_name;
  const std::string probe_name;
  flow::ShuffleSource build;
  flow::ShuffleSource probe;
};

// A join thread's end of the same flows: its target of each, opened by the constructor.
struct ShuffleTargets {
  ShuffleTargets(const RankJoin& join, int thread);
  const std::string build_name;
  const std::string probe_name;
  flow::ShuffleTarget build;
  flow::ShuffleTarget probe;
};

// The part of a prepared join particular to its algorithm (join.cpp: radix and
// fragment-and-replicate; grace_join.cpp: grace).
class JoinThreads {
 public:
  virtual ~JoinThreads() = default;
  // Starts the rank's 2 x threads threads on `group`: each opens its flows, calls
  // RankJoin::opened(), and joins once that returns true.
  virtual void start(ThreadGroup& group) = 0;
  // Join::run, with the fragments set, before the threads are released (grace with bloom: sizes
  // the filter). Throws what the algorithm's setup throws.
  virtual void before_run() {}
  // A thread failed: releases the algorithm's own Countdowns (thread-safe).
  virtual void abandon() {}
};

// Probes `count` probe tuples at `tuples` against `table`, into `out`; hands the pairs to the
// sink when there is one (`pairs` is the join thread's own buffer, reused across batches).
void probe_batch(const RankJoin& join, const kernels::JoinTable& table, const std::byte* tuples,
                 std::size_t count, int thread, std::vector<Match>& pairs, JoinResult& out);

// Joins a join thread's whole partition, materialised: `build_count` build tuples at `build` with
// `probe_count` probe tuples at `probe`. Both sides are cut into the same sub-partitions by
// kernels::hash_partition (JoinSpec::grace_partitions, or enough for about kGracePartitionTuples
// build tuples each), and per sub-partition a kernels::JoinTable is built and probed
// (probe_batch). Adds build_tuples, probe_tuples, matches and checksum to `out`. The local phase
// of grace and rrj.
void join_partition(const RankJoin& join, const std::byte* build, std::size_t build_count, const std::byte* probe,
                    std::size_t probe_count, int thread, JoinResult& out);

std::unique_ptr<JoinThreads> radix_threads(RankJoin& join);
std::unique_ptr<JoinThreads> fragment_replicate_threads(RankJoin& join);
// The grace hash join's threads (grace_join.cpp) and its part of create_join (its flows).
std::unique_ptr<JoinThreads> grace_threads(RankJoin& join);
void create_grace_flows(cluster::Node& node, const JoinSpec& spec);
// The RDMA radix join's threads (rrj_join.cpp) and its part of create_join (its record).
std::unique_ptr<JoinThreads> rrj_threads(RankJoin& join);
void create_rrj(cluster::Node& node, const JoinSpec& spec);

}  // namespace dfi::ops::detail
