// Network namespaces that stand in for hosts: one namespace per rank, all joined by a Linux
// bridge, so that a local cluster talks TCP over real (virtual) Ethernet instead of loopback.
//
//   hub namespace "dfi<pid>hub":  bridge br0, ports r0 r1 r2 ...
//                                   |       |       |
//   rank namespaces "dfi<pid>r<k>": eth0    eth0    eth0      (10.99.0.<k+1>/24, plus lo)
//
// Nothing is added to the root namespace: no address, no route, no interface. Every namespace is
// removed again by NetnsTopology's owner (and by its destructor), which also removes the veth
// pairs and the bridge. Creating namespaces needs CAP_NET_ADMIN and CAP_SYS_ADMIN (root) and the
// `ip` program from iproute2; netns_unavailable_reason() says whether this process has them.
#pragma once

#include <string>
#include <vector>

namespace dfi::launch {

// Rank k gets 10.99.0.<k+1>/24, so at most 254 ranks fit.
inline constexpr int kNetnsMaxRanks = 254;
inline constexpr int kNetnsPrefixLength = 24;

// The IPv4 address of `rank` inside its namespace, e.g. "10.99.0.1" for rank 0. Throws
// dfi::Error(Errc::invalid_argument) unless 0 <= rank < kNetnsMaxRanks. Thread-safe.
std::string netns_rank_address(int rank);

// The network device each rank namespace uses to reach the others ("eth0"); the launcher passes
// it to ranks as DFI_NET_DEVICES so that the fabric's TCP transport uses it.
std::string netns_rank_device();

// The name of `rank`'s namespace for a topology created by this process: "dfi<pid>r<rank>".
// Throws dfi::Error(Errc::invalid_argument) for a negative rank. Thread-safe.
std::string netns_rank_name(int rank);

// The name of this process's hub namespace, which holds the bridge: "dfi<pid>hub". Thread-safe.
std::string netns_hub_name();

// The namespaces named by this process's scheme that currently exist (as `ip netns list` would
// show them), sorted. Empty when none exist. Meant for tests and diagnostics. Thread-safe.
std::vector<std::string> netns_owned_by_this_process();

// Why namespaces cannot be created here ("needs CAP_NET_ADMIN and CAP_SYS_ADMIN ...", "`ip` ...
// not found"), or the empty string if they can. Probes by creating (and immediately dropping) an
// anonymous network namespace in a short-lived child process. Thread-safe.
std::string netns_unavailable_reason();

// Cuts (up = false) or restores (up = true) the link of the rank namespace this process runs in:
// its device netns_rank_device() goes down or up, as a pulled cable would, so that the rank can
// reach nobody and nobody reaches it (a partition). Meant for a process that the launcher started
// in its rank's namespace (e.g. a test or bench harness around the rank's real work). Throws
// dfi::Error(Errc::invalid_argument) when this process is not in a rank namespace (no such
// device), Errc::io naming the `ip` command that failed. Thread-safe.
void netns_set_own_link(bool up);

// Owns the namespaces of one local cluster. At most one instance may exist per process at a time,
// which keeps the per-process names unique. Not thread-safe: one thread owns the object.
class NetnsTopology {
 public:
  // Creates the hub and `ranks` rank namespaces, connects and configures them; leftovers with the
  // same names (from a crashed earlier process with the same pid) are removed first. Blocks until
  // done (a few milliseconds per rank).
  // Errors: dfi::Error(Errc::invalid_argument) unless 1 <= ranks <= kNetnsMaxRanks;
  // Errc::already_exists if another NetnsTopology is alive in this process; Errc::io naming the
  // failing `ip` command and its output (or Errc::timeout if it hangs). On any error, everything
  // created so far has been removed before the exception leaves the constructor.
  // `qdisc`, if not empty, is a tc queueing discipline installed as root on every rank's device,
  // e.g. "netem delay 1ms loss 0.5%" or "tbf rate 500mbit burst 64kb latency 50ms"; a kernel
  // without it gives Errc::io naming the tc command and its message.
  explicit NetnsTopology(int ranks, std::string qdisc = {});
  // Calls remove() and ignores its errors.
  ~NetnsTopology();
  NetnsTopology(const NetnsTopology&) = delete;
  NetnsTopology& operator=(const NetnsTopology&) = delete;

  int ranks() const noexcept { return ranks_; }
  // The namespace of `rank` (netns_rank_name(rank)); the path "/var/run/netns/<name>" can be
  // opened and passed to setns(). Throws dfi::Error(Errc::invalid_argument) for a bad rank.
  const std::string& rank_namespace(int rank) const;
  const std::string& hub_namespace() const noexcept { return hub_; }

  // Removes every namespace this object created (rank namespaces first, then the hub). Processes
  // still inside a namespace keep it alive, unnamed, until they exit, so stop them first.
  // Returns one message per namespace that could not be removed (empty on success). Idempotent.
  std::vector<std::string> remove() noexcept;

 private:
  void create();
  void ip(const std::vector<std::string>& args);
  void run(const std::vector<std::string>& argv);
  std::string qdisc_;

  int ranks_;
  std::string hub_;
  std::vector<std::string> rank_names_;
  std::vector<std::string> created_;  // in creation order
};

}  // namespace dfi::launch
