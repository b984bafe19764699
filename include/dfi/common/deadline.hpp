// A point in time after which a bounded wait gives up. Every blocking call in DFI takes one
// (or a timeout converted to one), so nothing waits forever.
#pragma once

#include <chrono>

namespace dfi {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Deadline(std::chrono::nanoseconds timeout) : at_(Clock::now() + timeout) {}
  static Deadline after_ms(long long ms) { return Deadline(std::chrono::milliseconds(ms)); }

  bool expired() const { return Clock::now() >= at_; }
  Clock::time_point time_point() const { return at_; }
  // Milliseconds left, never negative.
  long long remaining_ms() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return left > 0 ? left : 0;
  }

 private:
  Clock::time_point at_;
};

}  // namespace dfi
