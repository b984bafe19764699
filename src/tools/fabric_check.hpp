// `dfi fabric check`: put/get/atomics/active messages between every pair of ranks, verified and
// timed. Each rank in turn drives the operations towards every other rank while the others
// serve, so pairs are measured one at a time.
#pragma once

#include <cstddef>
#include <iosfwd>

namespace dfi::tools {

struct FabricCheckOptions {
  bool quick = false;                // fewer repetitions (tests, CI)
  std::size_t bandwidth_message = 65536;
  bool json = false;                 // one JSON object per pair instead of a table row
};

// Runs the check as one rank of a cluster (rank/size from the launcher). Returns 0 when every
// operation gave the expected result, 1 otherwise; prints per-pair numbers to `out`.
int run_fabric_check(const FabricCheckOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dfi::tools
