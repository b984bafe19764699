// bench::RankThreads, the one harness of the scenarios' rank threads: start gate, phases, the
// first error with its role.
#include "bench/rank_threads.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

namespace dfi::tools::bench {
namespace {

using Clock = RankThreads::Clock;

// join() must throw a dfi::Error with this code and message.
void expect_join_error(RankThreads& threads, Errc code, const std::string& message) {
  try {
    threads.join();
    ADD_FAILURE() << "join() reported no error; expected: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code);
    EXPECT_EQ(e.what(), message);
  }
}

TEST(RankThreads, ReleasesEveryThreadAfterAllAreReadyAndBeforeRan) {
  constexpr int kThreads = 4;
  std::atomic<int> ready{0};
  std::atomic<bool> before_ran{false};
  std::vector<Clock::time_point> started(kThreads);
  std::vector<char> saw_before(kThreads);  // not vector<bool>: one byte per thread
  RankThreads threads("test");
  for (int t = 0; t < kThreads; ++t) {
    threads.start("worker " + std::to_string(t), [&, t](RankThreads::Gate& gate) {
      ++ready;
      gate.ready_and_wait();
      started[t] = Clock::now();
      saw_before[t] = before_ran.load();
    });
  }
  const Clock::time_point released = threads.release([&] {
    EXPECT_EQ(ready.load(), kThreads);  // every thread is at the gate
    before_ran = true;
  });
  threads.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(saw_before[t]) << "thread " << t << " started before the gate opened";
    EXPECT_GE(started[t], released);
  }
}

TEST(RankThreads, PhasesAreReleasedOneAfterAnother) {
  std::atomic<int> step{0};
  int seen_at_second_release = -1;
  RankThreads threads("test");
  threads.start("source", [&](RankThreads::Gate& gate) {
    gate.ready();  // phase 1: open (nobody waits)
    step = 1;
    gate.ready_and_wait();  // phase 2: wait for the owner's sample
    step = 2;
  });
  threads.release();
  threads.release([&] { seen_at_second_release = step.load(); });
  threads.join();
  EXPECT_EQ(seen_at_second_release, 1);
  EXPECT_EQ(step.load(), 2);
}

TEST(RankThreads, AThreadThatFailsBeforeTheGateDoesNotHoldItAndIsNamed) {
  std::atomic<bool> other_ran{false};
  RankThreads threads("bench test: rank 1");
  threads.start("source 0", [](RankThreads::Gate&) {
    throw Error(Errc::timeout, "flow 'x': target 2 did not open in time");
  });
  threads.start("source 1", [&](RankThreads::Gate& gate) {
    gate.ready_and_wait();
    other_ran = true;
  });
  threads.release();
  expect_join_error(threads, Errc::timeout,
                    "bench test: rank 1: source 0: flow 'x': target 2 did not open in time");
  EXPECT_TRUE(other_ran.load());
}

TEST(RankThreads, AFailedStepBeforeTheReleaseIsReportedAfterTheThreads) {
  RankThreads threads("bench test");
  threads.start("target", [](RankThreads::Gate& gate) { gate.ready_and_wait(); });
  threads.release([] { throw std::runtime_error("barrier 'start': rank 0 is dead"); });
  expect_join_error(threads, Errc::io, "bench test: barrier 'start': rank 0 is dead");
}

TEST(RankThreads, AnOwnerThatLeavesEarlyReleasesAndJoinsItsThreads) {
  std::atomic<bool> finished{false};
  {
    RankThreads threads("test");
    threads.start("waiter", [&](RankThreads::Gate& gate) {
      gate.ready_and_wait();
      finished = true;
    });
  }  // no release, no join: the destructor does both
  EXPECT_TRUE(finished.load());
}

}  // namespace
}  // namespace dfi::tools::bench
