// `dfi bench driven-qos --quick`, for real (producers on rank 0, consumers on rank 1, the mover
// on rank 2), cut down with --set to short phases over shm and tcp. Checks the result's shape:
// a timeline per run (QoS and the equal-share baseline) with one series per flow, the achieved
// part of every flow in every phase for both (and, on shm, for the same shares with the mover
// not capped),
// the aggregate comparison against its 0.9 target
// and a note per phase; never how close the shares came (a loaded machine decides that). A run
// in which a tuple is lost, duplicated or out of order makes the scenario fail by itself.
#include <gtest/gtest.h>

#include "bench/result.hpp"
#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::find_by_id;

// `capped`: the mover ran capped (shm's default), so the same shares uncapped were measured too.
void check_driven_qos(const json& r, bool capped) {
  ASSERT_TRUE(r.is_object());
  for (const auto& [panel, prefix] : {std::pair{"timeline", "flow"}, std::pair{"timeline_equal", "equal"}}) {
    const json* p = find_by_id(r["panels"], panel);
    ASSERT_NE(p, nullptr) << panel;
    for (int f = 0; f < 3; ++f) {
      const json* s = find_by_id((*p)["series"], prefix + std::to_string(f));
      ASSERT_NE(s, nullptr) << panel << "/" << f;
      EXPECT_GE((*s)["points"].size(), 15u) << panel << "/" << f;  // 3 phases of 0.6 s in 0.1 s bins
      EXPECT_FALSE((*s)["commands"].empty()) << panel << "/" << f;
    }
  }
  const json* share = find_by_id(r["panels"], "share");
  ASSERT_NE(share, nullptr);
  EXPECT_EQ(find_by_id((*share)["series"], "uncapped") != nullptr && find_by_id((*share)["series"], "uncapped")->at("points").size() == 9u, capped);
  for (const char* series : {"qos", "equal"}) {
    const json* s = find_by_id((*share)["series"], series);
    ASSERT_NE(s, nullptr) << series;
    ASSERT_EQ((*s)["points"].size(), 9u) << series;  // 3 phases x 3 flows
    double sum = 0;
    for (int f = 0; f < 3; ++f) sum += (*s)["points"][f]["value"].get<double>();
    EXPECT_NEAR(sum, 1.0, 1e-6) << series << ": a phase's parts add up to 1";
  }
  EXPECT_EQ((*share)["series"][0]["points"][8]["x"], json("p3 f2 (0.67)"));
  const json* aggregate = find_by_id(r["panels"], "aggregate");
  ASSERT_NE(aggregate, nullptr);
  ASSERT_EQ((*aggregate)["ratios"].size(), 3u);
  EXPECT_DOUBLE_EQ((*aggregate)["ratios"][0]["target"].get<double>(), 0.9);
  for (const json& ratio : (*aggregate)["ratios"]) EXPECT_GT(ratio["dfi_value"].get<double>(), 0);
  int phase_notes = 0;
  for (const json& note : r["notes"]) phase_notes += note.get<std::string>().rfind("phase ", 0) == 0 ? 1 : 0;
  EXPECT_EQ(phase_notes, 3);
}

const std::vector<std::string> kCutDown = {"--set", "phase_seconds=0.6", "--set", "settle_seconds=0.2"};

TEST(BenchDrivenQos, QuickOverShm) { check_driven_qos(testing::run_quick("driven-qos", "shm", kCutDown, 120s), true); }

TEST(BenchDrivenQos, QuickOverTcp) { check_driven_qos(testing::run_quick("driven-qos", "tcp", kCutDown, 120s), false); }

}  // namespace
}  // namespace dfi::tools::bench
