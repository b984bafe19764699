// `dfi bench tpch-q1 --quick`, for real over shm and tcp: tpchgen-cli's lineitem at SF 0.1 (cached
// under the build tree), 2 producer ranks, 3 consumers of cost 1:2:3, the mover; the balance flow
// and static partitioning. The scenario itself fails when a run's Q1 differs from DuckDB's over
// the same file or a tuple is lost or duplicated; this test checks the result's shape (runtime
// against static and ideal with their targets, the per-consumer timelines, costs and shares),
// never the speeds. Skipped when the build's venv lacks tpchgen-cli or duckdb.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "bench/result.hpp"
#include "bench_e2e.hpp"
#include "dfi/launch/child_process.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::find_by_id;

// Why the venv cannot run the scenario, or "".
std::string tools_missing() {
  const std::string venv = DFI_PYTHON_VENV;
  if (venv.empty()) return "the build was configured without DFI_PYTHON_VENV (scripts/dev makes build/venv)";
  if (::access((venv + "/bin/tpchgen-cli").c_str(), X_OK) != 0) {
    return venv + " has no tpchgen-cli (scripts/dev installs python/requirements-dev.txt)";
  }
  if (launch::run_child({{venv + "/bin/python", "-c", "import duckdb"}, {}}, 60s).exit_code != 0) {
    return venv + " cannot import duckdb (scripts/dev installs python/requirements-dev.txt)";
  }
  return {};
}

void check_tpch_q1(const json& r) {
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["parameters"]["scale_factor"], 0.1);
  const json* runtime = find_by_id(r["panels"], "runtime");
  ASSERT_NE(runtime, nullptr);
  for (const char* s : {"balanced", "static", "ideal", "ideal_set"}) {
    const json* series = find_by_id((*runtime)["series"], s);
    ASSERT_NE(series, nullptr) << s;
    ASSERT_EQ((*series)["points"].size(), 1u) << s;
    EXPECT_GT((*series)["points"][0]["value"].get<double>(), 0) << s;
  }
  ASSERT_EQ((*runtime)["ratios"].size(), 3u);
  EXPECT_EQ((*runtime)["ratios"][0]["baseline"], "static");
  EXPECT_DOUBLE_EQ((*runtime)["ratios"][0]["target"].get<double>(), 0.7);
  EXPECT_EQ((*runtime)["ratios"][1]["baseline"], "ideal");
  EXPECT_DOUBLE_EQ((*runtime)["ratios"][1]["target"].get<double>(), 1.1);
  EXPECT_EQ((*runtime)["ratios"][2]["baseline"], "ideal_set");
  EXPECT_DOUBLE_EQ((*runtime)["ratios"][2]["target"].get<double>(), 1.1);
  const json* timeline = find_by_id(r["panels"], "timeline");
  ASSERT_NE(timeline, nullptr);
  for (const char* mode : {"balanced-", "static-"}) {
    for (const char* c : {"c1", "c2", "c3"}) {
      const json* s = find_by_id((*timeline)["series"], std::string(mode) + c);
      ASSERT_NE(s, nullptr) << mode << c;
      EXPECT_GE((*s)["points"].size(), 3u) << mode << c;
      EXPECT_FALSE((*s)["commands"].empty()) << mode << c;
    }
  }
  // Every tuple went to some consumer: the shares of each mode add up to 100 %.
  const json* share = find_by_id(r["panels"], "share");
  ASSERT_NE(share, nullptr);
  for (const char* mode : {"balanced", "static"}) {
    const json* s = find_by_id((*share)["series"], mode);
    ASSERT_NE(s, nullptr) << mode;
    ASSERT_EQ((*s)["points"].size(), 3u) << mode;
    double total = 0;
    for (const json& p : (*s)["points"]) total += p["value"].get<double>();
    EXPECT_NEAR(total, 100.0, 1e-6) << mode;
  }
  bool agreed = false;
  for (const json& note : r["notes"]) agreed = agreed || note.get<std::string>().find("agreed with DuckDB") != std::string::npos;
  EXPECT_TRUE(agreed) << r["notes"].dump();
}

TEST(BenchTpchQ1, QuickOverShm) {
  if (std::string why = tools_missing(); !why.empty()) GTEST_SKIP() << "tpch-q1 cannot run: " << why;
  check_tpch_q1(testing::run_quick("tpch-q1", "shm", {}, 180s));
}

TEST(BenchTpchQ1, QuickOverTcp) {
  if (std::string why = tools_missing(); !why.empty()) GTEST_SKIP() << "tpch-q1 cannot run: " << why;
  check_tpch_q1(testing::run_quick("tpch-q1", "tcp", {}, 180s));
}

}  // namespace
}  // namespace dfi::tools::bench
