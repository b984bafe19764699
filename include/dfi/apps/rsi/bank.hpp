// apps::rsi bank — the bank-transfer workload: money moves between accounts, the total never
// changes. Runs either protocol on a cluster and checks the total (and that no record stayed
// locked) after every run. `dfi txn` is this function behind a command line.
//
// Roles by rank: ranks 0 .. servers-1 are storage servers (rank 0 also hosts the timestamp
// service and the run's statistics words and prints progress and the summary); every other
// rank runs `threads` clients, one per thread, each on its own worker. A client repeats: pick two
// different accounts at random, read both, move 1..10 units from one to the other, commit; an
// aborted transfer is counted and the client goes on with a new one. Every whole word of an
// account's payload holds its balance, so a read mixing two versions is caught (the client stops
// with an error; the audit counts such records).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>

#include "dfi/apps/rsi/client.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::apps::rsi {

struct BankOptions {
  Protocol protocol = Protocol::rsi;
  std::string table = "bank";
  std::uint64_t accounts = 1000;
  std::int64_t initial_balance = 1000;
  std::size_t servers = 1;            // ranks 0 .. servers-1
  std::size_t threads = 1;            // clients per client rank
  std::size_t payload_bytes = 8;      // >= 8: the balance, repeated in every whole word
  double seconds = 5;                 // run length (clients stop after it or `transactions`)
  std::uint64_t transactions = 0;     // per client; 0: no limit
  std::uint64_t timestamps = std::uint64_t{1} << 24;  // the timestamp vector's bits
  std::chrono::milliseconds timeout{30000};           // set-up waits and 2PC replies
  bool progress = true;               // rank 0 prints a line per second
};

// Runs the workload as this rank's role. Returns 0 when the run completed and (rank 0) the
// invariant held and no record stayed locked; 1 otherwise, with the reason on `err` (a failed
// storage server is named). Throws dfi::Error for bad options (invalid_argument, naming the
// option) and failed set-up.
int run_bank(cluster::Node& node, const BankOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dfi::apps::rsi
