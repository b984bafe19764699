// `dfi agg`: a distributed GROUP BY aggregation (ops::run_aggregation) on generated data
// (agg_data.hpp), as one rank of a cluster. Rank 0 prints groups, checksum, time and input
// tuples/s per core, and checks the result against a single-node std::unordered_map aggregation
// of the same data.
//
//   dfi cluster run --nodes 4 -- dfi agg --algorithm rdma --tuples 8000000 --groups 1000000
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>

#include "dfi/ops/aggregate.hpp"

namespace dfi::tools {

struct AggCommandOptions {
  std::string name = "agg";
  std::string algorithm = "rdma";     // rdma | hierarchical
  std::uint64_t tuples = 1'000'000;   // all ranks together
  std::uint64_t groups = 1000;        // distinct keys drawn from (>= 1)
  double zipf = 0;                    // 0: uniform keys; > 0: Zipf exponent
  int threads = 1;
  std::size_t cache_groups = 16384;   // rdma: groups of a thread's pre-aggregation table
  double pass_through_below = 0.25;   // rdma: see ops::AggregationSpec
  std::uint64_t seed = 1;
  std::string verify = "auto";        // yes | no | auto (at most 16 M tuples)
  bool json = false;
  std::string dump;                   // a directory: inputs and groups as CSV (see run_agg_command)
};

// Why `options` are unusable, or empty.
std::string check_agg_options(const AggCommandOptions& options);

// One aggregation of sum, count, min, max and avg of `value` by `key` on generated data, called
// by every rank: rank 0 creates it, every rank generates its fragments, passes a barrier, opens
// the aggregation (ops::Aggregation), calls `ready` (may be null), passes another barrier and
// runs it (with `run`'s sink, if any): the result's `seconds` is the run's from that barrier,
// `open_seconds` the open's. Returns the result summed over the ranks.
ops::AggregationResult run_generated_aggregation(cluster::Node& node, const AggCommandOptions& options,
                                                 const std::function<void()>& ready = {},
                                                 const ops::AggregationRunOptions& run = {});

struct ReferenceAggregation {
  std::uint64_t groups = 0;
  std::uint64_t checksum = 0;  // as ops::AggregationResult defines it
};
// The single-node reference on the data a cluster of `ranks` generates for `options`.
ReferenceAggregation reference_aggregation(const AggCommandOptions& options, int ranks);

// With AggCommandOptions::dump (cross-checks on small data, e.g. against DuckDB): rank 0 writes
// DIR/input.csv (key,value: the whole generated input) and DIR/result.csv
// (algorithm,groups,checksum,input_tuples), and every rank r writes DIR/groups-<r>.csv
// (key,sum_value,count,min_value,max_value,avg_value: the result rows it produced).
// Returns 0 when the aggregation ran (and, if verified, matched the reference); 1 otherwise.
int run_agg_command(const AggCommandOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dfi::tools
