// `dfi bench fabric-bw --quick`, for real: two DFI ranks plus ucx_perftest, over shm and tcp.
// Checks the result's shape and that every number is positive; never how fast anything is.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "bench/paths.hpp"
#include "bench/process.hpp"
#include "bench/result.hpp"
#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;
using testing::find_by_id;
using testing::TempDir;

json run_quick(const std::string& transport, const fs::path& out) {
  launch::ChildResult r =
      launch::run_child({{DFI_BINARY, "bench", "fabric-bw", "--quick", "--transport", transport,
                          "--out", out.string(), "--no-plot"},
                         {}},
                        100s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(r.timed_out) << r.output;
  const fs::path file = out / ("fabric-bw-" + transport + "-quick.json");
  std::ifstream in(file);
  EXPECT_TRUE(in.good()) << "no " << file << "\n" << r.output;
  if (!in.good()) return json();
  json result = json::parse(in, nullptr, false);
  EXPECT_FALSE(result.is_discarded()) << file << " is not JSON";
  return result;
}

void check_fabric_bw(const json& r, const std::string& transport) {
  ASSERT_TRUE(r.is_object());
  const std::vector<std::string> problems = validate_result(r);
  for (const std::string& p : problems) ADD_FAILURE() << p;
  EXPECT_EQ(r["scenario"], "fabric-bw");
  EXPECT_EQ(r["transport"], transport);
  EXPECT_TRUE(r["quick"].get<bool>());
  EXPECT_NE(r["command"].get<std::string>().find("dfi bench fabric-bw"), std::string::npos);

  const json* bw = find_by_id(r["panels"], "put_bw");
  ASSERT_NE(bw, nullptr);
  std::set<std::size_t> sizes;
  for (const json& s : r["parameters"]["sizes"]) sizes.insert(s.get<std::size_t>());
  ASSERT_FALSE(sizes.empty());
  for (const char* id : {"dfi", "ucx_perftest"}) {
    const json* series = find_by_id((*bw)["series"], id);
    ASSERT_NE(series, nullptr) << id;
    EXPECT_FALSE((*series)["commands"].empty()) << id;
    std::set<std::size_t> seen;
    for (const json& p : (*series)["points"]) {
      seen.insert(p["x"].get<std::size_t>());
      EXPECT_GT(p["value"].get<double>(), 0) << id << " at " << p["x"];
    }
    EXPECT_EQ(seen, sizes) << id;
  }
  EXPECT_EQ((*bw)["ratios"].size(), sizes.size());
  for (const json& ratio : (*bw)["ratios"]) EXPECT_GT(ratio["ratio"].get<double>(), 0);

  const json* lat = find_by_id(r["panels"], "latency");
  ASSERT_NE(lat, nullptr);
  const json* dfi = find_by_id((*lat)["series"], "dfi");
  const json* put_lat = find_by_id((*lat)["series"], "ucp_put_lat");
  ASSERT_NE(dfi, nullptr);
  ASSERT_NE(put_lat, nullptr);
  EXPECT_EQ((*dfi)["points"].size(), 3u);  // put ping-pong, AM ping-pong, put + flush
  EXPECT_EQ((*put_lat)["points"].size(), 1u);
  for (const json& s : (*lat)["series"]) {
    for (const json& p : s["points"])
      EXPECT_GT(p["value"].get<double>(), 0) << s["id"] << " " << p["x"];
  }
  EXPECT_GE((*lat)["ratios"].size(), 1u);
}

TEST(BenchFabricBw, QuickOverShm) {
  TempDir out;
  ASSERT_FALSE(out.path().empty());
  check_fabric_bw(run_quick("shm", out.path()), "shm");
}

TEST(BenchFabricBw, QuickOverTcp) {
  TempDir out;
  ASSERT_FALSE(out.path().empty());
  check_fabric_bw(run_quick("tcp", out.path()), "tcp");
}

TEST(BenchFabricBw, ListAndUnknownScenario) {
  launch::ChildResult list = launch::run_child({{DFI_BINARY, "bench", "list"}, {}}, 30s);
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_NE(list.output.find("fabric-bw"), std::string::npos) << list.output;
  launch::ChildResult unknown =
      launch::run_child({{DFI_BINARY, "bench", "no-such-scenario"}, {}}, 30s);
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("no scenario 'no-such-scenario'"), std::string::npos)
      << unknown.output;
}

// bench/plot.py on a real result. Needs python3-matplotlib, which only `scripts/dev bench`
// installs: without it the test says so and skips.
TEST(BenchPlot, PlotsAQuickResult) {
  const std::string python = python_interpreter();
  launch::ChildResult probe = launch::run_child({{python, "-c", "import matplotlib"}, {}}, 30s);
  if (probe.exit_code != 0) {
    GTEST_SKIP() << python
                 << " has no matplotlib (install python3-matplotlib; scripts/dev bench does)";
  }
  TempDir out;
  ASSERT_FALSE(out.path().empty());
  json r = run_quick("shm", out.path());
  ASSERT_TRUE(r.is_object());
  const fs::path png = out.path() / "plot.png";
  launch::ChildResult plot =
      launch::run_child({{python, bench_source_dir() + "/plot.py",
                          (out.path() / "fabric-bw-shm-quick.json").string(), png.string()},
                         {}},
                        60s);
  EXPECT_EQ(plot.exit_code, 0) << plot.output;
  ASSERT_TRUE(fs::exists(png));
  std::ifstream in(png, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  EXPECT_GT(fs::file_size(png), 1000u);
}

}  // namespace
}  // namespace dfi::tools::bench
