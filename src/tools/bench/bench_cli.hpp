// The `dfi bench` commands:
//
//   dfi bench list                                   scenarios, their parameters and baselines
//   dfi bench <scenario>... [--quick] [--transport shm|tcp] [--netns] [--out DIR] [--repeat N]
//                           [--set NAME=JSON]... [--no-plot]
//   dfi bench all --quick                            every registered scenario
//   dfi bench-baseline perftest --test ucp_put_bw --size 4096 [...]   one baseline by hand
//   dfi bench-baseline mpi --program mpi_p2p --np 2 [-- PROGRAM ARGS]
//   dfi bench-baseline stream --transport tcp --tuple-bytes 64 --tuples 1000000
//   dfi bench-rank <scenario> '<params json>'        (hidden) a scenario's rank program
//   dfi bench-stream <side> --tuple-bytes 64 ...     (hidden) one side of a stream baseline
//
// Progress goes to stderr; per scenario a JSON result <out>/<scenario>-<transport>[-netns]
// [-quick].json and a PNG next to it (bench/plot.py); a summary of ratios goes to stdout.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "stream_baseline.hpp"

namespace CLI {
class App;
}

namespace dfi::tools::bench {

class BenchCli {
 public:
  // Adds the commands to `app` (before it parses).
  explicit BenchCli(CLI::App& app);

  // After parsing: runs the selected bench command and returns its exit code, or nullopt when
  // none of them was selected. `argv` is recorded as the command of each result.
  // Exit codes: 0 ok; 1 a scenario failed or could not run; 2 bad usage; 3 a plot failed;
  // 130 interrupted.
  std::optional<int> run(int argc, char** argv);

 private:
  CLI::App* bench_ = nullptr;
  CLI::App* rank_ = nullptr;
  CLI::App* perftest_ = nullptr;
  CLI::App* mpi_ = nullptr;
  CLI::App* stream_ = nullptr;       // bench-baseline stream
  CLI::App* stream_side_ = nullptr;  // bench-stream

  struct Options {
    std::vector<std::string> names;
    bool quick = false;
    std::string transport = "shm";
    bool netns = false;
    std::string out;
    int repeat = 0;  // 0: 1 with --quick, else 3
    std::vector<std::string> set;
    bool no_plot = false;
  } options_;

  std::string rank_scenario_;
  std::string rank_params_;

  struct PerftestOptions {
    std::string test = "ucp_put_bw";
    std::size_t size = 4096;
    std::size_t iterations = 10000;
    std::size_t warmup = 1000;
    std::string transport = "shm";
  } perftest_options_;

  struct MpiOptions {
    std::string program = "mpi_p2p";
    int ranks = 2;
    std::string transport = "shm";
    std::vector<std::string> args;
  } mpi_options_;

  StreamRun stream_options_;
  StreamSide stream_side_options_;
  long stream_wait_ms_ = 30000;
};

}  // namespace dfi::tools::bench
