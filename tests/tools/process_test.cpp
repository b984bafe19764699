// What bench adds to launch::ChildProcess for its baselines: servers known to listen before their
// client starts, and command lines and output quoted in results and messages. (The child process
// itself is tested with the launch layer: tests/launch/child_process_test.cpp.)
#include "bench/process.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dfi/common/error.hpp"

namespace dfi::tools::bench {
namespace {

using namespace std::chrono_literals;

// A server that listens on the port it is given, for as long as the test lets it.
launch::ChildSpec python_server(int port) {
  return {{"python3", "-c",
           "import socket, sys, time\n"
           "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
           "print('listening', flush=True); time.sleep(30)\n",
           std::to_string(port)},
          {}};
}

TEST(Process, ListeningCheck) {
  const int port = launch::pick_free_port();
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

TEST(Process, StartsAServerAndReturnsOnceItListens) {
  if (!launch::find_program("python3")) GTEST_SKIP() << "python3 not found in PATH";
  ListeningServer server = start_listening_server(python_server, "test server", 20s);
  EXPECT_TRUE(is_listening(server.port));
  EXPECT_TRUE(server.process.running());
}

TEST(Process, AServerThatExitsIsAnErrorQuotingItsOutput) {
  try {
    start_listening_server(
        [](int port) {
          return launch::ChildSpec{
              {"sh", "-c", "echo cannot serve on $0; exit 4", std::to_string(port)}, {}};
        },
        "test server", 10s);
    FAIL() << "a server that exited was reported as listening";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("test server"), std::string::npos) << what;
    EXPECT_NE(what.find("exited with status 4"), std::string::npos) << what;
    EXPECT_NE(what.find("cannot serve on"), std::string::npos) << what;
  }
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
