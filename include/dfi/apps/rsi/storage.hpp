// apps::rsi::StorageServer — one rank's share of a table's records (001 §4.2, NAM architecture).
//
// The server allocates its record block (cluster::SharedWords: registered memory that clients
// read, compare-and-swap and write one-sidedly), writes every record's first version (commit id 0,
// payload from `init`) and publishes the block. For RSI that is all: the server's CPU does nothing
// on the data path (over shm none at all; over tcp UCX emulates the one-sided operations with
// active messages that the process's progress thread applies, see src/README.md).
//
// For the baseline, traditional SI with two-phase commit (Protocol::two_pc), the same server
// also serves two-sided messages on a worker of its own, from a thread of its own: clients send
// read, prepare (lock + validate), commit (install + unlock) and abort (unlock) requests and the
// server's CPU does the work on its block (wire format in src/apps/rsi/two_pc_wire.hpp).
//
//   StorageServer server(node, table, [](std::uint64_t id, std::span<std::byte> payload) {...},
//                        /*serve_two_pc=*/false);
//   ... until the run is over; the destructor stops serving (peers must be done by then).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "dfi/apps/rsi/table.hpp"
#include "dfi/cluster/shared_words.hpp"

namespace dfi::fabric {
class Worker;
}

namespace dfi::apps::rsi {

// Sets the first payload of record `id`.
using RecordInit = std::function<void(std::uint64_t id, std::span<std::byte> payload)>;

class StorageServer {
 public:
  // Hosts this rank's block of `table` (this rank must be one of its servers) and, with
  // `serve_two_pc`, starts serving 2PC requests. Throws dfi::Error: invalid_argument (this rank
  // is not a server of the table), already_exists (the block was published already).
  StorageServer(cluster::Node& node, const Table& table, const RecordInit& init, bool serve_two_pc);
  // Stops serving and frees the block.
  ~StorageServer();
  StorageServer(const StorageServer&) = delete;
  StorageServer& operator=(const StorageServer&) = delete;

  // This server's index in the table's server list.
  std::size_t server() const noexcept { return server_; }
  // 2PC requests served so far (0 for RSI: nothing to serve). Thread-safe.
  std::uint64_t requests() const noexcept { return requests_.load(std::memory_order_relaxed); }

  // Registry record of server `server`'s 2PC worker address.
  static std::string two_pc_record(const std::string& table, std::size_t server);

 private:
  struct TwoPc;
  void serve();

  Table table_;
  std::size_t server_ = 0;
  cluster::SharedWords block_;
  std::unique_ptr<TwoPc> two_pc_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> requests_{0};
  std::thread thread_;
};

// Reads every record of `table` (one get per server block, or the local block) and calls
// `visit(id, header, payload)` for each, in id order per server. For checks after a run, when no
// transaction is in flight. Throws dfi::Error: peer_failed naming the storage server, timeout.
void scan_table(cluster::Node& node, fabric::Worker& worker, const Table& table, std::chrono::milliseconds timeout,
                const std::function<void(std::uint64_t id, std::uint64_t header, std::span<const std::byte> payload)>& visit);

}  // namespace dfi::apps::rsi
