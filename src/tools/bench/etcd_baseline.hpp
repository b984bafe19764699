// The etcd baseline of the kv scenarios: an etcd cluster (Debian's etcd-server, 3.4) of N members
// on loopback, and the YCSB-like load generator bench/etcd/ycsb (Go, the real etcd client
// go.etcd.io/etcd/client/v3; built with `go build` on first use, like the MPI baselines). Neither
// is a dependency of DFI: without them the scenario says why it cannot run.
//
//   launch::EtcdCluster etcd(5, bench::etcd_data_root(bench::EtcdData::tmpfs));  // healthy
//   nlohmann::json r = bench::run_etcd_ycsb(etcd, {.clients = 4, .window = 16, ...});
//   // r["requests_per_second"], r["p99_us"], ...             // members stop with `etcd`
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dfi/launch/etcd_cluster.hpp"

namespace dfi::tools::bench {

// Where the members keep their write-ahead log: tmpfs (/dev/shm: fsync costs nothing) or the
// disk under the bench build directory (etcd as deployed, fsync per commit).
enum class EtcdData { tmpfs, disk };

// Why the etcd baseline cannot run here (no etcd or etcdctl, no Go), or empty.
std::string etcd_unavailable();

// The folder the members of an etcd baseline keep their data in.
std::string etcd_data_root(EtcdData data);
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
nlohmann::json run_etcd_ycsb(const launch::EtcdCluster& cluster, const EtcdLoad& load, std::string* command = nullptr);

}  // namespace dfi::tools::bench
