// launch::ChildProcess: a helper program with captured output, a bound and a group kill.
#include "dfi/launch/child_process.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "dfi/common/error.hpp"

namespace dfi::launch {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// True while `pid` exists and is not a zombie waiting for its (new) parent to reap it.
bool alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const std::size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

TEST(ChildProcess, CapturesOutputExitCodeAndEnvironment) {
  ChildResult r = run_child(
      {{"sh", "-c", "echo out; echo err >&2; echo \"$DFI_CHILD_TEST_VAR\"; exit 3"},
       {{"DFI_CHILD_TEST_VAR", "first"}, {"DFI_CHILD_TEST_VAR", "seen"}}},
      10s);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(contains(r.output, "out\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "err\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "seen\n")) << r.output;  // the last setting of a name wins
  EXPECT_FALSE(contains(r.output, "first")) << r.output;
}

TEST(ChildProcess, KillsTheWholeGroupWhenItOverstaysItsBound) {
  const auto start = std::chrono::steady_clock::now();
  ChildResult r = run_child({{"sh", "-c", "sleep 30 & echo $!; sleep 30"}, {}}, 300ms);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  // The background sleep was in the child's process group: it is gone too.
  const int background = std::stoi(r.output);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (alive(background) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(alive(background)) << "background child " << background << " survived";
}

TEST(ChildProcess, OutputIsReadableWhileItRuns) {
  ChildProcess child = ChildProcess::start({{"sh", "-c", "echo ready; sleep 30"}, {}});
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!contains(child.output(), "ready") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(child.output(), "ready\n");
  EXPECT_TRUE(child.running());
  // The destructor kills and reaps it; an explicit wait past the bound says it timed out.
  ChildResult r = child.wait(0ms);
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(child.running());
}

TEST(ChildProcess, AProgramThatCannotRunIsAnErrorNamingIt) {
  try {
    ChildProcess::start({{"dfi-no-such-program-xyz", "--flag"}, {}});
    FAIL() << "started a program that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::io);
    EXPECT_TRUE(contains(e.what(), "dfi-no-such-program-xyz --flag")) << e.what();
    EXPECT_TRUE(contains(e.what(), "not found in PATH")) << e.what();
  }
  try {
    ChildProcess::start({{"/dev/null"}, {}});  // exists, not executable
    FAIL() << "executed /dev/null";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "cannot execute '/dev/null'")) << e.what();
  }
}

TEST(ChildProcess, FindProgram) {
  EXPECT_TRUE(find_program("sh").has_value());
  EXPECT_FALSE(find_program("dfi-no-such-program-xyz").has_value());
  EXPECT_EQ(find_program("/bin/sh").value_or(""), "/bin/sh");
  EXPECT_FALSE(find_program("").has_value());
}

TEST(ChildProcess, PickFreePort) {
  const int port = pick_free_port();
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
}

}  // namespace
}  // namespace dfi::launch
