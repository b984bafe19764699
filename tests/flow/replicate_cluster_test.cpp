// Multi-process replicate tests: every body runs over shm and over TCP.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <regex>

#include "cluster_run.hpp"

namespace dfi {
namespace {

using testing::contains;
using testing::run_cluster;
using testing::RunOptions;

// DFI_REPLICATE_CONFIGS (default 30) random flows per mode and transport; DFI_PROPERTY_SEED fixes
// the seed (default: a new one per run, printed so a failure can be replayed).
std::string property_count() {
  const char* count = std::getenv("DFI_REPLICATE_CONFIGS");
  return count != nullptr ? count : "30";
}

std::string property_seed() {
  if (const char* seed = std::getenv("DFI_PROPERTY_SEED")) return seed;
  return std::to_string(std::chrono::system_clock::now().time_since_epoch().count() % 1000000007);
}

class ReplicateCluster : public ::testing::TestWithParam<std::string> {
 protected:
  void random_flows(const std::string& mode, const std::string& verdict) {
    const std::string seed = property_seed();
    RunOptions options;
    options.timeout = std::chrono::seconds(300);
    auto run = run_cluster(3, GetParam(),
                           {REPLICATE_NODE, "property", mode, seed, property_count()}, options);
    ASSERT_EQ(run.code, 0) << "seed " << seed << '\n' << run.all();
    EXPECT_TRUE(contains(run.out, verdict)) << run.all();
    const auto at = run.out.find("property ");
    std::cout << "seed " << seed << ": " << (at == std::string::npos ? run.out : run.out.substr(at))
              << std::flush;
  }
};

TEST_P(ReplicateCluster, NaiveDeliversEveryTupleToEveryTargetOnce) {
  random_flows("naive", "all exactly once");
}
TEST_P(ReplicateCluster, RelayDeliversEveryTupleToEveryTargetOnce) {
  random_flows("relay", "all exactly once");
}
TEST_P(ReplicateCluster, OrderedTargetsConsumeIdenticalSequences) {
  random_flows("ordered", "all exactly once, identical order");
}
TEST_P(ReplicateCluster, OrderedRelayTargetsConsumeIdenticalSequences) {
  random_flows("ordered-relay", "all exactly once, identical order");
}
TEST_P(ReplicateCluster, StampedTargetsConsumeIdenticalSequences) {
  random_flows("ordered-stamp", "all exactly once, identical order");
}

TEST_P(ReplicateCluster, SourceKilledHoldingASequenceNumberLeavesAReportedGap) {
  for (const char* replication : {"naive", "relay"}) {
    auto run = run_cluster(3, GetParam(), {REPLICATE_NODE, "gap-kill", replication});
    EXPECT_NE(run.code, 0) << run.all();  // rank 1 was killed: the launcher says so
    EXPECT_TRUE(std::regex_search(run.err, std::regex(R"(rank 1 .*signal 9)"))) << run.all();
    EXPECT_TRUE(contains(run.out, std::string("gap-kill-") + replication +
                                      ": 3 targets with identical sequences, 1 gap each"))
        << run.all();
    EXPECT_TRUE(contains(run.out, "gap event: sequence")) << run.all();
    EXPECT_TRUE(contains(run.out, "source (rank 1, thread 0) failed before closing the flow"))
        << run.all();
    EXPECT_FALSE(contains(run.err, "FAILED")) << run.all();
    EXPECT_FALSE(std::regex_search(run.err, std::regex(R"(rank [02] exited with status)")))
        << run.all();
  }
}

TEST_P(ReplicateCluster, SegmentDelayedPastTheTimeoutIsAGapThenDropped) {
  for (const char* replication : {"naive", "relay"}) {
    auto run = run_cluster(3, GetParam(), {REPLICATE_NODE, "gap-delay", replication});
    ASSERT_EQ(run.code, 0) << run.all();
    EXPECT_TRUE(contains(
        run.out, std::string("gap-delay-") + replication +
                     ": 3 targets with identical sequences, 1 gap each, late segment dropped"))
        << run.all();
  }
}

TEST_P(ReplicateCluster, SlowTargetCausesNoGapsAtTheOthers) {
  auto run = run_cluster(3, GetParam(), {REPLICATE_NODE, "slow-target"});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "slow target: no false gaps, identical sequences")) << run.all();
}

// The flow_faults setting (flow/detail/faults.hpp): drops at one target are gaps there only; a
// delay below the gap timeout holds a target back without a gap.
TEST_P(ReplicateCluster, InjectedDropsAreGapsAndDelaysHoldBack) {
  RunOptions options;
  options.env = {{"DFI_FLOW_FAULTS",
                  "flow=rep-inj*,from=1,to=2,drop,first=10,every=25,count=3; flow=rep-injected,from=1,to=0,delay=300,first=20,count=1"}};
  auto run = run_cluster(3, GetParam(), {REPLICATE_NODE, "injected"}, options);
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "injected: rank 2 saw 3 gaps, rank 0's targets none")) << run.all();
}

// The same rules on a stamped flow: a segment dropped on its way from target 0 (the sequencer) to
// rank 2 is a gap there only; a segment held back at target 0 is numbered late, not lost.
TEST_P(ReplicateCluster, StampedFlowInjectedDropsAreGapsBehindTheSequencer) {
  RunOptions options;
  options.env = {{"DFI_FLOW_FAULTS",
                  "flow=rep-inj*,from=1,to=2,drop,first=10,every=25,count=3; flow=rep-injected*,from=1,to=0,delay=300,first=20,count=1"}};
  auto run = run_cluster(3, GetParam(), {REPLICATE_NODE, "injected", "stamp"}, options);
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "injected (stamp): rank 2 saw 3 gaps, rank 0's targets none")) << run.all();
}

// A drop rule that matches a reliable flow is refused when the flow opens, naming the rule.
TEST_P(ReplicateCluster, InjectedDropOnAReliableFlowIsRefused) {
  RunOptions options;
  options.env = {{"DFI_FLOW_FAULTS", "flow=rep-victim-*,drop"}, {"DFI_REGISTRY_TIMEOUT_MS", "5000"}};
  auto run = run_cluster(3, GetParam(), {REPLICATE_NODE, "kill-source"}, options);
  EXPECT_NE(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.all(), "rule 'flow=rep-victim-*,drop': drop matches flow 'rep-victim-source' (replicate), which never loses a segment")) << run.all();
}

TEST_P(ReplicateCluster, StampedFlowDeadSourceLeavesNoGapAndIdenticalSequences) {
  auto run = run_cluster(3, GetParam(), {REPLICATE_NODE, "stamp-kill-source"});
  EXPECT_NE(run.code, 0) << run.all();  // rank 1 was killed: the launcher says so
  EXPECT_TRUE(std::regex_search(run.err, std::regex(R"(rank 1 .*signal 9)"))) << run.all();
  EXPECT_TRUE(contains(run.out, "stamp-kill-source: 3 targets with identical sequences, no gap, the dead source named at each"))
      << run.all();
  EXPECT_FALSE(contains(run.err, "FAILED")) << run.all();
  EXPECT_FALSE(std::regex_search(run.err, std::regex(R"(rank [02] exited with status)"))) << run.all();
}

TEST_P(ReplicateCluster, DeadSourceFailsTheConsumeNamingFlowAndRank) {
  auto run = run_cluster(3, GetParam(), {REPLICATE_NODE, "kill-source"});
  EXPECT_NE(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out,
                       "[rank 0] target saw: flow 'rep-victim-source' target (rank 0, id 0): "
                       "source (rank 1, thread 0) failed before closing"))
      << run.all();
  EXPECT_FALSE(contains(run.err, "FAILED")) << run.all();
}

TEST_P(ReplicateCluster, DeadRelayIsReportedBelowItAndToTheSource) {
  auto run = run_cluster(3, GetParam(), {REPLICATE_NODE, "kill-relay"});
  EXPECT_NE(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out,
                       "[rank 2] target 1 saw: flow 'rep-victim-relay' target (rank 2, id 0): "
                       "target (rank 1, id 0), which relays source (rank 0, thread 0), failed"))
      << run.all();
  EXPECT_TRUE(contains(run.out,
                       "[rank 0] target 2 saw: flow 'rep-victim-relay' target (rank 0, id 1): the "
                       "stream of source (rank 0, thread 0) ended early: rank 1"))
      << run.all();
  EXPECT_TRUE(contains(run.out,
                       "[rank 0] source saw: flow 'rep-victim-relay' source (rank 0, thread 0) -> "
                       "target (rank 1, id 0)"))
      << run.all();
  EXPECT_FALSE(contains(run.err, "FAILED")) << run.all();
  EXPECT_FALSE(std::regex_search(run.err, std::regex(R"(rank [02] exited with status)")))
      << run.all();
}

TEST_P(ReplicateCluster, UserErrorsAreReportedClearly) {
  RunOptions options;
  options.env = {{"DFI_REGISTRY_TIMEOUT_MS", "3000"}};  // "unknown flow" waits this long
  auto run = run_cluster(2, GetParam(), {REPLICATE_NODE, "errors"}, options);
  ASSERT_EQ(run.code, 0) << run.all();
  for (const char* error :
       {"duplicate flow", "unknown flow", "wrong flow type", "schema mismatch",
        "target not in the flow", "source not in the flow", "tuple larger than a segment",
        "fan-out 0", "stamp without ordered", "stamp with relay", "ordered without gap timeout", "wrong tuple width", "push after close"}) {
    EXPECT_TRUE(contains(run.out, std::string("error ok: ") + error)) << error << '\n' << run.all();
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ReplicateCluster, ::testing::Values("shm", "tcp"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace dfi
