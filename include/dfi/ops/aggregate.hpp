// ops::run_aggregation — distributed GROUP BY aggregation on combiner flows (001 §5.3, Fig 8;
// ../shared/DESIGN.md §8).
//
//   ops::AggregationSpec spec;
//   spec.name = "revenue";  spec.schema = schema;  spec.key = "region";
//   spec.aggregates = flow::parse_aggregates("sum(amount),count(*)");
//   spec.algorithm = ops::AggregateAlgorithm::rdma;  spec.threads = 2;
//   if (node.rank() == 0) ops::create_aggregation(node, spec);
//   ops::AggregationResult mine = ops::run_aggregation(node, spec, fragments);   // every rank
//   ops::AggregationResult all = ops::gather_aggregation_results(node, spec, mine);
//
// run_aggregation opens the aggregation's flow and runs it in one call. To keep the open out of a
// measured region (as ops::Join does), open first and run later:
//   ops::Aggregation aggregation(node, spec);  // threads started, every source connected to every target
//   node.barrier("revenue/start");              // every rank's flow ends open
//   ops::AggregationResult mine = aggregation.run(fragments);  // mine.open_seconds: the open
//
// Algorithms (both local state -> combine -> finalize; both on one combiner flow,
// "<name>.partials", whose sources are the rank's aggregation threads):
//  - rdma (001's RDMA aggregation): each thread pre-aggregates its fragment in a cache-sized table
//    (`cache_groups` groups); when the table is full it ships it as partial rows to the key's
//    partition owner, in the background of the flow, and starts afresh. Adaptively: when a table
//    filled with a hit rate below `pass_through_below` (few of its tuples found their key there:
//    many groups, little locality), the thread stops pre-aggregating for a while and ships each
//    tuple as a partial row of its own (flow::CombinerSourceOptions::pass_through_below), then
//    tries its table again. The flow has one target
//    per thread of every rank, and the combiner routes each row by kernels::route of its key, so
//    the post-aggregation runs on all threads of all ranks at once, each over its own partition
//    of the groups. Robust to many groups and to skew: no node ever holds more than its partition.
//  - hierarchical (the classic scheme): each thread aggregates its whole fragment locally (an
//    unbounded table), then ships it once to the single target on rank 0, which does the global
//    union and the post-aggregation of every group alone.
//
// Results: one row per group in the combiner's result schema (flow::combiner_result_schema:
// the key, then one column per aggregate; SUM wraps modulo 2^64, AVG of integers is exact). A
// rank's result counts the groups whose rows it produced (rdma: its partitions; hierarchical:
// rank 0 all of them), and a checksum, the sum (mod 2^64) of kernels::fold_tuple over those rows,
// which does not depend on the algorithm, on how partials were combined, or on row order
// (except for float aggregates, whose rounding depends on the order of combination).
//
// Failures: a rank that dies (also between its Aggregation's open and run) makes every other
// rank's run_aggregation / Aggregation::run throw dfi::Error(peer_failed) naming the flow and the
// rank, or timeout after the flow's stall timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dfi/flow/combiner.hpp"
#include "dfi/flow/schema.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/flow/spec.hpp"
#include "dfi/ops/fragment.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::ops {

enum class AggregateAlgorithm { rdma, hierarchical };
std::string_view aggregate_algorithm_name(AggregateAlgorithm algorithm);
// "rdma" or "hierarchical"; throws dfi::Error(invalid_argument).
AggregateAlgorithm parse_aggregate_algorithm(std::string_view text);

// What every rank must agree on; a plain value.
struct AggregationSpec {
  std::string name;  // the aggregation's flow is "<name>.partials"
  AggregateAlgorithm algorithm = AggregateAlgorithm::rdma;
  flow::Schema schema;                        // of the input tuples
  std::string key;                            // the GROUP BY column
  std::vector<flow::AggregateSpec> aggregates;  // at least one (flow::parse_aggregates)
  int ranks = 0;    // ranks taking part (0 .. ranks-1); 0: all of the node's cluster
  int threads = 1;  // aggregation threads per rank (rdma: as many post-aggregation threads too)
  // rdma: groups a thread's pre-aggregation table holds before it ships (cache-sized: 16384
  // groups of a 48 B row are 768 KiB).
  std::size_t cache_groups = 16384;
  // rdma: the hit rate of a full pre-aggregation table below which the thread passes tuples
  // through unaggregated for a while (0: always pre-aggregate). At 0.25, uniform keys over many
  // groups pass through and Zipf keys (about half hits) are pre-aggregated.
  double pass_through_below = 0.25;
  flow::FlowOptions flow_options;  // ring shape and timeouts of the flow (bandwidth mode)

  // Throws dfi::Error(invalid_argument) naming the aggregation and the problem.
  void validate(int cluster_size) const;
  // The result rows' schema (flow::combiner_result_schema of the flow).
  flow::Schema result_schema() const;
};

// Creates the aggregation's flow. Call once per aggregation from one rank.
void create_aggregation(cluster::Node& node, const AggregationSpec& spec);

struct AggregationRunOptions {
  // Called with each batch of final result rows (result_schema()) this rank produces, by the
  // thread that finalized them (rdma: the rank's post-aggregation threads, several at once).
  // Null: rows are only counted and checksummed.
  std::function<void(int thread, const flow::TupleBatch& rows)> sink;
  // Longest wait for the flow and its members to appear (0: registry_timeout_ms).
  std::chrono::milliseconds open_timeout{0};
};

struct AggregationResult {
  std::uint64_t input_tuples = 0;  // tuples this rank aggregated
  std::uint64_t groups = 0;        // result rows this rank produced
  std::uint64_t checksum = 0;      // sum of fold_tuple over those rows, mod 2^64
  std::uint64_t shipped_rows = 0;  // partial rows this rank's threads shipped
  std::uint64_t passed_tuples = 0;  // rdma: tuples among them shipped unaggregated (pass-through)
  // The run's wall time, without the open and without the close of the flow's connections
  // (ops::Aggregation::run; gather: the slowest rank's).
  double seconds = 0;
  double open_seconds = 0;  // opening the aggregation's flow, before the run (gather: max)

  AggregationResult& operator+=(const AggregationResult& other);
};

// This rank's part of one aggregation, opened ahead of its run. The constructor starts the rank's
// threads; each opens its end of the flow (an aggregation thread its source, with a fabric worker
// of its own, connected to every target; a post-aggregation thread its target) and then waits
// for run(), which hands the aggregation threads their fragments. Owned by one thread: construct,
// run and destroy it on the same thread (or hand it over with a happens-before).
class Aggregation {
 public:
  // Validates the spec, starts the threads and returns once every one of them has opened its end
  // of the flow: then this rank's sources are connected to every target. Blocks until every
  // target exists (so every rank must construct its Aggregation, or call run_aggregation).
  // Throws dfi::Error naming the aggregation: invalid_argument (bad spec, a rank outside it),
  // not_found / timeout (not created within options.open_timeout), peer_failed (a rank died
  // while the flow opened); the threads have ended when it throws.
  Aggregation(cluster::Node& node, const AggregationSpec& spec, const AggregationRunOptions& options = {});
  // Ends the threads: after run(), waits while they close their ends of the flow (connections
  // flushed and closed, memory deregistered). One destroyed without run() closes its sources
  // empty: the other ranks' runs then complete without this rank's tuples (so a rank that cannot
  // run should fail: its death makes the others' runs fail with peer_failed).
  ~Aggregation();
  Aggregation(const Aggregation&) = delete;
  Aggregation& operator=(const Aggregation&) = delete;

  // Runs the aggregation on the open flow: input[t] is aggregation thread t's fragment (exactly
  // spec.threads of them; they must stay valid until run returns). Blocks until this rank's part
  // of the result is complete (its aggregation threads closed their sources, its post-aggregation
  // threads finalized their groups); the threads then close their ends of the flow, which the
  // destructor waits for. Returns this rank's result, `seconds` from this call (neither the open
  // nor that close included) and `open_seconds` the constructor's. Once per Aggregation. Throws dfi::Error
  // naming the aggregation: invalid_argument (wrong fragment count, a second call), peer_failed
  // (a rank died), timeout (the flow stalled).
  AggregationResult run(std::span<const Fragment> input);

  // How long the constructor took to open the flow.
  double open_seconds() const { return open_seconds_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  double open_seconds_ = 0;
  bool ran_ = false;
};

// Opens and runs this rank's part in one call: Aggregation(node, spec, options).run(input) (the
// result's `seconds` is the run's, `open_seconds` the open's). Throws what Aggregation and
// Aggregation::run throw; a wrong fragment count before anything is opened.
AggregationResult run_aggregation(cluster::Node& node, const AggregationSpec& spec,
                                  std::span<const Fragment> input,
                                  const AggregationRunOptions& options = {});

// Sums every rank's result (time: the slowest rank's); every rank calls it once and gets the sum.
AggregationResult gather_aggregation_results(cluster::Node& node, const AggregationSpec& spec,
                                             const AggregationResult& mine);

}  // namespace dfi::ops
