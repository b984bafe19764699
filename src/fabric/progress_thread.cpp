#include "dfi/fabric/progress_thread.hpp"

#include "dfi/fabric/worker.hpp"

namespace dfi::fabric {

ProgressThread::ProgressThread(Worker& worker, std::chrono::microseconds spin)
    : worker_(worker), spin_(spin), thread_([this] { run(); }) {}

ProgressThread::~ProgressThread() { stop(); }

void ProgressThread::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  worker_.signal();
  thread_.join();
}

void ProgressThread::run() {
  using Clock = std::chrono::steady_clock;
  auto last_event = Clock::now();
  while (!stop_.load(std::memory_order_acquire)) {
    if (worker_.progress() != 0) {
      last_event = Clock::now();
      continue;
    }
    if (Clock::now() - last_event < spin_) continue;
    // Short sleeps keep keepalive and stop() responsive even without events.
    worker_.wait_for_event(std::chrono::milliseconds(20));
    last_event = Clock::now();
  }
}

}  // namespace dfi::fabric
