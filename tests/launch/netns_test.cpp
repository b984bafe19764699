// Local clusters in network namespaces. Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2;
// every test that needs them skips with the reason when they are missing.
#include "dfi/launch/netns.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "dfi/common/error.hpp"
#include "dfi/launch/local_cluster.hpp"
#include "launch/launch_test_util.hpp"

namespace dfi::launch {
namespace {

using std::chrono::milliseconds;
using testing::describe;
using testing::leftover_processes;
using testing::marked_sleep_seconds;
using testing::run;
using testing::shell;

#define DFI_REQUIRE_NETNS()                                                        \
  do {                                                                             \
    const std::string why = netns_unavailable_reason();                            \
    if (!why.empty()) GTEST_SKIP() << "network namespace tests cannot run: " << why; \
  } while (false)

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// Output of a shell command run in the root namespace.
std::string capture(const std::string& command) {
  std::string output;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  if (!pipe) return output;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe.get())) output.append(buffer, n);
  return output;
}

// Neither our helper nor `ip netns list` shows a namespace of this process.
void expect_no_namespaces_left() {
  EXPECT_TRUE(netns_owned_by_this_process().empty());
  const std::string listed = capture("ip netns list");
  EXPECT_FALSE(contains(listed, "dfi" + std::to_string(::getpid())))
      << "`ip netns list` still shows namespaces of this process:\n" << listed;
}

ClusterOptions netns_options(int nodes, const std::string& script) {
  ClusterOptions options;
  options.nodes = nodes;
  options.transport = "tcp";
  options.netns = true;
  options.argv = shell(script);
  return options;
}

TEST(Netns, AddressAndNameScheme) {
  EXPECT_EQ(netns_rank_address(0), "10.99.0.1");
  EXPECT_EQ(netns_rank_address(2), "10.99.0.3");
  EXPECT_EQ(netns_rank_address(kNetnsMaxRanks - 1), "10.99.0.254");
  EXPECT_THROW(static_cast<void>(netns_rank_address(kNetnsMaxRanks)), Error);
  EXPECT_THROW(static_cast<void>(netns_rank_address(-1)), Error);
  const std::string pid = std::to_string(::getpid());
  EXPECT_EQ(netns_rank_name(3), "dfi" + pid + "r3");
  EXPECT_EQ(netns_hub_name(), "dfi" + pid + "hub");
}

TEST(Netns, TopologyIsCreatedAndRemoved) {
  DFI_REQUIRE_NETNS();
  {
    NetnsTopology topology(2);
    const std::vector<std::string> expected{netns_hub_name(), netns_rank_name(0),
                                            netns_rank_name(1)};
    std::vector<std::string> sorted = expected;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(netns_owned_by_this_process(), sorted);
    EXPECT_EQ(topology.rank_namespace(1), netns_rank_name(1));
    const std::string rank1 = capture("ip -n " + netns_rank_name(1) + " -4 -o addr show");
    EXPECT_TRUE(contains(rank1, "10.99.0.2/24")) << rank1;
    const std::string hub = capture("ip -n " + netns_hub_name() + " -o link show");
    EXPECT_TRUE(contains(hub, "master br0")) << hub;
    try {
      NetnsTopology second(1);
      ADD_FAILURE() << "a second topology in the same process must be refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::already_exists) << e.what();
    }
    EXPECT_TRUE(topology.remove().empty());
    expect_no_namespaces_left();
  }
  // The destructor after remove() is harmless, and a new topology can be made again.
  NetnsTopology again(1);
  EXPECT_EQ(netns_owned_by_this_process().size(), 2U);
}

TEST(Netns, SetupFailingHalfwayRemovesWhatWasCreated) {
  DFI_REQUIRE_NETNS();
  std::string real_ip;
  for (const char* candidate : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(candidate, X_OK) == 0) {
      real_ip = candidate;
      break;
    }
  }
  ASSERT_FALSE(real_ip.empty()) << "cannot find the ip binary";
  char pattern[] = "/tmp/dfi-netns-test-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  // An `ip` that fails when rank 1's address is configured, after several namespaces exist.
  {
    std::ofstream script(dir + "/ip");
    script << "#!/bin/sh\n"
           << "case \"$*\" in *'addr add 10.99.0.2/24'*) echo 'injected failure' >&2; exit 2;; "
           << "esac\nexec " << real_ip << " \"$@\"\n";
  }
  ::chmod((dir + "/ip").c_str(), 0755);
  const std::string old_path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  ::setenv("PATH", (dir + ":" + old_path).c_str(), 1);
  try {
    NetnsTopology topology(3);
    ADD_FAILURE() << "setup should have failed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::io) << e.what();
    EXPECT_TRUE(contains(e.what(), "addr add 10.99.0.2/24")) << e.what();
    EXPECT_TRUE(contains(e.what(), "injected failure")) << e.what();
  }
  ::setenv("PATH", old_path.c_str(), 1);
  static_cast<void>(std::system(("rm -rf '" + dir + "'").c_str()));
  expect_no_namespaces_left();
}

TEST(Netns, RanksSeeTheirOwnAddressAndTalkTcpAcrossTheBridge) {
  DFI_REQUIRE_NETNS();
  const std::string server =
      "import os, socket\n"
      "host, port = os.environ['DFI_REGISTRY'].rsplit(':', 1)\n"
      "s = socket.socket()\n"
      "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
      "s.bind((host, int(port)))\n"
      "s.listen(1)\n"
      "s.settimeout(10)\n"
      "c, peer = s.accept()\n"
      "print('got', c.recv(100).decode(), 'from', peer[0], flush=True)\n";
  const std::string client =
      "import os, socket, time\n"
      "host, port = os.environ['DFI_REGISTRY'].rsplit(':', 1)\n"
      "for attempt in range(200):\n"
      "    try:\n"
      "        c = socket.create_connection((host, int(port)), timeout=1)\n"
      "        break\n"
      "    except OSError:\n"
      "        time.sleep(0.05)\n"
      "else:\n"
      "    raise SystemExit('rank 1 cannot connect to ' + host)\n"
      "c.sendall(b'hello-from-rank-1')\n"
      "c.close()\n";
  ClusterOptions options = netns_options(
      3,
      "echo \"registry $DFI_REGISTRY transport $DFI_TRANSPORT\"; "
      "echo \"addr $(ip -4 -o addr show dev eth0)\"; "
      // /sys must describe the rank's namespace (UCX lists interfaces there): the MAC of eth0 in
      // /sys is the one netlink reports for the rank's eth0.
      "mac=$(cat /sys/class/net/eth0/address) && ip -o link show dev eth0 | grep -q \"$mac\" && "
      "echo 'sysfs shows this namespace'; "
      "case $DFI_RANK in 0) exec python3 -c \"$SERVER\";; 1) exec python3 -c \"$CLIENT\";; esac");
  options.extra_env = {{"SERVER", server}, {"CLIENT", client}};
  options.timeout = milliseconds(20000);
  const auto r = run(options);
  EXPECT_EQ(r.code, 0) << describe(r);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    EXPECT_TRUE(contains(r.out, prefix + "addr ")) << describe(r);
    EXPECT_TRUE(contains(r.out, netns_rank_address(rank) + "/24")) << describe(r);
    EXPECT_TRUE(contains(r.out, prefix + "registry 10.99.0.1:")) << describe(r);
    EXPECT_TRUE(contains(r.out, prefix + "sysfs shows this namespace\n")) << describe(r);
  }
  // Each rank sees only its own address.
  for (const std::string& line : {std::string("[rank 0] addr"), std::string("[rank 2] addr")}) {
    const auto at = r.out.find(line);
    ASSERT_NE(at, std::string::npos) << describe(r);
    const std::string text = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_FALSE(contains(text, "10.99.0.2/")) << text;
  }
  EXPECT_TRUE(contains(r.out, "[rank 0] got hello-from-rank-1 from 10.99.0.2\n")) << describe(r);
  EXPECT_TRUE(contains(r.out, "transport tcp")) << describe(r);
  expect_no_namespaces_left();
  const std::string root_addresses = capture("ip -4 -o addr show");
  EXPECT_FALSE(contains(root_addresses, "10.99.0.")) << "the root namespace was changed:\n"
                                                     << root_addresses;
}

TEST(Netns, NamespacesAreRemovedAfterAFailingRank) {
  DFI_REQUIRE_NETNS();
  const std::string marker = marked_sleep_seconds(7);
  ClusterOptions options = netns_options(
      2, "if [ \"$DFI_RANK\" = 1 ]; then exit 5; fi; sleep " + marker);
  options.grace = milliseconds(200);
  const auto r = run(options);
  EXPECT_EQ(r.code, kExitRankFailed) << describe(r);
  EXPECT_TRUE(contains(r.err, "exited with status 5")) << describe(r);
  EXPECT_LT(r.elapsed, milliseconds(5000)) << describe(r);
  EXPECT_TRUE(leftover_processes(marker).empty()) << describe(r);
  expect_no_namespaces_left();
}

TEST(Netns, NamespacesAreRemovedAfterTimeoutAndExecFailure) {
  DFI_REQUIRE_NETNS();
  const std::string marker = marked_sleep_seconds(8);
  ClusterOptions options = netns_options(2, "sleep " + marker);
  options.timeout = milliseconds(300);
  auto r = run(options);
  EXPECT_EQ(r.code, kExitTimeout) << describe(r);
  EXPECT_TRUE(leftover_processes(marker).empty()) << describe(r);
  expect_no_namespaces_left();

  options.argv = {"/dev/null"};  // exists, but cannot be executed
  r = run(options);
  EXPECT_EQ(r.code, kExitCannotExecute) << describe(r);
  EXPECT_TRUE(contains(r.err, "cannot execute '/dev/null'")) << describe(r);
  expect_no_namespaces_left();
}

}  // namespace
}  // namespace dfi::launch
