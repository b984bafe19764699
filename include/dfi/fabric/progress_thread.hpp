// fabric::ProgressThread — serves a Worker from a background thread.
//
// Needed where the transport emulates one-sided operations (TCP): the target CPU must progress
// the worker that peers write into. On shm it mostly sleeps, waking for active messages and
// keepalive. The thread owns the worker from start to stop: nobody else may call it meanwhile.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
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
  // Spin 50 µs; nap from the settings table by the worker's transport capabilities
  // (progress_nap_shm_us, progress_nap_tcp_us).
  explicit ProgressThread(Worker& worker);
  // Stops and joins the thread.
  ~ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  void stop();

  // Also progresses `worker` while its owner is away: for a worker that its owner progresses
  // while it waits for data, but that must keep moving (UCX connection set-up, flush-closes of
  // peers) while the owner does something else. The thread looks at adopted workers only when it
  // is about to nap, and progresses one only if its owner did not claim it (Worker::claim) since
  // the previous look: no competition with an owner that is consuming. At most kMaxAdopted
  // workers; throws dfi::Error(invalid_argument) beyond. Thread-safe.
  void adopt(Worker& worker);
  // Stops progressing `worker`; when it returns, this thread no longer touches it. Thread-safe.
  void abandon(Worker& worker);
  static constexpr std::size_t kMaxAdopted = 64;

 private:
  void run();
  unsigned progress_adopted();

  Worker& worker_;
  std::chrono::microseconds spin_;
  std::chrono::microseconds nap_;
  std::atomic<bool> stop_{false};
  std::array<std::atomic<Worker*>, kMaxAdopted> adopted_{};
  std::atomic<std::size_t> adopted_count_{0};
  std::atomic<std::uint64_t> passes_{0};  // loop passes, so abandon() knows when a pass ended
  std::array<std::uint64_t, kMaxAdopted> owner_claims_seen_{};  // this thread's only
  std::thread thread_;
};

}  // namespace dfi::fabric
