// End-to-end runs of `dfi bench python --quick` over shm and tcp, cut down to 200 000 rows and
// two repetitions (one Python and one C++ transfer each, alternating). Checks the result's
// shape, never a speed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using testing::find_by_id;
using testing::run_quick;

void check_python(const json& r) {
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["parameters"]["rows"], 200000);
  const json* panel = find_by_id(r["panels"], "rows_per_s");
  ASSERT_NE(panel, nullptr) << r.dump(2);
  for (const char* id : {"python", "cpp"}) {
    const json* series = find_by_id((*panel)["series"], id);
    ASSERT_NE(series, nullptr) << id;
    ASSERT_EQ((*series)["points"].size(), 1u) << id;
    const json& point = (*series)["points"][0];
    EXPECT_EQ(point["samples"].size(), 2u) << id << ": one sample per repetition";
    EXPECT_GT(point["value"].get<double>(), 0) << id;
  }
  ASSERT_EQ((*panel)["ratios"].size(), 1u);
  EXPECT_EQ((*panel)["ratios"][0]["dfi"], "python");
  EXPECT_EQ((*panel)["ratios"][0]["baseline"], "cpp");
  EXPECT_EQ((*panel)["ratios"][0]["target"], 0.8);
}

TEST(BenchPython, QuickOverShm) {
  check_python(run_quick("python", "shm", {"--set", "rows=200000", "--repeat", "2"},
                         std::chrono::seconds(90)));
}

TEST(BenchPython, QuickOverTcp) {
  check_python(run_quick("python", "tcp", {"--set", "rows=200000", "--repeat", "2"},
                         std::chrono::seconds(90)));
}

}  // namespace
}  // namespace dfi::tools::bench
