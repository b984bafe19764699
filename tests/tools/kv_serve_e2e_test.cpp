// `dfi kv serve` end to end: a cluster of 3 replicas and one gateway rank (dfi cluster run) serves
// puts, gets and deletes sent by separate `dfi kv put/get/delete` processes through the gateway's
// socket, refuses a value wider than the service's, and stops cleanly on SIGTERM to one of its
// ranks or on `dfi kv stop`: every rank stops, the gateway removes its socket, and every rank and
// the launcher end with status 0.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "dfi/launch/child_process.hpp"

namespace dfi {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// `dfi cluster run -n 4 ... dfi kv serve --replicas 3 --value-bytes 16` in `dir`, started and
// waited for until its gateway (rank 3, thread 0) listens at `socket`.
// `launcher` and `serve` go on the launcher's and kv serve's command lines.
std::optional<launch::ChildProcess> start_service(const std::string& transport, const std::string& protocol,
                                                  const std::filesystem::path& dir, const std::string& socket,
                                                  const std::vector<std::string>& launcher = {},
                                                  const std::vector<std::string>& serve = {}) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<std::string> argv = {DFI_BINARY, "cluster", "run", "-n", "4", "--transport", transport, "--timeout", "90"};
  argv.insert(argv.end(), launcher.begin(), launcher.end());
  for (const char* a : {"--", DFI_BINARY, "kv", "serve", "--protocol"}) argv.emplace_back(a);
  argv.insert(argv.end(), {protocol, "--replicas", "3", "--value-bytes", "16", "--socket-dir", dir.string()});
  argv.insert(argv.end(), serve.begin(), serve.end());
  launch::ChildProcess cluster = launch::ChildProcess::start({argv, {}});
  const auto start = std::chrono::steady_clock::now();
  while (!contains(cluster.output(), "serves at " + socket)) {
    if (!cluster.running() || std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) {
      ADD_FAILURE() << "the service did not start:\n" << cluster.output();
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cluster;
}

// `dfi kv <op> --socket <socket> <args...>`, a process of its own.
launch::ChildResult kv(const std::string& socket, const std::string& op, std::vector<std::string> args) {
  std::vector<std::string> argv = {DFI_BINARY, "kv", op, "--socket", socket};
  argv.insert(argv.end(), args.begin(), args.end());
  return launch::ChildProcess::start({argv, {}}).wait(std::chrono::seconds(40));
}

// The processes whose parent is `parent` (from /proc), lowest pid first.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // gone meanwhile
    // pid (comm) state ppid ...: comm may hold spaces, so read after its closing parenthesis.
    std::istringstream rest(line.substr(line.rfind(')') + 1));
    char state = 0;
    pid_t ppid = 0;
    if (rest >> state >> ppid && ppid == parent) children.push_back(static_cast<pid_t>(std::stol(name)));
  }
  std::sort(children.begin(), children.end());
  return children;
}

class KvServe : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(KvServe, ServesRequestsFromOtherProcessesAndStopsCleanlyOnSigtermToARank) {
  const auto& [transport, protocol] = GetParam();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("dfi-kvserve-" + std::to_string(::getpid()) + "-" + transport + "-" + protocol);
  const std::string socket = (dir / "kv-3-0.sock").string();
  std::optional<launch::ChildProcess> cluster = start_service(transport, protocol, dir, socket);
  ASSERT_TRUE(cluster.has_value());
  launch::ChildResult r = kv(socket, "put", {"7", "hello"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = kv(socket, "get", {"7"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "hello\n");
  r = kv(socket, "put", {"7", "0123456789abcdef"});  // exactly the width
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = kv(socket, "get", {"7"});
  EXPECT_EQ(r.output, "0123456789abcdef\n");
  r = kv(socket, "put", {"8", "0123456789abcdefX"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "a value of 17 bytes for a service of 16-byte values")) << r.output;
  r = kv(socket, "delete", {"7"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = kv(socket, "get", {"7"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "key 7 not found")) << r.output;
  r = kv(socket, "delete", {"7"});
  EXPECT_EQ(r.exit_code, 2) << r.output;

  // SIGTERM to one rank (the launcher's first child): it publishes the stop, every rank stops and
  // leaves with status 0, and so does the launcher. (SIGTERM to the launcher sends it to every
  // rank, then SIGKILL after 1 s; a whole stop takes ~0.2 s here, but a sanitizer build may take
  // longer than that, so the test signals a rank: no deadline but its own 30 s.)
  const std::vector<pid_t> ranks = children_of(cluster->pid());
  ASSERT_EQ(ranks.size(), 4u) << cluster->output();
  ASSERT_EQ(::kill(ranks.front(), SIGTERM), 0);
  const launch::ChildResult end = cluster->wait(std::chrono::seconds(30));
  EXPECT_EQ(end.exit_code, 0) << end.output;
  EXPECT_TRUE(contains(end.output, "received SIGTERM: stopping the service")) << end.output;
  EXPECT_TRUE(contains(end.output, "kv serve: rank 3 thread 0 stopped after 8 request(s)")) << end.output;
  for (const char* rank : {"0", "1", "2"}) {
    // put, put, delete, delete (of an absent key): four writes, applied by every replica.
    EXPECT_TRUE(contains(end.output, std::string("kv serve: rank ") + rank + " (replica) stopped in view 0: 4 write(s) applied, 0 key(s)"))
        << end.output;
  }
  EXPECT_FALSE(std::filesystem::exists(socket));
  std::filesystem::remove_all(dir);
}

// `dfi kv stop` through a gateway: the gateway's rank publishes the stop, every rank stops on its
// own and leaves with status 0, so the launcher does too.
class KvServeStop : public ::testing::TestWithParam<std::string> {};

TEST_P(KvServeStop, AGatewayStopEndsEveryRankWithStatusZero) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("dfi-kvserve-stop-" + std::to_string(::getpid()) + "-" + GetParam());
  const std::string socket = (dir / "kv-3-0.sock").string();
  std::optional<launch::ChildProcess> cluster = start_service(GetParam(), "paxos", dir, socket);
  ASSERT_TRUE(cluster.has_value());
  launch::ChildResult r = kv(socket, "put", {"1", "one"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = kv(socket, "stop", {});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const launch::ChildResult end = cluster->wait(std::chrono::seconds(30));
  EXPECT_EQ(end.exit_code, 0) << end.output;
  EXPECT_TRUE(contains(end.output, "kv serve: rank 3 thread 0 was asked to stop the service")) << end.output;
  EXPECT_TRUE(contains(end.output, "kv serve: rank 3 thread 0 stopped after 1 request(s)")) << end.output;
  for (const char* rank : {"0", "1", "2"}) {
    EXPECT_TRUE(contains(end.output, std::string("kv serve: rank ") + rank + " (replica) stopped in view 0: 1 write(s) applied, 1 key(s)"))
        << end.output;
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Transports, KvServeStop, ::testing::Values("shm", "tcp"));

// The rank (DFI_RANK) of process `pid`, -1 when unknown.
int rank_of(pid_t pid) {
  std::ifstream environ("/proc/" + std::to_string(pid) + "/environ");
  std::string item;
  while (std::getline(environ, item, '\0')) {
    if (item.rfind("DFI_RANK=", 0) == 0) return std::stoi(item.substr(9));
  }
  return -1;
}

// The README's `kv serve` line (issue 29): the launcher serves the registry (--registry-apart) and
// lets the others run on after a rank dies (--grace), two gateways, one of which is never used
// until the end. Killing a replica (the leader, rank 0, or a follower) with SIGKILL: the next get
// through the used gateway returns the value within a bound (the target is 1 s; the bound leaves
// room for a loaded machine), a put and a get go through, and the gateway that was idle through
// the view change serves too. Before, the new view's leader waited for the idle gateway, and
// after 30 s every replica ended.
class KvServeKill : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(KvServeKill, AKilledReplicaWithAnIdleGatewayRecoversWithinABound) {
  const auto& [transport, victim] = GetParam();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("dfi-kvserve-kill-" + std::to_string(::getpid()) + "-" + transport + "-" + victim);
  const std::string socket = (dir / "kv-3-0.sock").string();
  const std::string idle = (dir / "kv-3-1.sock").string();
  std::optional<launch::ChildProcess> cluster =
      start_service(transport, "paxos", dir, socket, {"--registry-apart", "--grace", "86400"}, {"--threads", "2"});
  ASSERT_TRUE(cluster.has_value());
  launch::ChildResult r = kv(socket, "put", {"7", "hello"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const int target = victim == "leader" ? 0 : 2;
  pid_t pid = 0;
  for (pid_t child : children_of(cluster->pid())) {
    if (rank_of(child) == target) pid = child;
  }
  ASSERT_NE(pid, 0) << cluster->output();
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  r = kv(socket, "get", {"7"});
  const auto recovered = std::chrono::steady_clock::now();
  EXPECT_EQ(r.exit_code, 0) << r.output << cluster->output();
  EXPECT_EQ(r.output, "hello\n");
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(recovered - killed).count(), 2000)
      << cluster->output();
  r = kv(socket, "put", {"8", "world"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = kv(idle, "get", {"8"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "world\n");
  r = kv(idle, "stop", {});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const launch::ChildResult end = cluster->wait(std::chrono::seconds(30));
  EXPECT_FALSE(end.timed_out) << end.output;
  // The killed rank fails the launcher's status; every other rank stops cleanly in view 1.
  EXPECT_TRUE(contains(end.output, "kv serve: rank 3 thread 0 stopped after 3 request(s)")) << end.output;
  EXPECT_TRUE(contains(end.output, "kv serve: rank 3 thread 1 stopped after 1 request(s)")) << end.output;
  for (int rank : {0, 1, 2}) {
    if (rank == target) continue;
    // (A follower that took the new leader's state counts only the writes it applied itself.)
    const std::string line = "kv serve: rank " + std::to_string(rank) + " (replica) stopped in view 1: ";
    const std::size_t at = end.output.find(line);
    ASSERT_NE(at, std::string::npos) << end.output;
    EXPECT_TRUE(contains(end.output.substr(at, end.output.find('\n', at) - at), "applied, 2 key(s)")) << end.output;
  }
  EXPECT_FALSE(contains(end.output, "error")) << end.output;
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(TransportsAndVictims, KvServeKill,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values("leader", "follower")),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

INSTANTIATE_TEST_SUITE_P(TransportsAndProtocols, KvServe,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values("paxos", "nopaxos")),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

}  // namespace
}  // namespace dfi
