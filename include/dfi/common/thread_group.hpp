// dfi::ThreadGroup — the threads of one rank of an operator or app (ops joins and aggregation,
// the commtier tests): started one by one, joined together, and the first exception any of them
// threw rethrown once all have ended (the others end on their own: their flows fail or close, or
// the group's on-failure action releases them from a Countdown they wait on).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace dfi {

class ThreadGroup {
 public:
  ThreadGroup() = default;
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;
  // Joins what is still running (without rethrowing).
  ~ThreadGroup() {
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  // Runs `action` once, on the thread that throws first (before start(): not thread-safe).
  // Typically abandons the Countdowns the other threads may wait on.
  void on_failure(std::function<void()> action) { on_failure_ = std::move(action); }

  // Runs `body` on a new thread; what it throws is kept if it is the first.
  void start(std::function<void()> body) {
    threads_.emplace_back([this, body = std::move(body)] {
      try {
        body();
      } catch (...) {
        bool first = false;
        {
          std::lock_guard lock(mutex_);
          first = !error_;
          if (first) error_ = std::current_exception();
        }
        if (first && on_failure_) on_failure_();
      }
    });
  }

  // Waits for every thread, then rethrows the first exception, if any.
  void join() {
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::exception_ptr error_;  // guarded by mutex_ while threads run
  std::function<void()> on_failure_;
};

// A one-shot gate between the phases of an operator's threads: wait() returns true once
// count_down() was called `count` times, false at once if the gate was abandoned (a thread of the
// group failed, so the phase will never complete). Thread-safe.
class Countdown {
 public:
  explicit Countdown(int count) : count_(count) {}

  void count_down() {
    std::lock_guard lock(mutex_);
    if (--count_ <= 0) changed_.notify_all();
  }
  void abandon() {
    std::lock_guard lock(mutex_);
    abandoned_ = true;
    changed_.notify_all();
  }
  bool wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return count_ <= 0 || abandoned_; });
    return !abandoned_;
  }
  // wait() for at most `timeout`: its result, or nullopt if neither happened by then.
  std::optional<bool> wait_for(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return count_ <= 0 || abandoned_; })) return std::nullopt;
    return !abandoned_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int count_;               // guarded by mutex_
  bool abandoned_ = false;  // guarded by mutex_
};

}  // namespace dfi
