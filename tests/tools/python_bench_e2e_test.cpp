// End-to-end runs of `dfi bench python --quick` over shm and tcp, cut down to 20 000 rows per
// rank and two repetitions (each side on 2 and 4 ranks, taking turns). Checks the result's shape,
// never a speed. The mpi4py peer runs where the venv has mpi4py (scripts/dev bench installs
// python/requirements-bench.txt); elsewhere the result must say why it was left out, and the test
// reports that part as skipped.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using testing::find_by_id;
using testing::run_quick;

// Checks the panel; returns why the mpi4py series is missing (empty when it ran).
std::string check_python(const json& r) {
  EXPECT_EQ(r["parameters"]["rows"], 20000);
  EXPECT_EQ(r["parameters"]["ranks"], json::array({2, 4}));
  const json* panel = find_by_id(r["panels"], "rows_per_s");
  if (panel == nullptr) {
    ADD_FAILURE() << r.dump(2);
    return {};
  }
  std::string missing;
  if (find_by_id((*panel)["series"], "mpi4py") == nullptr) {
    for (const json& note : r["notes"]) {
      if (note.get<std::string>().find("mpi4py series left out: ") == 0) missing = note;
    }
    EXPECT_FALSE(missing.empty()) << "no mpi4py series and no note saying why: " << r.dump(2);
  }
  for (const char* id : {"python", "cpp", "mpi4py"}) {
    if (std::string(id) == "mpi4py" && !missing.empty()) continue;
    const json* series = find_by_id((*panel)["series"], id);
    if (series == nullptr) {
      ADD_FAILURE() << id;
      continue;
    }
    EXPECT_EQ((*series)["points"].size(), 2u) << id << ": 2 and 4 ranks";
    for (const json& point : (*series)["points"]) {
      EXPECT_EQ(point["samples"].size(), 2u) << id << ": one sample per repetition";
      EXPECT_GT(point["value"].get<double>(), 0) << id;
    }
  }
  const json& ratios = (*panel)["ratios"];
  EXPECT_EQ(ratios.size(), missing.empty() ? 4u : 2u) << ratios.dump(2);
  for (const json& ratio : ratios) {
    EXPECT_EQ(ratio["dfi"], "python");
    EXPECT_EQ(ratio["target"], ratio["baseline"] == "cpp" ? 0.9 : 2.0) << ratio.dump();
  }
  return missing;
}

void quick(const std::string& transport) {
  const std::string missing = check_python(
      run_quick("python", transport, {"--set", "rows=20000", "--repeat", "2"}, std::chrono::seconds(90)));
  if (!missing.empty()) GTEST_SKIP() << "python and cpp checked; " << missing;
}

TEST(BenchPython, QuickOverShm) { quick("shm"); }

TEST(BenchPython, QuickOverTcp) { quick("tcp"); }

}  // namespace
}  // namespace dfi::tools::bench
