// Runs a local cluster from a test and captures what it printed.
#pragma once

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "dfi/launch/local_cluster.hpp"

namespace dfi::testing {

struct ClusterRun {
  int code = -1;
  std::string out;
  std::string err;
  double seconds = 0;
  std::string all() const { return "--- stdout\n" + out + "--- stderr\n" + err; }
};

struct RunOptions {
  bool netns = false;
  std::string qdisc;
  std::chrono::milliseconds timeout = std::chrono::seconds(90);
  // After a rank fails (a test that kills one), the time the others get to finish on their own.
  std::chrono::milliseconds grace = std::chrono::seconds(3);
  std::vector<std::pair<std::string, std::string>> env;
};

inline ClusterRun run_cluster(int nodes, const std::string& transport, std::vector<std::string> argv,
                              const RunOptions& run_options) {
  launch::ClusterOptions options;
  options.qdisc = run_options.qdisc;
  options.extra_env = run_options.env;
  options.nodes = nodes;
  options.transport = transport;
  options.netns = run_options.netns;
  options.argv = std::move(argv);
  options.timeout = run_options.timeout;
  options.grace = run_options.grace;
  std::ostringstream out, err;
  ClusterRun run;
  auto start = std::chrono::steady_clock::now();
  run.code = launch::run_cluster(options, out, err);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.out = out.str();
  run.err = err.str();
  return run;
}

inline ClusterRun run_cluster(int nodes, const std::string& transport, std::vector<std::string> argv,
                              bool netns = false) {
  RunOptions options;
  options.netns = netns;
  return run_cluster(nodes, transport, std::move(argv), options);
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace dfi::testing
