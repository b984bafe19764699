#include "dfi/fabric/progress_thread.hpp"

#include "dfi/fabric/context.hpp"
#include "dfi/fabric/worker.hpp"

namespace dfi::fabric {

ProgressThread::ProgressThread(Worker& worker, std::chrono::microseconds spin, std::chrono::microseconds nap)
    : worker_(worker), spin_(spin), nap_(nap), thread_([this] { run(); }) {}

ProgressThread::ProgressThread(Worker& worker)
    : ProgressThread(worker, std::chrono::microseconds(50),
                     worker.context().capabilities().needs_target_progress ? std::chrono::microseconds(100)
                                                                          : std::chrono::microseconds(20000)) {}

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
    // Bounded naps keep keepalive, stop() and fd-less arrivals (see the header) responsive.
    worker_.wait_for_event(nap_);
    last_event = Clock::now();
  }
}

}  // namespace dfi::fabric
