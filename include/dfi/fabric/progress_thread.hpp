// fabric::ProgressThread — serves a Worker from a background thread.
//
// Needed where the transport emulates one-sided operations (TCP): the target CPU must progress
// the worker that peers write into. On shm it mostly sleeps, waking for active messages and
// keepalive. The thread owns the worker from start to stop: nobody else may call it meanwhile.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace dfi::fabric {

class Worker;

class ProgressThread {
 public:
  // Starts progressing `worker`. It spins for `spin` after the last event, then sleeps on the
  // worker's event fd for at most `nap` at a time. UCX 1.13 does not always signal that fd for
  // emulated one-sided operations arriving over TCP, so where the transport needs target
  // progress the nap must be short (it bounds the extra latency of such an operation).
  ProgressThread(Worker& worker, std::chrono::microseconds spin, std::chrono::microseconds nap);
  // Spin and nap chosen from the worker's transport capabilities.
  explicit ProgressThread(Worker& worker);
  // Stops and joins the thread.
  ~ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  void stop();

 private:
  void run();

  Worker& worker_;
  std::chrono::microseconds spin_;
  std::chrono::microseconds nap_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dfi::fabric
