// `dfi bench shuffle-bw | shuffle-lat | shuffle-nm | partition | memory --quick`, for real (DFI ranks plus
// ucx_perftest and, for shuffle-bw, the TCP socket stream or the shared-memory ring; for partition the
// hand-written partitioner), with sizes cut down
// further so that each run stays well under 20 s on 2 cores. Checks the result's shape, that
// every number is positive and that the scenario-specific invariants hold; never how fast
// anything is.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "bench/process.hpp"
#include "bench/result.hpp"
#include "bench/stream_baseline.hpp"
#include "bench_e2e.hpp"
#include "dfi/common/error.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::find_by_id;

json run_quick(const std::string& scenario, const std::string& transport,
               const std::vector<std::string>& extra) {
  return testing::run_quick(scenario, transport, extra, 60s);
}

// Every point of every series is positive; every measured series (DFI's, ucx_perftest's) has its
// commands (computed references such as the memory expectation have none).
void check_positive(const json& panel) {
  for (const json& s : panel["series"]) {
    const std::string id = s["id"];
    if (s["role"] == "dfi" || id.starts_with("ucp") || id.starts_with("ucx")) {
      EXPECT_FALSE(s["commands"].empty()) << panel["id"] << "/" << id;
    }
    for (const json& p : s["points"])
      EXPECT_GT(p["value"].get<double>(), 0) << panel["id"] << "/" << s["id"] << " at " << p["x"];
  }
}

std::set<std::size_t> xs_of(const json& series) {
  std::set<std::size_t> xs;
  for (const json& p : series["points"]) xs.insert(p["x"].get<std::size_t>());
  return xs;
}

// The baselines every shuffle-bw panel shows next to DFI: both ucx_perftest tests at the segment
// size and the hand-written streams of the run's transport, measured (commands recorded) at every
// tuple size.
void check_shuffle_baselines(const json& panel, const std::vector<std::string>& streams,
                             const std::set<std::size_t>& sizes) {
  std::vector<std::string> ids = {"ucp_put_bw", "ucp_am_bw"};
  ids.insert(ids.end(), streams.begin(), streams.end());
  for (const std::string& id : ids) {
    const json* s = find_by_id(panel["series"], id);
    ASSERT_NE(s, nullptr) << panel["id"] << "/" << id;
    EXPECT_EQ((*s)["role"], "baseline") << id;
    EXPECT_FALSE((*s)["commands"].empty()) << panel["id"] << "/" << id;
    EXPECT_EQ(xs_of(*s), sizes) << panel["id"] << "/" << id;
  }
}

TEST(BenchShuffleBw, QuickOverShm) {
  json r = run_quick("shuffle-bw", "shm",
                     {"--set", "tuple_sizes=[16,1024]", "--set", "bytes_per_point=16777216"});
  ASSERT_TRUE(r.is_object());
  const std::set<std::size_t> sizes = {16, 1024};
  for (const char* id : {"bw_t1", "bw_t2"}) {
    const json* panel = find_by_id(r["panels"], id);
    ASSERT_NE(panel, nullptr) << id;
    check_positive(*panel);
    check_shuffle_baselines(*panel, {"ring_tuple", "ring_bulk"}, sizes);
    EXPECT_EQ(find_by_id((*panel)["series"], "tcp_stream"), nullptr) << id;
    const std::string t = std::string(id).substr(3);
    for (const std::string& series : {"direct_" + t, "staged_" + t, "batch_direct_" + t, "batch_staged_" + t}) {
      const json* s = find_by_id((*panel)["series"], series);
      ASSERT_NE(s, nullptr) << id << "/" << series;
      EXPECT_EQ(xs_of(*s), sizes) << id << "/" << series;
    }
    // push and push_batch, direct and staged, each against ucp_put_bw, ucp_am_bw and its ring
    // (push: the per-tuple ring, push_batch: the bulk ring), per size; direct push has the 0.9
    // target against the per-tuple ring, direct push_batch 0.8 against the bulk ring.
    EXPECT_EQ((*panel)["ratios"].size(), 2 * 2 * 3 * sizes.size()) << id;
    bool tuple_target = false, bulk_target = false;
    for (const json& ratio : (*panel)["ratios"]) {
      tuple_target |= ratio["dfi"] == "direct_" + t && ratio["baseline"] == "ring_tuple" &&
                      ratio.value("target", 0.0) == 0.9;
      bulk_target |= ratio["dfi"] == "batch_direct_" + t && ratio["baseline"] == "ring_bulk" &&
                     ratio.value("target", 0.0) == 0.8;
      EXPECT_FALSE(ratio["dfi"].get<std::string>().starts_with("batch_") && ratio["baseline"] == "ring_tuple");
      EXPECT_FALSE(!ratio["dfi"].get<std::string>().starts_with("batch_") && ratio["baseline"] == "ring_bulk");
    }
    EXPECT_TRUE(tuple_target) << id;
    EXPECT_TRUE(bulk_target) << id;
  }
  const json* versus = find_by_id(r["panels"], "direct_vs_staged");
  ASSERT_NE(versus, nullptr);
  EXPECT_EQ((*versus)["ratios"].size(), 2 * sizes.size());
}

TEST(BenchShuffleBw, QuickOverTcpHasOnlyThePutPath) {
  json r = run_quick(
      "shuffle-bw", "tcp",
      {"--set", "tuple_sizes=[64]", "--set", "threads=[1]", "--set", "bytes_per_point=4194304"});
  ASSERT_TRUE(r.is_object());
  const json* panel = find_by_id(r["panels"], "bw_t1");
  ASSERT_NE(panel, nullptr);
  check_positive(*panel);
  check_shuffle_baselines(*panel, {"tcp_stream"}, {64});
  EXPECT_EQ(find_by_id((*panel)["series"], "ring_tuple"), nullptr);
  EXPECT_EQ(find_by_id((*panel)["series"], "ring_bulk"), nullptr);
  EXPECT_NE(find_by_id((*panel)["series"], "direct_t1"), nullptr);
  EXPECT_NE(find_by_id((*panel)["series"], "batch_direct_t1"), nullptr);
  EXPECT_EQ(find_by_id((*panel)["series"], "staged_t1"), nullptr);
  EXPECT_EQ(find_by_id(r["panels"], "direct_vs_staged"), nullptr);
  // One ratio per baseline and API; the socket stream's target is 0.5.
  EXPECT_EQ((*panel)["ratios"].size(), 6u);
  bool socket_target = false;
  for (const json& ratio : (*panel)["ratios"])
    socket_target |= ratio["baseline"] == "tcp_stream" && ratio.value("target", 0.0) == 0.5;
  EXPECT_TRUE(socket_target);
}

// The stream baselines on their own, with 24 B tuples: 64 KiB socket reads cut tuples, and a ring
// of 416 tuples with batches of 41 wraps in the middle of a batch, with both ring producers (per
// tuple, whole runs). run_stream_baseline throws unless every tuple arrived (count and key sum).
TEST(StreamBaseline, OddTupleSizesArriveWhole) {
  for (const char* transport : {"tcp", "shm", "shm-bulk"}) {
    StreamRun run;
    run.transport = std::string(transport).substr(0, 3);
    if (std::string(transport) == "shm-bulk") run.copy = "bulk";
    run.tuple_bytes = 24;
    run.tuples = 300000;
    run.ring_bytes = 10000;
    run.batch_bytes = 1000;
    run.dfi_binary = DFI_BINARY;
    run.timeout = 30s;
    StreamResult r = run_stream_baseline(run);
    EXPECT_EQ(r.tuples, run.tuples) << transport;
    EXPECT_GT(r.gbps, 0) << transport;
    EXPECT_NE(r.command.find("bench-stream"), std::string::npos) << r.command;
    if (run.transport == "shm") {
      EXPECT_NE(r.command.find("--copy " + run.copy), std::string::npos) << r.command;
    }
  }
  // The per-tuple ring copies only widths it has a compile-time copy of.
  EXPECT_TRUE(ring_copies_width(4096));
  EXPECT_FALSE(ring_copies_width(72));
  StreamRun odd;
  odd.transport = "shm";
  odd.tuple_bytes = 72;
  odd.tuples = 100;
  odd.dfi_binary = DFI_BINARY;
  odd.timeout = 30s;
  try {
    (void)run_stream_baseline(odd);
    ADD_FAILURE() << "72 B tuples with the per-tuple ring did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no compile-time copy of 72 B"), std::string::npos) << e.what();
  }
  StreamRun rdma;
  rdma.transport = "rdma";
  rdma.tuples = 1;
  rdma.dfi_binary = DFI_BINARY;
  EXPECT_THROW(run_stream_baseline(rdma), Error);
}

TEST(BenchShuffleLat, QuickOverShm) {
  json r = run_quick("shuffle-lat", "shm", {"--set", "iterations=2000"});
  ASSERT_TRUE(r.is_object());
  const json* panel = find_by_id(r["panels"], "rtt");
  ASSERT_NE(panel, nullptr);
  check_positive(*panel);
  const json* dfi = find_by_id((*panel)["series"], "dfi");
  const json* put = find_by_id((*panel)["series"], "ucp_put_lat");
  ASSERT_NE(dfi, nullptr);
  ASSERT_NE(put, nullptr);
  EXPECT_EQ((*dfi)["points"].size(), 2u);  // median and p99
  EXPECT_EQ((*put)["points"].size(), 2u);
  // The p99 is never below the median.
  double median = 0, p99 = 0;
  for (const json& p : (*dfi)["points"]) {
    if (p["x"].get<std::string>().find("median") != std::string::npos) {
      median = p["value"];
    } else {
      p99 = p["value"];
    }
  }
  EXPECT_LE(median, p99);
  EXPECT_GE((*panel)["ratios"].size(), 2u);
}

TEST(BenchShuffleLat, QuickOverTcp) {
  json r = run_quick("shuffle-lat", "tcp", {"--set", "iterations=200"});
  ASSERT_TRUE(r.is_object());
  const json* panel = find_by_id(r["panels"], "rtt");
  ASSERT_NE(panel, nullptr);
  check_positive(*panel);
}

TEST(BenchMemory, QuickOverShmMatchesTheLayout) {
  json r = run_quick("memory", "shm", {});
  ASSERT_TRUE(r.is_object());
  const json* panel = find_by_id(r["panels"], "flow_memory");
  ASSERT_NE(panel, nullptr);
  check_positive(*panel);
  // The accounting equals the expectation from the ring layout, and 2 x 4 x 4 with defaults
  // holds 4 targets x 8 rings of 32 x 8 KiB (+ credit word) per node, no staging on shm.
  bool budgeted = false;
  for (const json& ratio : (*panel)["ratios"]) {
    if (ratio["baseline"] == "expected") {
      EXPECT_NEAR(ratio["ratio"].get<double>(), 1.0, 1e-9);
    }
    if (ratio["baseline"] == "budget") {
      budgeted = true;
      EXPECT_NEAR(ratio["dfi_value"].get<double>(), 4 * 8 * (32 * 8208 + 128) / 1048576.0, 1e-9);
    }
  }
  EXPECT_TRUE(budgeted);
  ASSERT_NE(find_by_id(r["panels"], "rss_growth"), nullptr);
}

TEST(BenchMemory, QuickOverTcpCountsStaging) {
  json r =
      run_quick("memory", "tcp", {"--set", R"(settings=[{"ranks":2,"sources":1,"targets":1}])"});
  ASSERT_TRUE(r.is_object());
  const json* panel = find_by_id(r["panels"], "flow_memory");
  ASSERT_NE(panel, nullptr);
  const json* dfi = find_by_id((*panel)["series"], "dfi");
  ASSERT_NE(dfi, nullptr);
  ASSERT_EQ((*dfi)["points"].size(), 1u);
  // 1 target x 2 rings + 1 source x 2 targets x 4 staging segments of 8 KiB.
  const double expected = (2 * (32 * 8208 + 128) + 2 * 4 * 8208) / 1048576.0;
  EXPECT_NEAR((*dfi)["points"][0]["value"].get<double>(), expected, 1e-9);
}

// shuffle-nm: 4 ranks, a 4:4 flow and the socket all-to-all, both checked for counts and key
// sums by the driver (a mismatch fails the run); here: both series measured at every size, the
// tcp target declared, commands recorded.
void check_shuffle_nm(const json& r, bool target) {
  ASSERT_TRUE(r.is_object());
  const json* panel = find_by_id(r["panels"], "aggregate");
  ASSERT_NE(panel, nullptr);
  check_positive(*panel);
  for (const char* id : {"dfi", "sockets"}) {
    const json* s = find_by_id((*panel)["series"], id);
    ASSERT_NE(s, nullptr) << id;
    EXPECT_EQ(xs_of(*s), (std::set<std::size_t>{16, 1024})) << id;
    EXPECT_FALSE((*s)["commands"].empty()) << id;
  }
  ASSERT_EQ((*panel)["ratios"].size(), 2u);
  EXPECT_EQ((*panel)["ratios"][0].contains("target"), target);
}

TEST(BenchShuffleNm, QuickOverShm) {
  check_shuffle_nm(run_quick("shuffle-nm", "shm",
                             {"--set", "tuple_sizes=[16,1024]", "--set", "bytes_per_source=4194304"}),
                   false);
}

TEST(BenchShuffleNm, QuickOverTcp) {
  check_shuffle_nm(run_quick("shuffle-nm", "tcp",
                             {"--set", "tuple_sizes=[16,1024]", "--set", "bytes_per_source=4194304"}),
                   true);
}

// partition: 2 ranks over shm, 1:M push_batch and the hand-written partitioner, both checked for
// counts, key sums and routed sums by the driver (a mismatch fails the run); here: one panel per
// width, both series at every target count, the 0.7x target declared, commands recorded.
TEST(BenchPartition, QuickOverShm) {
  const json r = run_quick("partition", "shm",
                           {"--set", "targets=[2,16]", "--set", "tuple_sizes=[16,64]", "--set",
                            "bytes_per_point=2097152"});
  ASSERT_TRUE(r.is_object());
  for (const char* id : {"partition_16", "partition_64"}) {
    const json* panel = find_by_id(r["panels"], id);
    ASSERT_NE(panel, nullptr) << id;
    check_positive(*panel);
    for (const char* series : {"dfi", "limit_lines", "limit_direct"}) {
      const json* s = find_by_id((*panel)["series"], series);
      ASSERT_NE(s, nullptr) << id << "/" << series;
      EXPECT_EQ(xs_of(*s), (std::set<std::size_t>{2, 16})) << id << "/" << series;
      EXPECT_FALSE((*s)["commands"].empty()) << id << "/" << series;
    }
    ASSERT_EQ((*panel)["ratios"].size(), 4u) << id;  // 2 target counts x 2 limits
    for (const json& ratio : (*panel)["ratios"]) EXPECT_DOUBLE_EQ(ratio["target"].get<double>(), 0.7) << id;
  }
}

// The partition limit by hand over 33 targets, at widths with full lines (16 B), lines of two
// rows (24 B) and none (64 B), a count that leaves partial lines: the driver checks the
// receiver's count, key sum and routed sum (every tuple once, in its key's ring).
TEST(BenchPartition, LimitDeliversEveryTupleToItsTarget) {
  for (const char* copy : {"partition", "partition-direct"}) {
  for (std::size_t width : {16, 24, 64}) {
    StreamRun run;
    run.transport = "shm";
    run.copy = copy;
    run.targets = 33;
    run.tuple_bytes = width;
    run.tuples = 100000 + 3;
    run.dfi_binary = DFI_BINARY;
    run.timeout = 30s;
    const StreamResult r = run_stream_baseline(run);
    EXPECT_EQ(r.tuples, run.tuples) << copy << " " << width;
    EXPECT_GT(r.gbps, 0) << copy << " " << width;
  }
  }
}

}  // namespace
}  // namespace dfi::tools::bench
