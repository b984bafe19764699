#include "rank_threads.hpp"

#include <climits>
#include <utility>

#include "dfi/common/backoff.hpp"

namespace dfi::tools::bench {
namespace {

// Gate waits yield and never sleep: a thread released from a sleep would start late.
Backoff yielding() {
  BackoffSettings settings;
  settings.spin = 0;
  settings.yield = UINT32_MAX;
  return Backoff(settings);
}

Errc code_of(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  return error != nullptr ? error->code() : Errc::io;
}

}  // namespace

void RankThreads::Gate::ready() noexcept { arrivals_.fetch_add(1, std::memory_order_release); }

void RankThreads::Gate::ready_and_wait() noexcept {
  const int phase = arrivals_.fetch_add(1, std::memory_order_release) + 1;
  Backoff backoff = yielding();
  while (released_.load(std::memory_order_acquire) < phase) backoff.pause();
}

RankThreads::RankThreads(std::string what) : what_(std::move(what)) {}

RankThreads::~RankThreads() {
  released_.store(INT_MAX, std::memory_order_release);
  for (const auto& slot : slots_) {
    if (slot->thread.joinable()) slot->thread.join();
  }
}

void RankThreads::start(std::string role, std::function<void(Gate&)> body) {
  auto& slot = *slots_.emplace_back(std::make_unique<Slot>());
  slot.role = std::move(role);
  slot.thread = std::thread([this, &slot, body = std::move(body)] {
    Gate gate(slot.arrivals, released_);
    try {
      body(gate);
    } catch (const std::exception& e) {
      fail(slot.role, e);
    }
    slot.ended.store(true, std::memory_order_release);
  });
}

void RankThreads::fail(const std::string& role, const std::exception& e) {
  std::lock_guard lock(mutex_);
  if (!error_.empty()) return;
  error_ = what_ + ": " + role + ": " + e.what();
  error_code_ = code_of(e);
}

RankThreads::Clock::time_point RankThreads::release(const std::function<void()>& before) {
  const int phase = released_.load(std::memory_order_relaxed) + 1;
  Backoff backoff = yielding();
  for (const auto& slot : slots_) {
    while (slot->arrivals.load(std::memory_order_acquire) < phase &&
           !slot->ended.load(std::memory_order_acquire)) {
      backoff.pause();
    }
  }
  if (before) {
    try {
      before();
    } catch (const std::exception& e) {
      if (before_error_.empty()) {
        before_error_ = what_ + ": " + e.what();
        before_code_ = code_of(e);
      }
    }
  }
  const Clock::time_point at = Clock::now();
  released_.store(phase, std::memory_order_release);
  return at;
}

void RankThreads::join() {
  released_.store(INT_MAX, std::memory_order_release);  // nobody waits for a phase never released
  for (const auto& slot : slots_) {
    if (slot->thread.joinable()) slot->thread.join();
  }
  if (!error_.empty()) throw Error(error_code_, error_);
  if (!before_error_.empty()) throw Error(before_code_, before_error_);
}

}  // namespace dfi::tools::bench
