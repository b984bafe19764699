// ops::Join, ops::run_join — distributed equi-joins on flows (003 §4.3.1, §6.3.1;
// ../shared/DESIGN.md §8).
//
//   ops::JoinSpec spec{.name = "q", .algorithm = ops::JoinAlgorithm::radix,
//                      .build = {schema_r, "key"}, .probe = {schema_s, "key"}, .threads = 2};
//   if (node.rank() == 0) ops::create_join(node, spec);        // once, anywhere
//   // on every rank, with this rank's fragments (one per thread) of both relations:
//   ops::JoinResult mine = ops::run_join(node, spec, build_fragments, probe_fragments);
//   ops::JoinResult all = ops::gather_join_results(node, spec, mine);   // summed over ranks
//
// run_join opens the join's flows and runs it in one call. To keep the open out of a measured
// region (an MPI join connects in MPI_Init), open first and run later:
//   ops::Join join(node, spec);       // threads started, every source connected to every target
//   node.barrier("q/start");          // every rank's flows open
//   ops::JoinResult mine = join.run(build_fragments, probe_fragments);  // mine.open_seconds: the open
//
// Algorithms. Each rank runs `threads` partitioning threads (one flow source each) and `threads`
// join threads (local state -> combine -> finalize: a table per join thread, the rank's result
// is their sum, the join's result the ranks' sum).
//  - radix: two shuffle flows, "<name>.build" and "<name>.probe", each with one source per
//    partitioning thread and one target per join thread of every rank, routed by the key hash
//    (kernels::route). A partitioning thread pushes its build fragment, closes, then pushes its
//    probe fragment. A join thread adds build tuples to its kernels::JoinTable as they arrive,
//    builds the table when every source has closed, and then probes with probe tuples as they
//    arrive. No histogram pass, no barrier between partitioning and joining: the flows' rings
//    hold the probe side back (credit flow control) until its target is ready for it.
//  - fragment_replicate: one replicate flow, "<name>.build", from every partitioning thread to
//    one target per rank; join thread 0 of a rank builds the rank's table from the whole build
//    relation, then every join thread probes its own probe fragment against it. The probe
//    relation never crosses the network: the algorithm of choice when the build side is small.
//  - grace (001 §5): the same two shuffle flows as radix, but in phases. Partitioning threads
//    push the build side, close, and push the probe side only once every join thread of their
//    rank has received its whole build partition; join threads materialise what they receive
//    (build side, then probe side) and only then join it: they cut both sides into
//    `grace_partitions` sub-partitions by another part of the key hash (a number independent of
//    the thread count, by default enough that a sub-partition's table stays cache-sized,
//    kGracePartitionTuples build tuples) and build and probe one sub-partition at a time. With
//    `bloom` (the semi-join reduction), every partitioning thread first inserts its build keys
//    into a kernels::BloomFilter, the rank ORs its threads' filters and ships the blocks over a
//    third flow, "<name>.bloom" (replicate, one source and one target per rank; join thread 0
//    receives and ORs them), and probe tuples whose key misses the combined filter are dropped
//    before they are pushed: a selective join ships a fraction of its probe side. The filter's
//    size follows the build side's total size (ranks exchange their build counts first). The
//    reduction is one-way: the probe side is filtered by the build keys; 001 §5.1.2 also filters
//    the build side by a filter of the probe keys, which this join does not (yet).
//    Differences from radix: radix builds while the build side arrives and probes while the
//    probe side arrives (one table per join thread, the probe side held back only by the flows'
//    credits); grace materialises both sides before joining, and joins cache-sized partitions.
//  - rrj (001 §5.2, the RDMA radix join): no flows. Partitioning threads first count, per
//    relation, how many of their tuples go to each join thread of every rank (a histogram pass;
//    same key hash as radix); the ranks exchange the counts (registry records, as grace's build
//    counts), each rank allocates one receive region per relation of exactly the size it will
//    receive and publishes its memory key, and every partitioning thread writes its tuples
//    straight into its own slice of each remote region through small per-partition staging
//    buffers (kRrjStagingBytes), each written with one fabric call when full: a put (native RMA),
//    a store into the mapped region (shm), or one active message the target places (tcp, where
//    UCX would emulate the put). After a completion exchange every join thread joins its
//    partition in place, in cache-sized sub-partitions, with the grace join's local phase.
//    The whole input crosses the network once, with no rings and no flow control; it costs the
//    histogram pass and a barrier between partitioning and joining, which radix avoids.
//
// Results: the number of joined pairs and a checksum, the sum (mod 2^64) over the pairs of
// kernels::pair_checksum(fold_tuple(build), fold_tuple(probe)), which kernels::reference_join
// computes the same way on one node. A JoinRunOptions::sink sees the pairs themselves.
//
// Failures: a rank that dies mid-join (or between its Join's open and run) makes every other
// rank's run_join / Join::run throw dfi::Error(peer_failed) naming the join, the flow and the rank
// (no hang); so does a stall longer than the flows' stall timeout (Errc::timeout).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "dfi/flow/schema.hpp"
#include "dfi/flow/spec.hpp"
#include "dfi/ops/fragment.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::ops {

// radix, fragment_replicate, grace: joins on flows; rrj: the RDMA radix join, radix partitioning
// straight into exactly sized receive regions of the ranks with one-sided writes (see above).
enum class JoinAlgorithm { radix, fragment_replicate, grace, rrj };
std::string_view join_algorithm_name(JoinAlgorithm algorithm);
// "radix", "fragment-replicate" (also "fr"), "grace" or "rrj"; throws dfi::Error(invalid_argument).
JoinAlgorithm parse_join_algorithm(std::string_view text);

// One input of a join: the schema of its tuples and the name of its key column.
struct Relation {
  flow::Schema schema;
  std::string key;
};

// What every rank must agree on; a plain value.
struct JoinSpec {
  std::string name;  // the join's flows are "<name>.build" and "<name>.probe" (rrj: no flows)
  JoinAlgorithm algorithm = JoinAlgorithm::radix;
  Relation build;  // the inner relation (hash table side)
  Relation probe;  // the outer relation
  int ranks = 0;    // ranks taking part (0 .. ranks-1); 0: all of the node's cluster
  int threads = 1;  // partitioning threads and join threads per rank
  // Ring shape and timeouts of the join's flows (mode must stay bandwidth).
  flow::FlowOptions flow_options;
  // Grace and rrj: sub-partitions per join thread (0: enough for about kGracePartitionTuples build
  // tuples each, a power of two). Grace only: the Bloom-filter semi-join reduction with its size.
  int grace_partitions = 0;
  bool bloom = false;
  double bloom_bits_per_key = 16;  // build keys x this = the filter's bits (0.09 % false positives)

  // Throws dfi::Error(invalid_argument) naming the join and the problem: bad name or thread
  // count, unknown key column, key columns of different type or width, a float key.
  // Also: bloom without grace, bloom_bits_per_key outside [1, 64], grace_partitions outside
  // [0, kMaxGracePartitions].
  void validate(int cluster_size) const;
};

// The build tuples a grace sub-partition holds when JoinSpec::grace_partitions is 0: its table
// (per tuple: the tuple, a 24 B chain entry, a 4 B bucket head; 16 Ki tuples of 16 B are 704
// KiB) stays within a core's L2 cache.
inline constexpr std::size_t kGracePartitionTuples = 16 * 1024;
// The most sub-partitions per join thread JoinSpec::grace_partitions may ask for.
inline constexpr int kMaxGracePartitions = 1 << 20;
// rrj: the most bytes of one staging buffer (a partitioning thread has one per join thread of
// every rank, and writes it to its remote slice when full): whole tuples, at least one; 8 KiB
// less a few words, so that one buffer is one active message where the transport emulates RMA.
inline constexpr std::size_t kRrjStagingBytes = 8152;

// Creates the join's flows (rrj: publishes the join's record instead). Call once per join from
// one rank (like flow::create_flow). Throws what validate() and flow::create_flow throw
// (already_exists for a name in use).
void create_join(cluster::Node& node, const JoinSpec& spec);

// One joined pair, as a sink sees it: pointers to the build tuple (inside the join table) and
// the probe tuple (inside a flow's ring or a fragment), valid during the sink call only.
struct Match {
  const std::byte* build;
  const std::byte* probe;
};

struct JoinRunOptions {
  // Called by join thread `thread` with the pairs of one probe batch (never with none). Runs on
  // the join threads, several at once: it must be thread-safe. Null: pairs are only counted.
  std::function<void(int thread, std::span<const Match> matches)> sink;
  // Longest wait for the join's flows and their members to appear (0: registry_timeout_ms).
  std::chrono::milliseconds open_timeout{0};
};

struct JoinResult {
  std::uint64_t build_tuples = 0;  // build tuples in the tables (radix: the ones routed here)
  std::uint64_t probe_tuples = 0;  // probe tuples probed here
  // Probe tuples pushed into the probe flow by this rank (radix, grace; grace with bloom: those
  // that passed the filter; rrj: written into the ranks' regions); 0 for fragment-and-replicate,
  // whose probe side never moves.
  std::uint64_t shipped_probe_tuples = 0;
  std::uint64_t matches = 0;       // joined pairs
  std::uint64_t checksum = 0;      // sum of pair checksums, mod 2^64
  double seconds = 0;              // the run's wall time, without the open (gather: the slowest
                                   // rank's)
  double build_seconds = 0;        // from the run's start until the last join thread's table was
                                   // built (grace: its build side received) (gather: max)
  double open_seconds = 0;         // opening the join's flows, before the run (gather: max)

  JoinResult& operator+=(const JoinResult& other);
};

// This rank's part of one join, opened ahead of its run. The constructor starts the rank's
// partitioning and join threads; each opens its flows (a partitioning thread its sources, with a
// fabric worker of its own, connected to every target of the join; a join thread its targets;
// rrj: a partitioning thread connects its worker to every rank) and then waits for run(), which
// hands them the fragments. Owned by one thread: construct, run
// and destroy it on the same thread (or hand it over with a happens-before).
class Join {
 public:
  // Validates the spec, starts the threads and returns once every one of them has opened its
  // flows: then this rank's sources are connected to every rank's targets. Blocks until every
  // rank's targets exist (so every rank must construct its Join, or call run_join). Throws
  // dfi::Error naming the join: invalid_argument (bad spec, a rank outside the join), not_found
  // / timeout (the join was not created within options.open_timeout), peer_failed (a rank died
  // while the flows opened); the threads have ended when it throws.
  Join(cluster::Node& node, const JoinSpec& spec, const JoinRunOptions& options = {});
  // Ends the threads. A Join destroyed without run() closes its sources empty: the other ranks'
  // runs then complete without this rank's tuples (so a rank that cannot run should fail: its
  // death makes the others' runs fail with peer_failed).
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // Runs the join on the open flows: build[t] and probe[t] are the fragments of partitioning
  // thread t (exactly spec.threads of each; they must stay valid until run returns). Blocks
  // until every thread of this rank is done; returns this rank's result, `seconds` from this
  // call (the open not included) and `open_seconds` the constructor's. Once per Join. Throws
  // dfi::Error naming the join: invalid_argument (wrong fragment count, a second call),
  // peer_failed (a rank died), timeout (the flows stalled).
  JoinResult run(std::span<const Fragment> build, std::span<const Fragment> probe);

  // How long the constructor took to open the flows.
  double open_seconds() const { return open_seconds_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  double open_seconds_ = 0;
  bool ran_ = false;
};

// Opens and runs this rank's part of the join in one call: Join(node, spec, options).run(build,
// probe) (the result's `seconds` is the run's, `open_seconds` the open's). Throws what Join and
// Join::run throw; a wrong fragment count before anything is opened.
JoinResult run_join(cluster::Node& node, const JoinSpec& spec, std::span<const Fragment> build,
                    std::span<const Fragment> probe, const JoinRunOptions& options = {});

// Sums the results of every rank of the join (times: the slowest rank's); each rank calls it
// once after run_join, and every rank gets the sum. Uses the registry (one record per rank).
// Throws dfi::Error(timeout) naming the ranks that did not report, peer_failed.
JoinResult gather_join_results(cluster::Node& node, const JoinSpec& spec, const JoinResult& mine);

}  // namespace dfi::ops
