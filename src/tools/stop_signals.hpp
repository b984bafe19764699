// tools::StopSignals — SIGINT and SIGTERM as events that a long-lived command (`dfi registry
// serve`, `dfi kv serve`) waits for and answers with a clean shutdown, instead of the end of the
// process.
//
//   StopSignals stop;                 // first thing in the command: before any thread starts
//   while (stop.wait(std::chrono::milliseconds(100)) == 0) { ... }
#pragma once

#include <signal.h>

#include <chrono>

namespace dfi::tools {

class StopSignals {
 public:
  // Blocks SIGINT and SIGTERM in the calling thread; the threads it starts later inherit the
  // mask, so the signals stay pending for wait() instead of ending the process.
  StopSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  }

  // Waits up to `timeout` for SIGINT or SIGTERM (sent to the process or to this thread); returns
  // the signal's number, or 0 when none came.
  int wait(std::chrono::milliseconds timeout) {
    const timespec interval{static_cast<time_t>(timeout.count() / 1000), static_cast<long>(timeout.count() % 1000) * 1'000'000};
    const int signal_number = sigtimedwait(&set_, nullptr, &interval);
    return signal_number > 0 ? signal_number : 0;
  }

 private:
  sigset_t set_;
};

}  // namespace dfi::tools
