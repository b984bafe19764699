// Multi-process combiner tests: every body runs over shm and over TCP.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "cluster_run.hpp"

namespace dfi {
namespace {

using testing::contains;
using testing::run_cluster;
using testing::RunOptions;

// DFI_COMBINER_CONFIGS (default 30) random flows per transport; DFI_PROPERTY_SEED fixes the seed.
std::string property_count() {
  const char* count = std::getenv("DFI_COMBINER_CONFIGS");
  return count != nullptr ? count : "30";
}

std::string property_seed() {
  if (const char* seed = std::getenv("DFI_PROPERTY_SEED")) return seed;
  return std::to_string(std::chrono::system_clock::now().time_since_epoch().count() % 1000000007);
}

class CombinerCluster : public ::testing::TestWithParam<std::string> {};

TEST_P(CombinerCluster, RandomFlowsEqualASingleNodeReference) {
  const std::string seed = property_seed();
  RunOptions options;
  options.timeout = std::chrono::seconds(300);
  auto run =
      run_cluster(3, GetParam(), {COMBINER_NODE, "property", seed, property_count()}, options);
  ASSERT_EQ(run.code, 0) << "seed " << seed << '\n' << run.all();
  EXPECT_TRUE(contains(run.out, "all equal to the reference")) << run.all();
  const auto at = run.out.find("combiner property:");
  std::cout << "seed " << seed << ": " << (at == std::string::npos ? run.out : run.out.substr(at))
            << std::flush;
}

TEST_P(CombinerCluster, SumWrapsAvgIsExactMinMaxKeepExtremes) {
  auto run = run_cluster(3, GetParam(), {COMBINER_NODE, "overflow"});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "wrapping sums, exact averages and extremes as documented"))
      << run.all();
  EXPECT_TRUE(contains(run.out, "sum(v) of 3 x INT64_MAX = 9223372036854775805 (wrapped)"))
      << run.all();
}

TEST_P(CombinerCluster, StreamingReadSeesFlushedPartials) {
  auto run = run_cluster(2, GetParam(), {COMBINER_NODE, "partial"});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "after phase 2 the streaming read counts 2000 tuples in 10 groups"))
      << run.all();
  EXPECT_TRUE(contains(run.out, "final results have 10 groups")) << run.all();
}

TEST_P(CombinerCluster, BeforeFirstWriteRunsOnceBeforeTheFirstWrite) {
  auto run = run_cluster(2, GetParam(), {COMBINER_NODE, "first-write"});
  ASSERT_EQ(run.code, 0) << run.all();
  for (const char* first : {"full table", "full table routed to 2 targets", "full table starting a pass-through window",
                            "flush", "close", "close on destruction"}) {
    EXPECT_TRUE(contains(run.out, std::string("first-write: ") + first +
                                      ": before_first_write ran once, before the first write"))
        << first << '\n' << run.all();
  }
}

TEST_P(CombinerCluster, UserErrorsAreReportedClearly) {
  RunOptions options;
  options.env = {{"DFI_REGISTRY_TIMEOUT_MS", "3000"}};
  auto run = run_cluster(2, GetParam(), {COMBINER_NODE, "errors"}, options);
  ASSERT_EQ(run.code, 0) << run.all();
  for (const char* error :
       {"no aggregates", "unknown column", "non-numeric column", "no target", "latency mode",
        "duplicate aggregate", "no key column", "result names clash", "unknown aggregate function",
        "sum without a column", "wrong flow type", "unknown flow", "source not in the flow",
        "wrong tuple width", "push after close"}) {
    EXPECT_TRUE(contains(run.out, std::string("error ok: ") + error)) << error << '\n' << run.all();
  }
}

TEST_P(CombinerCluster, DeadSourceFailsTheConsumeNamingFlowAndRank) {
  auto run = run_cluster(3, GetParam(), {COMBINER_NODE, "kill-source"});
  EXPECT_NE(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out,
                       "[rank 0] target saw: flow 'comb-victim' target (rank 0, id 0): source "
                       "(rank 1, thread 0) failed before closing"))
      << run.all();
  EXPECT_FALSE(contains(run.err, "FAILED")) << run.all();
}

INSTANTIATE_TEST_SUITE_P(Transports, CombinerCluster, ::testing::Values("shm", "tcp"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace dfi
