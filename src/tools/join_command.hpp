// `dfi join`: a distributed join (ops::run_join) on generated data, as one rank of a cluster.
// Every rank generates its fragments (deterministically from the seed, so rank 0 can regenerate
// the whole input), the ranks join, and rank 0 prints the result, the time and input tuples/s
// per core, and checks matches and checksum against kernels::reference_join on the same data.
//
//   dfi cluster run --nodes 4 --transport tcp -- dfi join --build-tuples 4000000 --threads 1
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>

#include "dfi/kernels/reference_join.hpp"
#include "dfi/ops/join.hpp"

namespace dfi::tools {

struct JoinCommandOptions {
  std::string name = "join";         // the join's (and its flows') name
  std::string algorithm = "radix";   // radix | fragment-replicate (fr) | grace
  bool bloom = false;                // grace: Bloom-filter semi-join reduction
  int partitions = 0;                // grace: sub-partitions per join thread (0: automatic)
  std::uint64_t build_tuples = 1'000'000;  // the whole build (inner) relation
  std::uint64_t probe_tuples = 1'000'000;  // the whole probe (outer) relation
  int threads = 1;                   // partitioning threads and join threads per rank
  std::size_t tuple_bytes = 16;      // key uint64, payload uint64, then padding (multiple of 8)
  double selectivity = 1.0;          // fraction of probe tuples whose key occurs in build (0..1]
  std::uint64_t duplicates = 1;      // build tuples per key
  std::uint64_t seed = 1;
  std::string verify = "auto";       // yes | no | auto (when both relations hold <= 16 M tuples)
  bool json = false;                 // rank 0 prints one JSON object instead of the summary
  std::string dump;                  // a directory: rank 0 writes the inputs and the result as CSV
};

// Why `options` are unusable ("--selectivity must be in (0, 1]"), or empty.
std::string check_join_options(const JoinCommandOptions& options);

// One join on generated data (join_data.hpp), called by every rank of `node`'s cluster: rank 0
// creates the join, every rank generates its fragments, passes a cluster barrier, opens the join
// (ops::Join), calls `ready` (may be null), passes another barrier and runs it (with `run`'s sink, if any): the
// result's `seconds` is the run's from that barrier, `open_seconds` the open's. Returns the
// result summed over the ranks. Throws dfi::Error as ops::Join, Join::run and
// gather_join_results do; invalid_argument for bad options.
ops::JoinResult run_generated_join(cluster::Node& node, const JoinCommandOptions& options,
                                   const std::function<void()>& ready = {},
                                   const ops::JoinRunOptions& run = {});

// The single-node reference result (kernels::reference_join) on the data a cluster of `ranks`
// generates for `options`.
kernels::ReferenceJoinResult reference_join_result(const JoinCommandOptions& options, int ranks);

// With JoinCommandOptions::dump (for cross-checks on small data, e.g. against DuckDB): rank 0
// writes DIR/build.csv and DIR/probe.csv (key,payload: the whole generated relations),
// DIR/result.csv (algorithm,bloom,matches,checksum,probe_tuples,shipped_probe_tuples), and every
// rank r writes DIR/pairs-<r>.csv (build_payload,probe_payload: the pairs its join threads found;
// payloads are the tuples' global indices, unique per relation).
// Returns 0 when the join ran (and, if verified, matched the reference); 1 with the reason on
// `err` otherwise.
int run_join_command(const JoinCommandOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dfi::tools
