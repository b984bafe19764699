// Child processes of the baseline runners: output capture, exit codes, timeouts, ports.
#include "bench/process.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace dfi::tools::bench {
namespace {

using namespace std::chrono_literals;

TEST(Process, CapturesOutputExitCodeAndEnvironment) {
  ProcessResult r =
      run_process({{"sh", "-c", "echo out; echo err >&2; echo \"$DFI_BENCH_TEST_VAR\"; exit 3"},
                   {{"DFI_BENCH_TEST_VAR", "seen"}}},
                  10s);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.output.find("out\n"), std::string::npos);
  EXPECT_NE(r.output.find("err\n"), std::string::npos);
  EXPECT_NE(r.output.find("seen\n"), std::string::npos);
}

TEST(Process, KillsWhatOverstaysItsBound) {
  const auto start = std::chrono::steady_clock::now();
  ProcessResult r = run_process({{"sh", "-c", "sleep 30 & sleep 30"}, {}}, 300ms);
  EXPECT_TRUE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(Process, MissingProgramExits127WithAReason) {
  ProcessResult r = run_process({{"dfi-no-such-program-xyz"}, {}}, 10s);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.output.find("cannot execute dfi-no-such-program-xyz"), std::string::npos) << r.output;
}

TEST(Process, FindInPath) {
  EXPECT_TRUE(find_in_path("sh").has_value());
  EXPECT_FALSE(find_in_path("dfi-no-such-program-xyz").has_value());
  EXPECT_EQ(find_in_path("/bin/sh").value_or(""), "/bin/sh");
}

TEST(Process, FreePortAndListeningCheck) {
  const int port = pick_free_port();
  ASSERT_GT(port, 0);
  EXPECT_FALSE(is_listening(port));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  EXPECT_TRUE(is_listening(port));
  ::close(fd);
}

TEST(Text, ShellJoinAndTail) {
  EXPECT_EQ(shell_join({"a", "b c", "it's", "x=1"}), "a 'b c' 'it'\\''s' x=1");
  EXPECT_EQ(shell_join({""}), "''");
  EXPECT_EQ(shell_join({"-p", "$PORT", "$(rm)", "$port"}), "-p $PORT '$(rm)' '$port'");
  EXPECT_EQ(tail_lines("1\n2\n3\n4\n", 2), "3\n4");
  EXPECT_EQ(tail_lines("only", 3), "only");
  EXPECT_EQ(tail_lines("", 3), "");
}

}  // namespace
}  // namespace dfi::tools::bench
