#include "dfi/launch/netns.hpp"

#include <dirent.h>
#include <net/if.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>

#include "dfi/common/config.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/common/error.hpp"
#include "dfi/launch/child_process.hpp"
#include "subprocess.hpp"

namespace dfi::launch {
namespace {

constexpr char kNetnsDir[] = "/var/run/netns";  // where `ip netns` keeps its names
constexpr char kAddressPrefix[] = "10.99.0.";
constexpr char kBridge[] = "br0";              // inside the hub namespace
constexpr char kRankDevice[] = "eth0";         // inside each rank namespace
constexpr std::chrono::seconds kIpTimeout{10};  // one `ip` command; normally a few milliseconds
constexpr int kCapNetAdmin = 12;
constexpr int kCapSysAdmin = 21;

std::atomic<bool> g_topology_alive{false};

std::string process_prefix() { return "dfi" + std::to_string(::getpid()); }

// "dfi<pid>hub" or "dfi<pid>r<digits>" for our pid.
bool is_our_name(const std::string& name, const std::string& prefix) {
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string rest = name.substr(prefix.size());
  if (rest == "hub") return true;
  if (rest.size() < 2 || rest[0] != 'r') return false;
  return std::all_of(rest.begin() + 1, rest.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
}

bool netns_exists(const std::string& name) {
  struct stat info {};
  return ::stat((std::string(kNetnsDir) + "/" + name).c_str(), &info) == 0;
}

// The effective capability set from /proc/self/status, or nullopt if it cannot be read.
std::optional<std::uint64_t> effective_capabilities() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      try {
        return std::stoull(line.substr(7), nullptr, 16);
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

// 0 if a child process can create a network namespace, else the errno of unshare().
int probe_unshare_netns() {
  const pid_t pid = ::fork();
  if (pid < 0) return errno;
  if (pid == 0) ::_exit(::unshare(CLONE_NEWNET) == 0 ? 0 : (errno & 0xff));
  const int status = detail::wait_for_exit(pid);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return EINVAL;
}

std::string trim(std::string text);

// Runs `argv` (an `ip` or `tc` command); throws Errc::io naming `what`, the command and its output
// when it fails.
void run_checked(const std::vector<std::string>& argv, const char* what) {
  const detail::CommandResult result = detail::run_command(argv, Deadline(kIpTimeout));
  if (!WIFEXITED(result.status) || WEXITSTATUS(result.status) != 0) {
    throw Error(Errc::io, std::string(what) + " failed: `" + detail::join_command(argv) + "` " +
                              detail::describe_wait_status(result.status) + ": " + trim(result.output));
  }
}

std::string trim(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0) {
    text.pop_back();
  }
  return text;
}

}  // namespace

std::string netns_rank_device() { return kRankDevice; }

std::string netns_rank_address(int rank) {
  if (rank < 0 || rank >= kNetnsMaxRanks) {
    throw Error(Errc::invalid_argument, "netns rank " + std::to_string(rank) +
                                            " out of range: the address scheme 10.99.0.<rank+1>"
                                            "/24 fits ranks 0.." +
                                            std::to_string(kNetnsMaxRanks - 1));
  }
  return kAddressPrefix + std::to_string(rank + 1);
}

std::string netns_rank_name(int rank) {
  if (rank < 0) throw Error(Errc::invalid_argument, "netns rank must not be negative");
  return process_prefix() + "r" + std::to_string(rank);
}

std::string netns_hub_name() { return process_prefix() + "hub"; }

std::vector<std::string> netns_owned_by_this_process() {
  std::vector<std::string> names;
  DIR* dir = ::opendir(kNetnsDir);
  if (dir == nullptr) return names;
  const std::string prefix = process_prefix();
  while (const dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (is_our_name(name, prefix)) names.push_back(std::move(name));
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::string netns_unavailable_reason() {
  if (!find_program("ip")) {
    return "the `ip` program (iproute2) was not found in PATH";
  }
  const std::optional<std::uint64_t> caps = effective_capabilities();
  if (!caps) return "cannot read the effective capabilities from /proc/self/status";
  const auto has = [&](int cap) { return ((*caps >> cap) & 1U) != 0; };
  if (!has(kCapNetAdmin) || !has(kCapSysAdmin)) {
    std::ostringstream message;
    message << "creating network namespaces needs CAP_NET_ADMIN and CAP_SYS_ADMIN (run as root); "
            << "this process has CapEff=" << std::hex << *caps;
    return message.str();
  }
  if (const int error = probe_unshare_netns(); error != 0) {
    return "cannot create a network namespace (unshare(CLONE_NEWNET): " +
           detail::errno_message(error) + "); a container without network-namespace support?";
  }
  return "";
}

NetnsTopology::NetnsTopology(int ranks, std::string qdisc) : qdisc_(std::move(qdisc)), ranks_(ranks) {
  if (ranks < 1 || ranks > kNetnsMaxRanks) {
    throw Error(Errc::invalid_argument, "a netns topology needs 1.." +
                                            std::to_string(kNetnsMaxRanks) + " ranks, not " +
                                            std::to_string(ranks));
  }
  if (g_topology_alive.exchange(true)) {
    throw Error(Errc::already_exists,
                "another network-namespace topology is alive in this process (" +
                    netns_hub_name() + "); only one may exist at a time");
  }
  try {
    hub_ = netns_hub_name();
    for (int rank = 0; rank < ranks; ++rank) rank_names_.push_back(netns_rank_name(rank));
    create();
  } catch (...) {
    static_cast<void>(remove());
    g_topology_alive.store(false);
    throw;
  }
}

NetnsTopology::~NetnsTopology() {
  static_cast<void>(remove());
  g_topology_alive.store(false);
}

const std::string& NetnsTopology::rank_namespace(int rank) const {
  if (rank < 0 || rank >= ranks_) {
    throw Error(Errc::invalid_argument, "rank " + std::to_string(rank) + " is not in 0.." +
                                            std::to_string(ranks_ - 1));
  }
  return rank_names_[static_cast<std::size_t>(rank)];
}

void NetnsTopology::ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  run(argv);
}

void NetnsTopology::run(const std::vector<std::string>& argv) { run_checked(argv, "network namespace setup"); }

void netns_set_own_link(bool up) {
  // A rank namespace: the launcher told this process so (net_devices is the rank device only in
  // netns mode), and the device exists in this process's own network namespace.
  const bool rank_namespace = config::get_string("net_devices") == kRankDevice;
  if (!rank_namespace || ::if_nametoindex(kRankDevice) == 0) {
    throw Error(Errc::invalid_argument,
                std::string("netns: this process is not in a rank namespace of `dfi cluster run --netns` (") +
                    (rank_namespace ? "no device " : "DFI_NET_DEVICES is not ") + kRankDevice + "): there is no rank link to cut");
  }
  run_checked({"ip", "link", "set", kRankDevice, up ? "up" : "down"}, up ? "restoring the rank's link" : "cutting the rank's link");
}

void NetnsTopology::create() {
  // Names with our pid can only be leftovers of a dead process that had the same pid.
  std::vector<std::string> all_names{hub_};
  all_names.insert(all_names.end(), rank_names_.begin(), rank_names_.end());
  for (const std::string& name : all_names) {
    if (netns_exists(name)) ip({"netns", "delete", name});
  }

  for (const std::string& name : all_names) {
    ip({"netns", "add", name});
    created_.push_back(name);
  }
  ip({"-n", hub_, "link", "add", kBridge, "type", "bridge"});
  ip({"-n", hub_, "link", "set", kBridge, "up"});
  for (int rank = 0; rank < ranks_; ++rank) {
    const std::string& ns = rank_names_[static_cast<std::size_t>(rank)];
    std::string port = "r";  // (not "r" + ...: GCC 12 -Wrestrict false positive, PR105651)
    port += std::to_string(rank);
    // Created inside the hub, with the peer end moved straight into the rank's namespace.
    ip({"-n", hub_, "link", "add", port, "type", "veth", "peer", "name", kRankDevice, "netns",
        ns});
    ip({"-n", hub_, "link", "set", port, "master", kBridge, "up"});
    ip({"-n", ns, "link", "set", "lo", "up"});
    ip({"-n", ns, "addr", "add",
        netns_rank_address(rank) + "/" + std::to_string(kNetnsPrefixLength), "dev", kRankDevice});
    ip({"-n", ns, "link", "set", kRankDevice, "up"});
    if (!qdisc_.empty()) {
      std::vector<std::string> tc{"tc", "-n", ns, "qdisc", "add", "dev", kRankDevice, "root"};
      std::istringstream words(qdisc_);
      for (std::string word; words >> word;) tc.push_back(word);
      run(tc);
    }
  }
}

std::vector<std::string> NetnsTopology::remove() noexcept {
  std::vector<std::string> failures;
  try {
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
      const std::vector<std::string> argv{"ip", "netns", "delete", *it};
      std::string problem;
      try {
        const detail::CommandResult result = detail::run_command(argv, Deadline(kIpTimeout));
        if (!WIFEXITED(result.status) || WEXITSTATUS(result.status) != 0) {
          problem = detail::describe_wait_status(result.status) + ": " + trim(result.output);
        }
      } catch (const std::exception& e) {
        problem = e.what();
      }
      if (!problem.empty() && netns_exists(*it)) {
        failures.push_back("cannot remove network namespace " + *it + " (`" +
                           detail::join_command(argv) + "` " + problem + ")");
      }
    }
    created_.clear();
  } catch (...) {
    failures.emplace_back("out of memory while removing network namespaces");
  }
  return failures;
}

}  // namespace dfi::launch
