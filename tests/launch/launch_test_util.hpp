// Helpers shared by the launch tests: run a cluster and capture what it printed, and look for
// processes a run left behind.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "dfi/launch/local_cluster.hpp"

namespace dfi::launch::testing {

struct ClusterResult {
  int code = -1;
  std::string out;
  std::string err;
  std::chrono::milliseconds elapsed{0};
};

inline ClusterResult run(const ClusterOptions& options) {
  std::ostringstream out;
  std::ostringstream err;
  const auto start = std::chrono::steady_clock::now();
  ClusterResult result;
  result.code = run_cluster(options, out, err);
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  result.out = out.str();
  result.err = err.str();
  return result;
}

// argv for `/bin/sh -c script`.
inline std::vector<std::string> shell(const std::string& script) {
  return {"/bin/sh", "-c", script};
}

// A string unique to this test process, to put into command lines and find them again.
inline std::string unique_marker(const std::string& tag) {
  return tag + std::to_string(::getpid());
}

// A `sleep` duration that is easy to find in /proc: "30.<pid><n>".
inline std::string marked_sleep_seconds(int n) {
  return "30." + std::to_string(::getpid()) + std::to_string(n);
}

// Pids of live (non-zombie) processes whose command line contains `needle`.
inline std::vector<int> processes_with(const std::string& needle) {
  std::vector<int> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (const dirent* entry = ::readdir(proc)) {
    const std::string name = entry->d_name;
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream file("/proc/" + name + "/cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    if (std::stoi(name) != ::getpid() && cmdline.find(needle) != std::string::npos) {
      found.push_back(std::stoi(name));
    }
  }
  ::closedir(proc);
  return found;
}

// Processes whose command line contains `needle` that are still there after up to `wait`
// (a process killed a moment ago may take a few milliseconds to disappear).
inline std::vector<int> leftover_processes(const std::string& needle,
                                           std::chrono::milliseconds wait =
                                               std::chrono::milliseconds(1000)) {
  const auto until = std::chrono::steady_clock::now() + wait;
  std::vector<int> found = processes_with(needle);
  while (!found.empty() && std::chrono::steady_clock::now() < until) {
    ::usleep(10000);
    found = processes_with(needle);
  }
  return found;
}

inline std::string describe(const ClusterResult& r) {
  return "code " + std::to_string(r.code) + " after " + std::to_string(r.elapsed.count()) +
         " ms\n--- out ---\n" + r.out + "--- err ---\n" + r.err;
}

}  // namespace dfi::launch::testing
