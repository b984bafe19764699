// `dfi bench kv --quick`, `kv-failover --quick`, `kv-jepsen --quick` and `kv-etcd --quick`, for real, cut down with --set to
// seconds: 3 replicas, 2 client ranks of one thread, 4 requests outstanding each. Checks the
// result's shape — every protocol's series, throughput positive, the declared comparisons —
// never how fast anything is (a run whose replicas disagree fails the scenario by itself).
// kv-etcd needs Debian's etcd-server and etcd-client (scripts/dev bench installs them) and Go;
// without them it reports itself skipped with the reason.
#include <gtest/gtest.h>

#include "bench/etcd_baseline.hpp"
#include "bench/go_tool.hpp"
#include "bench/result.hpp"
#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::find_by_id;

void check_series(const json& r, const std::vector<std::string>& series, std::size_t ratios) {
  ASSERT_TRUE(r.is_object());
  const json* p = find_by_id(r["panels"], "throughput");
  ASSERT_NE(p, nullptr);
  for (const std::string& id : series) {
    const json* s = find_by_id((*p)["series"], id);
    ASSERT_NE(s, nullptr) << id;
    ASSERT_EQ((*s)["points"].size(), 1u) << id;
    EXPECT_EQ((*s)["points"][0]["x"], json(4)) << id;
    EXPECT_GT((*s)["points"][0]["value"].get<double>(), 0) << id;
    EXPECT_FALSE((*s)["commands"].empty()) << id;
  }
  EXPECT_EQ((*p)["ratios"].size(), ratios);
  // The latency curves (p50, p95, p99 vs offered load), each with a point of every series.
  for (const char* id : {"p50", "p95", "p99"}) {
    const json* latency = find_by_id(r["panels"], id);
    ASSERT_NE(latency, nullptr) << id;
    for (const std::string& name : series) {
      const json* s = find_by_id((*latency)["series"], name);
      ASSERT_NE(s, nullptr) << id << ' ' << name;
      ASSERT_EQ((*s)["points"].size(), 1u) << id << ' ' << name;
      EXPECT_GT((*s)["points"][0]["value"].get<double>(), 0) << id << ' ' << name;
    }
  }
}

const std::vector<std::string> kCutDown = {"--set", "replicas=3", "--set", "threads=1", "--set", "windows=[4]",
                                           "--set", "seconds=0.5", "--set", "keys=1000"};

TEST(BenchKv, QuickOverShm) {
  check_series(testing::run_quick("kv", "shm", kCutDown, 120s), {"nopaxos", "paxos", "unreplicated"}, 3);
}

TEST(BenchKv, QuickOverTcp) {
  check_series(testing::run_quick("kv", "tcp", kCutDown, 120s), {"nopaxos", "paxos", "unreplicated"}, 3);
}

// value_bytes reaches every run (each checks every value it reads against its put's pattern).
TEST(BenchKv, QuickWith1KiBValuesOverTcp) {
  std::vector<std::string> args = kCutDown;
  args.insert(args.end(), {"--set", "value_bytes=1024"});
  const json r = testing::run_quick("kv", "tcp", args, 120s);
  check_series(r, {"nopaxos", "paxos", "unreplicated"}, 3);
  EXPECT_EQ(r["parameters"]["value_bytes"], json(1024)) << r["parameters"].dump();
}

// kv-failover: the leader and then a follower killed mid-run, each next to a run where none is;
// every run's survivors must agree (the scenario fails otherwise) and end in a view after 0.
void check_failover(const json& r) {
  ASSERT_TRUE(r.is_object());
  for (const char* panel : {"failover", "throughput"}) {
    const json* p = find_by_id(r["panels"], panel);
    ASSERT_NE(p, nullptr) << panel;
    for (const char* id : {"paxos", "no-failure"}) {
      const json* s = find_by_id((*p)["series"], id);
      ASSERT_NE(s, nullptr) << panel << ' ' << id;
      ASSERT_EQ((*s)["points"].size(), 2u) << panel << ' ' << id;
      for (const json& point : (*s)["points"]) EXPECT_GT(point["value"].get<double>(), 0) << panel << ' ' << id;
    }
  }
}

const std::vector<std::string> kFailoverCutDown = {"--set", "seconds=1.5", "--set", "kill_after_s=0.7"};

TEST(BenchKvFailover, QuickOverShm) { check_failover(testing::run_quick("kv-failover", "shm", kFailoverCutDown, 180s)); }

TEST(BenchKvFailover, QuickOverTcp) { check_failover(testing::run_quick("kv-failover", "tcp", kFailoverCutDown, 180s)); }

// kv-jepsen: 4 short runs (no fault, the leader, a follower, a client killed), every history
// linearizable.
TEST(BenchKvJepsen, QuickOverShm) {
  if (!go_binary()) GTEST_SKIP() << "no Go: no Porcupine checker (README set-up installs Go)";
  const json r = testing::run_quick("kv-jepsen", "shm", {"--set", "histories=4", "--set", "seconds=1.2"}, 180s);
  ASSERT_TRUE(r.is_object());
  const json* p = find_by_id(r["panels"], "histories");
  ASSERT_NE(p, nullptr);
  const json* ok = find_by_id((*p)["series"], "linearizable");
  const json* bad = find_by_id((*p)["series"], "violations");
  ASSERT_NE(ok, nullptr);
  ASSERT_NE(bad, nullptr);
  double linearizable = 0;
  for (const json& point : (*ok)["points"]) linearizable += point["value"].get<double>();
  EXPECT_EQ(linearizable, 4);
  for (const json& point : (*bad)["points"]) EXPECT_EQ(point["value"].get<double>(), 0) << point["x"];
}

// kv-jepsen with injected faults (flow_faults): NOPaxos with drops and a slow follower, 2 runs,
// both linearizable.
TEST(BenchKvJepsen, InjectedDropAndDelayOverShm) {
  if (!go_binary()) GTEST_SKIP() << "no Go: no Porcupine checker (README set-up installs Go)";
  const json r = testing::run_quick("kv-jepsen", "shm",
                                    {"--set", "histories=2", "--set", "seconds=1.2", "--set", "protocol=nopaxos", "--set",
                                     "faults=drop,delay"},
                                    180s);
  ASSERT_TRUE(r.is_object());
  const json* p = find_by_id(r["panels"], "histories");
  ASSERT_NE(p, nullptr);
  const json* ok = find_by_id((*p)["series"], "linearizable");
  ASSERT_NE(ok, nullptr);
  std::vector<std::string> faults;
  for (const json& point : (*ok)["points"]) {
    faults.push_back(point["x"].get<std::string>());
    EXPECT_EQ(point["value"].get<double>(), 1) << point["x"];
  }
  EXPECT_EQ(faults, (std::vector<std::string>{"drop", "delay"}));
}

TEST(BenchKvEtcd, QuickOverShm) {
  if (std::string why = etcd_unavailable(); !why.empty()) GTEST_SKIP() << "the etcd baseline cannot run: " << why;
  check_series(testing::run_quick("kv-etcd", "shm", kCutDown, 300s), {"paxos", "nopaxos", "etcd-tmpfs"}, 2);
}

}  // namespace
}  // namespace dfi::tools::bench
