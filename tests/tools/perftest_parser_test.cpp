// The ucx_perftest output parser, on output captured from ucx_perftest 1.13.1 on this kind of
// machine (client side; the server prints only its banner).
#include <gtest/gtest.h>

#include <algorithm>

#include "bench/mpi_baseline.hpp"
#include "bench/perftest.hpp"
#include "dfi/common/error.hpp"

namespace dfi::tools::bench {
namespace {

// UCX_TLS=sm ucx_perftest 127.0.0.1 -t ucp_put_bw -s 65536 -n 20000
constexpr const char* kPutBwShm =
    R"(+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |       overhead (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
Final:                 20000      0.531     2.515     2.515    24846.95   24846.95      397551      397551
)";

// UCX_TLS=tcp UCX_NET_DEVICES=lo ucx_perftest 127.0.0.1 -t ucp_put_bw -s 1048576 -n 500: a
// progress line ("[thread 0]") comes before the final one.
constexpr const char* kPutBwTcp =
    R"(+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |       overhead (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
[thread 0]               396      0.159  2567.409  2567.409      389.50     389.50         389         389
Final:                   500      0.159  8718.876  3846.914      114.69     259.95         115         260
)";

// UCX_TLS=sm ucx_perftest 127.0.0.1 -t ucp_am_lat -s 8 -n 100000
constexpr const char* kAmLatShm =
    R"(+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |        latency (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
[thread 0]                96   4973.023  5227.901  5227.901        0.00       0.00         191         191
Final:                100000      0.100     2.363     7.380        3.23       1.03      423128      135504
)";

// The start of `ucx_perftest -h` (1.13.1).
constexpr const char* kHelp = R"(  Usage: ucx_perftest [ server-hostname ] [ options ]

  Common options:
     -t <test>      test to run:
           am_lat - UCT active message latency
          put_lat - UCT put latency
          tag_lat - UCP tag match latency
     tag_sync_lat - UCP tag sync match latency
      ucp_put_lat - UCP put latency
       ucp_put_bw - UCP put bandwidth
          ucp_get - UCP get latency / bandwidth / message rate
       ucp_am_lat - UCP am latency
        ucp_am_bw - UCP am bandwidth / message rate

     -s <size>      list of scatter-gather sizes for single message (8)
                    for example: "-s 16,48,8192,8192,14"
     -n <iters>     number of iterations to run (1000000)
)";

TEST(PerftestParser, BandwidthOverShm) {
  std::optional<PerftestFinal> f = parse_perftest_final(kPutBwShm);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->iterations, 20000);
  EXPECT_DOUBLE_EQ(f->latency_p50_us, 0.531);
  EXPECT_DOUBLE_EQ(f->bandwidth_total_mib, 24846.95);
  EXPECT_DOUBLE_EQ(f->msgrate_total, 397551);
  // MiB/s -> GB/s (10^9 B/s): 24846.95 * 2^20 / 1e9
  EXPECT_NEAR(f->bandwidth_gbps(), 26.0539, 1e-3);
}

TEST(PerftestParser, UsesTheFinalLineNotTheProgressLines) {
  std::optional<PerftestFinal> f = parse_perftest_final(kPutBwTcp);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->iterations, 500);
  EXPECT_DOUBLE_EQ(f->bandwidth_moment_mib, 114.69);
  EXPECT_DOUBLE_EQ(f->bandwidth_total_mib, 259.95);
  EXPECT_DOUBLE_EQ(f->latency_total_us, 3846.914);
}

TEST(PerftestParser, LatencyColumns) {
  std::optional<PerftestFinal> f = parse_perftest_final(kAmLatShm);
  ASSERT_TRUE(f.has_value());
  EXPECT_DOUBLE_EQ(f->latency_p50_us, 0.100);
  EXPECT_DOUBLE_EQ(f->latency_moment_us, 2.363);
  EXPECT_DOUBLE_EQ(f->latency_total_us, 7.380);
  EXPECT_DOUBLE_EQ(f->msgrate_moment, 423128);
}

TEST(PerftestParser, ThousandsSeparators) {
  std::optional<PerftestFinal> f = parse_perftest_final(
      "Final:       1,000,000      0.060     1.081     1.081    7,060.00   7,060.00   925,378   "
      "925,378\n");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->iterations, 1000000);
  EXPECT_DOUBLE_EQ(f->bandwidth_total_mib, 7060);
}

TEST(PerftestParser, NoOrBrokenFinalLine) {
  EXPECT_FALSE(parse_perftest_final("").has_value());
  EXPECT_FALSE(parse_perftest_final(
      "[1.2] UCX ERROR client failed. connect() failed: Connection refused\n"));
  EXPECT_FALSE(parse_perftest_final("Final:  100  0.1  0.2\n").has_value());  // too few numbers
  EXPECT_FALSE(
      parse_perftest_final("Final:  100 0.1 0.2 0.3 x 1 2 3\n").has_value());  // not a number
  // Output cut off while printing: the last complete Final line wins.
  std::string cut = std::string(kPutBwShm) + "Final:   20000   0.5";
  ASSERT_TRUE(parse_perftest_final(cut).has_value());
  EXPECT_EQ(parse_perftest_final(cut)->iterations, 20000);
}

TEST(PerftestParser, TestList) {
  std::vector<std::string> tests = parse_perftest_tests(kHelp);
  EXPECT_EQ(tests.size(), 9u);
  for (const char* name : {"ucp_put_bw", "ucp_put_lat", "ucp_am_lat", "tag_sync_lat", "am_lat"}) {
    EXPECT_NE(std::find(tests.begin(), tests.end(), name), tests.end()) << name;
  }
  EXPECT_EQ(std::find(tests.begin(), tests.end(), "-s"), tests.end());
  EXPECT_TRUE(parse_perftest_tests("no list here").empty());
}

TEST(PerftestEnvironment, PerTransport) {
  using Env = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(perftest_environment("shm"), (Env{{"UCX_TLS", "sm"}}));
  EXPECT_EQ(perftest_environment("tcp"), (Env{{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}}));
  EXPECT_THROW(perftest_environment("ib"), Error);
}

TEST(MpiBaseline, MpirunCommandLine) {
  MpiRun run;
  run.program = "mpi_p2p";
  run.ranks = 2;
  run.transport = "tcp";
  run.args = {"--mode", "single"};
  std::vector<std::string> argv = mpirun_argv(run, "/x/mpi_p2p");
  auto has = [&](const std::vector<std::string>& seq) {
    return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end();
  };
  EXPECT_EQ(argv.front(), "mpirun");
  EXPECT_TRUE(has({"--allow-run-as-root", "--oversubscribe"}));
  EXPECT_TRUE(has({"-np", "2"}));
  EXPECT_TRUE(has({"--mca", "pml", "ucx"}));
  EXPECT_TRUE(has({"--mca", "pml_ucx_devices", "any"}));
  EXPECT_TRUE(has({"-x", "UCX_TLS=tcp,self", "-x", "UCX_NET_DEVICES=lo"}));
  // One-sided MPI must not fall back to the shared-memory BTL over tcp.
  EXPECT_TRUE(has({"--mca", "btl", "self,tcp"}));
  EXPECT_TRUE(has({"--mca", "btl_tcp_if_include", "lo"}));
  EXPECT_TRUE(has({"/x/mpi_p2p", "--mode", "single"}));
  run.transport = "shm";
  argv = mpirun_argv(run, "/x/mpi_p2p");
  EXPECT_TRUE(has({"-x", "UCX_TLS=sm,self"}));
  EXPECT_FALSE(has({"--mca", "btl", "self,tcp"}));
  run.transport = "verbs";
  EXPECT_THROW(mpirun_argv(run, "/x/mpi_p2p"), Error);
}

}  // namespace
}  // namespace dfi::tools::bench
