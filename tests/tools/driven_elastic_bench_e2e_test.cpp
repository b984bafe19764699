// `dfi bench driven-elastic --quick`, for real (4 producers on rank 0, 4 paced consumers on rank 1
// that join and leave, the mover on rank 2; then the static flows with 1..4 consumers), over shm
// and tcp. Checks the result's shape: a stacked per-consumer timeline covering the run, the
// aggregate of all 7 phases against the static flow of as many consumers with its 0.9 target;
// never the values (a loaded machine decides them). A tuple lost or duplicated, a consumer that
// joined and got nothing, make the scenario fail by itself.
#include <gtest/gtest.h>

#include "bench/result.hpp"
#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::find_by_id;

void check_driven_elastic(const json& r) {
  ASSERT_TRUE(r.is_object());
  const json* timeline = find_by_id(r["panels"], "timeline");
  ASSERT_NE(timeline, nullptr);
  EXPECT_EQ((*timeline)["stacked"], true);
  for (const char* c : {"c1", "c2", "c3", "c4"}) {
    const json* s = find_by_id((*timeline)["series"], c);
    ASSERT_NE(s, nullptr) << c;
    EXPECT_GE((*s)["points"].size(), 35u) << c;  // 7 phases of 0.6 s in 0.1 s bins
    EXPECT_FALSE((*s)["commands"].empty()) << c;
  }
  const json* aggregate = find_by_id(r["panels"], "aggregate");
  ASSERT_NE(aggregate, nullptr);
  ASSERT_EQ((*aggregate)["ratios"].size(), 7u);
  EXPECT_EQ((*aggregate)["ratios"][3]["x"], json("4 (4)"));
  for (const json& ratio : (*aggregate)["ratios"]) {
    EXPECT_DOUBLE_EQ(ratio["target"].get<double>(), 0.9);
    EXPECT_GT(ratio["dfi_value"].get<double>(), 0);
    EXPECT_GT(ratio["baseline_value"].get<double>(), 0);
  }
}

TEST(BenchDrivenElastic, QuickOverShm) { check_driven_elastic(testing::run_quick("driven-elastic", "shm", {}, 120s)); }

TEST(BenchDrivenElastic, QuickOverTcp) { check_driven_elastic(testing::run_quick("driven-elastic", "tcp", {}, 120s)); }

}  // namespace
}  // namespace dfi::tools::bench
