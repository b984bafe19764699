// `dfi bench driven-replicate --quick` and `dfi bench driven-fairness --quick`, for real (a
// producer rank, consumer ranks and, on the driven side, a mover rank; DFI's ordered replicate
// flow on the same ranks), cut down with --set to short points over shm and tcp. Checks the
// results' shape: every point on both sides, the driven-vs-flow comparisons, Jain's index per
// point with a note saying whether the 0.95 target was met; never the values (a loaded machine
// decides them). A tuple lost, duplicated or reordered, or two consumers that saw different
// sequences, make the scenarios fail by themselves.
#include <gtest/gtest.h>

#include "bench/result.hpp"
#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::find_by_id;

void expect_sides(const json& panel, std::size_t points, const std::vector<std::string>& driven = {"driven"}) {
  std::vector<std::string> sides = driven;
  sides.push_back("flow");
  for (const std::string& side : sides) {
    const json* s = find_by_id(panel["series"], side);
    ASSERT_NE(s, nullptr) << panel["id"] << "/" << side;
    ASSERT_EQ((*s)["points"].size(), points) << panel["id"] << "/" << side;
    for (const json& p : (*s)["points"]) EXPECT_GT(p["value"].get<double>(), 0) << panel["id"] << "/" << side;
    EXPECT_FALSE((*s)["commands"].empty()) << panel["id"] << "/" << side;
  }
  EXPECT_EQ(panel["ratios"].size(), points * driven.size()) << panel["id"];  // each driven series vs the flow
}

void check_driven_replicate(const json& r) {
  ASSERT_TRUE(r.is_object());
  for (const char* id : {"per_consumer", "aggregate"}) {
    const json* panel = find_by_id(r["panels"], id);
    ASSERT_NE(panel, nullptr) << id;
    expect_sides(*panel, 2, {"driven", "driven_poll20us"});  // 1 and 3 consumers, the mover's two intervals
    EXPECT_EQ((*panel)["series"][0]["points"][1]["x"], json(3)) << id;
  }
}

void check_driven_fairness(const json& r) {
  ASSERT_TRUE(r.is_object());
  const json* producers = find_by_id(r["panels"], "producers");
  ASSERT_NE(producers, nullptr);
  expect_sides(*producers, 3);  // P1 p1, P2 p1, P2 p2
  const json* consumers = find_by_id(r["panels"], "consumers");
  ASSERT_NE(consumers, nullptr);
  expect_sides(*consumers, 8);  // 2 points x 4 consumers
  const json* aggregate = find_by_id(r["panels"], "aggregate");
  ASSERT_NE(aggregate, nullptr);
  expect_sides(*aggregate, 2);
  const json* jain = find_by_id(r["panels"], "jain");
  ASSERT_NE(jain, nullptr);
  EXPECT_EQ(find_by_id((*jain)["series"], "driven_producers")->at("points").size(), 1u);  // P = 2 only
  EXPECT_EQ(find_by_id((*jain)["series"], "driven_consumers")->at("points").size(), 2u);
  for (const json& s : (*jain)["series"]) {
    for (const json& p : s["points"]) {
      EXPECT_GT(p["value"].get<double>(), 0.0);
      EXPECT_LE(p["value"].get<double>(), 1.0 + 1e-9);
    }
  }
  int verdicts = 0;
  for (const json& note : r["notes"]) {
    const std::string text = note.get<std::string>();
    verdicts += text.rfind("Jain's index, driven", 0) == 0 && text.find("target >= 0.95") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(verdicts, 2) << "a verdict over the producers and one over the consumers";
}

const std::vector<std::string> kCutDown = {"--set", "seconds=0.25"};

TEST(BenchDrivenReplicate, QuickOverShm) {
  check_driven_replicate(testing::run_quick("driven-replicate", "shm", kCutDown, 120s));
}

TEST(BenchDrivenReplicate, QuickOverTcp) {
  check_driven_replicate(testing::run_quick("driven-replicate", "tcp", kCutDown, 120s));
}

TEST(BenchDrivenFairness, QuickOverShm) {
  check_driven_fairness(testing::run_quick("driven-fairness", "shm", kCutDown, 120s));
}

TEST(BenchDrivenFairness, QuickOverTcp) {
  check_driven_fairness(testing::run_quick("driven-fairness", "tcp", kCutDown, 120s));
}

}  // namespace
}  // namespace dfi::tools::bench
