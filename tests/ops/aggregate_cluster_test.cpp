// Multi-process aggregation tests on 4 ranks (ops::Aggregation through `dfi agg`, which checks
// every result against a single-node std::unordered_map aggregation of the same data, and
// ops_node); every body runs over shm and over TCP, with both algorithms.
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

class AggregateCluster : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  const std::string& transport() const { return std::get<0>(GetParam()); }
  const std::string& algorithm() const { return std::get<1>(GetParam()); }
  // `dfi agg ARGS` on 4 ranks; expects the reference check to pass and `groups` groups (unless
  // empty).
  // `out`, if given, receives the ranks' output.
  void agg(const std::vector<std::string>& args, const std::string& groups, std::string* out = nullptr) {
    std::vector<std::string> argv{DFI_BINARY, "agg", "--verify", "yes", "--algorithm", algorithm()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto run = run_cluster(4, transport(), argv);
    if (out != nullptr) *out = run.out;
    ASSERT_EQ(run.code, 0) << run.all();
    if (!groups.empty()) {
      EXPECT_TRUE(contains(run.out, "dfi agg: " + groups + " groups")) << run.all();
    }
    EXPECT_TRUE(contains(run.out, "matches the reference")) << run.all();
  }
};

TEST_P(AggregateCluster, OneGroup) { agg({"--tuples", "200000", "--groups", "1"}, "1"); }

TEST_P(AggregateCluster, FewGroupsTwoThreads) {
  agg({"--tuples", "300000", "--groups", "100", "--threads", "2"}, "100");
}

// Far more groups than a pre-aggregation table holds: every thread ships many times. Its tables
// hardly ever hit, so rdma passes most tuples through unaggregated (adaptive pre-aggregation),
// unless that is switched off.
TEST_P(AggregateCluster, ManyGroupsSmallCacheTables) {
  std::string out;
  agg({"--tuples", "300000", "--groups", "1000000", "--cache-groups", "512"}, "", &out);
  const std::size_t at = out.find(" tuples passed through)");
  ASSERT_NE(at, std::string::npos) << out;
  const std::uint64_t passed = std::stoull(out.substr(out.rfind('(', at) + 1));
  if (algorithm() == "rdma") {
    EXPECT_GT(passed, 200'000u) << out;
    agg({"--tuples", "300000", "--groups", "1000000", "--cache-groups", "512", "--pass-through-below", "0"}, "", &out);
    EXPECT_TRUE(contains(out, "(0 tuples passed through)")) << out;
  } else {
    EXPECT_EQ(passed, 0u) << out;
  }
}

TEST_P(AggregateCluster, ZipfSkew) { agg({"--tuples", "300000", "--groups", "100000", "--zipf", "1.2"}, ""); }

TEST_P(AggregateCluster, EmptyInput) { agg({"--tuples", "0", "--groups", "10"}, "0"); }

// `ops_node MODE ALGORITHM` kills rank 2: every other rank reports peer_failed, well before the
// flow's stall timeout.
void expect_clear_errors_after_a_kill(const std::string& transport, const std::string& mode,
                                      const std::string& algorithm) {
  RunOptions options;
  options.timeout = std::chrono::seconds(40);
  auto run = run_cluster(4, transport, {OPS_NODE, mode, algorithm}, options);
  EXPECT_NE(run.code, 0) << run.all();
  for (int rank : {0, 1, 3}) {
    EXPECT_TRUE(contains(run.out, "rank " + std::to_string(rank) + ": peer_failed: ")) << rank << run.all();
  }
  EXPECT_TRUE(contains(run.out, "rank 2")) << run.all();
  EXPECT_FALSE(contains(run.err, "FAILED")) << run.all();
  EXPECT_LT(run.seconds, 30) << run.all();
}

// Rank 2 dies 200 ms into a large aggregation.
TEST_P(AggregateCluster, AKilledRankGivesEveryOtherRankAClearError) {
  expect_clear_errors_after_a_kill(transport(), "agg-kill", algorithm());
}

// ops::Aggregation: the flow opened before a barrier, the aggregation run after it (what `dfi agg`
// and the bench do); run() refuses a second call and a wrong fragment count.
TEST_P(AggregateCluster, APreparedAggregationRunsOnItsOpenFlow) {
  auto run = run_cluster(4, transport(), {OPS_NODE, "agg-prepared", algorithm()});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "agg-prepared-" + algorithm() + ": 1000 groups, as expected")) << run.all();
}

// Rank 2 opens the aggregation and dies before it runs it: the other ranks end with peer_failed.
TEST_P(AggregateCluster, ARankKilledBetweenOpenAndRunGivesEveryOtherRankAClearError) {
  expect_clear_errors_after_a_kill(transport(), "agg-prepared-kill", algorithm());
}

INSTANTIATE_TEST_SUITE_P(TransportsAndAlgorithms, AggregateCluster,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values("rdma", "hierarchical")),
                         [](const auto& param_info) { return std::get<0>(param_info.param) + "_" + std::get<1>(param_info.param); });

}  // namespace
}  // namespace dfi
