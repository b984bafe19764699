// An etcd v3 cluster of N members on this machine's loopback (Debian's etcd-server and
// etcd-client): what the registry-on-etcd tests and the kv scenarios' etcd baseline start. Every
// member is a child process of the caller (launch::ChildProcess), killed with the object.
//
//   dfi::launch::EtcdCluster etcd(3, "/dev/shm");    // started, healthy, a leader elected
//   setenv("DFI_REGISTRY", etcd.url().c_str(), 1);   // "etcd://127.0.0.1:p1,127.0.0.1:p2,..."
//   etcd.kill(etcd.leader());                        // the others elect a new leader
//
// Not thread-safe: one thread owns it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "dfi/launch/child_process.hpp"

namespace dfi::launch {

// Why no etcd cluster can start here ("etcd not found in PATH: install Debian's etcd-server and
// etcd-client"), or an empty string.
std::string etcd_unavailable();

class EtcdCluster {
 public:
  // Starts `members` members on free loopback ports, each keeping its data in a directory of its
  // own under `data_root` (/dev/shm: fsync costs nothing), and waits (up to `bound`) until every
  // member answers `etcdctl endpoint health`. Throws dfi::Error(io) quoting a member's output when
  // one exits or the cluster does not become healthy in time; not_found when etcd is missing.
  EtcdCluster(int members, const std::string& data_root, std::chrono::milliseconds bound = std::chrono::seconds(30));
  // Kills the members and removes their data.
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // "127.0.0.1:p1,127.0.0.1:p2,...": every member's client address.
  const std::string& endpoints() const noexcept { return endpoints_; }
  // "etcd://" + endpoints(): a DFI_REGISTRY value.
  std::string url() const { return "etcd://" + endpoints_; }
  // The command that started member 0 (for records and for reproducing by hand).
  const std::string& command() const noexcept { return command_; }
  int size() const noexcept { return static_cast<int>(members_.size()); }
  // The index of the member that leads now (asked of the members still running with `etcdctl
  // endpoint status`), or -1 when none answers with a leader within `bound`.
  int leader(std::chrono::milliseconds bound = std::chrono::seconds(10));
  // Kills member `index` (SIGKILL) and reaps it; its data stays (it does not come back).
  void kill(int index);
  bool running(int index);

 private:
  std::vector<ChildProcess> members_;
  std::vector<std::string> client_addresses_;  // "127.0.0.1:p" per member
  std::string data_dir_;
  std::string endpoints_;
  std::string command_;
};

}  // namespace dfi::launch
