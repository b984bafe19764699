#include "dfi/apps/kv/bench.hpp"

#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dfi/apps/kv/client.hpp"
#include "dfi/apps/kv/history.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/cluster/records.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/kernels/zipf.hpp"
#include "dfi/registry/client.hpp"
#include "names.hpp"

namespace dfi::apps::kv {
namespace {

using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: one clock for every process

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// Latencies in log-linear buckets: 8 per power of two (12.5 % wide), merged by adding.
class LatencyHistogram {
 public:
  static constexpr std::size_t kBuckets = 64 * 8;

  void add(std::uint64_t ns) {
    ++counts_[bucket(ns)];
    ++total_;
  }
  void merge(const LatencyHistogram& other) {
    for (std::size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    total_ += other.total_;
  }
  // The upper bound of the bucket holding the p-th percentile (0 when empty).
  std::uint64_t percentile_ns(double p) const {
    if (total_ == 0) return 0;
    const auto rank = static_cast<std::uint64_t>(p / 100.0 * static_cast<double>(total_ - 1)) + 1;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return upper(i);
    }
    return upper(kBuckets - 1);
  }
  // "index:count" of every non-empty bucket, and back.
  std::string encode() const {
    std::ostringstream s;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      if (counts_[i] != 0) s << ' ' << i << ':' << counts_[i];
    }
    return s.str();
  }
  void decode_add(std::istream& in) {
    std::string item;
    while (in >> item) {
      const auto colon = item.find(':');
      const std::size_t i = std::stoull(item.substr(0, colon));
      const std::uint64_t n = std::stoull(item.substr(colon + 1));
      if (i < kBuckets) counts_[i] += n;
      total_ += n;
    }
  }

 private:
  static std::size_t bucket(std::uint64_t ns) {
    if (ns < 8) return static_cast<std::size_t>(ns);
    const int log = 63 - std::countl_zero(ns);
    return static_cast<std::size_t>(log) * 8 + static_cast<std::size_t>((ns >> (log - 3)) & 7);
  }
  static std::uint64_t upper(std::size_t i) {
    if (i < 8) return i;
    const std::size_t log = i / 8;
    return (std::uint64_t{8} + (i % 8) + 1) << (log - 3);
  }

  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t total_ = 0;
};

struct ClientResult {
  std::uint64_t ops = 0, gets = 0, puts = 0, dels = 0;
  std::uint64_t resent = 0, stale = 0;  // NOPaxos: requests sent again, stale leader replies
  double seconds = 0;
  std::uint64_t longest_wait_ns = 0;  // the longest time without a completion (a view change)
  LatencyHistogram latency;
  std::string error;
};

void check_bench(const cluster::Node& node, const BenchOptions& o) {
  if (!(o.rate >= 0)) {
    throw Error(Errc::invalid_argument, "kv bench '" + o.service.name + "': rate must not be negative");
  }
  check_options(o.service, node.size());
  auto bad = [&](const std::string& what) {
    return Error(Errc::invalid_argument, "kv bench '" + o.service.name + "': " + what);
  };
  if (o.keys < 1) throw bad("keys must be at least 1");
  if (o.batch < 1 || o.batch > o.service.window) {
    throw bad("batch must be 1 .. the window (" + std::to_string(o.service.window) + "), not " + std::to_string(o.batch));
  }
  if (!(o.read_ratio >= 0 && o.read_ratio <= 1)) throw bad("read ratio must be in [0, 1]");
  if (!(o.delete_ratio >= 0 && o.delete_ratio <= 1)) throw bad("delete ratio must be in [0, 1]");
  if (!(o.zipf >= 0)) throw bad("the Zipf exponent must not be negative");
  if (!(o.seconds > 0) && o.requests == 0) throw bad("give a positive run length or a request count");
  if (o.idle_threads < 0 || o.idle_threads >= o.service.client_threads) {
    throw bad("idle threads must be 0 .. " + std::to_string(o.service.client_threads - 1) +
              " (every client rank keeps a thread that sends), not " + std::to_string(o.idle_threads));
  }
  if (o.fault != BenchOptions::Fault::none && o.service.sequencer == flow::Sequencer::stamp) {
    throw bad("the fault seam makes a client hold a sequence number: it needs the counter sequencer "
              "(--sequencer counter); with stamp, clients take none");
  }
}

// The sending client threads of a rank that have not finished sending yet (an idle client waits
// for none to be left before it closes: it may not close after them, since a client's close waits
// for the end of the service, which comes once every client closed).
class Sending {
 public:
  explicit Sending(int threads) : left_(threads) {}
  // A sending thread is done sending (once per thread: see Done).
  void done() {
    left_.fetch_sub(1);
    left_.notify_all();
  }
  void wait_for_all() {
    for (int left = left_.load(); left > 0; left = left_.load()) left_.wait(left);
  }
  // Calls done() once: at finish(), or at the end of its scope (a thread that failed).
  class Done {
   public:
    explicit Done(Sending& sending) : sending_(sending) {}
    ~Done() { finish(); }
    Done(const Done&) = delete;
    Done& operator=(const Done&) = delete;
    void finish() {
      if (finished_) return;
      finished_ = true;
      sending_.done();
    }

   private:
    Sending& sending_;
    bool finished_ = false;
  };

 private:
  std::atomic<int> left_;
};

// An idle client thread (BenchOptions::idle_threads): opens its client, counts as serving, sends
// nothing until every sending thread of its rank is done sending, then closes.
void run_idle_client(cluster::Node& node, const BenchOptions& o, int thread, Sending& sending, ClientResult& result) {
  try {
    fabric::Worker worker(node.fabric(), "kv-idle-client-" + std::to_string(thread));
    Client client(node, worker, o.service, thread);
    node.registry().publish(serving_record(o.service.name, client.index()), "1", /*replace=*/true);
    const auto start = Clock::now();
    sending.wait_for_all();
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    client.close().throw_if_error();
  } catch (const std::exception& e) {
    result.error = e.what();
  }
}

// One client thread: keeps the window full until the run ends, then closes.
void run_client(cluster::Node& node, const BenchOptions& o, int thread, std::atomic<std::uint64_t>& progress,
                Sending& sending, ClientResult& result) {
  Sending::Done done_sending(sending);
  try {
    fabric::Worker worker(node.fabric(), "kv-client-" + std::to_string(thread));
    ServiceOptions service = o.service;
    const std::vector<flow::SourceRef> clients = client_threads(service, node.size());
    if (o.fault != BenchOptions::Fault::none && clients.back().rank == node.rank() && clients.back().thread == thread) {
      service.on_sequence = [&o, &worker, taken = std::uint64_t{0}](std::uint64_t sequence) mutable {
        if (++taken != o.fault_segment) return;
        std::fprintf(stderr, "kv bench: test fault: the last client %s sequence number %llu\n",
                     o.fault == BenchOptions::Fault::kill ? "dies holding" : "delays",
                     static_cast<unsigned long long>(sequence));
        if (o.fault == BenchOptions::Fault::delay) {
          std::this_thread::sleep_for(o.fault_delay);
          return;
        }
        // Let this worker's operations complete first (UCX 1.13 over TCP aborts a process that
        // serves an emulated operation of a peer that just died), then die.
        for (auto until = Clock::now() + std::chrono::milliseconds(50); Clock::now() < until;) {
          worker.progress();
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        ::raise(SIGKILL);
        std::abort();
      };
    }
    Client client(node, worker, service, thread);
    const std::uint64_t index = client.index();
    std::mt19937_64 rng(o.seed * 0x9E3779B97F4A7C15ull + index + 1);
    std::uniform_int_distribution<std::uint64_t> uniform_key(0, o.keys - 1);
    kernels::ZipfSampler zipf_key(o.keys, o.zipf > 0 ? o.zipf : 1.0);
    auto key_of = [&](std::mt19937_64& random) { return o.zipf > 0 ? zipf_key(random) - 1 : uniform_key(random); };
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    struct Pending {
      std::uint64_t seq = 0;
      std::uint64_t input = 0;
      std::int64_t call_ns = 0;
      std::size_t entry = 0;  // in the journal
    };
    std::vector<Pending> pending(o.service.window);
    std::string value(o.service.value_bytes, '\0');  // a put's value, rewritten in place
    std::uint64_t put_count = 0;
    std::optional<HistoryJournal> journal;
    if (!o.history_dir.empty()) journal.emplace(HistoryJournal::path(o.history_dir, node.rank(), thread));

    const auto start = Clock::now();
    const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
    std::uint64_t submitted = 0;
    std::int64_t last_return = now_ns();
    // Paced (rate > 0): request n is due n / rate seconds after the start.
    const auto due = [&](std::uint64_t n) {
      return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(static_cast<double>(n) / o.rate));
    };
    for (;;) {
      // The clock is read once per poll round, not per request.
      const auto now = Clock::now();
      const bool stop = o.requests != 0 ? submitted >= o.requests : now >= end;
      const std::uint64_t allowed = o.rate > 0 ? static_cast<std::uint64_t>(
                                                     std::chrono::duration<double>(now - start).count() * o.rate) + 1
                                               : UINT64_MAX;
      // With a batch, nothing until `batch` places are free (or none is taken).
      const bool refill = client.outstanding() + o.batch <= o.service.window || client.outstanding() == 0;
      while (refill && !stop && client.outstanding() < o.service.window && (o.requests == 0 || submitted < o.requests) &&
             submitted < allowed) {
        Op op = Op::get;
        if (coin(rng) >= o.read_ratio) op = coin(rng) < o.delete_ratio ? Op::del : Op::put;
        const std::uint64_t key = key_of(rng);
        std::uint64_t input = 0;
        if (op == Op::put) {
          input = ((index + 1) << 40) | ++put_count;  // unique over the run
          value_of(input, value);
        }
        std::uint64_t seq = 0;
        const std::int64_t call = now_ns();
        // Journaled before it is sent: a client killed right after sending leaves the operation
        // in its history, outcome unknown.
        const std::size_t entry = journal ? journal->invoked(index, op, key, input, call) : 0;
        client.submit(op, key, op == Op::put ? std::string_view(value) : std::string_view(), seq).throw_if_error();
        for (Pending& p : pending) {
          if (p.seq != 0) continue;
          p = {seq, input, call, entry};
          break;
        }
        ++submitted;
      }
      if (client.outstanding() == 0) {
        if (stop) break;
        std::this_thread::sleep_until(std::min(due(submitted), end));  // paced, ahead of time
        continue;
      }
      // One completion, waiting if need be; then those that came with it, so that the requests
      // taking their places go out together (one segment: in NOPaxos one sequence number).
      Completion done;
      do {
        client.poll(done).throw_if_error();
        const std::int64_t ret = now_ns();
        result.longest_wait_ns = std::max(result.longest_wait_ns, static_cast<std::uint64_t>(ret - last_return));
        last_return = ret;
        auto it = std::find_if(pending.begin(), pending.end(), [&](const Pending& p) { return p.seq == done.seq; });
        const Pending p = *it;
        it->seq = 0;
        std::uint64_t output = 0;
        if (done.op == Op::get && done.found) {
          output = id_of(done.value);
          if (output == 0) {
            throw Error(Errc::protocol, "kv bench: client " + std::to_string(index) + " read a value of key " +
                                            std::to_string(done.key) + " that no put wrote (torn or corrupted)");
          }
        } else if (done.op == Op::del) {
          output = done.found ? 1 : 0;
        }
        if (result.ops == 0) node.registry().publish(serving_record(o.service.name, index), "1", /*replace=*/true);
        ++result.ops;
        (done.op == Op::get ? result.gets : done.op == Op::put ? result.puts : result.dels)++;
        result.latency.add(static_cast<std::uint64_t>(ret - p.call_ns));
        if (journal) journal->returned(p.entry, output, ret);
        progress.store(result.ops, std::memory_order_relaxed);
      } while (client.ready() > 0);
    }
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    done_sending.finish();
    client.close().throw_if_error();
    result.resent = client.resent();
    result.stale = client.stale_replies();
  } catch (const std::exception& e) {
    result.error = e.what();
  }
}

std::string fmt_us(std::uint64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f us", static_cast<double>(ns) / 1000.0);
  return buf;
}

// The lowest rank that reported: adds up every report and checks the replicas against each other.
// `reports[r]` is empty for a rank that died before it reported.
int summarize(const BenchOptions& o, const std::vector<std::optional<std::string>>& reports, std::ostream& out,
              std::ostream& err, BenchSummary& summary) {
  const ServiceOptions& s = o.service;
  std::uint64_t ops = 0, gets = 0, puts = 0, dels = 0, clients = 0, longest_wait = 0;
  double rate = 0;
  LatencyHistogram latency;
  std::uint64_t resent = 0, stale = 0;
  struct Replica {
    int rank;
    std::uint64_t writes, reads, rounds, slots, keys, digest, answered, view, noops, filled;
  };
  std::vector<Replica> replicas;
  std::vector<int> dead;
  for (std::size_t rank = 0; rank < reports.size(); ++rank) {
    if (!reports[rank]) {
      dead.push_back(static_cast<int>(rank));
      continue;
    }
    std::istringstream in(*reports[rank]);
    std::string kind;
    in >> kind;
    if (kind == "r") {
      Replica r{};
      r.rank = static_cast<int>(rank);
      in >> r.writes >> r.reads >> r.rounds >> r.slots >> r.keys >> r.digest >> r.answered >> r.view >> r.noops >> r.filled;
      replicas.push_back(r);
    } else {
      std::uint64_t n = 0, g = 0, p = 0, d = 0, c = 0, w = 0, re = 0, st = 0;
      double r = 0;
      in >> n >> g >> p >> d >> c >> r >> w >> re >> st;
      ops += n, gets += g, puts += p, dels += d, clients += c, rate += r, resent += re, stale += st;
      longest_wait = std::max(longest_wait, w);
      latency.decode_add(in);
    }
  }
  char line[256];
  std::snprintf(line, sizeof line, "kv: %s, %d replica(s), %" PRIu64 " client(s) (window %zu): %" PRIu64
                " requests (%" PRIu64 " get, %" PRIu64 " put, %" PRIu64 " del), %.0f req/s, %zu-byte values\n",
                std::string(protocol_name(s.protocol)).c_str(), s.replicas, clients, s.window, ops, gets, puts, dels,
                rate, s.value_bytes);
  out << line;
  out << "kv: latency p50 " << fmt_us(latency.percentile_ns(50)) << ", p95 " << fmt_us(latency.percentile_ns(95))
      << ", p99 " << fmt_us(latency.percentile_ns(99)) << "\n";
  int status = 0;
  if (replicas.empty()) {
    err << "kv bench: no replica reported\n";
    return 1;
  }
  const Replica& first = replicas.front();
  if (first.view != 0 || !dead.empty()) {
    out << "kv: view changes: the service ended in view " << first.view << "; rank(s)";
    for (int r : dead) out << ' ' << r;
    out << " died; the longest wait of a client for a completion: " << fmt_us(longest_wait) << "\n";
  }
  // How many requests went together: per Multi-Paxos round, per NOPaxos sequence number (one
  // client's segment; see BenchOptions::batch).
  if (first.rounds != 0 && s.protocol != Protocol::unreplicated) {
    std::snprintf(line, sizeof line, "kv: %s: %" PRIu64 ", %.1f requests each\n",
                  s.protocol == Protocol::nopaxos ? "sequence numbers" : "rounds", first.rounds,
                  static_cast<double>(ops) / static_cast<double>(first.rounds));
    out << line;
  }
  std::uint64_t filled = 0;
  for (const Replica& r : replicas) filled += r.filled;
  if (first.noops != 0 || resent != 0 || filled != 0) {
    out << "kv: gap agreement: " << first.noops << " sequence number(s) became NO-OPs; the clients sent " << resent
        << " request(s) again; the followers filled " << filled << " gap(s) from the leader\n";
  }
  // Every request a client completed was answered by a leader, and so was every copy of a request
  // sent again that the leader executed before the copy the client took (NOPaxos); with a dead
  // rank, some of those answers are in its lost report.
  std::uint64_t answered = 0;
  for (const Replica& r : replicas) answered += r.answered;
  if (dead.empty() && answered != ops + stale) {
    err << "kv bench: the leaders answered " << answered << " requests, the clients completed " << ops << " and ignored "
        << stale << " answer(s) to older copies\n";
    status = 1;
  }
  for (const Replica& r : replicas) {
    if (r.slots != first.slots || r.keys != first.keys || r.digest != first.digest || r.view != first.view ||
        r.noops != first.noops) {
      err << "kv bench: replica rank " << r.rank << " applied " << r.slots << " slots (" << r.keys << " keys, digest "
          << r.digest << ", view " << r.view << ", " << r.noops << " NO-OPs), replica rank " << first.rank << " "
          << first.slots << " (" << first.keys << " keys, digest " << first.digest << ", view " << first.view << ", "
          << first.noops << " NO-OPs)\n";
      status = 1;
    }
  }
  summary.noops = first.noops;
  summary.resent = resent;
  summary.requests = ops;
  summary.clients = clients;
  summary.requests_per_second = rate;
  summary.p50_us = static_cast<double>(latency.percentile_ns(50)) / 1000.0;
  summary.p95_us = static_cast<double>(latency.percentile_ns(95)) / 1000.0;
  summary.p99_us = static_cast<double>(latency.percentile_ns(99)) / 1000.0;
  summary.longest_wait_us = static_cast<double>(longest_wait) / 1000.0;
  summary.view = first.view;
  summary.replicas_agree = status == 0;
  summary.summarized = true;
  if (status == 0) {
    out << "kv: replicas agree: " << replicas.size() << " of " << s.replicas << " applied " << first.slots
        << " writes, " << first.keys << " keys, digest " << std::hex << first.digest << std::dec << "\n";
  }
  return status;
}

}  // namespace

std::string serving_record(const std::string& service, std::size_t client) {
  return Names(service).serving + std::to_string(client);
}

int run_bench(cluster::Node& node, const BenchOptions& o, std::ostream& out, std::ostream& err,
              BenchSummary* summary) {
  check_bench(node, o);
  const Names names(o.service.name);
  std::string report;
  std::string failure;
  if (node.rank() < o.service.replicas) {
    if (node.rank() == 0) create_service(node, o.service);
    try {
      const ReplicaStats r = run_replica(node, o.service);
      std::ostringstream line;
      line << "r " << r.writes << ' ' << r.reads << ' ' << r.rounds << ' ' << r.slots << ' ' << r.keys << ' ' << r.digest
           << ' ' << r.answered << ' ' << r.view << ' ' << r.noops << ' ' << r.filled;
      report = line.str();
    } catch (const Error& e) {
      failure = e.what();
    }
  } else {
    const auto threads = static_cast<std::size_t>(o.service.client_threads);
    std::vector<ClientResult> results(threads);
    std::vector<std::atomic<std::uint64_t>> progress(threads);
    std::atomic<std::size_t> finished{0};
    const auto sending_threads = threads - static_cast<std::size_t>(o.idle_threads);
    Sending sending(static_cast<int>(sending_threads));
    std::vector<std::thread> workers;
    for (std::size_t t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        if (t < sending_threads) {
          run_client(node, o, static_cast<int>(t), progress[t], sending, results[t]);
        } else {
          run_idle_client(node, o, static_cast<int>(t), sending, results[t]);
        }
        finished.fetch_add(1, std::memory_order_release);
      });
    }
    if (o.progress && node.rank() == o.service.replicas) {
      // The first client rank shows its own clients' pace once a second while they run.
      std::uint64_t last = 0;
      auto next = Clock::now() + std::chrono::seconds(1);
      for (int second = 1; finished.load(std::memory_order_acquire) < threads;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (Clock::now() < next) continue;
        next += std::chrono::seconds(1);
        std::uint64_t sum = 0;
        for (auto& p : progress) sum += p.load(std::memory_order_relaxed);
        out << "kv: rank " << node.rank() << ": " << second++ << " s, " << (sum - last) << " req/s\n" << std::flush;
        last = sum;
      }
    }
    for (std::thread& w : workers) w.join();
    ClientResult total;
    double rate = 0;
    for (ClientResult& r : results) {
      // Every thread's error, not the first only: one thread's failure may explain another's.
      if (!r.error.empty()) {
        if (!failure.empty()) failure += '\n';
        failure += r.error;
      }
      total.longest_wait_ns = std::max(total.longest_wait_ns, r.longest_wait_ns);
      total.ops += r.ops, total.gets += r.gets, total.puts += r.puts, total.dels += r.dels;
      total.resent += r.resent, total.stale += r.stale;
      if (r.seconds > 0) rate += static_cast<double>(r.ops) / r.seconds;
      total.latency.merge(r.latency);
    }
    std::ostringstream line;
    line << "c " << total.ops << ' ' << total.gets << ' ' << total.puts << ' ' << total.dels << ' ' << threads << ' '
         << rate << ' ' << total.longest_wait_ns << ' ' << total.resent << ' ' << total.stale
         << total.latency.encode();
    report = line.str();
  }
  if (!failure.empty()) {
    err << "dfi kv (rank " << node.rank() << "): " << failure << "\n";
    return 1;
  }
  try {
    node.registry().publish(names.reports + std::to_string(node.rank()), report);
    const std::vector<std::optional<std::string>> reports =
        cluster::survivors_records(node, names.reports, node.size(), o.service.timeout);
    const auto first = std::find_if(reports.begin(), reports.end(), [](const auto& r) { return r.has_value(); });
    if (first - reports.begin() != node.rank()) return 0;
    BenchSummary mine;
    const int status = summarize(o, reports, out, err, mine);
    if (summary != nullptr) *summary = mine;
    return status;
  } catch (const Error& e) {
    err << "dfi kv (rank " << node.rank() << "): " << e.what() << "\n";
    return 1;
  }
}

}  // namespace dfi::apps::kv
