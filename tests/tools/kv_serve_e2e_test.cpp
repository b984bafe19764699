// `dfi kv serve` end to end: a cluster of 3 replicas and one gateway rank (dfi cluster run) serves
// puts, gets and deletes sent by separate `dfi kv put/get/delete` processes through the gateway's
// socket, refuses a value wider than the service's, and stops cleanly on SIGTERM: every rank ends
// on its own, well before the launcher's SIGKILL, and the gateway removes its socket.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "dfi/launch/child_process.hpp"

namespace dfi {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class KvServe : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(KvServe, ServesRequestsFromOtherProcessesAndStopsCleanlyOnSigterm) {
  const auto& [transport, protocol] = GetParam();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("dfi-kvserve-" + std::to_string(::getpid()) + "-" + transport + "-" + protocol);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string socket = (dir / "kv-3-0.sock").string();
  launch::ChildProcess cluster = launch::ChildProcess::start(
      {{DFI_BINARY, "cluster", "run", "-n", "4", "--transport", transport, "--timeout", "90", "--", DFI_BINARY, "kv",
        "serve", "--protocol", protocol, "--replicas", "3", "--value-bytes", "16", "--socket-dir", dir.string()},
       {}});
  const auto start = std::chrono::steady_clock::now();
  while (!contains(cluster.output(), "serves at " + socket)) {
    ASSERT_TRUE(cluster.running()) << cluster.output();
    ASSERT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60)) << cluster.output();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // `dfi kv <op> --socket <socket> <args...>`, a process of its own.
  auto kv = [&](const std::string& op, std::vector<std::string> args) {
    std::vector<std::string> argv = {DFI_BINARY, "kv", op, "--socket", socket};
    argv.insert(argv.end(), args.begin(), args.end());
    return launch::ChildProcess::start({argv, {}}).wait(std::chrono::seconds(40));
  };
  launch::ChildResult r = kv("put", {"7", "hello"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = kv("get", {"7"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "hello\n");
  r = kv("put", {"7", "0123456789abcdef"});  // exactly the width
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = kv("get", {"7"});
  EXPECT_EQ(r.output, "0123456789abcdef\n");
  r = kv("put", {"8", "0123456789abcdefX"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "a value of 17 bytes for a service of 16-byte values")) << r.output;
  r = kv("delete", {"7"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = kv("get", {"7"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "key 7 not found")) << r.output;
  r = kv("delete", {"7"});
  EXPECT_EQ(r.exit_code, 2) << r.output;

  ASSERT_EQ(::kill(cluster.pid(), SIGTERM), 0);
  const launch::ChildResult end = cluster.wait(std::chrono::seconds(30));
  EXPECT_EQ(end.exit_code, 128 + SIGTERM) << end.output;  // the launcher reports the signal it got
  EXPECT_FALSE(contains(end.output, "SIGKILL")) << end.output;
  EXPECT_FALSE(contains(end.output, "exited with status")) << end.output;  // every rank: status 0
  EXPECT_TRUE(contains(end.output, "kv serve: rank 3 thread 0 stopped after 8 request(s)")) << end.output;
  for (const char* rank : {"0", "1", "2"}) {
    // put, put, delete, delete (of an absent key): four writes, applied by every replica.
    EXPECT_TRUE(contains(end.output, std::string("kv serve: rank ") + rank + " (replica) stopped in view 0: 4 write(s) applied, 0 key(s)"))
        << end.output;
  }
  EXPECT_FALSE(std::filesystem::exists(socket));
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(TransportsAndProtocols, KvServe,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values("paxos", "nopaxos")),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

}  // namespace
}  // namespace dfi
