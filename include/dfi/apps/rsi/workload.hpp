// apps::rsi workloads — transactions on a cluster with either protocol, checked after every run.
// `dfi txn` and `dfi bench rsi` are run_workload behind a command line.
//
// Roles by rank: ranks 0 .. servers-1 are storage servers (rank 0 also hosts the timestamp
// service, the commit log, the run's statistics words, and prints progress and the summary);
// every other rank runs `threads` clients, one per thread, each on its own worker. A client
// repeats the workload's transaction; an aborted one is counted and the client goes on with a
// new one. Records that dead clients left locked are recovered by the others (client.hpp) and
// counted in the summary.
//
//   bank      money moves between `records` accounts: read two, move 1..10 units, write both.
//             Every whole word of an account's payload holds its balance, so a read mixing two
//             versions is caught. Check: the total never changes.
//   checkout  (001's TPC-W-like checkout) read 3 products, insert 1 order and its 3 order lines,
//             update the 3 products' stock. One table: `records` products, as many stock
//             records, then each client's own pre-allocated insert range of `order_slots` orders
//             (+ 3 lines each), used as a ring: insert ranges are disjoint, so inserts never
//             conflict and need no allocator round trip; an order slot is reused after
//             `order_slots` orders of its client (the audit then checks the newest ones). Stock
//             records count the units sold. Checks: units sold (sum over stock records) == units
//             the clients committed; every order present has its 3 lines with its own order
//             number and quantities (no half insert); with no ring wrapped, the lines' units ==
//             units sold.
// Both: no record left locked, no record holding words of different versions.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

#include "dfi/apps/rsi/client.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::apps::rsi {

enum class Workload { bank, checkout };

// "bank" / "checkout".
std::string_view workload_name(Workload workload) noexcept;
// Parses a workload name. Throws dfi::Error(invalid_argument) naming the accepted values.
Workload parse_workload(std::string_view name);

struct TxnOptions {
  Workload workload = Workload::bank;
  Protocol protocol = Protocol::rsi;
  std::string table;                  // default: the workload's name
  std::uint64_t records = 1000;       // bank: accounts; checkout: products
  std::int64_t initial_balance = 1000;  // bank: every account's first balance
  std::uint64_t order_slots = 1024;   // checkout: orders in each client's insert ring
  std::size_t servers = 1;            // ranks 0 .. servers-1
  std::size_t threads = 1;            // clients per client rank
  std::size_t payload_bytes = 8;      // bank: >= 8; checkout: >= 64
  double seconds = 5;                 // run length (clients stop after it or `transactions`)
  std::uint64_t transactions = 0;     // per client; 0: no limit
  std::uint64_t timestamps = std::uint64_t{1} << 24;  // the timestamp vector's bits
  std::chrono::milliseconds timeout{30000};           // set-up waits and 2PC replies
  bool progress = true;               // rank 0 prints a line per second
  // Test seam, passed to every client (ClientOptions::at_commit_stage).
  void (*at_commit_stage)(CommitStage stage, std::size_t client) = nullptr;
};

// What rank 0 saw (other ranks: only `code`).
struct TxnResult {
  int code = 0;               // 0: the run completed and every check held
  double seconds = 0;         // from the start barrier until every client left
  std::uint64_t commits = 0;
  std::uint64_t aborts = 0;
  std::size_t clients = 0;
};

// Runs the workload as this rank's role; rank 0 prints the summary and the checks on `out`.
// `code` is 1 when a check failed or a client or rank failed, with the reason on `err` (a failed
// storage server is named). Throws dfi::Error for bad options (invalid_argument, naming the
// option) and failed set-up.
TxnResult run_workload(cluster::Node& node, const TxnOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dfi::apps::rsi
