// What the join algorithms of ops/ share (join.cpp: radix and fragment-and-replicate;
// grace_join.cpp: the grace hash join): the flow names, one rank's shared state and the probe of
// a batch of probe tuples into the result.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/kernels/join_table.hpp"
#include "dfi/ops/join.hpp"
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

// What one rank's threads share.
struct RankJoin {
  cluster::Node& node;
  const JoinSpec& spec;
  const JoinRunOptions& options;
  kernels::JoinTable::Layout build_layout;
  kernels::JoinTable::Layout probe_layout;
  Clock::time_point start;
  std::mutex results_mutex;
  JoinResult result;  // guarded by results_mutex

  // Throws the join's error for a failed data-path call on `flow` ("consuming", "pushing into").
  void check(const Status& status, const char* action, const std::string& flow) const {
    check_call(status, "join", spec.name, node.rank(), action, flow);
  }
  void add(const JoinResult& part) {
    std::lock_guard lock(results_mutex);
    result += part;
  }
  double since_start() const { return std::chrono::duration<double>(Clock::now() - start).count(); }
};

// Probes `count` probe tuples at `tuples` against `table`, into `out`; hands the pairs to the
// sink when there is one (`pairs` is the join thread's own buffer, reused across batches).
void probe_batch(const RankJoin& join, const kernels::JoinTable& table, const std::byte* tuples,
                 std::size_t count, int thread, std::vector<Match>& pairs, JoinResult& out);

// The grace hash join's part of run_join (grace_join.cpp) and of create_join (its flows).
JoinResult run_grace(RankJoin& join, std::span<const Fragment> build, std::span<const Fragment> probe);
void create_grace_flows(cluster::Node& node, const JoinSpec& spec);

}  // namespace dfi::ops::detail
