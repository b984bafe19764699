// Scenario mpi-alltoall (003 Fig 11, 12): 4 ranks shuffle a generated table by key, DFI N:M
// shuffle flow vs OpenMPI MPI_Alltoall(v), in the same run.
//
// The table is the one bench/mpi/mpi_alltoall.cpp generates: rank r owns tuples_per_rank tuples,
// tuple i's first 8 bytes are the key splitmix64(seed ^ (r << 40) ^ i), every other byte is the
// key's low byte; the tuple goes to rank (key >> 32) % 4. Both sides generate the table before
// the timed part.
//
// DFI side (4 ranks under a local cluster): one bandwidth-mode shuffle flow per run with one
// source (thread 0) and one target (id 0) on every rank, explicit-target routing. On every rank a
// source thread scans the table, computes each tuple's target the same way as MPI and pushes it
// (ShuffleSource::push_to, tuple at a time), then closes; a target thread consumes concurrently,
// and for every tuple adds the key to a checksum, checks that it belongs to this rank and copies
// it into the rank's received partition (exactly what mpi_alltoall.cpp's consume() does).
// Runtime per rank = from a barrier that all ranks pass once every source is connected and every
// target open, to the end of stream at its target; reported: the slowest rank. The driver checks
// that the ranks together received as many tuples as they sent, with the same key sum, and
// nothing misrouted; a wrong delivery fails the run.
//
// (a) Pipelined (Fig 11), no straggler: DFI vs `mpi_alltoall --mode pipelined --slot-tuples 1`:
//     every round one MPI_Alltoall with a slot of one tuple per target (the paper's mini-batch of
//     about one tuple per target).
// (b) Straggler (Fig 12): DFI vs `mpi_alltoall --mode batched` (partition the whole table, then
//     MPI_Alltoall of counts and one MPI_Alltoallv) with rank `straggler_rank` slowed to s.
//
// The straggler, on both sides, computes at s times its speed: after a compute phase that took
// t, it spins (keeping its core busy) for t * (1/s - 1), so the phase takes t / s.
//   MPI (bench/mpi/common.hpp Straggle): the scan + partition (histogram and scatter) before the
//     collectives and the consume of what arrived after them; MPI_Alltoall(v) itself is not
//     stretched.
//   DFI (this file, the same rule): the source thread's scan + push_to of every chunk of
//     kStraggleChunk tuples (the push includes the copy into the ring, so DFI's transfer work on
//     shm is stretched too), except waiting for ring space: a chunk in which the source's stall
//     counter rose is charged the mean time per tuple of the chunks without a stall (all of it
//     until there is such a chunk), as MPI's wait inside a collective is not stretched; and the
//     target thread's processing of every consumed batch (not its wait for the next batch).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
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

constexpr const char* kName = "mpi-alltoall";
constexpr int kRanks = 4;
constexpr std::size_t kStraggleChunk = 1024;  // tuples per stretched source phase

// The same generator and routing as bench/mpi/common.hpp and mpi_alltoall.cpp.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::size_t target_of(std::uint64_t key, int ranks) {
  return static_cast<std::size_t>((key >> 32) % static_cast<std::uint64_t>(ranks));
}

std::vector<std::byte> make_table(int rank, std::size_t tuples, std::size_t tb,
                                  std::uint64_t seed) {
  std::vector<std::byte> table(tuples * tb);
  for (std::size_t i = 0; i < tuples; ++i) {
    const std::uint64_t key = splitmix64(seed ^ (static_cast<std::uint64_t>(rank) << 40) ^ i);
    std::byte* p = table.data() + i * tb;
    std::memset(p, static_cast<int>(key & 0xff), tb);
    std::memcpy(p, &key, sizeof key);
  }
  return table;
}

// A slower CPU, simulated exactly as bench/mpi/common.hpp's Straggle does: after a phase that
// took t, spin for t * (1/s - 1).
class Straggle {
 public:
  Straggle(bool active, double slowdown)
      : active_(active && slowdown > 0 && slowdown < 1), factor_(1.0 / slowdown - 1.0) {}
  void begin() {
    if (active_) start_ = Clock::now();
  }
  void end() {
    if (active_) stretch(Clock::now() - start_);
  }
  // Spins for `spent` * (1/s - 1): a phase of `spent` compute then took `spent` / s.
  void stretch(Clock::duration spent) {
    if (!active_) return;
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(spent * factor_);
    while (Clock::now() < until) {
    }
    stretched_ += std::chrono::duration<double>(spent * factor_).count();
  }
  bool active() const { return active_; }
  double stretched_seconds() const { return stretched_; }

 private:
  bool active_;
  double factor_;
  Clock::time_point start_{};
  double stretched_ = 0;
};

struct Run {
  std::string kind;  // "pipelined" or "straggler"
  std::size_t tuple_bytes = 0;
  std::size_t tuples_per_rank = 0;
  int straggler = -1;
  double slowdown = 1.0;
};

json run_json(const Run& r) {
  return {{"kind", r.kind},
          {"tuple_bytes", r.tuple_bytes},
          {"tuples_per_rank", r.tuples_per_rank},
          {"straggler", r.straggler},
          {"slowdown", r.slowdown}};
}

Run run_from(const json& j) {
  return {j.at("kind").get<std::string>(), j.at("tuple_bytes").get<std::size_t>(),
          j.at("tuples_per_rank").get<std::size_t>(), j.at("straggler").get<int>(),
          j.at("slowdown").get<double>()};
}

std::string slowdown_text(double s) {
  std::ostringstream text;
  text << "s = " << s;
  return text.str();
}

// ---------------------------------------------------------------------------------------------
// Rank program

class AlltoallRank {
 public:
  AlltoallRank(const json& params, std::ostream& err) : params_(params), err_(err) {}

  int run(std::ostream& out) {
    cluster::Node node;
    if (node.size() != kRanks) {
      err_ << "bench " << kName << ": needs exactly " << kRanks << " ranks, got " << node.size()
           << '\n';
      return 2;
    }
    json points = json::array();
    std::size_t index = 0;
    for (const json& r : params_.at("runs")) {
      const Run run = run_from(r);
      const flow::FlowSpec spec = make_spec(run, index);
      if (node.rank() == 0) flow::create_flow(node, spec);
      json point = shuffle(node, spec, run, index);
      point["index"] = index;
      points.push_back(point);
      node.barrier("bench/mpi-alltoall/done/" + std::to_string(index));
      ++index;
    }
    report_rank_result(
        out, {{"rank", node.rank()}, {"fabric", node.fabric().describe()}, {"points", points}});
    node.finish();
    return 0;
  }

 private:
  static flow::FlowSpec make_spec(const Run& run, std::size_t index) {
    flow::FlowSpec spec;
    spec.name = "bench-mpi-alltoall-" + std::to_string(index);
    for (int r = 0; r < kRanks; ++r) {
      spec.sources.push_back({r, 0});
      spec.targets.push_back({r, 0});
    }
    spec.schema = flow::Schema(
        {{"key", flow::Type::uint64, 1},
         {"payload", flow::Type::chars, static_cast<std::uint32_t>(run.tuple_bytes - 8)}});
    spec.key_column = "key";
    spec.routing = flow::Routing::explicit_target;
    spec.options.mode = flow::Mode::bandwidth;
    return spec;
  }

  // This rank's source and target, concurrently; returns what it sent, received and how long.
  json shuffle(cluster::Node& node, const flow::FlowSpec& spec, const Run& run,
               std::size_t index) {
    const int me = node.rank();
    const std::size_t tb = run.tuple_bytes;
    const std::size_t tuples = run.tuples_per_rank;
    const auto timeout = std::chrono::milliseconds(params_.at("consume_timeout_ms").get<long>());
    const std::vector<std::byte> table =
        make_table(me, tuples, tb, params_.at("seed").get<std::uint64_t>());
    std::uint64_t sent_key_sum = 0;
    for (std::size_t i = 0; i < tuples; ++i) {
      std::uint64_t key;
      std::memcpy(&key, table.data() + i * tb, sizeof key);
      sent_key_sum += key;
    }
    const bool slow = me == run.straggler;

    std::mutex mutex;
    std::uint64_t sent = 0, received = 0, received_key_sum = 0, misrouted = 0;
    double stretched = 0;
    Clock::time_point end{};

    RankThreads threads("bench mpi-alltoall: rank " + std::to_string(me));
    threads.start("target", [&](RankThreads::Gate& gate) {
      flow::ShuffleTarget target(node, spec.name, 0);
      std::vector<std::byte> partition;  // what this rank received, as a consumer would hold it
      partition.reserve(tuples * tb + tuples * tb / 4);
      gate.ready();
      Straggle straggle(slow, run.slowdown);
      flow::TupleBatch batch;
      std::uint64_t count = 0, sum = 0, wrong = 0;
      for (;;) {
        if (Status s = target.consume(batch, timeout); !s) throw Error(s.code(), s.message());
        if (batch.empty()) break;
        straggle.begin();
        const std::byte* p = batch.data;
        for (std::size_t i = 0; i < batch.count; ++i, p += tb) {
          std::uint64_t key;
          std::memcpy(&key, p, sizeof key);
          sum += key;
          if (target_of(key, kRanks) != static_cast<std::size_t>(me)) ++wrong;
        }
        partition.insert(partition.end(), batch.data, batch.data + batch.count * tb);
        count += batch.count;
        straggle.end();
      }
      const Clock::time_point done = Clock::now();
      std::lock_guard lock(mutex);
      end = done;
      received = count;
      received_key_sum = sum;
      misrouted = wrong;
      stretched += straggle.stretched_seconds();
    });
    threads.start("source", [&](RankThreads::Gate& gate) {
      fabric::Worker worker(node.fabric(), "mpi-alltoall source");
      flow::ShuffleSource source(node, worker, spec.name, 0);
      Straggle straggle(slow, run.slowdown);
      gate.ready_and_wait();
      const std::byte* p = table.data();
      // Compute time of the chunks without a stall, to charge chunks that waited for space.
      Clock::duration clean_time{};
      std::size_t clean_tuples = 0;
      for (std::size_t first = 0; first < tuples; first += kStraggleChunk) {
        const std::size_t last = std::min(tuples, first + kStraggleChunk);
        const std::uint64_t stalls = straggle.active() ? source.counters().stalls : 0;
        const Clock::time_point begin = straggle.active() ? Clock::now() : Clock::time_point{};
        for (std::size_t i = first; i < last; ++i, p += tb) {
          std::uint64_t key;
          std::memcpy(&key, p, sizeof key);
          if (Status s = source.push_to(target_of(key, kRanks), p, tb); !s) [[unlikely]]
            throw Error(s.code(), s.message());
        }
        if (straggle.active()) {
          const Clock::duration spent = Clock::now() - begin;
          if (source.counters().stalls == stalls || clean_tuples == 0) {
            // No wait for ring space (or no estimate yet: stretch it all, against DFI).
            if (source.counters().stalls == stalls) {
              clean_time += spent;
              clean_tuples += last - first;
            }
            straggle.stretch(spent);
          } else {
            const auto charged = std::chrono::duration_cast<Clock::duration>(
                clean_time * static_cast<double>(last - first) /
                static_cast<double>(clean_tuples));
            straggle.stretch(std::min(spent, charged));
          }
        }
      }
      if (Status s = source.close(); !s) throw Error(s.code(), s.message());
      std::lock_guard lock(mutex);
      sent = source.counters().tuples;
      stretched += straggle.stretched_seconds();
    });
    const Clock::time_point start = threads.release(
        [&] { node.barrier("bench/mpi-alltoall/start/" + std::to_string(index)); });
    threads.join();
    const double seconds = std::chrono::duration<double>(end - start).count();
    err_ << "bench mpi-alltoall: DFI " << run.kind << " " << tb << " B";
    if (run.straggler >= 0)
      err_ << ", straggler " << run.straggler << " " << slowdown_text(run.slowdown);
    err_ << ": rank " << me << " received " << received << " tuples in " << seconds << " s\n";
    return {{"sent_tuples", sent},
            {"sent_key_sum", sent_key_sum},
            {"received_tuples", received},
            {"received_key_sum", received_key_sum},
            {"misrouted", misrouted},
            {"stretched_seconds", stretched},
            {"seconds", seconds}};
  }

  const json& params_;
  std::ostream& err_;
};

// ---------------------------------------------------------------------------------------------
// Driver

class MpiAlltoall final : public Scenario {
 public:
  std::string name() const override { return kName; }
  std::string title() const override {
    return "4-rank shuffle by key: DFI N:M shuffle flow vs MPI_Alltoall(v), pipelined and with "
           "a straggler (003 Fig 11, 12)";
  }
  std::string description() const override {
    return "4 ranks each shuffle a generated table (8-byte random key, target rank = (key >> "
           "32) % 4). DFI: one 4:4 shuffle flow, on every rank a source thread pushes tuple at a "
           "time (push_to the key's rank) while a target thread consumes (key checksum, routing "
           "check, copy into the received partition). MPI (bench/mpi/mpi_alltoall.cpp, pml ucx "
           "over the same UCX transport): (a) pipelined mini-batches, one MPI_Alltoall per slot "
           "of slot_tuples tuples per target; (b) batched: partition the whole table, "
           "MPI_Alltoall of counts, one MPI_Alltoallv, with one straggling rank computing at s "
           "times its speed (every compute phase stretched to 1/s by spinning; on DFI the "
           "straggler's scan + push per chunk and its processing of every consumed batch are "
           "stretched the same way). Runtime: common barrier to the last tuple received at the "
           "slowest rank; both sides check tuple counts, key sums and routing.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"tuple_sizes", json::array({16, 256}), json::array({16, 64, 256, 1024}),
         "(a) pipelined: tuple sizes in bytes (>= 16, multiples of 8)"},
        {"pipelined_tuples_per_rank",
         {{"shm", 50000}, {"tcp", 10000}},
         {{"shm", 500000}, {"tcp", 100000}},
         "(a) pipelined: tuples each rank owns"},
        {"slot_tuples", 1, 1, "(a) MPI pipelined: tuples per target per MPI_Alltoall round"},
        {"straggler_tuple_bytes", 64, 64, "(b) straggler: tuple size in bytes"},
        {"straggler_tuples_per_rank",
         {{"shm", 500000}, {"tcp", 50000}},
         {{"shm", 2000000}, {"tcp", 1000000}},
         "(b) straggler: tuples each rank owns (003 Fig 12 varies this as T)"},
        {"slowdowns", json::array({1.0, 0.5, 0.25}), json::array({1.0, 0.5, 0.25}),
         "(b) speeds s of the straggling rank (1 = nobody straggles, the reference)"},
        {"straggler_rank", 3, 3, "(b) the straggling rank"},
        {"seed", 42, 42, "seed of the generated tables (both sides)"},
        {"timeout_s", 120, 900, "bound of the DFI cluster run and of each mpirun"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"openmpi",
             "bench/mpi/mpi_alltoall.cpp on 4 ranks: --mode pipelined (MPI_Alltoall per "
             "mini-batch of slot_tuples tuples per target) and --mode batched (partition, "
             "MPI_Alltoall of counts, one MPI_Alltoallv) with --straggler R --slowdown s; "
             "mpirun --oversubscribe --mca pml ucx with UCX_TLS=sm,self (shm) or tcp,self on lo "
             "(tcp)"}};
  }
  std::string unavailable(const RunContext& context) const override {
    (void)context;
    return mpi_baseline_unavailable();
  }

  void run(RunContext& context, Result& result) override {
    const std::vector<std::size_t> sizes = context.param("tuple_sizes");
    const std::size_t pipelined_tuples = context.param("pipelined_tuples_per_rank");
    const std::size_t slot_tuples = context.param("slot_tuples");
    const std::size_t straggler_tb = context.param("straggler_tuple_bytes");
    const std::size_t straggler_tuples = context.param("straggler_tuples_per_rank");
    const std::vector<double> slowdowns = context.param("slowdowns");
    const int straggler_rank = context.param("straggler_rank");
    const std::uint64_t seed = context.param("seed");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    std::vector<std::size_t> all_sizes = sizes;
    all_sizes.push_back(straggler_tb);
    for (std::size_t s : all_sizes) {
      if (s < 16 || s % 8 != 0 || s > 4096) {
        throw Error(Errc::invalid_argument, "bench mpi-alltoall: tuple size " + std::to_string(s) +
                                                " must be a multiple of 8 in [16, 4096]");
      }
    }
    for (double s : slowdowns) {
      if (!(s > 0 && s <= 1))
        throw Error(Errc::invalid_argument, "bench mpi-alltoall: slowdowns must be in (0, 1]");
    }
    if (straggler_rank < 0 || straggler_rank >= kRanks)
      throw Error(Errc::invalid_argument, "bench mpi-alltoall: straggler_rank must be 0..3");
    if (pipelined_tuples < 1 || straggler_tuples < 1 || slot_tuples < 1 ||
        straggler_tuples > 2000000000u)
      throw Error(Errc::invalid_argument, "bench mpi-alltoall: bad tuple or slot counts");
    if (sizes.empty() && slowdowns.empty())
      throw Error(Errc::invalid_argument, "bench mpi-alltoall: nothing to measure");

    std::vector<Run> runs;
    for (std::size_t s : sizes) runs.push_back({"pipelined", s, pipelined_tuples, -1, 1.0});
    for (double s : slowdowns)
      runs.push_back({"straggler", straggler_tb, straggler_tuples, s < 1 ? straggler_rank : -1, s});
    json planned = json::array();
    for (const Run& r : runs) planned.push_back(run_json(r));
    json parameters = context.resolved_parameters();
    parameters["runs"] = planned;
    result.set_parameters(parameters);
    result.add_baseline("openmpi", baselines()[0].description + "; " + mpi_version());
    result.add_note(
        "What the straggler slows (both sides: after a phase that took t, spin t * (1/s - 1)): "
        "MPI: the scan + partition before the collectives and the consume after them "
        "(MPI_Alltoall(v) is not stretched). DFI: the source thread's scan + push_to of every "
        "chunk of " +
        std::to_string(kStraggleChunk) +
        " tuples (including the copy into the rings, so DFI's transfer work is stretched too), "
        "except waits for ring space (a chunk in which the source stalled is charged the mean "
        "time per tuple of the chunks without a stall), and the target thread's processing of "
        "every consumed batch (not its wait for data).");
    result.add_note(
        "DFI uses two threads per rank (source and target), MPI one process per rank; 4 ranks "
        "share the machine's " +
        std::to_string(std::thread::hardware_concurrency()) +
        " vCPUs. MPI ranks busy-poll inside the collectives, DFI's idle targets back off to "
        "short sleeps, so waiting costs MPI more CPU on an oversubscribed machine.");
    result.add_note(
        "The 0.7x straggler target applies to s < 1; s = 1 (nobody straggles) is shown in its "
        "own panel as the reference.");

    Panel& pipelined = result.panel(
        "pipelined", "(a) Pipelined shuffle, 4:4, no straggler: runtime vs tuple size (Fig 11)",
        {"tuple size", "B", "log2"}, {"runtime", "s"}, Better::lower);
    pipelined.series("dfi", Role::dfi, "DFI 4:4 shuffle flow, push_to per tuple");
    pipelined.series("mpi_pipelined", Role::baseline,
                     "MPI_Alltoall per mini-batch (" + std::to_string(slot_tuples) +
                         " tuple(s) per target)");
    pipelined.compare("dfi", "mpi_pipelined", 0.2);  // DFI at least 5x faster
    const bool has_reference = std::count(slowdowns.begin(), slowdowns.end(), 1.0) > 0;
    const bool has_straggler = std::any_of(slowdowns.begin(), slowdowns.end(),
                                           [](double s) { return s < 1; });
    const std::string straggler_text = "rank " + std::to_string(straggler_rank) + " at s";
    if (has_straggler) {
      Panel& p = result.panel("straggler",
                              "(b) One straggler (" + straggler_text + "), " +
                                  std::to_string(straggler_tb) + " B tuples: runtime (Fig 12)",
                              {"straggler speed", "", "category"}, {"runtime", "s"},
                              Better::lower);
      p.series("dfi", Role::dfi, "DFI 4:4 shuffle flow, straggler slowed the same way");
      p.series("mpi_batched", Role::baseline, "MPI partition + MPI_Alltoallv, straggler slowed");
      p.compare("dfi", "mpi_batched", 0.7);
    }
    if (has_reference) {
      Panel& p = result.panel(
          "no_straggler",
          "(b) Reference without a straggler, " + std::to_string(straggler_tb) + " B tuples",
          {"straggler speed", "", "category"}, {"runtime", "s"}, Better::lower);
      p.series("dfi", Role::dfi, "DFI 4:4 shuffle flow");
      p.series("mpi_batched", Role::baseline, "MPI partition + MPI_Alltoallv");
      p.compare("dfi", "mpi_batched");
    }
    auto straggler_panel = [&](double s) -> Panel& {
      return result.panel(s < 1 ? "straggler" : "no_straggler");
    };

    RankJob job;
    job.nodes = kRanks;
    job.scenario = name();
    job.params = {
        {"runs", planned}, {"seed", seed}, {"consume_timeout_ms", timeout.count() * 1000}};
    job.timeout = timeout;
    const std::string dfi_command = rank_job_command(job, context);

    for (int rep = 1; rep <= context.repeat; ++rep) {
      const std::string round =
          "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat);
      auto run_dfi = [&] {
        context.say(round + ": DFI, " + std::to_string(runs.size()) + " flows, 4 ranks over " +
                    (context.netns ? "netns tcp" : context.transport));
        std::map<int, json> reports = run_rank_job(job, context);
        for (int r = 0; r < kRanks; ++r) {
          if (!reports.count(r))
            throw Error(Errc::protocol,
                        "bench mpi-alltoall: rank " + std::to_string(r) + " reported no result");
        }
        for (std::size_t i = 0; i < runs.size(); ++i) {
          const Run& run = runs[i];
          std::uint64_t sent = 0, sent_sum = 0, received = 0, received_sum = 0, misrouted = 0;
          double slowest = 0;
          bool each_sent_all = true;
          for (int r = 0; r < kRanks; ++r) {
            const json& p = reports.at(r).at("points").at(i);
            sent += p.at("sent_tuples").get<std::uint64_t>();
            sent_sum += p.at("sent_key_sum").get<std::uint64_t>();
            received += p.at("received_tuples").get<std::uint64_t>();
            received_sum += p.at("received_key_sum").get<std::uint64_t>();
            misrouted += p.at("misrouted").get<std::uint64_t>();
            slowest = std::max(slowest, p.at("seconds").get<double>());
            each_sent_all = each_sent_all && p.at("sent_tuples") == run.tuples_per_rank;
          }
          if (!each_sent_all || sent != received || sent_sum != received_sum || misrouted != 0 ||
              slowest <= 0) {
            throw Error(Errc::protocol,
                        "bench mpi-alltoall: DFI " + run_json(run).dump() +
                            ": wrong delivery: sent " + std::to_string(sent) +
                            " tuples, received " + std::to_string(received) + ", key sums " +
                            std::to_string(sent_sum) +
                            " / " + std::to_string(received_sum) + ", misrouted " +
                            std::to_string(misrouted));
          }
          if (run.kind == "pipelined") {
            pipelined.add("dfi", run.tuple_bytes, slowest);
            pipelined.add_command("dfi", dfi_command);
          } else {
            Panel& p = straggler_panel(run.slowdown);
            p.add("dfi", slowdown_text(run.slowdown), slowest);
            p.add_command("dfi", dfi_command);
          }
        }
      };
      auto mpi = [&](const Run& run) {
        MpiRun m;
        m.program = "mpi_alltoall";
        m.ranks = kRanks;
        m.transport = context.netns ? "tcp" : context.transport;
        m.timeout = timeout;
        m.args = {"--mode",
                  run.kind == "pipelined" ? "pipelined" : "batched",
                  "--tuple-bytes",
                  std::to_string(run.tuple_bytes),
                  "--tuples-per-rank",
                  std::to_string(run.tuples_per_rank),
                  "--slot-tuples",
                  std::to_string(slot_tuples),
                  "--seed",
                  std::to_string(seed),
                  "--straggler",
                  std::to_string(run.straggler)};
        if (run.straggler >= 0)
          m.args.insert(m.args.end(), {"--slowdown", std::to_string(run.slowdown)});
        MpiResult r = run_mpi(m);
        if (!r.data.value("ok", false)) {
          throw Error(Errc::protocol, "bench mpi-alltoall: MPI delivered wrongly: " +
                                          r.data.dump() + "\n" + r.command);
        }
        const double seconds = r.data.at("seconds");
        if (seconds <= 0)
          throw Error(Errc::protocol,
                      "bench mpi-alltoall: MPI runtime not positive: " + r.data.dump());
        context.say(round + ": MPI " + m.args[1] + " " + std::to_string(run.tuple_bytes) + " B" +
                    (run.straggler >= 0 ? ", " + slowdown_text(run.slowdown) : std::string()) +
                    ": " + std::to_string(seconds) + " s");
        if (run.kind == "pipelined") {
          pipelined.add("mpi_pipelined", run.tuple_bytes, seconds);
          pipelined.add_command("mpi_pipelined", r.command);
        } else {
          Panel& p = straggler_panel(run.slowdown);
          p.add("mpi_batched", slowdown_text(run.slowdown), seconds);
          p.add_command("mpi_batched", r.command);
        }
      };
      auto run_baseline = [&] {
        for (const Run& run : runs) mpi(run);
      };
      run_alternating(rep, run_dfi, run_baseline);
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return AlltoallRank(params, err).run(out);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_mpi_alltoall_scenario() {
  return std::make_unique<MpiAlltoall>();
}

}  // namespace dfi::tools::bench
