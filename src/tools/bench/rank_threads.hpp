// The threads of one rank of a scenario: each runs a role ("source 1", "target 0"), a start gate
// releases the ones waiting at it all at once, and the first error comes back with its role.
//
//   RankThreads threads("bench shuffle-bw");
//   std::vector<double> seconds(n);                        // local state, one slot per thread
//   for (int t = 0; t < n; ++t) {
//     threads.start("source " + std::to_string(t), [&, t](RankThreads::Gate& gate) {
//       flow::ShuffleSource source(...);                   // set-up, not timed
//       gate.ready_and_wait();                             // everyone set up; released together
//       ... timed loop ...
//       seconds[t] = ...;
//     });
//   }
//   Clock::time_point start = threads.release([&] { node.barrier("..."); });  // all ranks
//   threads.join();  // throws the first error: "bench shuffle-bw: source 1: <what happened>"
//   ... combine seconds ...
//
// A thread that ends (or fails) before it reaches the gate counts as ready, so release() never
// waits for a thread that will not come; the other waits are bounded by the threads' own
// timeouts (flow opens, consume). Gate waits yield (dfi::Backoff without sleeps), as the
// hand-written gates did: release latency is what starts a measurement.
// Owned by the thread that creates it; Gate is used by its own thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dfi/common/error.hpp"

namespace dfi::tools::bench {

class RankThreads {
 public:
  using Clock = std::chrono::steady_clock;

  // One thread's side of the gate. Each ready() is one phase: the first is released by the
  // first release(), the second by the second, and so on.
  class Gate {
   public:
    // This thread reached the next phase (set up, or done with a step); does not wait.
    void ready() noexcept;
    // ready(), then waits until the owner releases this phase.
    void ready_and_wait() noexcept;

   private:
    friend class RankThreads;
    Gate(std::atomic<int>& arrivals, const std::atomic<int>& released)
        : arrivals_(arrivals), released_(released) {}
    std::atomic<int>& arrivals_;
    const std::atomic<int>& released_;
  };

  // `what` starts every error message ("bench shuffle-bw", "bench memory: rank 1").
  explicit RankThreads(std::string what);
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;
  // Releases every phase and joins what still runs (an owner that throws leaves no thread).
  ~RankThreads();

  // Starts a thread running body(gate). An exception from the body ends that thread and is kept
  // for join() (the first one, by time, is reported).
  void start(std::string role, std::function<void(Gate&)> body);

  // Waits until every thread reached the next phase (or ended), runs `before` (a cross-rank
  // barrier, samples to take while every thread waits; its exception is kept for join()), then
  // releases the phase. Returns the time of the release.
  Clock::time_point release(const std::function<void()>& before = {});

  // Joins every thread. Throws dfi::Error "<what>: <role>: <message>" for the first thread that
  // failed (its dfi::Errc, io for other exceptions), else "<what>: <message>" if a `before` of
  // release() failed.
  void join();

 private:
  struct Slot {
    std::string role;
    std::atomic<int> arrivals{0};
    std::atomic<bool> ended{false};
    std::thread thread;
  };
  void fail(const std::string& role, const std::exception& e);

  std::string what_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<int> released_{0};
  std::mutex mutex_;
  std::string error_;  // the first failure, whole message
  Errc error_code_ = Errc::io;
  std::string before_error_;
  Errc before_code_ = Errc::io;
};

}  // namespace dfi::tools::bench
