// `dfi bench driven-restart --quick`, for real (producer on rank 0, consumer on rank 1, `dfi
// mover` processes on rank 2 killed by the crash_at seam and restarted), over shm and tcp. Checks
// the result's shape: every part of every restart (2 quick kills), the pause by the movers' stamps
// and the consumer's longest wait compared, each part and the pause positive, the parts adding up
// to the pause; never the values (a loaded machine decides them). A tuple lost, duplicated or out
// of order, or a mover that did not resume, makes the scenario fail by itself.
#include <gtest/gtest.h>

#include "bench/result.hpp"
#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::find_by_id;

void check_driven_restart(const json& r) {
  ASSERT_TRUE(r.is_object());
  const json* parts = find_by_id(r["panels"], "parts");
  ASSERT_NE(parts, nullptr);
  double sum = 0;
  for (const char* part : {"process_start", "join", "attach", "recover", "first_move"}) {
    const json* s = find_by_id((*parts)["series"], part);
    ASSERT_NE(s, nullptr) << part;
    ASSERT_EQ((*s)["points"].size(), 1u) << part;
    EXPECT_EQ((*s)["points"][0]["samples"].size(), 2u) << part << ": one sample per restart (2 kills)";
    EXPECT_GT((*s)["points"][0]["value"].get<double>(), 0) << part;
    for (const json& v : (*s)["points"][0]["samples"]) sum += v.get<double>();
  }
  const json* pause = find_by_id(r["panels"], "pause");
  ASSERT_NE(pause, nullptr);
  for (const char* series : {"mover", "consumer"}) {
    const json* s = find_by_id((*pause)["series"], series);
    ASSERT_NE(s, nullptr) << series;
    ASSERT_EQ((*s)["points"].size(), 1u) << series;
    EXPECT_GT((*s)["points"][0]["value"].get<double>(), 0) << series;
  }
  EXPECT_EQ((*pause)["ratios"].size(), 1u);
  // The longest restart's pause is at most the sum of both restarts' parts.
  EXPECT_LE(find_by_id((*pause)["series"], "mover")->at("points")[0]["value"].get<double>(), sum + 1e-6);
}

TEST(BenchDrivenRestart, QuickOverShm) { check_driven_restart(testing::run_quick("driven-restart", "shm", {}, 120s)); }

TEST(BenchDrivenRestart, QuickOverTcp) { check_driven_restart(testing::run_quick("driven-restart", "tcp", {}, 120s)); }

}  // namespace
}  // namespace dfi::tools::bench
