#include "dfi/fabric/progress_thread.hpp"

#include <cstdint>

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
  // The clock is read once per 64 empty polls, not per poll: on this kind of VM a read costs
  // tens of ns, and reading it per poll took a third of a busy TCP target's progress thread.
  constexpr std::uint32_t kPollsPerClockRead = 64;
  std::uint32_t idle = 0;
  Clock::time_point idle_since;
  while (!stop_.load(std::memory_order_acquire)) {
    if (worker_.progress() != 0) {
      idle = 0;
      continue;
    }
    if (++idle % kPollsPerClockRead != 0) continue;
    if (idle == kPollsPerClockRead) {
      idle_since = Clock::now();
      continue;
    }
    if (Clock::now() - idle_since < spin_) continue;
    // Bounded naps keep keepalive, stop() and fd-less arrivals (see the header) responsive.
    worker_.wait_for_event(nap_);
    idle = 0;
  }
}

}  // namespace dfi::fabric
