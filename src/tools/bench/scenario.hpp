// A benchmark scenario: DFI and its baseline, measured in the same run (../shared/DESIGN.md §10).
//
// Adding a scenario:
//   1. Write src/tools/bench/<name>.cpp with a class deriving from Scenario and a factory
//        std::unique_ptr<Scenario> make_<name>_scenario();
//      declared in scenarios.hpp. Declare the parameters (quick and full values) and the
//      baselines; run() measures everything `context.repeat` times and fills the Result.
//   2. Add one line to make_scenarios() in scenarios.cpp and the .cpp to CMakeLists.txt.
//   3. If DFI runs as a multi-rank program, implement run_rank() and start it from run() with
//      run_rank_job() (cluster_job.hpp): it runs `dfi bench-rank <name> '<params json>'` under a
//      local cluster and hands back what each rank reported with report_rank_result().
//   Baselines: run_perftest() (perftest.hpp), run_mpi() (mpi_baseline.hpp) and
//   run_stream_baseline() (stream_baseline.hpp).
#pragma once

#include <chrono>
#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "result.hpp"

namespace dfi::tools::bench {

// A declared parameter. Values are JSON; a value may be an object keyed by transport
// ({"shm": 1e9, "tcp": 1e8}), resolved by RunContext::param for the transport of the run.
struct Parameter {
  std::string name;
  nlohmann::json quick;  // used with --quick
  nlohmann::json full;   // used otherwise
  std::string help;
};

// A baseline that a scenario measures in the same run.
struct BaselineInfo {
  std::string name;         // "ucx_perftest", "openmpi"
  std::string description;  // what exactly it measures
};

class Scenario;

// Everything a scenario needs to run; built by the `dfi bench` driver.
struct RunContext {
  std::string transport = "shm";  // "shm" or "tcp"
  bool netns = false;             // DFI ranks in network namespaces (TCP across a bridge)
  bool quick = false;
  int repeat = 1;          // repetitions; reported values are medians over them
  std::string dfi_binary;  // this executable, for rank programs
  nlohmann::json overrides = nlohmann::json::object();  // --set name=value
  std::ostream* progress = nullptr;                     // human-readable progress (stderr)
  const Scenario* scenario = nullptr;

  // The value of declared parameter `name` for this run: the override if given, else the quick or
  // full value, resolved per transport. Throws dfi::Error(invalid_argument) for an undeclared name.
  nlohmann::json param(const std::string& name) const;
  // All parameters resolved as param() does, as one object (recorded in the result).
  nlohmann::json resolved_parameters() const;
  // Prints "bench <scenario>: <text>" on the progress stream.
  void say(const std::string& text) const;
};

class Scenario {
 public:
  virtual ~Scenario() = default;

  virtual std::string name() const = 0;         // "fabric-bw": the CLI name and file stem
  virtual std::string title() const = 0;        // one line, used as plot and table title
  virtual std::string description() const = 0;  // what is measured and how (README, results)
  virtual std::vector<Parameter> parameters() const = 0;
  virtual std::vector<BaselineInfo> baselines() const = 0;

  // Why this scenario cannot run in `context` (a missing tool, an unsupported transport), or an
  // empty string when it can. `dfi bench all` reports the reason and goes on.
  virtual std::string unavailable(const RunContext& context) const {
    (void)context;
    return {};
  }

  // Runs DFI and the baselines `context.repeat` times and records every sample in `result`.
  // Throws dfi::Error when a measurement fails (the message says which and why).
  virtual void run(RunContext& context, Result& result) = 0;

  // The rank program (`dfi bench-rank <name> '<params>'`, started by run_rank_job). Returns the
  // process exit code. Default: the scenario has no rank program.
  virtual int run_rank(const nlohmann::json& params, std::ostream& out, std::ostream& err);
};

// Seconds from `a` to `b` (rank programs time their runs with steady_clock).
inline double seconds_between(std::chrono::steady_clock::time_point a,
                              std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Runs repetition `rep`'s DFI and baseline measurements, alternating which goes first (DFI on
// odd repetitions) so that a drift in machine load hits both alike.
template <class Dfi, class Baseline>
void run_alternating(int rep, Dfi&& run_dfi, Baseline&& run_baseline) {
  if (rep % 2 == 1) {
    run_dfi();
    run_baseline();
  } else {
    run_baseline();
    run_dfi();
  }
}

// Every registered scenario, in the order `dfi bench list` and `dfi bench all` use.
const std::vector<std::unique_ptr<Scenario>>& scenarios();
// The scenario called `name`, or nullptr.
Scenario* find_scenario(const std::string& name);

}  // namespace dfi::tools::bench
