#include "dfi/apps/rsi/workload.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "dfi/apps/rsi/commit_log.hpp"
#include "dfi/apps/rsi/storage.hpp"
#include "dfi/apps/rsi/timestamps.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/cluster/shared_words.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/registry/client.hpp"
#include "workloads.hpp"

namespace dfi::apps::rsi {
namespace {

using Clock = std::chrono::steady_clock;

// The run's statistics words on rank 0: one block of one word per client for each.
enum StatBlock : std::size_t {
  kCommits = 0,
  kConflicts,
  kSnapshots,
  kDeparted,
  kForward,   // records of dead clients rolled forward
  kBack,      // ... rolled back
  kUnits,     // the workload's units (checkout: quantities sold)
  kFinished,  // the client opens no more transactions
  kBlocks
};
constexpr auto kReportEvery = std::chrono::milliseconds(200);  // clients add their counts

std::string stats_record(const std::string& table) { return "rsi/" + table + "/txn/stats"; }
std::string done_record(const std::string& table) { return "rsi/" + table + "/txn/done"; }
std::string start_barrier(const std::string& table) { return "rsi/" + table + "/txn/start"; }
std::string left_record(const std::string& table, int rank) { return "rsi/" + table + "/txn/left/" + std::to_string(rank); }

// After a rank died, node.finish() (a barrier of all ranks) cannot complete: rank 0, which hosts
// the registry, instead waits until every live rank said it is done with it (or died too).
void wait_for_live_ranks(cluster::Node& node, const std::string& table, std::chrono::milliseconds timeout) {
  const Deadline deadline(timeout);
  for (int r = 1; r < node.size(); ++r) {
    for (;;) {
      const std::vector<int> failed = node.failed_ranks();
      if (std::find(failed.begin(), failed.end(), r) != failed.end()) break;
      try {
        (void)node.wait_for(left_record(table, r), std::chrono::milliseconds(100));
        break;
      } catch (const Error&) {
        if (deadline.expired()) return;
      }
    }
  }
}

std::unique_ptr<detail::WorkloadImpl> make_workload(const cluster::Node& node, const TxnOptions& o, std::size_t clients) {
  auto bad = [&o](const std::string& what) {
    throw Error(Errc::invalid_argument, std::string(workload_name(o.workload)) + " workload: " + what);
  };
  if (o.servers == 0) bad("needs at least one storage server");
  if (static_cast<std::size_t>(node.size()) <= o.servers) {
    bad("a cluster of " + std::to_string(node.size()) + " ranks has no rank left for clients after " +
        std::to_string(o.servers) + " storage servers");
  }
  if (o.threads == 0) bad("needs at least one client thread per client rank");
  if (!(o.seconds > 0) && o.transactions == 0) bad("needs a run length (seconds or transactions)");
  return o.workload == Workload::bank ? detail::make_bank(o, clients) : detail::make_checkout(o, clients);
}

// The rank of each client: o.threads of them on each rank after the storage servers.
std::vector<int> ranks_of_clients(const cluster::Node& node, const TxnOptions& o) {
  std::vector<int> ranks;
  for (int r = static_cast<int>(o.servers); r < node.size(); ++r) {
    for (std::size_t t = 0; t < o.threads; ++t) ranks.push_back(r);
  }
  return ranks;
}

// One client thread's run. Returns "" or the error that ended it.
std::string run_client(cluster::Node& node, Client& client, detail::Driver& driver, cluster::SharedWords& stats,
                       const TxnOptions& o, std::size_t index, const std::vector<int>& client_ranks, Clock::time_point end) {
  const std::size_t clients = client_ranks.size();
  ClientCounters reported;
  std::uint64_t reported_units = 0;
  auto report = [&]() -> Status {
    const ClientCounters& now = client.counters();
    if (Status s = stats.fetch_add(kCommits * clients + index, now.commits - reported.commits); !s) return s;
    if (Status s = stats.fetch_add(kConflicts * clients + index, now.conflicts - reported.conflicts); !s) return s;
    if (Status s = stats.fetch_add(kSnapshots * clients + index, now.snapshots - reported.snapshots); !s) return s;
    if (Status s = stats.fetch_add(kUnits * clients + index, driver.units() - reported_units); !s) return s;
    if (now.rolled_forward != reported.rolled_forward || now.rolled_back != reported.rolled_back) {
      if (Status s = stats.fetch_add(kForward * clients + index, now.rolled_forward - reported.rolled_forward); !s) return s;
      if (Status s = stats.fetch_add(kBack * clients + index, now.rolled_back - reported.rolled_back); !s) return s;
    }
    reported = now;
    reported_units = driver.units();
    return {};
  };
  // After an abort the client waits a little before it tries again (the one dfi::Backoff, with
  // the short spin of waits whose polls are expensive: a retry costs remote round trips), so
  // that clients do not spin on a record another client has locked; a commit resets it.
  Backoff after_abort(BackoffSettings::from_config(/*polls_are_syscalls=*/true), index + 1);
  std::string error;
  auto next_report = Clock::now() + kReportEvery;
  for (std::uint64_t attempt = 0;; ++attempt) {
    if (o.transactions != 0 && client.counters().commits >= o.transactions) break;
    if (attempt % 16 == 0) {
      const auto now = Clock::now();
      if (o.transactions == 0 && now >= end) break;
      if (now >= next_report) {
        if (Status s = report(); !s) {
          error = "statistics: " + s.message();
          break;
        }
        next_report = now + kReportEvery;
      }
    }
    const Status s = driver.run(client);
    if (s) {
      after_abort.reset();
      continue;
    }
    if (s.code() == Errc::retry) {
      after_abort.pause();
      continue;
    }
    error = s.message();
    break;
  }
  if (error.empty()) {
    if (Status s = client.leave(); !s) error = s.message();
  }
  // Finished, even after an error, so that nobody waits for this client.
  if (Status s = stats.fetch_add(kFinished * clients + index, 1); !s && error.empty()) error = "statistics: " + s.message();
  if (error.empty()) {
    // A client that dies at the very end of the run holds its locks past the others' last
    // transaction: once every client finished or died, recover what the dead hold (bounded:
    // past the timeout, with whatever is known by then).
    (void)stats.wait_for_departures(node, kFinished * clients, client_ranks, Deadline(o.timeout),
                                    BackoffSettings::from_config(/*polls_are_syscalls=*/true));
    if (Status s = client.recover_dead(); !s) error = s.message();
  }
  if (error.empty()) {
    if (Status s = report(); !s) error = "statistics: " + s.message();
  }
  // Departed even after an error, so rank 0 does not wait for this client.
  if (Status s = stats.fetch_add(kDeparted * clients + index, 1); !s && error.empty()) error = "statistics: " + s.message();
  if (Status s = stats.flush(); !s && error.empty()) error = "statistics: " + s.message();
  return error;
}

int run_clients(cluster::Node& node, const TxnOptions& o, const Table& table, const detail::WorkloadImpl& workload,
                std::size_t clients, std::ostream& err) {
  const std::size_t first = (static_cast<std::size_t>(node.rank()) - o.servers) * o.threads;
  struct Seat {
    std::unique_ptr<fabric::Worker> worker;
    std::unique_ptr<Client> client;
    std::unique_ptr<detail::Driver> driver;
    cluster::SharedWords stats;
    std::string error;
  };
  std::vector<Seat> seats(o.threads);
  const std::vector<int> ranks = ranks_of_clients(node, o);
  ClientOptions co;
  co.clients = clients;
  co.timestamp_rank = 0;
  co.timeout = o.timeout;
  co.at_commit_stage = o.at_commit_stage;
  for (std::size_t t = 0; t < o.threads; ++t) {
    co.client = first + t;
    seats[t].worker = std::make_unique<fabric::Worker>(node.fabric(), "txn client " + std::to_string(co.client));
    seats[t].client = Client::open(o.protocol, node, *seats[t].worker, table, co);
    seats[t].driver = workload.driver(*seats[t].client, co.client);
    seats[t].stats.attach(node, *seats[t].worker, stats_record(o.table), 0, o.timeout);
  }
  node.barrier(start_barrier(o.table));
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      seats[t].error = run_client(node, *seats[t].client, *seats[t].driver, seats[t].stats, o, first + t, ranks, end);
    });
  }
  for (auto& thread : threads) thread.join();
  int code = 0;
  for (const Seat& seat : seats) {
    if (seat.error.empty()) continue;
    err << "dfi txn (rank " << node.rank() << "): " << seat.error << '\n';
    code = 1;
  }
  return code;
}

std::uint64_t sum_block(const cluster::SharedWords& stats, StatBlock block, std::size_t clients) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < clients; ++i) {
    sum += std::atomic_ref(stats.local()[block * clients + i]).load(std::memory_order_relaxed);
  }
  return sum;
}

TxnResult run_monitor(cluster::Node& node, const TxnOptions& o, const Table& table, detail::WorkloadImpl& workload,
                      const TimestampService& timestamps, cluster::SharedWords& stats, std::size_t clients,
                      std::ostream& out, std::ostream& err) {
  TxnResult result;
  result.clients = clients;
  const std::vector<int> client_ranks = ranks_of_clients(node, o);
  const auto start = Clock::now();
  const double limit = o.seconds + static_cast<double>(o.timeout.count()) / 1000.0;
  const BackoffSettings backoff = BackoffSettings::from_config();
  for (int second = 1;; ++second) {
    const bool all_left = stats.wait_for_departures(node, kDeparted * clients, client_ranks,
                                                    Deadline(start + std::chrono::seconds(second) - Clock::now()), backoff);
    if (o.progress && !all_left) {
      char line[160];
      std::snprintf(line, sizeof line, "txn: %3d s  %10llu commits  %10llu aborts  read timestamp %llu\n", second,
                    static_cast<unsigned long long>(sum_block(stats, kCommits, clients)),
                    static_cast<unsigned long long>(sum_block(stats, kConflicts, clients) + sum_block(stats, kSnapshots, clients)),
                    static_cast<unsigned long long>(timestamps.read_timestamp()));
      out << line << std::flush;
    }
    if (all_left) break;
    if (std::chrono::duration<double>(Clock::now() - start).count() > limit) {
      err << "dfi txn: clients still running " << limit << " s after the start\n";
      result.code = 1;
      return result;
    }
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.commits = sum_block(stats, kCommits, clients);
  const std::uint64_t conflicts = sum_block(stats, kConflicts, clients);
  const std::uint64_t snapshots = sum_block(stats, kSnapshots, clients);
  result.aborts = conflicts + snapshots;
  char line[256];
  std::snprintf(line, sizeof line, "txn: %s workload, protocol %s, %zu storage server(s), %zu client(s), %.2f s\n",
                std::string(workload_name(o.workload)).c_str(), std::string(protocol_name(o.protocol)).c_str(), o.servers,
                clients, result.seconds);
  out << line;
  std::snprintf(line, sizeof line, "txn: %llu commits (%.1f/s), %llu aborts (%.1f/s: %llu at commit, %llu at a read)\n",
                static_cast<unsigned long long>(result.commits), static_cast<double>(result.commits) / result.seconds,
                static_cast<unsigned long long>(result.aborts), static_cast<double>(result.aborts) / result.seconds,
                static_cast<unsigned long long>(conflicts), static_cast<unsigned long long>(snapshots));
  out << line;
  const std::uint64_t forward = sum_block(stats, kForward, clients), back = sum_block(stats, kBack, clients);
  if (forward + back != 0) {
    std::snprintf(line, sizeof line, "txn: recovered %llu record(s) of dead clients: %llu rolled forward, %llu rolled back\n",
                  static_cast<unsigned long long>(forward + back), static_cast<unsigned long long>(forward),
                  static_cast<unsigned long long>(back));
    out << line;
  }
  if (!node.failed_ranks().empty()) {
    err << "dfi txn: rank(s)";
    for (int r : node.failed_ranks()) err << ' ' << r;
    err << " failed during the run\n";
    result.code = 1;
  }

  fabric::Worker worker(node.fabric(), "txn audit");
  std::uint64_t locked_records = 0, newest = 0;
  try {
    scan_table(node, worker, table, o.timeout, [&](std::uint64_t id, std::uint64_t header, std::span<const std::byte> payload) {
      workload.visit(id, payload);
      if (locked(header)) ++locked_records;
      newest = std::max(newest, commit_id(header));
    });
  } catch (const Error& e) {
    err << "dfi txn: audit: " << e.what() << '\n';
    result.code = 1;
    return result;
  }
  std::vector<std::uint64_t> commits(clients);
  for (std::size_t c = 0; c < clients; ++c) {
    commits[c] = std::atomic_ref(stats.local()[kCommits * clients + c]).load(std::memory_order_relaxed);
  }
  if (!workload.finish(sum_block(stats, kUnits, clients), commits, out)) result.code = 1;
  if (locked_records == 0) {
    out << "txn: no record left locked; newest version has commit id " << newest << '\n';
  } else {
    out << "txn: " << locked_records << " record(s) left locked\n";
    result.code = 1;
  }
  return result;
}

}  // namespace

std::string_view workload_name(Workload workload) noexcept { return workload == Workload::bank ? "bank" : "checkout"; }

Workload parse_workload(std::string_view name) {
  if (name == "bank") return Workload::bank;
  if (name == "checkout") return Workload::checkout;
  throw Error(Errc::invalid_argument, "rsi: unknown workload '" + std::string(name) + "' (expected bank or checkout)");
}

TxnResult run_workload(cluster::Node& node, const TxnOptions& options, std::ostream& out, std::ostream& err) {
  TxnOptions o = options;  // outlives the workload, which refers to it
  if (o.table.empty()) o.table = std::string(workload_name(o.workload));
  const std::size_t clients = node.size() > static_cast<int>(o.servers)
                                  ? (static_cast<std::size_t>(node.size()) - o.servers) * o.threads
                                  : 0;
  std::unique_ptr<detail::WorkloadImpl> workload = make_workload(node, o, clients);
  const bool server = static_cast<std::size_t>(node.rank()) < o.servers;
  const auto deadline = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(o.seconds)) +
                        2 * o.timeout;
  auto init = [&workload](std::uint64_t id, std::span<std::byte> payload) { workload->init(id, payload); };
  TxnResult result;
  if (node.rank() == 0) {
    TableSpec spec{o.table, workload->records(), o.payload_bytes, {}};
    for (std::size_t s = 0; s < o.servers; ++s) spec.servers.push_back(static_cast<int>(s));
    const Table table = Table::create(node, spec);
    TimestampService timestamps = TimestampService::host(node, o.table, clients, o.timestamps);
    cluster::SharedWords stats;
    stats.host(node, stats_record(o.table), kBlocks * clients);
    cluster::SharedWords log = CommitLog::host(node, o.table, clients, o.payload_bytes);
    StorageServer storage(node, table, init, o.protocol == Protocol::two_pc);
    out << "txn: " << protocol_name(o.protocol) << ' ' << workload_name(o.workload) << " transactions on "
        << node.fabric().describe() << '\n'
        << std::flush;
    node.barrier(start_barrier(o.table));
    result = run_monitor(node, o, table, *workload, timestamps, stats, clients, out, err);
    node.registry().publish(done_record(o.table), "1");
    if (!node.failed_ranks().empty()) wait_for_live_ranks(node, o.table, o.timeout);
  } else if (server) {
    const Table table = Table::open(node, o.table, o.timeout);
    StorageServer storage(node, table, init, o.protocol == Protocol::two_pc);
    node.barrier(start_barrier(o.table));
    try {
      (void)node.wait_for(done_record(o.table), deadline);
    } catch (const Error& e) {
      err << "dfi txn (rank " << node.rank() << ", storage server): " << e.what() << '\n';
      result.code = 1;
    }
  } else {
    const Table table = Table::open(node, o.table, o.timeout);
    result.code = run_clients(node, o, table, *workload, clients, err);
  }
  if (node.rank() != 0) node.registry().publish(left_record(o.table, node.rank()), "1");
  if (node.failed_ranks().empty()) node.finish();
  return result;
}

}  // namespace dfi::apps::rsi
