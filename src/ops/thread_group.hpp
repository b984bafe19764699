// The threads of one rank of an operator: started one by one, joined together, and the first
// exception any of them threw rethrown once all have ended (the others end on their own: their
// flows fail or close).
#pragma once

#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace dfi::ops::detail {

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

  // Runs `body` on a new thread; what it throws is kept if it is the first.
  void start(std::function<void()> body) {
    threads_.emplace_back([this, body = std::move(body)] {
      try {
        body();
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
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
};

}  // namespace dfi::ops::detail
