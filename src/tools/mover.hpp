// `dfi mover FLOW...`: the data mover of driven flows as a process, one rank of a cluster (the
// other ranks run the processing units). Serves every flow until all have ended.
#pragma once

#include <chrono>
#include <iosfwd>
#include <string>
#include <vector>

namespace dfi::tools {

// Runs as one rank of a cluster: joins it, takes over `flows` (waiting for their buffers), moves
// until every flow has ended or `timeout` passed, prints what it moved, leaves the cluster.
// Returns 0 when every flow ended; 1 with the reason on `err` otherwise.
int run_mover(const std::vector<std::string>& flows, std::chrono::milliseconds timeout, std::ostream& out,
              std::ostream& err);

}  // namespace dfi::tools
