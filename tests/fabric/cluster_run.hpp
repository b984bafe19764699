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

inline ClusterRun run_cluster(int nodes, const std::string& transport, std::vector<std::string> argv,
                              bool netns = false,
                              std::chrono::milliseconds timeout = std::chrono::seconds(90)) {
  launch::ClusterOptions options;
  options.nodes = nodes;
  options.transport = transport;
  options.netns = netns;
  options.argv = std::move(argv);
  options.timeout = timeout;
  std::ostringstream out, err;
  ClusterRun run;
  auto start = std::chrono::steady_clock::now();
  run.code = launch::run_cluster(options, out, err);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.out = out.str();
  run.err = err.str();
  return run;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace dfi::testing
