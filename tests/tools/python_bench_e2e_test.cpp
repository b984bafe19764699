// End-to-end runs of `dfi bench python --quick` over shm and tcp, cut down to 20 000 rows per
// rank and two repetitions (each side on 2 and 4 ranks, taking turns). Checks the result's shape,
// never a speed. The mpi4py peer runs where the venv has mpi4py (scripts/dev bench installs
// python/requirements-bench.txt); elsewhere the result must say why it was left out, and the
// Mpi4pyPeer tests report themselves skipped with that reason (the Python and C++ sides are
// checked either way).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <map>
#include <string>

#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using testing::find_by_id;
using testing::run_quick;

// One quick run per transport, shared by the tests of that transport.
const json& quick_result(const std::string& transport) {
  static std::map<std::string, json> results;
  auto [at, added] = results.try_emplace(transport);
  if (added) at->second = run_quick("python", transport, {"--set", "rows=20000", "--repeat", "2"},
                                    std::chrono::seconds(90));
  return at->second;
}

// Why the result has no mpi4py series (its note), or empty when it has one.
std::string mpi4py_missing(const json& r) {
  const json* panel = find_by_id(r["panels"], "rows_per_s");
  if (panel == nullptr || find_by_id((*panel)["series"], "mpi4py") != nullptr) return {};
  for (const json& note : r["notes"]) {
    if (note.get<std::string>().find("mpi4py series left out: ") == 0) return note;
  }
  return "no mpi4py series and no note saying why";
}

// Series `id` has a point per rank count with a sample per repetition and, unless it is the
// Python side itself, the two ratios python / id with `target`.
void check_series(const json& r, const std::string& id, double target) {
  const json* panel = find_by_id(r["panels"], "rows_per_s");
  ASSERT_NE(panel, nullptr) << r.dump(2);
  const json* series = find_by_id((*panel)["series"], id);
  ASSERT_NE(series, nullptr) << id;
  EXPECT_EQ((*series)["points"].size(), 2u) << id << ": 2 and 4 ranks";
  for (const json& point : (*series)["points"]) {
    EXPECT_EQ(point["samples"].size(), 2u) << id << ": one sample per repetition";
    EXPECT_GT(point["value"].get<double>(), 0) << id;
  }
  int ratios = 0;
  for (const json& ratio : (*panel)["ratios"]) {
    if (ratio["baseline"] != id) continue;
    ++ratios;
    EXPECT_EQ(ratio["dfi"], "python");
    EXPECT_EQ(ratio["target"], target) << ratio.dump();
  }
  EXPECT_EQ(ratios, id == "python" ? 0 : 2) << "python / " << id << " at 2 and 4 ranks";
}

// The Python and C++ sides, which every build with the bindings has.
void check_python_and_cpp(const std::string& transport) {
  const json& r = quick_result(transport);
  EXPECT_EQ(r["parameters"]["rows"], 20000);
  EXPECT_EQ(r["parameters"]["ranks"], json::array({2, 4}));
  check_series(r, "python", 0);
  check_series(r, "cpp", 0.9);
}

// The mpi4py peer: skipped, saying why, where the venv has no mpi4py.
void check_mpi4py(const std::string& transport) {
  const json& r = quick_result(transport);
  const std::string missing = mpi4py_missing(r);
  if (missing.find("mpi4py series left out: ") == 0) GTEST_SKIP() << missing;
  ASSERT_TRUE(missing.empty()) << missing << "\n" << r.dump(2);
  check_series(r, "mpi4py", 2.0);
}

TEST(BenchPython, QuickOverShm) { check_python_and_cpp("shm"); }
TEST(BenchPython, Mpi4pyPeerOverShm) { check_mpi4py("shm"); }
TEST(BenchPython, QuickOverTcp) { check_python_and_cpp("tcp"); }
TEST(BenchPython, Mpi4pyPeerOverTcp) { check_mpi4py("tcp"); }

}  // namespace
}  // namespace dfi::tools::bench
