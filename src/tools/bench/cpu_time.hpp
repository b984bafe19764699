// CPU time of the calling thread and of this process, for scenarios that report what a party's
// CPU paid (driven-shuffle, driven-lat).
#pragma once

#include <sys/resource.h>
#include <time.h>

#include <cstdint>

namespace dfi::tools::bench {

// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID), ns.
inline std::int64_t thread_cpu_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// User + system CPU time of this process (every thread; getrusage), ns.
inline std::int64_t process_cpu_ns() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto ns = [](const timeval& v) { return static_cast<std::int64_t>(v.tv_sec) * 1'000'000'000 + v.tv_usec * 1000; };
  return ns(u.ru_utime) + ns(u.ru_stime);
}

}  // namespace dfi::tools::bench
