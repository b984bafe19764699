// Multi-process driven-flow tests (3 ranks: two processing units and the mover); every body runs
// over shm and over TCP.
#include <gtest/gtest.h>

#include "cluster_run.hpp"

namespace dfi {
namespace {

using testing::contains;
using testing::run_cluster;

class DrivenCluster : public ::testing::TestWithParam<std::string> {};

// Small rings (4 segments of 10 tuples): the mover wraps every ring many times and the producers
// wait for it; partial segments from flush() travel too.
TEST_P(DrivenCluster, KeyShuffleThroughTheMoverDeliversEveryTupleOnceInProducerOrder) {
  auto run = run_cluster(3, GetParam(), {DRIVEN_NODE, "shuffle", "4", "256", "20000"});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "60000 of 60000 tuples, all exactly once, routed by key, in producer order")) << run.all();
}

// The flows' default ring shape of the transport.
TEST_P(DrivenCluster, KeyShuffleWithDefaultRings) {
  auto run = run_cluster(3, GetParam(), {DRIVEN_NODE, "shuffle", "0", "0", "200000"});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "600000 of 600000 tuples, all exactly once")) << run.all();
}

TEST_P(DrivenCluster, ExplicitOneToOneWithAPollInterval) {
  auto run = run_cluster(3, GetParam(), {DRIVEN_NODE, "explicit", "50000"});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "driven explicit: 50000 tuples in order")) << run.all();
}

TEST_P(DrivenCluster, UserErrorsAreReportedClearly) {
  auto run = run_cluster(3, GetParam(), {DRIVEN_NODE, "errors"});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "driven errors: all clear")) << run.all();
}

INSTANTIATE_TEST_SUITE_P(Transports, DrivenCluster, ::testing::Values("shm", "tcp"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace dfi
