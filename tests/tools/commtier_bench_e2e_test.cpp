// `dfi bench commtier --quick`, for real (2 ranks), cut down with --set to seconds over shm and
// tcp. Checks the result's shape: the consuming and throughput panels with the multi, single,
// flow and limit series at every size, the targets of the consuming comparisons, the sweep and
// lanes panels; every bandwidth positive; never how fast anything is. (A transfer of the wrong
// size, number or content makes the scenario fail by itself.)
#include <gtest/gtest.h>

#include "bench/result.hpp"
#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::find_by_id;

void check_series(const json& panel, const char* id, std::size_t points) {
  const json* s = find_by_id(panel["series"], id);
  ASSERT_NE(s, nullptr) << id;
  ASSERT_EQ((*s)["points"].size(), points) << id;
  for (const json& p : (*s)["points"]) EXPECT_GT(p["value"].get<double>(), 0) << id;
  EXPECT_FALSE((*s)["commands"].empty()) << id;
}

void check_commtier(const json& r) {
  ASSERT_TRUE(r.is_object());
  for (const char* test : {"consuming", "throughput"}) {
    const json* p = find_by_id(r["panels"], test);
    ASSERT_NE(p, nullptr) << test;
    for (const char* series : {"multi", "single", "flow", "limit"}) check_series(*p, series, 2);
    ASSERT_EQ((*p)["ratios"].size(), 6u) << test;  // 3 comparisons x 2 sizes
  }
  const json* consuming = find_by_id(r["panels"], "consuming");
  ASSERT_NE(consuming, nullptr);
  EXPECT_DOUBLE_EQ((*consuming)["ratios"][0]["target"].get<double>(), 1.5);
  const json* sweep = find_by_id(r["panels"], "sweep");
  ASSERT_NE(sweep, nullptr);
  check_series(*sweep, "rb1", 2);
  check_series(*sweep, "rb2", 2);
  const json* lanes = find_by_id(r["panels"], "lanes");
  ASSERT_NE(lanes, nullptr);
  check_series(*lanes, "lanes1", 2);
  check_series(*lanes, "lanes2", 2);
}

const std::vector<std::string> kCutDown = {"--set", "sizes=[1000,65536]", "--set", "sweep_counts=[1,2]",
                                           "--set", "sweep_bytes=[1024,16384]", "--set", "sweep_size=65536",
                                           "--set", "bytes_per_size=1048576", "--set", "max_transfers=200"};

TEST(BenchCommtier, QuickOverShm) { check_commtier(testing::run_quick("commtier", "shm", kCutDown, 120s)); }

TEST(BenchCommtier, QuickOverTcp) { check_commtier(testing::run_quick("commtier", "tcp", kCutDown, 120s)); }

}  // namespace
}  // namespace dfi::tools::bench
