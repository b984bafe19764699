// Failure reporting of the rank programs that multi-process tests start (shuffle_node,
// driven_node, ...): a check that fails prints why on stderr and counts; the program's exit
// status says whether any did. Thread-safe.
#pragma once

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

namespace dfi::testing {

inline std::atomic<int> failures{0};
inline std::mutex print_mutex;  // one line at a time from many threads

inline void fail(const std::string& what) {
  std::lock_guard lock(print_mutex);
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  ++failures;
}

}  // namespace dfi::testing
