// Flows of every type opened N:N on 32 ranks (issue 27's open at scale), over shm and TCP: each
// rank checks what it received and its registry requests per open (open_scale_node.cpp). The
// 64-rank runs and their timings are `dfi bench scale`.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "cluster_run.hpp"

namespace dfi {
namespace {

using testing::run_cluster;
using testing::RunOptions;

class OpenScale : public ::testing::TestWithParam<std::string> {};

TEST_P(OpenScale, EveryFlowTypeOpensAndClosesOn32Ranks) {
  RunOptions options;
  options.timeout = std::chrono::seconds(240);
  auto run = run_cluster(32, GetParam(), {OPEN_SCALE_NODE, "all", "4"}, options);
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_EQ(run.err.find("FAILED"), std::string::npos) << run.all();
}

// Three source and three target threads on each of 8 ranks: the rank's registry requests for
// the open are those of one thread (a shared spec and records fetch, one record per rank).
TEST_P(OpenScale, ThreadsOfARankShareTheRegistryRequestsOfAnOpen) {
  RunOptions options;
  options.timeout = std::chrono::seconds(120);
  auto run = run_cluster(8, GetParam(), {OPEN_SCALE_NODE, "threads", "16", "3"}, options);
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_EQ(run.err.find("FAILED"), std::string::npos) << run.all();
}

INSTANTIATE_TEST_SUITE_P(Transports, OpenScale, ::testing::Values("shm", "tcp"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace dfi
