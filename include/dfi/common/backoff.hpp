// dfi::Backoff — the one way DFI waits for something another thread or process will do.
//
// A wait loop polls, then calls pause(). The first `spin` rounds return at once (the next poll
// is the cheapest way to see a change that is microseconds away), the next rounds up to `yield`
// give the core away, and after that each round sleeps a random few microseconds, so that many
// waiters do not poll one peer in lockstep. A caller that can block on an event instead (a
// worker's event fd) passes its own sleeper. The constants are settings (wait_spin_rounds,
// wait_yield_rounds, wait_sleep_us), resolved when the waiting object is set up, never per round.
//
//   Backoff backoff(BackoffSettings::from_config(), seed);
//   while (!ready()) { check deadline and peers every so often; backoff.pause(); }
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

namespace dfi {

struct BackoffSettings {
  std::uint32_t spin = 1024;   // rounds that return at once
  std::uint32_t yield = 4096;  // rounds (counted from the start) that yield
  std::uint32_t sleep_us = 50; // upper bound of a sleep; each sleep is 1 .. sleep_us µs

  // From the settings table; throws dfi::Error(invalid_argument) for malformed values.
  // `polls_are_syscalls`: each poll of the waiter costs a system call (it progresses a UCX worker
  // over tcp), so it spins and yields far less (the *_syscall settings) before it sleeps or
  // blocks on events.
  // On a crowded host (at least twice as many ranks as cores: the local_ranks setting, which
  // `dfi cluster run` sets) every waiter spins and yields that little too, unless
  // wait_spin_rounds or wait_yield_rounds is set.
  static BackoffSettings from_config(bool polls_are_syscalls = false);
};

// Whether this host runs at least twice as many ranks of the cluster as it has cores (the
// local_ranks setting; false when unknown).
bool crowded_host();

class Backoff {
 public:
  explicit Backoff(BackoffSettings settings = {}, std::uint64_t seed = 1) : settings_(settings), state_(seed | 1) {}

  // One round of waiting; `sleep(duration)` is called in the sleeping phase.
  template <class Sleep>
  void pause(Sleep&& sleep) {
    ++rounds_;
    if (rounds_ <= settings_.spin) return;
    if (rounds_ <= settings_.yield) {
      std::this_thread::yield();
      return;
    }
    state_ ^= state_ << 13;  // xorshift: a cheap, per-waiter random sleep
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    sleep(std::chrono::microseconds(1 + state_ % (settings_.sleep_us == 0 ? 1 : settings_.sleep_us)));
  }
  void pause() {
    pause([](std::chrono::microseconds d) { std::this_thread::sleep_for(d); });
  }
  // Back to spinning (something happened).
  void reset() noexcept { rounds_ = 0; }
  std::uint64_t rounds() const noexcept { return rounds_; }

 private:
  BackoffSettings settings_;
  std::uint64_t state_;
  std::uint64_t rounds_ = 0;
};

}  // namespace dfi
