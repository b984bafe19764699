// The etcd baseline of the kv scenarios: an etcd cluster (Debian's etcd-server, 3.4) of N members
// on loopback, and the YCSB-like load generator bench/etcd/ycsb (Go, the real etcd client
// go.etcd.io/etcd/client/v3; built with `go build` on first use, like the MPI baselines). Neither
// is a dependency of DFI: without them the scenario says why it cannot run.
//
//   bench::EtcdCluster etcd(5, bench::EtcdData::tmpfs);      // started, healthy, leader elected
//   nlohmann::json r = bench::run_etcd_ycsb(etcd, {.clients = 4, .window = 16, ...});
//   // r["requests_per_second"], r["p99_us"], ...             // members stop with `etcd`
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dfi/launch/child_process.hpp"

namespace dfi::tools::bench {

// Where the members keep their write-ahead log: tmpfs (/dev/shm: fsync costs nothing) or the
// disk under the bench build directory (etcd as deployed, fsync per commit).
enum class EtcdData { tmpfs, disk };

// Why the etcd baseline cannot run here (no etcd or etcdctl, no Go), or empty.
std::string etcd_unavailable();

class EtcdCluster {
 public:
  // Starts `members` members on free loopback ports and waits (up to `bound`) until every member
  // answers `etcdctl endpoint health`. Throws dfi::Error(io) quoting a member's output when one
  // exits or the cluster does not become healthy in time.
  EtcdCluster(int members, EtcdData data, std::chrono::milliseconds bound = std::chrono::seconds(30));
  // Kills the members and removes their data directories.
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // "127.0.0.1:p1,127.0.0.1:p2,...": every member's client URL.
  const std::string& endpoints() const noexcept { return endpoints_; }
  // The command that started member 0 (for the result's record).
  const std::string& command() const noexcept { return command_; }

 private:
  std::vector<launch::ChildProcess> members_;
  std::string data_dir_;
  std::string endpoints_;
  std::string command_;
};

struct EtcdLoad {
  int clients = 4;            // client connections
  std::uint64_t window = 1;   // requests outstanding per client
  std::uint64_t keys = 100000;
  double reads = 0.95;
  int value_bytes = 64;
  double seconds = 3;
};

// Builds bench/etcd/ycsb if needed, runs it against `cluster` and returns its JSON line
// (requests, requests_per_second, p50_us, p95_us, p99_us, errors); `command` receives the exact
// command. Throws dfi::Error: not_found (no Go), io (build or run failed, quoting the output).
nlohmann::json run_etcd_ycsb(const EtcdCluster& cluster, const EtcdLoad& load, std::string* command = nullptr);

}  // namespace dfi::tools::bench
