// `dfi mover FLOW...`: the data mover of driven flows as a process, one rank of a cluster (the
// other ranks run the processing units). Serves every flow until all have ended.
//
// Restart: a mover killed (even SIGKILL) is restarted by running the same command again as the
// same rank (or as another rank, once the first is declared dead): the process rejoins the
// cluster in the rank's place (cluster::Node), and each flow continues where the PUs' buffers say
// (driven::Mover, Recovery), with nothing lost or moved twice. The PUs wait meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace dfi::tools {

struct MoverCommandOptions {
  std::vector<std::string> flows;                  // the driven flows to serve
  std::chrono::milliseconds timeout{3'600'000};   // fail when they have not ended by then
  // Test seam (driven::Mover::crash_at): "link:N" or "publish:N" kills the process at the N-th
  // transfer reaching that point; empty: never.
  std::string crash_at;
};

// Runs as one rank of a cluster: joins it (or rejoins in the place of a killed mover), takes over
// the flows (waiting for their buffers; a flow an earlier mover served is continued, and a line
// says what was found), moves until every flow has ended or the timeout passed, prints what it
// moved, leaves the cluster. Returns 0 when every flow ended; 1 with the reason on `err`
// otherwise (2 for a malformed crash_at).
int run_mover(const MoverCommandOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dfi::tools
