// Scenario scale: how the control plane's costs grow with the cluster (issue 27). For N ranks,
// one N:N shuffle flow (`threads` sources and `threads` targets on every rank, short rings,
// explicit-target routing, `tuples_per_target` tuples of 16 B from every source to every
// target), measured per rank:
//   join        cluster::Node construction (registry connection, fabric, start-up barrier)
//   open        every source and target of the rank open, concurrently (the slowest)
//   first push  one tuple to every target, flushed (the first segments travel)
//   close       the rest pushed, every source closed and every target at its end of stream
//   memory      flow::memory_bytes of the rank once open (rings it hosts and writes)
//   registry    requests, connections and bytes of the rank's registry clients during the open
// and, timed by the driver, the whole run: `dfi cluster run` start to exit. Baseline, in the same
// run, started the same way (a launcher starting N processes on this machine): OpenMPI's mpirun
// of bench/mpi/mpi_start.cpp, which runs MPI_Init and a first MPI_Alltoall of the same tuples.
// The driver checks that every tuple arrived exactly once (counts and key sums).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "cluster_job.hpp"
#include "cpu_time.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/launch/etcd_cluster.hpp"
#include "mpi_baseline.hpp"
#include "rank_threads.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kName = "scale";
constexpr std::size_t kTupleBytes = 16;

// Key of tuple i from source s to target t: unique per (s, t, i), so sums catch a duplicate.
std::uint64_t key_of(std::size_t source, std::size_t target, std::size_t i) {
  return (std::uint64_t(source) << 40) ^ (std::uint64_t(target) << 20) ^ i;
}

// The least-squares slope of log(y) over log(x) for the points with x in [lo, hi]; NaN when
// fewer than two.
double growth_exponent(const std::map<int, double>& points, int lo, int hi) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    if (x < lo || x > hi || y <= 0) continue;
    const double lx = std::log(double(x)), ly = std::log(y);
    n += 1;
    sx += lx;
    sy += ly;
    sxx += lx * lx;
    sxy += lx * ly;
  }
  if (n < 2) return std::nan("");
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

// ---------------------------------------------------------------------------------------------
// Rank program

int run_scale_rank(const json& params, std::ostream& out, std::ostream& err) {
  const auto started = Clock::now();
  cluster::Node node;
  const auto joined = Clock::now();
  const int threads = params.at("threads").get<int>();
  const std::size_t tuples = params.at("tuples_per_target").get<std::size_t>();
  const int ranks = node.size();

  flow::FlowSpec spec;
  spec.name = "bench-scale";
  for (int r = 0; r < ranks; ++r) {
    for (int t = 0; t < threads; ++t) {
      spec.sources.push_back({r, t});
      spec.targets.push_back({r, t});
    }
  }
  spec.schema = flow::Schema({{"key", flow::Type::uint64}, {"value", flow::Type::uint64}});
  spec.key_column = "key";
  spec.routing = flow::Routing::explicit_target;
  spec.options.mode = flow::Mode::bandwidth;
  spec.options.segments = params.at("segments").get<std::uint32_t>();
  spec.options.segment_bytes = params.at("segment_bytes").get<std::uint32_t>();
  spec.options.rings = params.at("rings") == "per_rank" ? flow::RingSharing::per_rank : flow::RingSharing::per_thread;
  if (node.rank() == 0) flow::create_flow(node, spec);
  node.barrier("bench/scale/created");

  const std::size_t targets = spec.targets.size();
  std::vector<double> opened(2 * threads), first_push(threads), closed(2 * threads);
  std::vector<std::int64_t> open_cpu_ns(2 * threads);  // CPU time of each opening thread's open
  std::vector<std::uint64_t> received(threads), received_sum(threads), sent_sum(threads);
  std::atomic<std::size_t> memory{0};
  cluster::RegistryStats before, during;
  RankThreads group("bench scale: rank " + std::to_string(node.rank()));
  Clock::time_point open_start;
  for (int t = 0; t < threads; ++t) {
    group.start("target " + std::to_string(t), [&, t](RankThreads::Gate& gate) {
      gate.ready_and_wait();  // phase 1: open
      const std::int64_t cpu = thread_cpu_ns();
      flow::ShuffleTarget target(node, spec.name, t);
      opened[threads + t] = seconds_between(open_start, Clock::now());
      open_cpu_ns[threads + t] = thread_cpu_ns() - cpu;
      gate.ready_and_wait();  // phase 2: push and consume
      flow::TupleBatch batch;
      for (;;) {
        target.consume(batch).throw_if_error();
        if (batch.empty()) break;
        for (std::size_t i = 0; i < batch.count; ++i) {
          std::uint64_t key;
          std::memcpy(&key, batch.tuple(i), sizeof key);
          received_sum[t] += key;
        }
        received[t] += batch.count;
      }
      closed[threads + t] = seconds_between(open_start, Clock::now());
    });
    group.start("source " + std::to_string(t), [&, t](RankThreads::Gate& gate) {
      fabric::Worker worker(node.fabric(), "bench scale source " + std::to_string(t));
      gate.ready_and_wait();
      const std::int64_t cpu = thread_cpu_ns();
      flow::ShuffleSource source(node, worker, spec.name, t);
      opened[t] = seconds_between(open_start, Clock::now());
      open_cpu_ns[t] = thread_cpu_ns() - cpu;
      gate.ready_and_wait();
      const std::size_t me = std::size_t(node.rank()) * threads + t;
      const auto push_start = Clock::now();
      std::uint64_t tuple[2];
      for (std::size_t i = 0; i < tuples; ++i) {
        for (std::size_t target = 0; target < targets; ++target) {
          tuple[0] = key_of(me, target, i);
          tuple[1] = i;
          source.push_to(target, tuple, sizeof tuple).throw_if_error();
          sent_sum[t] += tuple[0];
        }
        if (i == 0) {
          source.flush().throw_if_error();
          first_push[t] = seconds_between(push_start, Clock::now());
        }
      }
      source.close().throw_if_error();
      closed[t] = seconds_between(open_start, Clock::now());
    });
  }
  open_start = group.release([&] {
    node.barrier("bench/scale/open");
    before = node.registry_stats();  // the open's registry traffic: what happens from here
  });
  // Every thread opened (or failed): the open's registry traffic is what happened since.
  group.release([&] {
    during = node.registry_stats();
    memory = flow::memory_bytes(spec.name);
    node.barrier("bench/scale/opened");
  });
  group.join();
  const auto finished = Clock::now();

  std::uint64_t got = 0, got_sum = 0, put_sum = 0;
  for (int t = 0; t < threads; ++t) {
    got += received[t];
    got_sum += received_sum[t];
    put_sum += sent_sum[t];
  }
  const std::uint64_t requests = during.requests - before.requests;
  report_rank_result(out, {{"rank", node.rank()},
                           {"join_s", seconds_between(started, joined)},
                           {"open_s", *std::max_element(opened.begin(), opened.end())},
                           {"open_cpu_s", double(std::accumulate(open_cpu_ns.begin(), open_cpu_ns.end(), std::int64_t{0})) / 1e9},
                           {"first_push_s", *std::max_element(first_push.begin(), first_push.end())},
                           {"close_s", *std::max_element(closed.begin(), closed.end()) -
                                           *std::max_element(opened.begin(), opened.end())},
                           {"run_s", seconds_between(started, finished)},
                           {"memory_bytes", memory.load()},
                           {"registry_requests", requests},
                           {"registry_connections", during.connections - before.connections},
                           {"registry_bytes", during.bytes_sent + during.bytes_received - before.bytes_sent -
                                                  before.bytes_received},
                           {"sent_tuples", std::uint64_t(threads) * targets * tuples},
                           {"sent_key_sum", put_sum},
                           {"received_tuples", got},
                           {"received_key_sum", got_sum}});
  (void)err;
  node.finish();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Driver

class Scale : public Scenario {
 public:
  std::string name() const override { return kName; }
  std::string title() const override {
    return "Control plane at scale: cluster join, N:N flow open, whole run vs MPI start-up";
  }
  std::string description() const override {
    return "N ranks on this machine, one N:N shuffle flow (threads sources and targets per rank, "
           "short rings, 16 B tuples, tuples_per_target from every source to every target): per "
           "rank the cluster join, the open of all its sources and targets, the first push, the "
           "close, the flow memory it holds and its registry requests during the open (slowest "
           "rank, or the maximum). The whole run (launcher start to exit) is compared with OpenMPI "
           "started the same way running MPI_Init and a first MPI_Alltoall of the same tuples.";
  }
  std::vector<Parameter> parameters() const override {
    return {{"ranks", json::array({4, 8}), json::array({4, 8, 16, 32, 64}), "cluster sizes"},
            {"threads", json::array({1}), json::array({1, 2}), "source and target threads per rank"},
            {"registries", json::array({"embedded"}), json::array({"embedded", "etcd"}),
             "embedded (rank 0 serves DFI's registry) and/or etcd (a 3-member etcd cluster on loopback)"},
            {"tuples_per_target", 64, 64, "tuples from every source to every target"},
            {"rings", json::array({"per_thread"}), json::array({"per_thread"}),
             "ring sharing (FlowOptions::rings): per_thread, per_rank (one ring per source rank "
             "and target, shared by the rank's threads; measured where threads >= 2)"},
            {"segments", 4, 4, "segments per ring"},
            {"segment_bytes", 4096, 4096, "bytes per segment"},
            {"timeout_s", 300, 300, "bound on one cluster run"}};
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"openmpi", "mpirun --oversubscribe of bench/mpi/mpi_start.cpp: MPI_Init and a first "
                        "MPI_Alltoall of tuples_per_target 16 B tuples to every rank, wall time of mpirun"}};
  }
  std::string unavailable(const RunContext& context) const override {
    if (std::string why = mpi_baseline_unavailable(); !why.empty()) return why;
    for (const json& registry : context.param("registries")) {
      if (registry == "etcd" && !launch::etcd_unavailable().empty()) return "etcd: " + launch::etcd_unavailable();
    }
    return {};
  }

  void run(RunContext& context, Result& result) override {
    const std::vector<int> sizes = context.param("ranks").get<std::vector<int>>();
    const std::vector<int> thread_counts = context.param("threads").get<std::vector<int>>();
    const std::vector<std::string> registries = context.param("registries").get<std::vector<std::string>>();
    const std::vector<std::string> ring_sharings = context.param("rings").get<std::vector<std::string>>();
    for (const std::string& r : ring_sharings) {
      if (r != "per_thread" && r != "per_rank") throw Error(Errc::invalid_argument, "bench scale: rings are per_thread and per_rank");
    }
    // The shapes measured: (threads, per-rank rings); per-rank rings only where threads share them.
    std::vector<std::pair<int, bool>> shapes;
    for (const std::string& r : ring_sharings) {
      for (int t : thread_counts) {
        if (r == "per_thread" || t >= 2) shapes.emplace_back(t, r == "per_rank");
      }
    }
    for (const std::string& r : registries) {
      if (r != "embedded" && r != "etcd") throw Error(Errc::invalid_argument, "bench scale: registries are embedded and etcd");
    }
    // One etcd cluster for every etcd run (each run keys its records under its own prefix).
    std::unique_ptr<launch::EtcdCluster> etcd;
    if (std::count(registries.begin(), registries.end(), "etcd") > 0) {
      etcd = std::make_unique<launch::EtcdCluster>(3, "/dev/shm");
      result.add_baseline("etcd", "3 etcd members on loopback (tmpfs), as the registry of the etcd runs: " + etcd->command());
    }
    const std::size_t tuples = context.param("tuples_per_target").get<std::size_t>();
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    for (int n : sizes) {
      if (n < 2 || n > 1024) throw Error(Errc::invalid_argument, "bench scale: ranks must be in 2..1024");
    }
    for (int t : thread_counts) {
      if (t < 1 || t > 16) throw Error(Errc::invalid_argument, "bench scale: threads must be in 1..16");
    }
    result.set_parameters(context.resolved_parameters());
    result.add_baseline("openmpi", baselines()[0].description + "; " + mpi_version());

    const Axis ranks_axis{"ranks", "", "log2"};
    auto threads_text = [](int t) { return std::to_string(t) + (t == 1 ? " thread" : " threads"); };
    Panel& open = result.panel("open", "Flow open (slowest rank) vs ranks", ranks_axis, {"open", "s", "log10"},
                               Better::lower);
    Panel& open_cpu = result.panel("open_cpu", "CPU time of a rank's open (its opening threads; the median rank)",
                                   ranks_axis, {"CPU time", "s", "log10"}, Better::lower);
    Panel& join = result.panel("join", "Cluster join (slowest rank) vs ranks", ranks_axis, {"join", "s", "log10"},
                               Better::lower);
    Panel& whole = result.panel("whole", "Whole run (start, join, open, push, close) vs MPI start + first all-to-all",
                                ranks_axis, {"wall time", "s", "log10"}, Better::lower);
    Panel& requests = result.panel("requests", "Registry requests per rank during the open (the most of any rank)",
                                   ranks_axis, {"requests", ""}, Better::lower);
    Panel& bytes = result.panel("registry_bytes", "Registry bytes per rank during the open (the most of any rank)",
                                ranks_axis, {"bytes", "KiB", "log10"}, Better::lower);
    Panel& memory = result.panel("memory", "Flow memory per rank (rings hosted and written)", ranks_axis,
                                 {"memory", "MiB", "log10"}, Better::lower);
    auto series_id = [](int t, const std::string& registry, bool per_rank) {
      return "dfi_" + std::to_string(t) + (registry == "embedded" ? std::string() : "_" + registry) +
             (per_rank ? "_rank" : "");
    };
    for (const std::string& registry : registries) {
      for (const auto& [t, per_rank] : shapes) {
        const std::string what = "DFI, " + threads_text(t) + " per rank" + (registry == "etcd" ? ", etcd" : "") +
                                 (per_rank ? ", per-rank rings" : "");
        for (Panel* p : {&open, &open_cpu, &join, &whole, &requests, &bytes, &memory})
          p->series(series_id(t, registry, per_rank), Role::dfi, what);
      }
    }
    whole.series("mpi", Role::baseline, "OpenMPI: mpirun, MPI_Init, first MPI_Alltoall");
    for (const std::string& registry : registries) {
      for (const auto& [t, per_rank] : shapes) whole.compare(series_id(t, registry, per_rank), "mpi", 0.3);
    }

    std::map<std::string, std::map<int, std::vector<double>>> open_samples;  // series -> ranks -> seconds
    std::map<std::string, std::map<int, std::vector<double>>> cpu_samples;   // series -> ranks -> CPU s
    for (int rep = 1; rep <= context.repeat; ++rep) {
      for (int n : sizes) {
        const std::string round = "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) +
                                  ", " + std::to_string(n) + " ranks";
        auto run_dfi = [&] {
          for (const std::string& registry : registries) {
          for (const auto& [t, per_rank] : shapes) {
            RankJob job;
            if (registry == "etcd") job.env = {{"DFI_REGISTRY", etcd->url()}, {"DFI_REGISTRY_EXTERNAL", "1"}};
            job.nodes = n;
            job.scenario = name();
            job.params = {{"threads", t},
                          {"tuples_per_target", tuples},
                          {"segments", context.param("segments")},
                          {"rings", per_rank ? "per_rank" : "per_thread"},
                          {"segment_bytes", context.param("segment_bytes")}};
            job.timeout = timeout;
            const auto start = Clock::now();
            std::map<int, json> reports = run_rank_job(job, context);
            const double wall = seconds_between(start, Clock::now());
            double join_s = 0, open_s = 0, memory_bytes = 0, most_requests = 0, most_bytes = 0;
            std::vector<double> cpu;
            std::uint64_t sent = 0, sent_sum = 0, got = 0, got_sum = 0;
            for (int r = 0; r < n; ++r) {
              if (!reports.count(r)) {
                throw Error(Errc::protocol, "bench scale: rank " + std::to_string(r) + " reported no result");
              }
              const json& p = reports.at(r);
              join_s = std::max(join_s, p.at("join_s").get<double>());
              open_s = std::max(open_s, p.at("open_s").get<double>());
              cpu.push_back(p.at("open_cpu_s").get<double>());
              memory_bytes = std::max(memory_bytes, p.at("memory_bytes").get<double>());
              most_requests = std::max(most_requests, p.at("registry_requests").get<double>());
              most_bytes = std::max(most_bytes, p.at("registry_bytes").get<double>());
              sent += p.at("sent_tuples").get<std::uint64_t>();
              sent_sum += p.at("sent_key_sum").get<std::uint64_t>();
              got += p.at("received_tuples").get<std::uint64_t>();
              got_sum += p.at("received_key_sum").get<std::uint64_t>();
            }
            const std::uint64_t expected = std::uint64_t(n) * t * std::uint64_t(n) * t * tuples;
            if (sent != expected || got != sent || got_sum != sent_sum) {
              throw Error(Errc::protocol, "bench scale: " + std::to_string(n) + " ranks, " + threads_text(t) +
                                              ": wrong delivery: expected " + std::to_string(expected) +
                                              " tuples, sent " + std::to_string(sent) + ", received " +
                                              std::to_string(got) + ", key sums " + std::to_string(sent_sum) +
                                              " / " + std::to_string(got_sum));
            }
            const std::string id = series_id(t, registry, per_rank);
            const std::string command = rank_job_command(job, context);
            open.add(id, n, open_s);
            open_cpu.add(id, n, median(cpu));
            join.add(id, n, join_s);
            whole.add(id, n, wall);
            requests.add(id, n, most_requests);
            bytes.add(id, n, most_bytes / 1024.0);
            memory.add(id, n, memory_bytes / 1048576.0);
            for (Panel* p : {&open, &open_cpu, &join, &whole, &requests, &bytes, &memory}) p->add_command(id, command);
            open_samples[id][n].push_back(open_s);
            cpu_samples[id][n].push_back(median(cpu));
            context.say(round + ", " + threads_text(t) + (per_rank ? ", per-rank rings" : "") + ", " + registry + " registry: DFI join " + format_fixed(join_s, 3) + " s, open " +
                        format_fixed(open_s, 3) + " s (CPU " + format_fixed(median(cpu), 3) + " s), whole run " + format_fixed(wall, 2) + " s, " +
                        format_fixed(most_requests, 0) + " registry requests per rank");
          }
          }
        };
        auto run_mpi_side = [&] {
          MpiRun m;
          m.program = "mpi_start";
          m.ranks = n;
          m.transport = context.netns ? "tcp" : context.transport;
          m.timeout = timeout;
          m.args = {"--tuple-bytes", std::to_string(kTupleBytes), "--tuples-per-target", std::to_string(tuples)};
          MpiResult r = run_mpi(m);
          if (!r.data.value("ok", false)) {
            throw Error(Errc::protocol, "bench scale: MPI delivered wrongly: " + r.data.dump() + "\n" + r.command);
          }
          whole.add("mpi", n, r.seconds);
          whole.add_command("mpi", r.command);
          context.say(round + ": MPI whole run " + format_fixed(r.seconds, 2) + " s (init " +
                      format_fixed(r.data.at("init_seconds").get<double>(), 3) + " s, first all-to-all " +
                      format_fixed(r.data.at("alltoall_seconds").get<double>(), 4) + " s)");
        };
        run_alternating(rep, run_dfi, run_mpi_side);
      }
    }
    const int lo = std::max(16, sizes.front());
    auto exponent_note = [&](const std::map<std::string, std::map<int, std::vector<double>>>& samples, const std::string& what) {
      for (const auto& [id, by_ranks] : samples) {
        std::map<int, double> medians;
        for (const auto& [n, values] : by_ranks) medians[n] = median(values);
        const double e = growth_exponent(medians, lo, sizes.back());
        if (std::isnan(e)) continue;
        result.add_note(what + " growth exponent, " + id + ", " + std::to_string(lo) + " to " +
                        std::to_string(sizes.back()) + " ranks (least squares on log-log medians): " +
                        format_fixed(e, 2) + " (target <= 1.2).");
      }
    };
    exponent_note(open_samples, "Open time (slowest rank)");
    exponent_note(cpu_samples, "Open CPU time per rank");
    result.add_note("All ranks share this machine's cores: at 64 ranks on 2 cores every rank waits for the "
                    "others' turns, for DFI and MPI alike.");
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return run_scale_rank(params, out, err);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_scale_scenario() { return std::make_unique<Scale>(); }

}  // namespace dfi::tools::bench
