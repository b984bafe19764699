// `dfi bench rsi --quick`, for real (2 storage ranks, 2 client ranks), cut down with --set to
// seconds over shm and tcp. Checks the result's shape: RSI and 2PC series on both workloads,
// every commit rate positive, the ratio against the 5x target; never how fast anything is. (A
// run whose bank total, checkout checks or lock audit fail makes the scenario fail by itself.)
#include <gtest/gtest.h>

#include "bench/result.hpp"
#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::find_by_id;

void check_rsi(const json& r) {
  ASSERT_TRUE(r.is_object());
  for (const char* workload : {"bank", "checkout"}) {
    const json* p = find_by_id(r["panels"], workload);
    ASSERT_NE(p, nullptr) << workload;
    for (const char* series : {"rsi", "2pc"}) {
      const json* s = find_by_id((*p)["series"], series);
      ASSERT_NE(s, nullptr) << workload << "/" << series;
      ASSERT_EQ((*s)["points"].size(), 1u) << workload << "/" << series;
      EXPECT_EQ((*s)["points"][0]["x"], json(2)) << workload << "/" << series;
      EXPECT_GT((*s)["points"][0]["value"].get<double>(), 0) << workload << "/" << series;
      EXPECT_FALSE((*s)["commands"].empty()) << workload << "/" << series;
    }
    ASSERT_EQ((*p)["ratios"].size(), 1u) << workload;
    EXPECT_DOUBLE_EQ((*p)["ratios"][0]["target"].get<double>(), 5.0) << workload;
    EXPECT_NE(find_by_id(r["panels"], std::string(workload) + "_aborts"), nullptr) << workload;
  }
}

const std::vector<std::string> kCutDown = {"--set", "client_threads=[2]", "--set", "seconds=0.5", "--set",
                                           "products=200", "--set", "accounts=1000"};

TEST(BenchRsi, QuickOverShm) { check_rsi(testing::run_quick("rsi", "shm", kCutDown, 120s)); }

TEST(BenchRsi, QuickOverTcp) { check_rsi(testing::run_quick("rsi", "tcp", kCutDown, 120s)); }

}  // namespace
}  // namespace dfi::tools::bench
