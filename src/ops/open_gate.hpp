// The gate between an operator's open and its run (ops::Join, ops::Aggregation): the constructor
// starts the rank's threads, each opens its flows and calls opened(), which waits for the run;
// the constructor returns once wait_open() saw every thread open; run() calls release().
#pragma once

#include "dfi/common/thread_group.hpp"

namespace dfi::ops::detail {

class OpenGate {
 public:
  // `threads`: how many threads call opened().
  explicit OpenGate(int threads) : open_(threads) {}

  // By each thread once its flows are open: waits for release(). False: the operator was
  // abandoned (a thread failed, or it is destroyed unrun); the thread returns at once.
  bool opened() {
    open_.count_down();
    return released_.wait();
  }
  // By the constructor: true once every thread called opened(), false if abandoned first.
  bool wait_open() { return open_.wait(); }
  // By run(), after it set what the threads read: lets them go.
  void release() { released_.count_down(); }
  // Releases every waiter with false (thread-safe; ThreadGroup::on_failure and destructors).
  void abandon() {
    open_.abandon();
    released_.abandon();
  }

 private:
  Countdown open_;
  Countdown released_{1};
};

}  // namespace dfi::ops::detail
