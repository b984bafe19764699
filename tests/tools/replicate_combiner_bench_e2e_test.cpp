// `dfi bench replicate | combiner | join-fr | ghj | agg --quick`, for real (4 DFI ranks plus ucx_perftest), cut down
// with --set so that each run takes seconds, over shm and tcp. Checks the result's shape: both
// DFI's and the baselines' series, every number positive, the ratios; never how fast anything
// is. (Each scenario fails by itself if a target received wrong data or a wrong aggregate.)
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "bench/process.hpp"
#include "bench/result.hpp"
#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::find_by_id;

json run_quick(const std::string& scenario, const std::string& transport,
               const std::vector<std::string>& extra) {
  return testing::run_quick(scenario, transport, extra, 90s);
}

// Every point of every series is positive and every series has the commands that produced it.
void check_positive(const json& panel) {
  for (const json& s : panel["series"]) {
    EXPECT_FALSE(s["commands"].empty()) << panel["id"] << "/" << s["id"];
    EXPECT_FALSE(s["points"].empty()) << panel["id"] << "/" << s["id"];
    for (const json& p : s["points"])
      EXPECT_GT(p["value"].get<double>(), 0) << panel["id"] << "/" << s["id"] << " at " << p["x"];
  }
}

std::set<json> xs_of(const json& series) {
  std::set<json> xs;
  for (const json& p : series["points"]) xs.insert(p["x"]);
  return xs;
}

// The series `ids` exist with points at exactly `xs`, and there is one ratio per (DFI series,
// baseline, x) pair declared: `ratios_per_x` of them at every x.
void check_panel(const json& result, const std::string& id, const std::vector<std::string>& ids,
                 const std::set<json>& xs, std::size_t ratios_per_x) {
  const json* panel = find_by_id(result["panels"], id);
  ASSERT_NE(panel, nullptr) << id;
  check_positive(*panel);
  for (const std::string& series : ids) {
    const json* s = find_by_id((*panel)["series"], series);
    ASSERT_NE(s, nullptr) << id << "/" << series;
    EXPECT_EQ(xs_of(*s), xs) << id << "/" << series;
  }
  EXPECT_EQ((*panel)["ratios"].size(), ratios_per_x * xs.size()) << id;
  for (const json& ratio : (*panel)["ratios"])
    EXPECT_GT(ratio["ratio"].get<double>(), 0) << id << ": " << ratio.dump();
}

void check_replicate(const json& r, const std::set<json>& sizes) {
  const std::vector<std::string> modes = {"naive", "relay", "ordered"};
  std::vector<std::string> bw = modes, rtt = modes;
  bw.push_back("ucx_perftest");
  rtt.push_back("ucp_put_lat");
  check_panel(r, "bw", bw, sizes, modes.size());
  check_panel(r, "rtt", rtt, {json("round trip, median"), json("round trip, 99th percentile")},
              modes.size());
  ASSERT_EQ(r["parameters"]["targets"], 3);
  // Every mode's median round trip is no larger than its 99th percentile (DFI's come from one
  // run; ucx_perftest's -R 50 and -R 99 are two runs, which a busy machine can invert).
  const json* rtt_panel = find_by_id(r["panels"], "rtt");
  ASSERT_NE(rtt_panel, nullptr);
  for (const json& s : (*rtt_panel)["series"]) {
    if (s["role"] != "dfi") continue;
    double median = 0, p99 = 0;
    for (const json& p : s["points"]) {
      if (p["x"].get<std::string>().find("median") != std::string::npos) {
        median = p["value"];
      } else {
        p99 = p["value"];
      }
    }
    EXPECT_LE(median, p99) << s["id"];
  }
}

TEST(BenchReplicate, QuickOverShm) {
  json r = run_quick("replicate", "shm",
                     {"--set", "tuple_sizes=[64,1024]", "--set", "bytes_per_point=4194304", "--set",
                      "latency_iterations=300"});
  ASSERT_TRUE(r.is_object());
  check_replicate(r, {json(64), json(1024)});
}

TEST(BenchReplicate, QuickOverTcp) {
  json r = run_quick("replicate", "tcp",
                     {"--set", "tuple_sizes=[64]", "--set", "bytes_per_point=1048576", "--set",
                      "latency_iterations=100"});
  ASSERT_TRUE(r.is_object());
  check_replicate(r, {json(64)});
}

void check_combiner(const json& r, const std::set<json>& groups) {
  // combiner vs the shuffle flow and vs ucx_perftest, at every number of groups.
  check_panel(r, "throughput", {"combiner", "shuffle", "ucx_perftest"}, groups, 2);
  const json* panel = find_by_id(r["panels"], "throughput");
  ASSERT_NE(panel, nullptr);
  std::set<std::string> baselines;
  for (const json& ratio : (*panel)["ratios"]) {
    EXPECT_EQ(ratio["dfi"], "combiner");
    baselines.insert(ratio["baseline"].get<std::string>());
  }
  EXPECT_EQ(baselines, (std::set<std::string>{"shuffle", "ucx_perftest"}));
  EXPECT_EQ(r["parameters"]["sources"], 3);
}

TEST(BenchCombiner, QuickOverShm) {
  json r = run_quick("combiner", "shm",
                     {"--set", "groups=[16,4096]", "--set", "tuples_per_source=200000"});
  ASSERT_TRUE(r.is_object());
  check_combiner(r, {json(16), json(4096)});
}

TEST(BenchCombiner, QuickOverTcp) {
  json r =
      run_quick("combiner", "tcp", {"--set", "groups=[64]", "--set", "tuples_per_source=100000"});
  ASSERT_TRUE(r.is_object());
  check_combiner(r, {json(64)});
}

// join-fr fails by itself when the two algorithms' matches or checksums differ.
void check_join_fr(const json& r) {
  ASSERT_TRUE(r.is_object());
  const json* all = find_by_id(r["panels"], "runtime");
  ASSERT_NE(all, nullptr);
  check_positive(*all);
  EXPECT_EQ((*all)["ratios"].size(), 2u);
  const json* small = find_by_id(r["panels"], "inner_1000x_smaller");
  ASSERT_NE(small, nullptr);
  check_positive(*small);
  ASSERT_EQ((*small)["ratios"].size(), 1u);
  EXPECT_DOUBLE_EQ((*small)["ratios"][0]["target"].get<double>(), 1 / 1.2);
}

TEST(BenchJoinFr, QuickOverShm) {
  check_join_fr(run_quick("join-fr", "shm", {"--set", "outer_tuples=20000", "--set", "ratios=[1,1000]"}));
}

TEST(BenchJoinFr, QuickOverTcp) {
  check_join_fr(run_quick("join-fr", "tcp", {"--set", "outer_tuples=10000", "--set", "ratios=[1,1000]"}));
}

// ghj fails by itself when its runs (with and without the Bloom filter, and rrj) differ in matches or
// checksum. With the filter, the shipped fraction of the probe side follows the selectivity.
void check_ghj(const json& r) {
  ASSERT_TRUE(r.is_object());
  check_panel(r, "runtime", {"bloom", "no_bloom", "rrj"}, {json(1), json(0.01)}, 2);  // bloom and rrj vs no_bloom
  check_panel(r, "shipped", {"bloom", "no_bloom"}, {json(1), json(0.01)}, 1);
  const json* shipped = find_by_id(r["panels"], "shipped");
  ASSERT_NE(shipped, nullptr);
  for (const json& p : (*find_by_id((*shipped)["series"], "no_bloom"))["points"]) {
    EXPECT_DOUBLE_EQ(p["value"].get<double>(), 1.0) << p.dump();
  }
  for (const json& p : (*find_by_id((*shipped)["series"], "bloom"))["points"]) {
    if (p["x"] == json(0.01)) {
      EXPECT_LT(p["value"].get<double>(), 0.03) << p.dump();
    }
  }
}

TEST(BenchGhj, QuickOverShm) {
  check_ghj(run_quick("ghj", "shm", {"--set", "build_tuples=20000", "--set", "probe_tuples=80000", "--set",
                                     "selectivities=[1,0.01]"}));
}

TEST(BenchGhj, QuickOverTcp) {
  check_ghj(run_quick("ghj", "tcp", {"--set", "build_tuples=10000", "--set", "probe_tuples=40000", "--set",
                                     "selectivities=[1,0.01]"}));
}

// agg fails by itself when an algorithm's group count or checksum differs from the single-node
// reference. `xs`: every group count of the run (the open panel has a point at each).
void check_agg(const json& r, const std::set<json>& xs) {
  ASSERT_TRUE(r.is_object());
  for (const auto& [panel, target] : {std::pair<const char*, double>{"few_groups", 1.0}, {"many_groups", 0.5}, {"zipf", 0.5}}) {
    const json* p = find_by_id(r["panels"], panel);
    ASSERT_NE(p, nullptr) << panel;
    check_positive(*p);
    ASSERT_EQ((*p)["ratios"].size(), 1u) << panel;
    EXPECT_DOUBLE_EQ((*p)["ratios"][0]["target"].get<double>(), target) << panel;
  }
  check_panel(r, "open", {"rdma", "hierarchical"}, xs, 1);
}

TEST(BenchAgg, QuickOverShm) {
  check_agg(run_quick("agg", "shm", {"--set", "tuples=40000", "--set", "few_groups=[10]", "--set",
                                     "many_groups=[100000]", "--set", "zipf_groups=[100000]"}),
            {json(10), json(100000)});
}

TEST(BenchAgg, QuickOverTcp) {
  check_agg(run_quick("agg", "tcp", {"--set", "tuples=20000", "--set", "few_groups=[10]", "--set",
                                     "many_groups=[50000]", "--set", "zipf_groups=[50000]"}),
            {json(10), json(50000)});
}

}  // namespace
}  // namespace dfi::tools::bench
