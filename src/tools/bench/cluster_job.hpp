// DFI's side of a scenario as a multi-rank program: `dfi bench-rank <scenario> '<params json>'`
// started under a local cluster (the same launcher as `dfi cluster run`).
//
//   In Scenario::run():
//     RankJob job{.nodes = 2, .scenario = name(), .params = {{"sizes", sizes}}};
//     std::map<int, nlohmann::json> reports = run_rank_job(job, context);
//   In Scenario::run_rank() (each rank):
//     ... measure ...
//     report_rank_result(out, {{"put_gbps", ...}});   // rank's numbers back to run()
#pragma once

#include <chrono>
#include <iosfwd>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace dfi::tools::bench {

struct RunContext;

struct RankJob {
  int nodes = 2;
  std::string scenario;  // the scenario whose run_rank() the ranks execute
  nlohmann::json params = nlohmann::json::object();
  std::chrono::milliseconds timeout{120000};
  // Extra environment for every rank (e.g. DFI_OP_TIMEOUT_MS).
  std::vector<std::pair<std::string, std::string>> env;
  // The launcher serves the registry (RegistryApart), not rank 0: any rank, rank 0 included,
  // may die (not with netns).
  bool registry_apart = false;
  // The rank program when it is not `dfi bench-rank <scenario> '<params json>'` (a Python rank,
  // scenario python): its argv, which gets the params itself; it reports with the same marker.
  std::vector<std::string> program;
};

// The marker in front of a rank's result line on stdout.
inline constexpr const char* kRankResultMarker = "DFI_BENCH_RESULT ";

// Prints `result` as the rank's one result line (marker + compact JSON) and flushes.
void report_rank_result(std::ostream& out, const nlohmann::json& result);

// "dfi cluster run --nodes 2 --transport shm -- dfi bench-rank fabric-bw '{...}'": the command
// that run_rank_job() runs in-process, for the result's record and for reproducing by hand.
std::string rank_job_command(const RankJob& job, const RunContext& context);

// Thrown by run_rank_job() when the launcher was stopped by a signal (Ctrl-C): the whole bench
// run should end, not just this scenario.
struct Interrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs the job on context.transport (in network namespaces with context.netns) and returns
// rank -> its reported result. Rank output other than result lines goes to the progress stream.
// Throws Interrupted on SIGINT/SIGTERM/SIGHUP, dfi::Error(io) if the cluster fails or times out
// (message has the exit code and the last lines of output), dfi::Error(protocol) if a result line
// is not JSON.
std::map<int, nlohmann::json> run_rank_job(const RankJob& job, const RunContext& context);

}  // namespace dfi::tools::bench
