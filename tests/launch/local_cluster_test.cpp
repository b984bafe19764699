#include "dfi/launch/local_cluster.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "dfi/common/error.hpp"
#include "launch/launch_test_util.hpp"

namespace dfi::launch {
namespace {

using std::chrono::milliseconds;
using testing::describe;
using testing::leftover_processes;
using testing::marked_sleep_seconds;
using testing::run;
using testing::shell;

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A fresh empty directory under /tmp, removed with its files at scope exit.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/dfi-launch-test-XXXXXX";
    const char* made = ::mkdtemp(pattern);
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() { static_cast<void>(std::system(("rm -rf '" + path_ + "'").c_str())); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool wait_for_files(const std::vector<std::string>& paths, milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    bool all = true;
    for (const std::string& path : paths) all = all && ::access(path.c_str(), F_OK) == 0;
    if (all) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

TEST(RunCluster, ThreeRanksPrintRankAndSizeWithPrefixes) {
  ClusterOptions options;
  options.nodes = 3;
  options.argv = shell(
      "echo \"rank=$DFI_RANK size=$DFI_SIZE local=$DFI_LOCAL_RANKS transport=$DFI_TRANSPORT\"; "
      "echo \"to stderr from $DFI_RANK\" >&2; printf 'no newline'");
  const auto r = run(options);
  ASSERT_EQ(r.code, 0) << describe(r);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    EXPECT_TRUE(contains(r.out, prefix + "rank=" + std::to_string(rank) +
                                    " size=3 local=3 transport=shm\n"))
        << describe(r);
    EXPECT_TRUE(contains(r.out, prefix + "no newline\n")) << describe(r);
    EXPECT_TRUE(contains(r.err, prefix + "to stderr from " + std::to_string(rank) + "\n"))
        << describe(r);
  }
  const std::regex line_pattern(R"(\[rank [0-2]\] .*)");
  for (const std::string& line : lines_of(r.out)) {
    EXPECT_TRUE(std::regex_match(line, line_pattern)) << "unexpected line: " << line;
  }
  EXPECT_EQ(lines_of(r.out).size(), 6U) << describe(r);
  EXPECT_EQ(lines_of(r.err).size(), 3U) << describe(r);
}

TEST(RunCluster, RanksGetRegistryTokenAndExtraEnvironment) {
  ClusterOptions options;
  options.nodes = 2;
  options.transport = "tcp";
  options.extra_env = {{"DFI_TEST_EXTRA", "hello world"}, {"DFI_TRANSPORT", "overridden"}};
  options.argv = shell(
      "echo \"registry=$DFI_REGISTRY token=$DFI_REGISTRY_TOKEN extra=$DFI_TEST_EXTRA "
      "transport=$DFI_TRANSPORT\"");
  const auto r = run(options);
  ASSERT_EQ(r.code, 0) << describe(r);
  const std::regex pattern(
      R"(\[rank ([01])\] registry=127\.0\.0\.1:([0-9]+) token=([0-9a-f]{32}) extra=hello world )"
      R"(transport=overridden)");
  std::set<std::string> registries;
  std::set<std::string> tokens;
  std::set<std::string> ranks;
  for (const std::string& line : lines_of(r.out)) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, pattern)) << "unexpected line: " << line;
    ranks.insert(match[1]);
    registries.insert(match[2]);
    tokens.insert(match[3]);
  }
  EXPECT_EQ(ranks.size(), 2U) << describe(r);
  EXPECT_EQ(registries.size(), 1U) << "all ranks must agree on the registry\n" << describe(r);
  EXPECT_EQ(tokens.size(), 1U) << "all ranks must share one token\n" << describe(r);
  EXPECT_NE(*registries.begin(), "0");
}

TEST(RunCluster, ManyLinesArriveCompleteAndInOrder) {
  ClusterOptions options;
  options.nodes = 2;
  options.argv = shell("seq 1 20000; printf '%070000d' 0 >&2");
  const auto r = run(options);
  ASSERT_EQ(r.code, 0) << r.err.substr(0, 1000);
  std::vector<int> next(2, 1);
  for (const std::string& line : lines_of(r.out)) {
    ASSERT_GT(line.size(), 9U);
    const int rank = line[6] - '0';
    ASSERT_TRUE(rank == 0 || rank == 1) << line;
    ASSERT_EQ(line.substr(9), std::to_string(next[rank])) << line;
    ++next[rank];
  }
  EXPECT_EQ(next[0], 20001);
  EXPECT_EQ(next[1], 20001);
  // 70000 characters without a newline: forwarded, split at the 64 KiB line limit.
  std::size_t zeros = 0;
  for (const std::string& line : lines_of(r.err)) {
    ASSERT_EQ(line.rfind("[rank ", 0), 0U) << line.substr(0, 100);
    zeros += line.size() - 9;
  }
  EXPECT_EQ(zeros, 2U * 70000U);
}

TEST(RunCluster, NonZeroExitIsReportedAndFailsTheRun) {
  ClusterOptions options;
  options.nodes = 3;
  options.argv = shell("if [ \"$DFI_RANK\" = 2 ]; then exit 3; fi; echo ok");
  const auto r = run(options);
  EXPECT_EQ(r.code, kExitRankFailed) << describe(r);
  EXPECT_TRUE(contains(r.err, "dfi cluster: rank 2 exited with status 3\n")) << describe(r);
  // The healthy ranks may still be running when rank 2 fails (the launcher then says it waits
  // for them), but none of them may be reported as failed.
  EXPECT_FALSE(std::regex_search(r.err, std::regex("rank [01] (exited|\\(pid)"))) << describe(r);
  EXPECT_TRUE(contains(r.out, "[rank 0] ok\n")) << describe(r);
}

TEST(RunCluster, RankKilledBySignalStopsTheOthersAfterGrace) {
  const std::string marker = marked_sleep_seconds(1);
  ClusterOptions options;
  options.nodes = 3;
  options.grace = milliseconds(500);
  // The sleeping ranks run `sleep` as a child of the shell: both must be stopped.
  options.argv = shell("if [ \"$DFI_RANK\" = 1 ]; then kill -9 $$; fi; sleep " + marker +
                       "; echo woke");
  const auto r = run(options);
  EXPECT_EQ(r.code, kExitRankFailed) << describe(r);
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(dfi cluster: rank 1 \(pid [0-9]+\) was )"
                                                  R"(killed by signal 9 \(Killed\))")))
      << describe(r);
  EXPECT_TRUE(contains(r.err, "rank 0 (pid")) << describe(r);
  EXPECT_TRUE(contains(r.err, "stopped by the launcher with SIGTERM")) << describe(r);
  EXPECT_FALSE(contains(r.out, "woke")) << describe(r);
  EXPECT_GE(r.elapsed, milliseconds(500)) << "the others must get the grace period";
  EXPECT_LT(r.elapsed, options.grace + kKillDelay + milliseconds(2000)) << describe(r);
  EXPECT_TRUE(leftover_processes(marker).empty()) << "processes left behind\n" << describe(r);
}

TEST(RunCluster, RanksIgnoringSigtermAreKilled) {
  TempDir dir;
  const std::string marker = marked_sleep_seconds(2);
  ClusterOptions options;
  options.nodes = 2;
  options.grace = milliseconds(0);
  // Rank 0 fails once rank 1 ignores SIGTERM (and so does the sleep it starts).
  options.argv = shell("if [ \"$DFI_RANK\" = 0 ]; then while [ ! -e " + dir.path() +
                       "/trapped ]; do sleep 0.01; done; exit 1; fi; trap '' TERM; touch " +
                       dir.path() + "/trapped; sleep " + marker + "; echo woke");
  const auto r = run(options);
  EXPECT_EQ(r.code, kExitRankFailed) << describe(r);
  EXPECT_TRUE(contains(r.err, "rank 1 still running 1000 ms after SIGTERM; sending SIGKILL"))
      << describe(r);
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(rank 1 \(pid [0-9]+\) stopped by the )"
                                                  R"(launcher with SIGKILL)")))
      << describe(r);
  EXPECT_LT(r.elapsed, kKillDelay + milliseconds(2000)) << describe(r);
  EXPECT_TRUE(leftover_processes(marker).empty()) << "processes left behind\n" << describe(r);
}

TEST(RunCluster, GraceLetsTheOthersFinishOnTheirOwn) {
  ClusterOptions options;
  options.nodes = 2;
  options.grace = milliseconds(5000);
  options.argv = shell("if [ \"$DFI_RANK\" = 0 ]; then exit 7; fi; sleep 0.3; echo finished");
  const auto r = run(options);
  EXPECT_EQ(r.code, kExitRankFailed) << describe(r);
  EXPECT_TRUE(contains(r.out, "[rank 1] finished\n")) << describe(r);
  EXPECT_TRUE(contains(r.err, "dfi cluster: rank 0 exited with status 7\n")) << describe(r);
  EXPECT_FALSE(contains(r.err, "SIGTERM")) << describe(r);
  EXPECT_LT(r.elapsed, milliseconds(3000)) << describe(r);
}

TEST(RunCluster, TimeoutStopsASleepingCluster) {
  const std::string marker = marked_sleep_seconds(3);
  ClusterOptions options;
  options.nodes = 2;
  options.timeout = milliseconds(500);
  options.argv = shell("sleep " + marker);
  const auto r = run(options);
  EXPECT_EQ(r.code, kExitTimeout) << describe(r);
  EXPECT_TRUE(contains(r.err, "timeout of 500 ms reached; ranks still running: 0, 1"))
      << describe(r);
  EXPECT_GE(r.elapsed, milliseconds(500));
  EXPECT_LT(r.elapsed, milliseconds(2500)) << describe(r);
  EXPECT_TRUE(leftover_processes(marker).empty()) << "processes left behind\n" << describe(r);
}

TEST(RunCluster, BackgroundProcessesOfARankDoNotOutliveIt) {
  const std::string marker = marked_sleep_seconds(4);
  ClusterOptions options;
  options.nodes = 1;
  options.argv = shell("sleep " + marker + " & echo started");
  const auto r = run(options);
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "[rank 0] started\n")) << describe(r);
  EXPECT_LT(r.elapsed, milliseconds(2000)) << describe(r);
  EXPECT_TRUE(leftover_processes(marker).empty()) << "processes left behind\n" << describe(r);
}

TEST(RunCluster, ProgramNotFoundIsAClearError) {
  ClusterOptions options;
  options.nodes = 2;
  options.argv = {"dfi-no-such-program-4711", "--flag"};
  const auto r = run(options);
  EXPECT_EQ(r.code, kExitCannotExecute) << describe(r);
  EXPECT_TRUE(contains(r.err, "cannot execute 'dfi-no-such-program-4711': not found in PATH"))
      << describe(r);
  EXPECT_LT(r.elapsed, milliseconds(1000));

  options.argv = {"/nonexistent/dfi-program"};
  const auto r2 = run(options);
  EXPECT_EQ(r2.code, kExitCannotExecute) << describe(r2);
  EXPECT_TRUE(contains(r2.err, "/nonexistent/dfi-program")) << describe(r2);
}

TEST(RunCluster, ExecFailureInTheChildIsReported) {
  TempDir dir;
  const std::string path = dir.path() + "/not-executable";
  std::ofstream(path) << "#!/bin/sh\necho should not run\n";
  ::chmod(path.c_str(), 0644);
  ClusterOptions options;
  options.nodes = 2;
  options.argv = {path};
  const auto r = run(options);
  EXPECT_EQ(r.code, kExitCannotExecute) << describe(r);
  EXPECT_TRUE(contains(r.err, "rank 0: cannot execute '" + path + "': Permission denied"))
      << describe(r);
  EXPECT_FALSE(contains(r.out, "should not run")) << describe(r);
  EXPECT_LT(r.elapsed, milliseconds(1000));
}

TEST(RunCluster, InvalidOptionsAreRejected) {
  const auto expect_invalid = [](const ClusterOptions& options, const std::string& needle) {
    std::ostringstream out;
    std::ostringstream err;
    try {
      static_cast<void>(run_cluster(options, out, err));
      ADD_FAILURE() << "expected invalid_argument mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_argument) << e.what();
      EXPECT_TRUE(contains(e.what(), needle)) << e.what();
    }
  };
  ClusterOptions good;
  good.argv = {"true"};
  ClusterOptions o = good;
  o.nodes = 0;
  expect_invalid(o, "nodes");
  o = good;
  o.argv.clear();
  expect_invalid(o, "argv");
  o = good;
  o.transport = "rdma";
  expect_invalid(o, "rdma");
  o = good;
  o.netns = true;  // with the default transport "shm"
  expect_invalid(o, "tcp");
  o = good;
  o.netns = true;
  o.transport = "tcp";
  o.nodes = 255;
  expect_invalid(o, "254");
  o = good;
  o.grace = milliseconds(-1);
  expect_invalid(o, "grace");
  o = good;
  o.timeout = milliseconds(-1);
  expect_invalid(o, "timeout");
  o = good;
  o.extra_env = {{"A=B", "c"}};
  expect_invalid(o, "A=B");
}

TEST(RunCluster, LauncherSignalStopsTheRanksAndRestoresHandlers) {
  TempDir dir;
  const std::string marker = marked_sleep_seconds(5);
  ClusterOptions options;
  options.nodes = 2;
  options.argv = shell("touch " + dir.path() + "/ready.$DFI_RANK; sleep " + marker);
  std::atomic<bool> ready{false};
  std::thread signaller([&] {
    ready = wait_for_files({dir.path() + "/ready.0", dir.path() + "/ready.1"}, milliseconds(10000));
    if (ready) ::kill(::getpid(), SIGTERM);
  });
  const auto r = run(options);
  signaller.join();
  ASSERT_TRUE(ready) << "ranks did not start\n" << describe(r);
  EXPECT_EQ(r.code, kExitSignalBase + SIGTERM) << describe(r);
  EXPECT_TRUE(contains(r.err, "received SIGTERM; stopping ranks 0, 1")) << describe(r);
  EXPECT_LT(r.elapsed, milliseconds(5000)) << describe(r);
  EXPECT_TRUE(leftover_processes(marker).empty()) << "processes left behind\n" << describe(r);
  struct sigaction action {};
  ::sigaction(SIGTERM, nullptr, &action);
  EXPECT_EQ(action.sa_handler, SIG_DFL) << "the launcher must restore the previous handler";
}

TEST(RunCluster, OnlyOneLauncherPerProcess) {
  TempDir dir;
  ClusterOptions slow;
  slow.nodes = 1;
  slow.argv = shell("touch " + dir.path() + "/ready; sleep 1");
  std::thread first([&] {
    std::ostringstream out;
    std::ostringstream err;
    EXPECT_EQ(run_cluster(slow, out, err), 0) << err.str();
  });
  ASSERT_TRUE(wait_for_files({dir.path() + "/ready"}, milliseconds(10000)));
  ClusterOptions other;
  other.argv = {"true"};
  std::ostringstream out;
  std::ostringstream err;
  try {
    static_cast<void>(run_cluster(other, out, err));
    ADD_FAILURE() << "a second concurrent run_cluster must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::already_exists) << e.what();
  }
  first.join();
}

}  // namespace
}  // namespace dfi::launch
