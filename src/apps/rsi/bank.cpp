#include "dfi/apps/rsi/bank.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "dfi/apps/rsi/storage.hpp"
#include "dfi/apps/rsi/timestamps.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/cluster/shared_words.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/registry/client.hpp"

namespace dfi::apps::rsi {
namespace {

using Clock = std::chrono::steady_clock;

// The run's statistics words on rank 0: four blocks of one word per client.
enum StatBlock : std::size_t { kCommits = 0, kConflicts = 1, kSnapshots = 2, kDeparted = 3 };
constexpr auto kReportEvery = std::chrono::milliseconds(200);  // clients add their counts

std::string stats_record(const std::string& table) { return "rsi/" + table + "/bank/stats"; }
std::string done_record(const std::string& table) { return "rsi/" + table + "/bank/done"; }

// An account's payload holds its balance in every whole word: a read that mixed two versions
// (a torn read) shows words that differ.
std::int64_t balance_of(std::span<const std::byte> payload) {
  std::int64_t balance = 0;
  std::memcpy(&balance, payload.data(), sizeof balance);
  return balance;
}

bool consistent(std::span<const std::byte> payload) {
  const std::int64_t first = balance_of(payload);
  for (std::size_t at = sizeof first; at + sizeof first <= payload.size(); at += sizeof first) {
    std::int64_t word = 0;
    std::memcpy(&word, payload.data() + at, sizeof word);
    if (word != first) return false;
  }
  return true;
}

void set_balance(std::span<std::byte> payload, std::int64_t balance) {
  for (std::size_t at = 0; at + sizeof balance <= payload.size(); at += sizeof balance) {
    std::memcpy(payload.data() + at, &balance, sizeof balance);
  }
}

void validate(const cluster::Node& node, const BankOptions& o) {
  auto bad = [](const std::string& what) { throw Error(Errc::invalid_argument, "bank workload: " + what); };
  if (o.servers == 0) bad("needs at least one storage server");
  if (static_cast<std::size_t>(node.size()) <= o.servers) {
    bad("a cluster of " + std::to_string(node.size()) + " ranks has no rank left for clients after " +
        std::to_string(o.servers) + " storage servers");
  }
  if (o.threads == 0) bad("needs at least one client thread per client rank");
  if (o.accounts < 2) bad("needs at least two accounts");
  if (o.payload_bytes < sizeof(std::int64_t)) bad("records of " + std::to_string(o.payload_bytes) + " bytes cannot hold a balance (8)");
  if (!(o.seconds > 0) && o.transactions == 0) bad("needs a run length (seconds or transactions)");
}

// One client thread's run. Returns "" or the error that ended it.
std::string run_client(Client& client, cluster::SharedWords& stats, const BankOptions& o, std::size_t index,
                       std::size_t clients, Clock::time_point end) {
  std::uint64_t rng = 0x9e3779b97f4a7c15ull * (index + 1);
  auto next = [&rng] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  std::vector<std::byte> a(o.payload_bytes), b(o.payload_bytes);  // set up once, reused
  ClientCounters reported;
  auto report = [&]() -> Status {
    const ClientCounters& now = client.counters();
    if (Status s = stats.fetch_add(kCommits * clients + index, now.commits - reported.commits); !s) return s;
    if (Status s = stats.fetch_add(kConflicts * clients + index, now.conflicts - reported.conflicts); !s) return s;
    if (Status s = stats.fetch_add(kSnapshots * clients + index, now.snapshots - reported.snapshots); !s) return s;
    reported = now;
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
    const std::uint64_t from = next() % o.accounts;
    std::uint64_t to = next() % (o.accounts - 1);
    if (to >= from) ++to;
    const std::int64_t amount = static_cast<std::int64_t>(1 + next() % 10);
    Status s = client.begin();
    if (s) s = client.read(from, a.data());
    if (s) s = client.read(to, b.data());
    if (s && (!consistent(a) || !consistent(b))) {
      error = client.name() + ": torn read: the words of account " + std::to_string(consistent(a) ? to : from) +
              " come from different versions";
      break;
    }
    if (s) {
      set_balance(a, balance_of(a) - amount);
      set_balance(b, balance_of(b) + amount);
      s = client.write(from, a.data());
      if (s) s = client.write(to, b.data());
      if (s) s = client.commit();
    }
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
    if (Status s = report(); !s) error = "statistics: " + s.message();
  }
  if (error.empty()) {
    if (Status s = client.leave(); !s) error = s.message();
  }
  // Departed even after an error, so rank 0 does not wait for this client.
  if (Status s = stats.fetch_add(kDeparted * clients + index, 1); !s && error.empty()) error = "statistics: " + s.message();
  if (Status s = stats.flush(); !s && error.empty()) error = "statistics: " + s.message();
  return error;
}

int run_clients(cluster::Node& node, const BankOptions& o, const Table& table, std::size_t clients,
                std::ostream& err) {
  const std::size_t first = (static_cast<std::size_t>(node.rank()) - o.servers) * o.threads;
  struct Seat {
    std::unique_ptr<fabric::Worker> worker;
    std::unique_ptr<Client> client;
    cluster::SharedWords stats;
    std::string error;
  };
  std::vector<Seat> seats(o.threads);
  ClientOptions co;
  co.clients = clients;
  co.timestamp_rank = 0;
  co.timeout = o.timeout;
  for (std::size_t t = 0; t < o.threads; ++t) {
    co.client = first + t;
    seats[t].worker = std::make_unique<fabric::Worker>(node.fabric(), "bank client " + std::to_string(co.client));
    seats[t].client = Client::open(o.protocol, node, *seats[t].worker, table, co);
    seats[t].stats.attach(node, *seats[t].worker, stats_record(o.table), 0, o.timeout);
  }
  node.barrier("rsi/" + o.table + "/bank/start");
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] { seats[t].error = run_client(*seats[t].client, seats[t].stats, o, first + t, clients, end); });
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

int run_monitor(cluster::Node& node, const BankOptions& o, const Table& table, const TimestampService& timestamps,
                cluster::SharedWords& stats, std::size_t clients, std::ostream& out, std::ostream& err) {
  std::vector<int> client_ranks;
  for (int r = static_cast<int>(o.servers); r < node.size(); ++r) {
    for (std::size_t t = 0; t < o.threads; ++t) client_ranks.push_back(r);
  }
  const auto start = Clock::now();
  const double limit = o.seconds + static_cast<double>(o.timeout.count()) / 1000.0;
  const BackoffSettings backoff = BackoffSettings::from_config();
  int code = 0;
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
      return 1;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const std::uint64_t commits = sum_block(stats, kCommits, clients);
  const std::uint64_t conflicts = sum_block(stats, kConflicts, clients);
  const std::uint64_t snapshots = sum_block(stats, kSnapshots, clients);
  char line[256];
  std::snprintf(line, sizeof line, "txn: protocol %s, %zu storage server(s), %zu client(s), %.2f s\n",
                std::string(protocol_name(o.protocol)).c_str(), o.servers, clients, seconds);
  out << line;
  std::snprintf(line, sizeof line, "txn: %llu commits (%.1f/s), %llu aborts (%.1f/s: %llu at commit, %llu at a read)\n",
                static_cast<unsigned long long>(commits), static_cast<double>(commits) / seconds,
                static_cast<unsigned long long>(conflicts + snapshots), static_cast<double>(conflicts + snapshots) / seconds,
                static_cast<unsigned long long>(conflicts), static_cast<unsigned long long>(snapshots));
  out << line;
  if (!node.failed_ranks().empty()) {
    err << "dfi txn: rank(s)";
    for (int r : node.failed_ranks()) err << ' ' << r;
    err << " failed during the run\n";
    code = 1;
  }

  fabric::Worker worker(node.fabric(), "bank audit");
  std::int64_t total = 0;
  std::uint64_t locked_records = 0, newest = 0, torn = 0;
  try {
    scan_table(node, worker, table, o.timeout, [&](std::uint64_t, std::uint64_t header, std::span<const std::byte> payload) {
      total += balance_of(payload);
      if (!consistent(payload)) ++torn;
      if (locked(header)) ++locked_records;
      newest = std::max(newest, commit_id(header));
    });
  } catch (const Error& e) {
    err << "dfi txn: audit: " << e.what() << '\n';
    return 1;
  }
  const std::int64_t expected = static_cast<std::int64_t>(o.accounts) * o.initial_balance;
  if (total == expected) {
    out << "txn: bank invariant holds: total " << total << " = " << o.accounts << " accounts x " << o.initial_balance << '\n';
  } else {
    out << "txn: bank invariant VIOLATED: total " << total << ", expected " << expected << '\n';
    code = 1;
  }
  if (torn != 0) {
    out << "txn: " << torn << " record(s) hold words of different versions\n";
    code = 1;
  }
  if (locked_records == 0) {
    out << "txn: no record left locked; newest version has commit id " << newest << '\n';
  } else {
    out << "txn: " << locked_records << " record(s) left locked\n";
    code = 1;
  }
  return code;
}

}  // namespace

int run_bank(cluster::Node& node, const BankOptions& o, std::ostream& out, std::ostream& err) {
  validate(node, o);
  const std::size_t clients = (static_cast<std::size_t>(node.size()) - o.servers) * o.threads;
  const bool server = static_cast<std::size_t>(node.rank()) < o.servers;
  const auto deadline = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(o.seconds)) +
                        2 * o.timeout;
  // Every account starts with the initial balance.
  auto init = [&o](std::uint64_t, std::span<std::byte> payload) {
    set_balance(payload, o.initial_balance);
  };
  int code = 0;
  if (node.rank() == 0) {
    TableSpec spec{o.table, o.accounts, o.payload_bytes, {}};
    for (std::size_t s = 0; s < o.servers; ++s) spec.servers.push_back(static_cast<int>(s));
    const Table table = Table::create(node, spec);
    TimestampService timestamps = TimestampService::host(node, o.table, clients, o.timestamps);
    cluster::SharedWords stats;
    stats.host(node, stats_record(o.table), 4 * clients);
    StorageServer storage(node, table, init, o.protocol == Protocol::two_pc);
    out << "txn: " << protocol_name(o.protocol) << " bank transfers on " << node.fabric().describe() << '\n' << std::flush;
    node.barrier("rsi/" + o.table + "/bank/start");
    code = run_monitor(node, o, table, timestamps, stats, clients, out, err);
    node.registry().publish(done_record(o.table), "1");
  } else if (server) {
    const Table table = Table::open(node, o.table, o.timeout);
    StorageServer storage(node, table, init, o.protocol == Protocol::two_pc);
    node.barrier("rsi/" + o.table + "/bank/start");
    try {
      (void)node.wait_for(done_record(o.table), deadline);
    } catch (const Error& e) {
      err << "dfi txn (rank " << node.rank() << ", storage server): " << e.what() << '\n';
      code = 1;
    }
  } else {
    const Table table = Table::open(node, o.table, o.timeout);
    code = run_clients(node, o, table, clients, err);
  }
  if (node.failed_ranks().empty()) node.finish();
  return code;
}

}  // namespace dfi::apps::rsi
