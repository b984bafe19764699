// `dfi bench driven-lat --quick`, for real (producer on rank 0, consumer on rank 1, the mover on
// rank 2; the latency-mode shuffle flow between the same ranks), over shm and tcp. Checks the
// result's shape: a median and a 99th-percentile panel per tuple size, the baseline and every
// polling interval at every rate, each interval compared with the baseline, the note that
// doorbell mode is missing; never the values (a loaded machine decides them). A tuple lost,
// duplicated or out of order makes the scenario fail by itself.
#include <gtest/gtest.h>

#include "bench/result.hpp"
#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::find_by_id;

void check_driven_lat(const json& r) {
  ASSERT_TRUE(r.is_object());
  for (const char* size : {"64", "1024"}) {
    for (const char* stat : {"median_", "p99_"}) {
      const std::string id = std::string(stat) + size;
      const json* panel = find_by_id(r["panels"], id);
      ASSERT_NE(panel, nullptr) << id;
      for (const char* series : {"flow", "poll_0us", "poll_50us"}) {
        const json* s = find_by_id((*panel)["series"], series);
        ASSERT_NE(s, nullptr) << id << "/" << series;
        ASSERT_EQ((*s)["points"].size(), 2u) << id << "/" << series;  // the two quick rates
        for (const json& p : (*s)["points"]) EXPECT_GT(p["value"].get<double>(), 0) << id << "/" << series;
        EXPECT_FALSE((*s)["commands"].empty()) << id << "/" << series;
      }
      EXPECT_EQ((*panel)["ratios"].size(), 4u) << id;  // 2 intervals x 2 rates, each vs the flow
    }
  }
  bool doorbell = false;
  for (const json& note : r["notes"]) doorbell = doorbell || note.get<std::string>().find("Doorbell") != std::string::npos;
  EXPECT_TRUE(doorbell) << "the missing doorbell mode is said";
}

const std::vector<std::string> kCutDown = {"--set", "seconds=0.15"};

TEST(BenchDrivenLat, QuickOverShm) { check_driven_lat(testing::run_quick("driven-lat", "shm", kCutDown, 120s)); }

TEST(BenchDrivenLat, QuickOverTcp) { check_driven_lat(testing::run_quick("driven-lat", "tcp", kCutDown, 120s)); }

}  // namespace
}  // namespace dfi::tools::bench
