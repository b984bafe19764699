// apps::kv bench — a YCSB-style workload against the replicated key-value service, as every rank
// of a cluster (`dfi kv bench` is this function behind a command line).
//
// Roles by rank: ranks 0 .. replicas-1 run the replicas (rank 0 leads and creates the service's
// flows); every other rank runs `client_threads` clients, each on its own worker, each keeping
// `window` requests outstanding (but the `idle_threads` last of them, which send nothing). A
// request is a get with probability read_ratio, else a put (or, with probability delete_ratio
// among the writes, a delete) of a key drawn from 0 .. keys-1, uniformly or Zipf-distributed (`zipf`, YCSB's skew is 0.99). Every put writes a value no other put writes (its first 8 bytes are a unique id, the
// rest a pattern derived from it), so a history names exactly which write a get saw, and a get
// that returns a torn or unknown value is caught at once.
//
// After the run every rank reports to all (cluster::survivors_records): the lowest rank that
// reported prints throughput, latency percentiles, and checks that every replica that reported
// applied the same writes (same slot and key count, digest and final view) and — when no rank
// died — that the leaders answered exactly the requests the clients completed. When views
// changed (Multi-Paxos: a replica died, service.hpp), it also prints the final view and the
// longest time any client went without a completion (the failover time, as the clients saw it).
// NOPaxos: when gap agreement made sequence numbers NO-OPs or clients sent requests again, it
// prints how many ("kv: gap agreement: ..."). With `history_dir`, every client thread journals
// its operations there as it goes (history.hpp: a killed client's history survives it), for the
// Porcupine checker (tests/porcupine).
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

#include "dfi/apps/kv/service.hpp"

namespace dfi::apps::kv {

struct BenchOptions {
  ServiceOptions service;
  std::uint64_t keys = 1000;
  double zipf = 0;                // 0: keys uniform over 0 .. keys-1; > 0: Zipf with this exponent (key 0 hottest)
  double read_ratio = 0.95;
  double delete_ratio = 0.0;      // share of the writes that are deletes
  double seconds = 3;             // run length of every client
  std::uint64_t requests = 0;     // per client, then stop (0: run `seconds`)
  double rate = 0;                // requests per second each client offers at most (0: as the window allows)
  // A client refills its window only once `batch` places are free (or none is outstanding), so
  // that its requests travel in groups of at least `batch`: one segment of the requests flow (in
  // NOPaxos one sequence number, one copy to every replica, one answer from each). 1 ..window;
  // 1 refills every place as soon as it is free.
  std::size_t batch = 1;
  // The last `idle_threads` client threads of every client rank open their client and then send
  // nothing until the rank's other threads finished, then close: gateways that nobody uses (`dfi
  // kv serve` with more sockets than users). A view change must not wait for them. 0 ..
  // client_threads-1 (every client rank keeps one thread that sends).
  int idle_threads = 0;
  std::string history_dir;        // non-empty: journal the clients' histories there
  std::uint64_t seed = 1;
  bool progress = true;           // the first client rank prints a line per second
  // Test seam (NOPaxos): the run's last client (the highest index), when it takes its
  // `fault_segment`-th sequence number of the requests flow, before the segment is written
  // anywhere — kill: its process dies (SIGKILL), leaving that number a gap at every replica;
  // delay: it waits `fault_delay` (longer than the gap timeout: the segment comes too late and is
  // dropped, gap agreement makes it a NO-OP and the client sends its requests again).
  enum class Fault { none, kill, delay };
  Fault fault = Fault::none;
  std::uint64_t fault_segment = 20;
  std::chrono::milliseconds fault_delay{2000};
};

// What the summarizing rank adds up after a run.
struct BenchSummary {
  std::uint64_t requests = 0;       // completed by all clients
  std::uint64_t clients = 0;
  double requests_per_second = 0;   // sum over clients of requests / their run time
  double p50_us = 0, p95_us = 0, p99_us = 0;  // request latency (bucket upper bounds, 12.5 %)
  double longest_wait_us = 0;       // the longest a client went without a completion (failover)
  std::uint64_t view = 0;           // the view the service ended in
  std::uint64_t noops = 0;          // NOPaxos: sequence numbers gap agreement made NO-OPs
  std::uint64_t resent = 0;         // NOPaxos: requests the clients sent again
  bool replicas_agree = false;
  bool summarized = false;          // this rank summarized the run (the others leave it untouched)
};

// The registry record that bench client `client` (its index, Client::index) of service `service`
// publishes once its first request completed: the service serves it. A fault harness starts its
// clock when every client's record exists (a fault before that tests the start-up, not the
// service).
std::string serving_record(const std::string& service, std::size_t client);

// Runs this rank's role. Returns 0 when the run completed and (summarizing rank) the replicas
// agree; 1 otherwise, with the reason on `err` naming the rank, flow or peer. The summarizing rank
// (the lowest that reported) fills `summary` when
// given. Throws dfi::Error for bad options (invalid_argument).
int run_bench(cluster::Node& node, const BenchOptions& options, std::ostream& out, std::ostream& err,
              BenchSummary* summary = nullptr);

}  // namespace dfi::apps::kv
