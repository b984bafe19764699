// The self-check across three "hosts": network namespaces joined by a bridge, over TCP.
#include <gtest/gtest.h>

#include "cluster_run.hpp"
#include "dfi/launch/netns.hpp"

namespace dfi {
namespace {

using testing::contains;

TEST(FabricNetns, SelfCheckRunsOnThreeHostsAndLeavesNoNamespace) {
  if (std::string why = launch::netns_unavailable_reason(); !why.empty()) {
    GTEST_SKIP() << "network namespaces unavailable: " << why;
  }
  auto run = testing::run_cluster(3, "tcp", {DFI_BINARY, "fabric", "check", "--quick"}, /*netns=*/true);
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "transport=tcp")) << run.all();
  for (const char* pair : {"0 -> 1  ok", "0 -> 2  ok", "1 -> 0  ok", "1 -> 2  ok", "2 -> 0  ok", "2 -> 1  ok"}) {
    EXPECT_TRUE(contains(run.out, pair)) << pair << '\n' << run.all();
  }
  EXPECT_TRUE(launch::netns_owned_by_this_process().empty());
}

TEST(FabricNetns, KilledHostIsReportedAndNamespacesAreRemoved) {
  if (std::string why = launch::netns_unavailable_reason(); !why.empty()) {
    GTEST_SKIP() << "network namespaces unavailable: " << why;
  }
  auto run = testing::run_cluster(3, "tcp", {FABRIC_NODE, "kill"}, /*netns=*/true);
  EXPECT_NE(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "[rank 0] rank 0 detected the failure")) << run.all();
  EXPECT_TRUE(contains(run.out, "[rank 2] rank 2 detected the failure")) << run.all();
  EXPECT_TRUE(launch::netns_owned_by_this_process().empty());
}

}  // namespace
}  // namespace dfi
