// `dfi bench driven-lat --quick`, for real (producer on rank 0, consumer on rank 1, the mover on
// rank 2; the latency-mode shuffle flow between the same ranks), over shm and tcp. Checks the
// result's shape: a median and a 99th-percentile panel per tuple size, the baseline, every
// polling interval and the doorbell series at every rate, each compared with the baseline and the
// doorbell also with polling by backoff; the mover's CPU per series and rate, and the idle points
// per mover mode; never the values (a loaded machine decides them). A tuple lost, duplicated or out
// of order makes the scenario fail by itself.
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
      for (const char* series : {"flow", "poll_0us", "poll_50us", "doorbell"}) {
        const json* s = find_by_id((*panel)["series"], series);
        ASSERT_NE(s, nullptr) << id << "/" << series;
        ASSERT_EQ((*s)["points"].size(), 2u) << id << "/" << series;  // the two quick rates
        for (const json& p : (*s)["points"]) EXPECT_GT(p["value"].get<double>(), 0) << id << "/" << series;
        EXPECT_FALSE((*s)["commands"].empty()) << id << "/" << series;
      }
      // (2 intervals + the doorbell) x 2 rates vs the flow, and the doorbell vs poll_0us at 2 rates
      EXPECT_EQ((*panel)["ratios"].size(), 8u) << id;
    }
    const json* cpu = find_by_id(r["panels"], std::string("mover_cpu_") + size);
    ASSERT_NE(cpu, nullptr) << size;
    for (const char* series : {"poll_0us", "poll_50us", "doorbell"}) {
      const json* s = find_by_id((*cpu)["series"], series);
      ASSERT_NE(s, nullptr) << "mover_cpu/" << series;
      ASSERT_EQ((*s)["points"].size(), 2u) << "mover_cpu/" << series;
      for (const json& p : (*s)["points"]) EXPECT_GT(p["value"].get<double>(), 0) << "mover_cpu/" << series;
    }
    EXPECT_EQ((*cpu)["ratios"].size(), 2u) << "mover_cpu: the doorbell vs poll_0us at 2 rates";
  }
  for (const char* id : {"idle_mover_cpu", "idle_pu_cpu"}) {
    const json* panel = find_by_id(r["panels"], id);
    ASSERT_NE(panel, nullptr) << id;
    for (const char* series : {"poll_0us", "poll_50us", "doorbell"}) {
      const json* s = find_by_id((*panel)["series"], series);
      ASSERT_NE(s, nullptr) << id << "/" << series;
      ASSERT_EQ((*s)["points"].size(), 1u) << id << "/" << series;
    }
    EXPECT_EQ((*panel)["ratios"].size(), 1u) << id;
  }
}

const std::vector<std::string> kCutDown = {"--set", "seconds=0.15"};

TEST(BenchDrivenLat, QuickOverShm) { check_driven_lat(testing::run_quick("driven-lat", "shm", kCutDown, 120s)); }

TEST(BenchDrivenLat, QuickOverTcp) { check_driven_lat(testing::run_quick("driven-lat", "tcp", kCutDown, 120s)); }

}  // namespace
}  // namespace dfi::tools::bench
