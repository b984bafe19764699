#include "dfi/fabric/progress_thread.hpp"

#include <cstdint>
#include <string>

#include "dfi/common/config.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/fabric/worker.hpp"

namespace dfi::fabric {

ProgressThread::ProgressThread(Worker& worker, std::chrono::microseconds spin, std::chrono::microseconds nap)
    : worker_(worker), spin_(spin), nap_(nap), thread_([this] { run(); }) {}

ProgressThread::ProgressThread(Worker& worker)
    : ProgressThread(worker, std::chrono::microseconds(50),
                     std::chrono::microseconds(config::get_int(
                         worker.context().capabilities().needs_target_progress ? "progress_nap_tcp_us"
                                                                               : "progress_nap_shm_us"))) {}

ProgressThread::~ProgressThread() { stop(); }

unsigned ProgressThread::progress_adopted() {
  unsigned events = 0;
  for (std::size_t i = 0; i < kMaxAdopted; ++i) {
    Worker* worker = adopted_[i].load(std::memory_order_acquire);
    if (worker == nullptr) continue;
    const std::uint64_t claims = worker->owner_claims();
    if (claims != owner_claims_seen_[i]) {  // the owner progressed it since our last look
      owner_claims_seen_[i] = claims;
      continue;
    }
    if (!worker->try_claim()) continue;
    events += worker->progress();
    worker->unclaim();
  }
  return events;
}

void ProgressThread::adopt(Worker& worker) {
  for (std::atomic<Worker*>& slot : adopted_) {
    Worker* expected = nullptr;
    if (slot.compare_exchange_strong(expected, &worker, std::memory_order_acq_rel)) {
      adopted_count_.fetch_add(1, std::memory_order_acq_rel);
      worker_.signal();
      return;
    }
  }
  throw Error(Errc::invalid_argument, "fabric: progress thread of worker '" + worker_.name() + "' already serves " +
                                          std::to_string(kMaxAdopted) + " other workers");
}

void ProgressThread::abandon(Worker& worker) {
  for (std::atomic<Worker*>& slot : adopted_) {
    Worker* expected = &worker;
    if (!slot.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) continue;
    adopted_count_.fetch_sub(1, std::memory_order_acq_rel);
    // The thread may have read the slot just before: wait until the pass it is in has ended.
    const std::uint64_t pass = passes_.load(std::memory_order_acquire);
    while (thread_.joinable() && !stop_.load(std::memory_order_acquire) &&
           passes_.load(std::memory_order_acquire) < pass + 2) {
      worker_.signal();
      std::this_thread::yield();
    }
    return;
  }
}

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
  bool napping = false;  // the last nap ran out with nothing to do: nap again, do not spin
  while (!stop_.load(std::memory_order_acquire)) {
    passes_.fetch_add(1, std::memory_order_acq_rel);
    if (worker_.progress() != 0) {
      idle = 0;
      napping = false;
      continue;
    }
    if (!napping) {
      if (++idle % kPollsPerClockRead != 0) continue;
      if (idle == kPollsPerClockRead) {
        idle_since = Clock::now();
        continue;
      }
      if (Clock::now() - idle_since < spin_) continue;
    }
    // Adopted workers whose owners are away: once per nap, never in the spin above.
    if (adopted_count_.load(std::memory_order_acquire) != 0 && progress_adopted() != 0) {
      idle = 0;
      napping = false;
      continue;
    }
    // Bounded naps keep keepalive, stop() and fd-less arrivals (see the header) responsive. Spin
    // again only after a nap that something woke: an idle thread costs one wake-up per nap.
    napping = !worker_.wait_for_event(nap_);
    idle = 0;
  }
}

}  // namespace dfi::fabric
