// Scenario mpi-p2p (003 Fig 10a/b): a fixed table sent tuple at a time from rank 0 to rank 1,
// DFI shuffle flow vs OpenMPI MPI_Send/MPI_Recv, in the same run.
//
// DFI side (two ranks under a local cluster): one bandwidth-mode shuffle flow per configuration
// (tuple size x threads). Rank 0 holds the table (tuple i carries its index i in its first 8
// bytes, the rest is zero, exactly as bench/mpi/mpi_p2p.cpp builds it) and runs K source threads
// (each its own fabric::Worker and ShuffleSource); rank 1 runs K target threads of the same flow
// (K sources -> K targets, key-hash routing on the index column: a K:K flow). Source thread t
// pushes its share (tuples / K, contiguous) tuple at a time with ShuffleSource::push, then closes.
// Each target consumes and copies every tuple into its slot of rank 1's table (the slot named by
// the tuple's index), as MPI_Recv receives each tuple straight into its slot. Runtime = from a
// barrier that both ranks pass after every source is connected and every target is open, to the
// end of stream at the last target (measured on rank 1). Afterwards rank 1 checks that the tuple
// count equals the table's and that every slot of its table holds its own index (so every tuple
// arrived exactly once); a wrong delivery fails the run.
//
// Baseline: bench/mpi/mpi_p2p.cpp under mpirun (pml ucx over the same UCX transport): --mode
// single (one MPI_Send/MPI_Recv per tuple), --mode threads --threads K (MPI_THREAD_MULTIPLE, one
// tag per thread) and --mode processes with K sender/receiver process pairs (2K ranks). The
// receiver checks every tuple's index; the program reports ok=false otherwise, which fails the
// run. Its runtime: the slowest participant from a common barrier to its last tuple.
//
// One thread is the single-threaded run (the same program path for MPI --mode single / threads 1
// / processes with 1 pair, and the same 1:1 flow for DFI), so the threads panels reuse those
// numbers at x = 1 rather than measuring the same thing twice.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "mpi_baseline.hpp"
#include "rank_threads.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kName = "mpi-p2p";

struct Config {
  std::size_t tuple_bytes = 0;
  int threads = 1;
  std::uint64_t tuples = 0;  // the whole table
  bool operator<(const Config& o) const {
    return std::tie(tuple_bytes, threads) < std::tie(o.tuple_bytes, o.threads);
  }
};

json config_json(const Config& c) {
  return {{"tuple_bytes", c.tuple_bytes}, {"threads", c.threads}, {"tuples", c.tuples}};
}

Config config_from(const json& j) {
  return {j.at("tuple_bytes").get<std::size_t>(), j.at("threads").get<int>(),
          j.at("tuples").get<std::uint64_t>()};
}

// The contiguous share of `tuples` that part `part` of `parts` handles (as mpi_p2p.cpp splits).
std::pair<std::uint64_t, std::uint64_t> share_of(std::uint64_t tuples, int parts, int part) {
  const std::uint64_t base = tuples / parts, extra = tuples % parts;
  const std::uint64_t p = static_cast<std::uint64_t>(part);
  return {p * base + std::min(p, extra), base + (p < extra ? 1 : 0)};
}

// ---------------------------------------------------------------------------------------------
// Rank program

class P2pRank {
 public:
  P2pRank(const json& params, std::ostream& err) : params_(params), err_(err) {}

  int run(std::ostream& out) {
    cluster::Node node;
    if (node.size() != 2) {
      err_ << "bench " << kName << ": needs exactly 2 ranks, got " << node.size() << '\n';
      return 2;
    }
    const int me = node.rank();
    json points = json::array();
    std::size_t index = 0;
    for (const json& c : params_.at("configs")) {
      const Config config = config_from(c);
      const flow::FlowSpec spec = make_spec(config, index);
      if (me == 0) flow::create_flow(node, spec);
      const std::string start = "bench/mpi-p2p/start/" + std::to_string(index);
      json point =
          me == 0 ? run_sources(node, spec, config, start) : run_targets(node, spec, config, start);
      point["index"] = index;
      points.push_back(point);
      node.barrier("bench/mpi-p2p/done/" + std::to_string(index));
      ++index;
    }
    report_rank_result(out,
                       {{"rank", me}, {"fabric", node.fabric().describe()}, {"points", points}});
    node.finish();
    return 0;
  }

 private:
  static flow::FlowSpec make_spec(const Config& config, std::size_t index) {
    flow::FlowSpec spec;
    spec.name = "bench-mpi-p2p-" + std::to_string(index);
    for (int t = 0; t < config.threads; ++t) {
      spec.sources.push_back({0, t});
      spec.targets.push_back({1, t});
    }
    spec.schema = flow::Schema(
        {{"index", flow::Type::uint64, 1},
         {"payload", flow::Type::chars, static_cast<std::uint32_t>(config.tuple_bytes - 8)}});
    spec.key_column = "index";
    spec.routing = flow::Routing::key_hash;
    spec.options.mode = flow::Mode::bandwidth;
    return spec;
  }

  // Rank 0: K source threads push the table tuple at a time, starting together after the barrier.
  json run_sources(cluster::Node& node, const flow::FlowSpec& spec, const Config& config,
                   const std::string& start_barrier) {
    const std::size_t tb = config.tuple_bytes;
    std::vector<std::byte> table(config.tuples * tb, std::byte{0});
    for (std::uint64_t i = 0; i < config.tuples; ++i) std::memcpy(&table[i * tb], &i, sizeof i);
    std::atomic<std::uint64_t> sent{0};
    RankThreads threads("bench mpi-p2p");
    for (int t = 0; t < config.threads; ++t) {
      threads.start("source " + std::to_string(t), [&, t](RankThreads::Gate& gate) {
        fabric::Worker worker(node.fabric(), "mpi-p2p source " + std::to_string(t));
        flow::ShuffleSource source(node, worker, spec.name, t);
        const auto [first, count] = share_of(config.tuples, config.threads, t);
        gate.ready_and_wait();
        const std::byte* p = table.data() + first * tb;
        for (std::uint64_t i = 0; i < count; ++i, p += tb) {
          if (Status s = source.push(p, tb); !s) [[unlikely]]
            throw Error(s.code(), s.message());
        }
        if (Status s = source.close(); !s) throw Error(s.code(), s.message());
        sent += source.counters().tuples;
      });
    }
    threads.release([&] { node.barrier(start_barrier); });
    threads.join();
    return {{"sent_tuples", sent.load()}};
  }

  // Rank 1: K targets copy every tuple into its slot of the table; then the table is checked.
  json run_targets(cluster::Node& node, const flow::FlowSpec& spec, const Config& config,
                   const std::string& start_barrier) {
    const std::size_t tb = config.tuple_bytes;
    const auto timeout = std::chrono::milliseconds(params_.at("consume_timeout_ms").get<long>());
    std::vector<std::byte> table(config.tuples * tb, std::byte{0xff});
    std::mutex mutex;
    std::uint64_t received = 0, out_of_range = 0;
    Clock::time_point first = Clock::time_point::max(), last = Clock::time_point::min();
    RankThreads threads("bench mpi-p2p");
    for (int t = 0; t < config.threads; ++t) {
      threads.start("target " + std::to_string(t), [&, t](RankThreads::Gate& gate) {
        flow::ShuffleTarget target(node, spec.name, t);
        gate.ready();
        flow::TupleBatch batch;
        std::uint64_t count = 0, bad = 0;
        Clock::time_point arrived = Clock::time_point::max();
        for (;;) {
          if (Status s = target.consume(batch, timeout); !s) throw Error(s.code(), s.message());
          if (batch.empty()) break;
          if (count == 0) arrived = Clock::now();
          const std::byte* p = batch.data;
          for (std::size_t i = 0; i < batch.count; ++i, p += tb) {
            std::uint64_t index;
            std::memcpy(&index, p, sizeof index);
            if (index < config.tuples) [[likely]] {
              std::memcpy(&table[index * tb], p, tb);
            } else {
              ++bad;
            }
          }
          count += batch.count;
        }
        const Clock::time_point end = Clock::now();
        std::lock_guard lock(mutex);
        received += count;
        out_of_range += bad;
        last = std::max(last, end);
        first = std::min(first, arrived);
      });
    }
    const Clock::time_point start = threads.release([&] { node.barrier(start_barrier); });
    threads.join();
    // Every slot must hold its own index: each tuple arrived, none twice in place of another.
    std::uint64_t wrong_slots = 0;
    for (std::uint64_t i = 0; i < config.tuples; ++i) {
      std::uint64_t index;
      std::memcpy(&index, &table[i * tb], sizeof index);
      if (index != i) ++wrong_slots;
    }
    const double seconds = seconds_between(start, last);
    err_ << "bench mpi-p2p: DFI " << tb << " B tuples, " << config.threads << ":"
         << config.threads << " flow: " << received << " tuples in " << seconds
         << " s (first batch after " << seconds_between(start, std::max(start, first)) << " s)\n";
    return {{"received_tuples", received},
            {"out_of_range", out_of_range},
            {"wrong_slots", wrong_slots},
            {"seconds", seconds}};
  }

  const json& params_;
  std::ostream& err_;
};

// ---------------------------------------------------------------------------------------------
// Driver

class MpiP2p final : public Scenario {
 public:
  std::string name() const override { return kName; }
  std::string title() const override {
    return "Point-to-point, tuple at a time: DFI shuffle flow vs MPI_Send/MPI_Recv (003 Fig 10)";
  }
  std::string description() const override {
    return "A fixed table sent from rank 0 to rank 1 one tuple at a time. DFI: a bandwidth-mode "
           "shuffle flow, K source threads on rank 0 (ShuffleSource::push per tuple, key-hash "
           "routing on the index column) into K targets on rank 1, which copy every tuple into "
           "its slot of rank 1's table. OpenMPI (bench/mpi/mpi_p2p.cpp, pml ucx over the same "
           "UCX transport): one MPI_Send/MPI_Recv per tuple into its slot; single-threaded, K "
           "threads with MPI_THREAD_MULTIPLE (one tag per thread), and K sender/receiver "
           "process pairs. Runtime: common barrier to the last tuple received; both sides "
           "verify that every tuple arrived exactly once (DFI: every slot holds its own index; "
           "MPI: every received tuple carries the expected index).";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"tuple_sizes", json::array({16, 256}), json::array({16, 64, 256, 1024}),
         "tuple sizes of the single-threaded runs in bytes (>= 16, multiples of 8)"},
        {"threads", json::array({1, 2}), json::array({1, 2, 3, 4}),
         "thread counts (DFI: K sources -> K targets; MPI: K threads, K process pairs)"},
        {"thread_tuple_bytes", 64, 64, "tuple size of the multi-threaded runs"},
        {"table_bytes",
         {{"shm", 32u << 20}, {"tcp", 16u << 20}},
         {{"shm", 128u << 20}, {"tcp", 32u << 20}},
         "bytes of the table sent in every configuration (003: 16 GiB)"},
        {"timeout_s", 120, 900, "bound of the DFI cluster run and of each mpirun"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"openmpi",
             "bench/mpi/mpi_p2p.cpp: one MPI_Send/MPI_Recv of tuple_bytes per tuple, received "
             "into its slot; --mode single, --mode threads (MPI_THREAD_MULTIPLE) and --mode "
             "processes (K pairs); mpirun --mca pml ucx with UCX_TLS=sm,self (shm) or "
             "tcp,self on lo (tcp)"}};
  }
  std::string unavailable(const RunContext& context) const override {
    (void)context;
    return mpi_baseline_unavailable();
  }

  void run(RunContext& context, Result& result) override {
    const std::vector<std::size_t> sizes = context.param("tuple_sizes");
    const std::vector<int> thread_counts = context.param("threads");
    const std::size_t thread_tb = context.param("thread_tuple_bytes");
    const std::size_t table_bytes = context.param("table_bytes");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    if (sizes.empty() || thread_counts.empty())
      throw Error(Errc::invalid_argument, "bench mpi-p2p: nothing to measure");
    std::vector<std::size_t> all_sizes = sizes;
    all_sizes.push_back(thread_tb);
    for (std::size_t s : all_sizes) {
      if (s < 16 || s % 8 != 0 || s > 4096 || table_bytes / s < 1000) {
        throw Error(Errc::invalid_argument,
                    "bench mpi-p2p: tuple size " + std::to_string(s) +
                        " must be a multiple of 8 in [16, 4096] with >= 1000 tuples in the table");
      }
    }
    for (int k : thread_counts) {
      if (k < 1 || k > 16)
        throw Error(Errc::invalid_argument, "bench mpi-p2p: thread counts must be in [1, 16]");
    }

    // One DFI flow per distinct (tuple size, threads); 1 thread at thread_tb is shared.
    std::set<Config> planned_set;
    for (std::size_t s : sizes) planned_set.insert({s, 1, table_bytes / s});
    for (int k : thread_counts) planned_set.insert({thread_tb, k, table_bytes / thread_tb});
    const std::vector<Config> configs(planned_set.begin(), planned_set.end());
    json planned = json::array();
    for (const Config& c : configs) planned.push_back(config_json(c));
    json parameters = context.resolved_parameters();
    parameters["configs"] = planned;
    result.set_parameters(parameters);
    result.add_baseline("openmpi", baselines()[0].description + "; " + mpi_version());
    result.add_note(
        "The 10x target is the paper's claim for small tuples and is checked on the smallest "
        "tuple size only (panel smallest_tuple); at larger tuples MPI's per-message cost is "
        "amortised and the ratio shrinks.");
    result.add_note(
        "x = 1 in the threads panels is the single-threaded run at thread_tuple_bytes (the "
        "same program path), not a separate measurement.");
    result.add_note(
        "The machine has " + std::to_string(std::thread::hardware_concurrency()) +
        " vCPUs: with K threads per side (DFI, MPI threads) or 2K MPI processes, K > 1 "
        "oversubscribes them, and MPI's receivers busy-poll while DFI's targets back off to "
        "short sleeps when idle.");

    Panel& single_rt = result.panel("single_runtime",
                                    "Single-threaded: runtime of the table vs tuple size (Fig 10a)",
                                    {"tuple size", "B", "log2"}, {"runtime", "s"}, Better::lower);
    Panel& single_rate = result.panel("single_rate", "Single-threaded: tuples per second",
                                      {"tuple size", "B", "log2"}, {"tuple rate", "Mtuples/s"},
                                      Better::higher);
    for (Panel* p : {&single_rt, &single_rate}) {
      p->series("dfi", Role::dfi, "DFI 1:1 shuffle flow, push per tuple");
      p->series("mpi", Role::baseline, "MPI_Send/MPI_Recv per tuple");
      p->compare("dfi", "mpi");
    }
    const std::size_t smallest = *std::min_element(sizes.begin(), sizes.end());
    const std::string smallest_x = std::to_string(smallest) + " B, 1 thread";
    Panel& target = result.panel(
        "smallest_tuple",
        "Smallest tuple (" + std::to_string(smallest) + " B), single-threaded: the 10x target",
        {"configuration", "", "category"}, {"tuple rate", "Mtuples/s"}, Better::higher);
    target.series("dfi", Role::dfi, "DFI 1:1 shuffle flow, push per tuple");
    target.series("mpi", Role::baseline, "MPI_Send/MPI_Recv per tuple");
    target.compare("dfi", "mpi", 10.0);
    Panel& threads_rt = result.panel(
        "threads_runtime",
        "Runtime vs threads, " + std::to_string(thread_tb) + " B tuples (Fig 10b)",
        {"threads per side", "", "linear"}, {"runtime", "s"}, Better::lower);
    Panel& threads_rate = result.panel(
        "threads_rate", "Tuples per second vs threads, " + std::to_string(thread_tb) + " B tuples",
        {"threads per side", "", "linear"}, {"tuple rate", "Mtuples/s"}, Better::higher);
    for (Panel* p : {&threads_rt, &threads_rate}) {
      p->series("dfi", Role::dfi, "DFI, K sources -> K targets in one flow");
      p->series("mpi_threads", Role::baseline, "MPI, K threads (MPI_THREAD_MULTIPLE)");
      p->series("mpi_processes", Role::baseline, "MPI, K sender/receiver process pairs");
      p->compare("dfi", "mpi_threads");
      p->compare("dfi", "mpi_processes");
    }

    RankJob job;
    job.nodes = 2;
    job.scenario = name();
    job.params = {{"configs", planned}, {"consume_timeout_ms", timeout.count() * 1000}};
    job.timeout = timeout;
    const std::string dfi_command = rank_job_command(job, context);

    auto add_both = [](Panel& rt, Panel& rate, const std::string& id, const json& x,
                       double seconds, std::uint64_t tuples) {
      rt.add(id, x, seconds);
      rate.add(id, x, static_cast<double>(tuples) / seconds / 1e6);
    };

    for (int rep = 1; rep <= context.repeat; ++rep) {
      const std::string round =
          "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat);
      auto run_dfi = [&] {
        context.say(round + ": DFI, " + std::to_string(configs.size()) + " flows, 2 ranks over " +
                    (context.netns ? "netns tcp" : context.transport));
        std::map<int, json> reports = run_rank_job(job, context);
        if (!reports.count(0) || !reports.count(1))
          throw Error(Errc::protocol, "bench mpi-p2p: a rank reported no result");
        for (std::size_t i = 0; i < configs.size(); ++i) {
          const Config& c = configs[i];
          const json& s = reports.at(0).at("points").at(i);
          const json& t = reports.at(1).at("points").at(i);
          const std::uint64_t sent = s.at("sent_tuples");
          const std::uint64_t received = t.at("received_tuples");
          if (sent != c.tuples || received != c.tuples || t.at("out_of_range") != 0 ||
              t.at("wrong_slots") != 0) {
            throw Error(Errc::protocol,
                        "bench mpi-p2p: DFI " + std::to_string(c.tuple_bytes) + " B, " +
                            std::to_string(c.threads) + " thread(s): expected " +
                            std::to_string(c.tuples) + " tuples, sources " + s.dump() +
                            ", targets " + t.dump());
          }
          const double seconds = t.at("seconds");
          if (seconds <= 0)
            throw Error(Errc::protocol, "bench mpi-p2p: DFI runtime not positive: " + t.dump());
          if (c.threads == 1 && std::count(sizes.begin(), sizes.end(), c.tuple_bytes) > 0) {
            add_both(single_rt, single_rate, "dfi", c.tuple_bytes, seconds, c.tuples);
            if (c.tuple_bytes == smallest)
              target.add("dfi", smallest_x, static_cast<double>(c.tuples) / seconds / 1e6);
          }
          if (c.tuple_bytes == thread_tb &&
              std::count(thread_counts.begin(), thread_counts.end(), c.threads) > 0) {
            add_both(threads_rt, threads_rate, "dfi", c.threads, seconds, c.tuples);
          }
        }
        for (Panel* p : {&single_rt, &single_rate, &target, &threads_rt, &threads_rate})
          p->add_command("dfi", dfi_command);
      };
      auto mpi = [&](const std::string& mode, int ranks, int threads, std::size_t tb) {
        MpiRun run;
        run.program = "mpi_p2p";
        run.ranks = ranks;
        run.transport = context.netns ? "tcp" : context.transport;
        run.timeout = timeout;
        run.args = {"--mode",        mode, "--tuple-bytes", std::to_string(tb), "--table-bytes",
                    std::to_string(table_bytes)};
        if (mode == "threads")
          run.args.insert(run.args.end(), {"--threads", std::to_string(threads)});
        MpiResult r = run_mpi(run);
        const std::uint64_t tuples = table_bytes / tb;
        if (!r.data.value("ok", false) || r.data.value("tuples", std::uint64_t{0}) != tuples) {
          throw Error(Errc::protocol, "bench mpi-p2p: MPI delivered wrongly (expected " +
                                          std::to_string(tuples) + " tuples): " + r.data.dump() +
                                          "\n" + r.command);
        }
        const double seconds = r.data.at("seconds");
        if (seconds <= 0)
          throw Error(Errc::protocol, "bench mpi-p2p: MPI runtime not positive: " + r.data.dump());
        context.say(round + ": MPI " + mode + " x" + std::to_string(threads) + ", " +
                    std::to_string(tb) + " B: " + std::to_string(seconds) + " s");
        return std::make_pair(seconds, r.command);
      };
      auto run_baseline = [&] {
        for (std::size_t s : sizes) {
          auto [seconds, command] = mpi("single", 2, 1, s);
          add_both(single_rt, single_rate, "mpi", s, seconds, table_bytes / s);
          single_rt.add_command("mpi", command);
          single_rate.add_command("mpi", command);
          if (s == smallest) {
            target.add("mpi", smallest_x, static_cast<double>(table_bytes / s) / seconds / 1e6);
            target.add_command("mpi", command);
          }
          if (s == thread_tb &&
              std::count(thread_counts.begin(), thread_counts.end(), 1) > 0) {
            for (const char* id : {"mpi_threads", "mpi_processes"}) {
              add_both(threads_rt, threads_rate, id, 1, seconds, table_bytes / s);
              threads_rt.add_command(id, command);
              threads_rate.add_command(id, command);
            }
          }
        }
        for (int k : thread_counts) {
          if (k == 1 && std::count(sizes.begin(), sizes.end(), thread_tb) > 0) continue;
          for (const auto& [id, mode, ranks] :
               {std::tuple<std::string, std::string, int>{"mpi_threads", "threads", 2},
                {"mpi_processes", "processes", 2 * k}}) {
            auto [seconds, command] = mpi(mode, ranks, k, thread_tb);
            add_both(threads_rt, threads_rate, id, k, seconds, table_bytes / thread_tb);
            threads_rt.add_command(id, command);
            threads_rate.add_command(id, command);
          }
        }
      };
      run_alternating(rep, run_dfi, run_baseline);
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return P2pRank(params, err).run(out);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_mpi_p2p_scenario() { return std::make_unique<MpiP2p>(); }

}  // namespace dfi::tools::bench
