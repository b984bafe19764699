// apps::kv::HistoryJournal: what a client journals is what kvcheck (tests/porcupine) reads —
// completed and unfinished operations, past the first growth of the file, and from a process
// killed with SIGKILL in the middle of its run.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "dfi/apps/kv/history.hpp"
#include "dfi/launch/child_process.hpp"

namespace dfi::apps::kv {
namespace {

class HistoryJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(KVCHECK).empty()) GTEST_SKIP() << "Go not found at configure time: no kvcheck (README set-up installs it)";
    dir_ = std::filesystem::temp_directory_path() /
           ("dfi-journal-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  launch::ChildResult check(const std::string& path) {
    return launch::ChildProcess::start({{KVCHECK, path}, {}}).wait(std::chrono::seconds(60));
  }

  std::string dir_;
};

// tests/porcupine/testdata/concurrent.history, journaled: overlapping operations of three
// clients and a put whose outcome is unknown.
TEST_F(HistoryJournalTest, ALinearizableJournalIsAccepted) {
  const std::string path = HistoryJournal::path(dir_, 3, 0);
  {
    HistoryJournal j(path);
    j.returned(j.invoked(0, Op::put, 1, 5, 0), 0, 10);
    j.returned(j.invoked(1, Op::get, 1, 0, 5), 5, 30);
    j.returned(j.invoked(2, Op::del, 1, 0, 40), 1, 50);
    j.returned(j.invoked(1, Op::get, 1, 0, 60), 0, 70);
    (void)j.invoked(0, Op::put, 2, 7, 100);  // never returns
    const std::size_t read = j.invoked(1, Op::get, 2, 0, 200);
    (void)j.invoked(1, Op::get, 3, 0, 300);  // an unanswered read constrains nothing
    j.returned(read, 7, 210);
  }
  const launch::ChildResult r = check(path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kvcheck: 6 operations on 2 keys: linearizable"), std::string::npos) << r.output;
}

TEST_F(HistoryJournalTest, AStaleReadIsRejected) {
  const std::string path = HistoryJournal::path(dir_, 3, 1);
  {
    HistoryJournal j(path);
    j.returned(j.invoked(0, Op::put, 1, 5, 0), 0, 10);
    j.returned(j.invoked(0, Op::put, 1, 6, 20), 0, 30);
    j.returned(j.invoked(1, Op::get, 1, 0, 40), 5, 50);  // 6 was written before this read began
  }
  const launch::ChildResult r = check(path);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("NOT linearizable"), std::string::npos) << r.output;
}

// 40000 operations: the file doubles (16384 records at first) and nothing is lost on the way.
TEST_F(HistoryJournalTest, AJournalGrowsPastItsFirstSize) {
  const std::string path = HistoryJournal::path(dir_, 2, 0);
  {
    HistoryJournal j(path);
    for (std::uint64_t i = 1; i <= 20000; ++i) {
      const auto t = static_cast<std::int64_t>(i * 100);
      j.returned(j.invoked(0, Op::put, i % 7, i, t), 0, t + 10);
      j.returned(j.invoked(0, Op::get, i % 7, 0, t + 20), i, t + 30);
    }
  }
  const launch::ChildResult r = check(path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kvcheck: 40000 operations on 7 keys: linearizable"), std::string::npos) << r.output;
}

// A process killed with SIGKILL mid-run (no destructor, no flush) leaves its journal readable:
// every returned operation, and the one in flight as unknown.
TEST_F(HistoryJournalTest, AKilledWritersJournalSurvivesIt) {
  const std::string path = HistoryJournal::path(dir_, 4, 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto* j = new HistoryJournal(path);  // never destroyed
    for (std::uint64_t i = 1; i <= 1000; ++i) {
      const auto t = static_cast<std::int64_t>(i * 100);
      j->returned(j->invoked(5, Op::put, 1, i, t), 0, t + 10);
    }
    (void)j->invoked(5, Op::put, 1, 1001, 200000);
    ::raise(SIGKILL);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const launch::ChildResult r = check(path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kvcheck: 1001 operations on 1 keys: linearizable"), std::string::npos) << r.output;
}

TEST_F(HistoryJournalTest, AnUncreatableJournalIsNamed) {
  try {
    HistoryJournal j(dir_ + "/no/such/dir/kv-0-0.journal");
    FAIL() << "created a journal in a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv history: cannot create '" + dir_ + "/no/such/dir/kv-0-0.journal'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dfi::apps::kv
