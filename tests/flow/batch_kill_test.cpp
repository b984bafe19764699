// A peer killed while a push_batch is under way (issue 28): the survivor's call fails with
// peer_failed naming the dead rank, and nothing arrives twice. Over shm and TCP.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>

#include "cluster_run.hpp"

namespace dfi {
namespace {

using testing::contains;
using testing::run_cluster;

// The survivors finish their batches after the kill (64 MiB over tcp, or under a sanitizer on a
// loaded 2-core machine): the launcher waits for them this long, not its default 3 s.
testing::RunOptions survivors_finish() {
  testing::RunOptions options;
  options.grace = std::chrono::seconds(60);
  return options;
}

class BatchKill : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchKill, ASourceKilledInsidePushBatchFailsTheTargetsNamingItAndDuplicatesNothing) {
  auto run = run_cluster(3, GetParam(), {BATCH_KILL_NODE, "kill-source"}, survivors_finish());
  EXPECT_NE(run.code, 0) << run.all();  // rank 1 was killed: the launcher says so
  EXPECT_TRUE(std::regex_search(run.err, std::regex(R"(rank 1 .*signal 9)"))) << run.all();
  for (const char* line : {"target 0 saw: peer_failed: flow 'batch-victim-source'",
                           "target 1 saw: peer_failed: flow 'batch-victim-source'",
                           "kill-source: nothing duplicated, every source in order"}) {
    EXPECT_TRUE(contains(run.out, std::string("[rank 0] ") + line)) << line << '\n' << run.all();
  }
  EXPECT_FALSE(contains(run.err, "FAILED")) << run.all();
  EXPECT_FALSE(std::regex_search(run.err, std::regex(R"(rank [02] exited with status)"))) << run.all();
}

TEST_P(BatchKill, ATargetKilledDuringPushBatchFailsItNamingTheTarget) {
  auto run = run_cluster(3, GetParam(), {BATCH_KILL_NODE, "kill-target"}, survivors_finish());
  EXPECT_NE(run.code, 0) << run.all();
  EXPECT_TRUE(std::regex_search(run.err, std::regex(R"(rank 1 .*signal 9)"))) << run.all();
  EXPECT_TRUE(contains(run.out, "[rank 0] source saw: peer_failed: flow 'batch-victim-target'")) << run.all();
  EXPECT_TRUE(contains(run.out, "[rank 2] live target: nothing duplicated, in order")) << run.all();
  EXPECT_FALSE(contains(run.err, "FAILED")) << run.all();
  EXPECT_FALSE(std::regex_search(run.err, std::regex(R"(rank [02] exited with status)"))) << run.all();
}

TEST_P(BatchKill, WithDropForDeadTargetsTheLiveTargetGetsEveryTupleOfItsBatchesOnce) {
  auto run = run_cluster(3, GetParam(), {BATCH_KILL_NODE, "kill-target-drop"}, survivors_finish());
  EXPECT_NE(run.code, 0) << run.all();
  EXPECT_TRUE(std::regex_search(run.err, std::regex(R"(rank 1 .*signal 9)"))) << run.all();
  EXPECT_TRUE(contains(run.out, "[rank 0] source: every batch pushed")) << run.all();
  EXPECT_TRUE(contains(run.out, "[rank 2] live target: nothing duplicated, in order")) << run.all();
  EXPECT_FALSE(contains(run.err, "FAILED")) << run.all();
  EXPECT_FALSE(std::regex_search(run.err, std::regex(R"(rank [02] exited with status)"))) << run.all();
}

INSTANTIATE_TEST_SUITE_P(Transports, BatchKill, ::testing::Values("shm", "tcp"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace dfi
