// Multi-process tests of apps/rsi: the bank workload under `dfi txn` with RSI and with the 2PC
// baseline (2 storage servers, 4 clients on 2 ranks, 16 accounts: many conflicts), the
// conflict scenario of rsi_node, and a storage server killed mid-run. Every body runs over shm
// and over TCP.
#include <gtest/gtest.h>

#include <chrono>
#include <ostream>
#include <regex>
#include <string>
#include <utility>

#include "cluster_run.hpp"

namespace dfi {
namespace {

using testing::contains;
using testing::run_cluster;
using testing::RunOptions;

struct Param {
  std::string transport;
  std::string protocol;
};

// gtest prints a failing test's parameter with this (not as bytes).
void PrintTo(const Param& p, std::ostream* os) { *os << p.transport << '/' << p.protocol; }

class RsiCluster : public ::testing::TestWithParam<Param> {};

std::uint64_t commits_in(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("txn: (\\d+) commits"))) return 0;
  return std::stoull(m[1]);
}

TEST_P(RsiCluster, BankTransfersKeepTheTotalUnderFourConflictingClients) {
  auto run = run_cluster(4, GetParam().transport,
                         {DFI_BINARY, "txn", "--protocol", GetParam().protocol, "--servers", "2", "--threads", "2",
                          "--accounts", "16", "--seconds", "3"});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "4 client(s)")) << run.all();
  EXPECT_TRUE(contains(run.out, "txn: bank invariant holds: total 16000 = 16 accounts x 1000")) << run.all();
  EXPECT_TRUE(contains(run.out, "txn: no record left locked")) << run.all();
  EXPECT_GT(commits_in(run.out), 0u) << run.all();
}

// Records of 1 KiB (the paper's size): payloads of many words, so a reader that raced an install
// and kept a torn payload would break the total.
TEST_P(RsiCluster, BankTransfersWithKilobyteRecordsKeepTheTotal) {
  auto run = run_cluster(4, GetParam().transport,
                         {DFI_BINARY, "txn", "--protocol", GetParam().protocol, "--servers", "2", "--threads", "2",
                          "--accounts", "64", "--record-bytes", "1024", "--seconds", "2", "--no-progress"});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "txn: bank invariant holds: total 64000 = 64 accounts x 1000")) << run.all();
  EXPECT_TRUE(contains(run.out, "txn: no record left locked")) << run.all();
  EXPECT_GT(commits_in(run.out), 0u) << run.all();
}

// Checkouts (1 KiB records, 32 products: conflicts on stock) with insert rings that do not wrap
// (40 commits per client, 64 order slots): every check, including lines == units sold.
TEST_P(RsiCluster, CheckoutsKeepStockOrdersAndLinesConsistent) {
  auto run = run_cluster(4, GetParam().transport,
                         {DFI_BINARY, "txn", "--workload", "checkout", "--protocol", GetParam().protocol, "--servers", "2",
                          "--threads", "2", "--products", "32", "--order-slots", "64", "--transactions", "40",
                          "--no-progress"});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "txn: 160 commits")) << run.all();
  EXPECT_TRUE(std::regex_search(run.out, std::regex("check holds: units sold \\(stock records\\) (\\d+) == units committed by the clients \\1\\n")))
      << run.all();
  EXPECT_TRUE(contains(run.out, "check holds: 160 orders present, 0 order lines not matching their order")) << run.all();
  EXPECT_TRUE(contains(run.out, "check holds: units of the order lines")) << run.all();
  EXPECT_TRUE(contains(run.out, "check holds: orders present 160 == commits 160")) << run.all();
  EXPECT_TRUE(contains(run.out, "check holds: 0 product records changed")) << run.all();
  EXPECT_FALSE(contains(run.out, "VIOLATED")) << run.all();
  EXPECT_TRUE(contains(run.out, "txn: no record left locked")) << run.all();
}

// Timed checkouts whose insert rings wrap (1 slot: wrapped by any client's second commit, even
// on a slow, loaded machine): orders are overwritten in place, and the checks that remain hold.
TEST_P(RsiCluster, CheckoutsWithWrappingInsertRingsKeepTheirChecks) {
  auto run = run_cluster(4, GetParam().transport,
                         {DFI_BINARY, "txn", "--workload", "checkout", "--protocol", GetParam().protocol, "--servers", "2",
                          "--threads", "2", "--products", "16", "--order-slots", "1", "--seconds", "2", "--no-progress"});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "insert rings wrapped")) << run.all();
  EXPECT_FALSE(contains(run.out, "VIOLATED")) << run.all();
  EXPECT_TRUE(contains(run.out, "txn: no record left locked")) << run.all();
}

TEST_P(RsiCluster, AConflictingWriterAbortsAndLeavesNoLockBehind) {
  auto run = run_cluster(3, GetParam().transport, {RSI_NODE, "conflict", GetParam().protocol});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "rsi conflict (" + GetParam().protocol +
                                    "): conflicting writer aborted, no lock left behind, snapshot rule held, no dirty read"))
      << run.all();
}

// Rank 1, a storage server, is killed 2 s into a 60 s run: every client stops with an error naming
// it, rank 0's audit names it too, and the run ends long before its length.
TEST_P(RsiCluster, AKilledStorageServerGivesClientsAnErrorNamingIt) {
  const std::string txn = std::string(DFI_BINARY) + " txn --protocol " + GetParam().protocol +
                          " --servers 2 --threads 2 --accounts 1000 --seconds 60 --no-progress";
  const std::string script = "if [ \"$DFI_RANK\" = 1 ]; then " + txn + " & pid=$!; sleep 2; kill -9 $pid; exit 0; else exec " +
                             txn + "; fi";
  RunOptions options;
  options.timeout = std::chrono::seconds(40);
  auto run = run_cluster(4, GetParam().transport, {"/bin/sh", "-c", script}, options);
  EXPECT_NE(run.code, 0) << run.all();
  EXPECT_LT(run.seconds, 35) << run.all();
  // Straight from a record operation, or — when the other client rank already exited and this
  // client set out to recover its locks — from the recovery's table scan ("recovery: rsi table
  // 'bank': storage server 1 ..."): either way one line naming the client and the server.
  for (const auto& [rank, client] : {std::pair{2, 0}, std::pair{3, 2}}) {
    const std::regex line("dfi txn \\(rank " + std::to_string(rank) + "\\): " + GetParam().protocol + " client " +
                          std::to_string(client) + " of table 'bank': [^\\n]*storage server 1 \\(rank 1\\)");
    EXPECT_TRUE(std::regex_search(run.err, line)) << "rank " << rank << ", client " << client << '\n' << run.all();
  }
  EXPECT_TRUE(contains(run.err, "storage server 1 (rank 1)")) << run.all();
  EXPECT_FALSE(contains(run.out, "bank invariant")) << run.all();
}

// A client killed while it holds locks (rsi_node crash: rank 2 dies at a chosen point of a
// commit) does not block its records: rank 3's clients roll them back (not committed) or forward
// (the commit record was written), the run finishes, the total holds, no lock is left. "late":
// the client dies only after the run's end, when rank 3's clients are done with transactions;
// they recover its records as they leave.
struct CrashParam {
  std::string transport;
  std::string stage;
};
void PrintTo(const CrashParam& p, std::ostream* os) { *os << p.transport << '/' << p.stage; }

class RsiCrash : public ::testing::TestWithParam<CrashParam> {};

std::uint64_t recovered(const std::string& out, const char* how) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("(\\d+) rolled forward, (\\d+) rolled back"))) return 0;
  return std::stoull(m[std::string(how) == "forward" ? 1 : 2]);
}

TEST_P(RsiCrash, AClientKilledHoldingLocksIsRecoveredByTheOthers) {
  // Rank 2 must die by SIGKILL (exit status 137 through the shell); its wrapper then exits 0 so
  // that the launcher lets the others finish.
  const std::string script = std::string(RSI_NODE) + " crash " + GetParam().stage +
                             "; code=$?; if [ \"$DFI_RANK\" = 2 ]; then [ $code = 137 ] && exit 0; "
                             "echo \"rank 2 was not killed (exit $code)\" >&2; exit 3; fi; exit $code";
  auto run = run_cluster(4, GetParam().transport, {"/bin/sh", "-c", script});
  ASSERT_EQ(run.code, 0) << run.all();
  EXPECT_TRUE(contains(run.out, "txn: bank invariant holds: total 16000 = 16 accounts x 1000")) << run.all();
  EXPECT_TRUE(contains(run.out, "txn: no record left locked")) << run.all();
  // Rank 3 may be listed too: it exits once done, and after a failure nobody waits for it.
  EXPECT_TRUE(contains(run.err, "dfi txn: rank(s) 2")) << run.all();
  // Client 0 held both records of its transfer: not committed at "locked", committed after.
  if (GetParam().stage == "locked") {
    EXPECT_GE(recovered(run.out, "back"), 2u) << run.all();
  } else if (GetParam().stage == "logged" || GetParam().stage == "late") {
    EXPECT_GE(recovered(run.out, "forward"), 2u) << run.all();
  } else {
    EXPECT_GE(recovered(run.out, "forward"), 1u) << run.all();
  }
}

INSTANTIATE_TEST_SUITE_P(TransportsAndStages, RsiCrash,
                         ::testing::Values(CrashParam{"shm", "locked"}, CrashParam{"shm", "logged"},
                                           CrashParam{"shm", "installing"}, CrashParam{"tcp", "locked"},
                                           CrashParam{"tcp", "logged"}, CrashParam{"tcp", "installing"},
                                           CrashParam{"shm", "late"}, CrashParam{"tcp", "late"}),
                         [](const auto& param_info) { return param_info.param.transport + "_" + param_info.param.stage; });

INSTANTIATE_TEST_SUITE_P(TransportsAndProtocols, RsiCluster,
                         ::testing::Values(Param{"shm", "rsi"}, Param{"shm", "2pc"}, Param{"tcp", "rsi"},
                                           Param{"tcp", "2pc"}),
                         [](const auto& param_info) {
                           return param_info.param.transport + "_" + (param_info.param.protocol == "rsi" ? "rsi" : "twopc");
                         });

}  // namespace
}  // namespace dfi
