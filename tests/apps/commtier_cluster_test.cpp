// Multi-process tests of apps/commtier (commtier_node.cpp), every body over shm and over TCP:
// exactly-once, in-order delivery in both directions for single- and multi-buffer
// configurations and several lanes; errors named; a dead SU is named in the CU's error; and
// `dfi commtier` runs the throughput and consuming tests through a tier and through flows.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "cluster_run.hpp"

namespace dfi {
namespace {

using testing::contains;
using testing::run_cluster;
using testing::RunOptions;

class Commtier : public ::testing::TestWithParam<std::string> {};

// Buffers of 64 B (two messages of a word at most), 1 KiB and 4 KiB, one (002's single buffer),
// two, three and seven of them; 300 transfers each way per lane, sizes 0 B to three buffers.
TEST_P(Commtier, EveryTransferArrivesOnceAndInOrderForEveryBufferConfiguration) {
  auto run = run_cluster(2, GetParam(), {COMMTIER_NODE, "exchange", "1", "1:64", "1:1024", "2:256", "3:4096", "7:1024"});
  ASSERT_EQ(run.code, 0) << run.all();
  for (const std::string& tier : std::vector<std::string>{"x0-1:64", "x1-1:1024", "x2-2:256", "x3-3:4096", "x4-7:1024"}) {
    EXPECT_TRUE(contains(run.out, tier + " SU lane 0: 300 requests checked, 300 replies sent")) << tier << run.all();
    EXPECT_TRUE(contains(run.out, tier + " CU lane 0: 300 replies checked")) << tier << run.all();
  }
}

TEST_P(Commtier, LanesAreIndependentAndEachKeepsItsOrder) {
  auto run = run_cluster(2, GetParam(), {COMMTIER_NODE, "exchange", "3", "2:512"});
  ASSERT_EQ(run.code, 0) << run.all();
  for (const std::string& lane : std::vector<std::string>{"0", "1", "2"}) {
    EXPECT_TRUE(contains(run.out, "x0-2:512 SU lane " + lane + ": 300 requests checked")) << run.all();
    EXPECT_TRUE(contains(run.out, "x0-2:512 CU lane " + lane + ": 300 replies checked")) << run.all();
  }
}

TEST_P(Commtier, MisuseIsNamed) {
  auto run = run_cluster(2, GetParam(), {COMMTIER_NODE, "errors"});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "error ok: commtier 'e': the CU and the SU are both rank 0")) << run.all();
  EXPECT_TRUE(contains(run.out, "error ok: commtier 'e': rank 1 cannot open a sender at the su")) << run.all();
  EXPECT_TRUE(contains(run.out, "error ok: commtier 'nope' does not exist")) << run.all();
  EXPECT_TRUE(contains(run.out, "a transfer of 600 B does not fit the 10 B given")) << run.all();
  EXPECT_TRUE(contains(run.out, "send after close")) << run.all();
}

TEST_P(Commtier, ADeadStorageUnitIsNamedInTheComputeUnitsError) {
  RunOptions options;
  options.timeout = std::chrono::seconds(60);
  auto run = run_cluster(3, GetParam(), {COMMTIER_NODE, "kill"}, options);
  EXPECT_NE(run.code, 0) << run.all();  // rank 2 was killed
  EXPECT_LT(run.seconds, 30) << run.all();
  EXPECT_TRUE(contains(run.out, "[rank 1] commtier_node: CU received 50 transfers, then: flow 'k.to_cu.0'"))
      << run.all();
  EXPECT_TRUE(contains(run.out, "source (rank 2, thread 0) failed before closing the flow")) << run.all();
  EXPECT_TRUE(contains(run.out, "and then: flow 'k.to_cu.0'")) << run.all();
  EXPECT_TRUE(contains(run.err, "rank 2")) << run.all();
}

// `dfi commtier`: both tests, through a tier with one and two buffers and two lanes, and through
// flows; every transfer's size, number and the last one's content are checked by run_test.
TEST_P(Commtier, TheCommtierCommandRunsBothTestsThroughATierAndThroughFlows) {
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--test", "consuming", "--buffers", "1"},
        std::vector<std::string>{"--test", "consuming", "--buffers", "2", "--lanes", "2"},
        std::vector<std::string>{"--test", "throughput", "--buffers", "3"},
        std::vector<std::string>{"--test", "consuming", "--via", "flow", "--lanes", "2"}}) {
    std::vector<std::string> argv = {DFI_BINARY, "commtier", "--buffer-bytes", "4KiB", "--sizes", "8,1000,4KiB,20000",
                                     "--bytes-per-size", "256KiB", "--max-transfers", "200"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto run = run_cluster(2, GetParam(), argv);
    ASSERT_EQ(run.code, 0) << run.all();
    EXPECT_TRUE(contains(run.out, "[rank 0] commtier: ")) << run.all();
    EXPECT_TRUE(contains(run.out, "          20000         13")) << run.all();  // 256 KiB / 20000 B transfers
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, Commtier, ::testing::Values("shm", "tcp"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace dfi
