// Scenarios join, join-fr and ghj (003 Fig 13-14; 001 §5): distributed joins on flows (ops::Join).
//
// join: the radix join on two shuffle flows (4 ranks, `threads` partitioning and join threads
// each) against the MPI radix join of bench/mpi/mpi_radix_join.cpp (4 processes; Barthels et
// al.: histogram, MPI_Put into exclusive window offsets, barrier, local build/probe; and the
// same with one MPI_Alltoallv instead of the puts), on the same generated data
// (src/tools/join_data.hpp): a foreign-key join, build and probe `tuples` tuples of 16 B each,
// unique build keys, every probe tuple with exactly one partner. Runtime: DFI from a cluster
// barrier after data generation and the join's open (ops::Join: threads started, every source
// connected to every target) to the slowest rank's end of probe; MPI from an MPI_Barrier after
// data generation (its connections set up in MPI_Init) to the slowest process's end of probe.
// The DFI open is measured too (slowest rank) and reported in panel "open". Every run's
// matches and checksum must equal the MPI join's and the tuple count; a difference fails the run.
//
// join-fr: the fragment-and-replicate join (the build side replicated to every rank, the probe
// side never moves) against the radix join, at inner:outer size ratios 1:1 .. 1:1000 with the
// outer side fixed.
//
// All three time the DFI joins from the barrier after the open, and report the open separately
// (panel "open").
//
// ghj: the grace hash join (001 §5) with and without the Bloom-filter semi-join reduction at
// selectivities 1 .. 0.001 (the fraction of probe tuples with a partner), and the RDMA radix join
// (RRJ vs GHJ), the same data for all three, in rotating order; runtime and the probe tuples each
// ships.
#include <algorithm>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "../join_command.hpp"
#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "mpi_baseline.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;

constexpr int kRanks = 4;
constexpr double kBarthelsPerCore = 11.9e6;  // input tuples/s per core (VLDB 2017)

// One join on a fresh 4-rank cluster: `dfi bench-rank <scenario> {options}`; returns rank 0's
// report (the summed result).
json run_dfi_join(RunContext& context, const std::string& scenario, const json& options,
                  std::chrono::seconds timeout, std::string& command) {
  RankJob job;
  job.nodes = kRanks;
  job.scenario = scenario;
  job.params = options;
  job.timeout = timeout;
  command = rank_job_command(job, context);
  std::map<int, json> reports = run_rank_job(job, context);
  if (!reports.count(0)) throw Error(Errc::protocol, "bench " + scenario + ": rank 0 reported no result");
  return reports.at(0);
}

// The rank program of both scenarios: one generated join with the options in `params`.
int join_rank(const json& params, std::ostream& out, std::ostream& err) {
  JoinCommandOptions options;
  options.name = params.at("name").get<std::string>();
  options.algorithm = params.at("algorithm").get<std::string>();
  options.build_tuples = params.at("build_tuples");
  options.probe_tuples = params.at("probe_tuples");
  options.threads = params.at("threads");
  options.tuple_bytes = params.at("tuple_bytes");
  options.selectivity = params.value("selectivity", 1.0);
  options.bloom = params.value("bloom", false);
  try {
    cluster::Node node;
    const ops::JoinResult all = run_generated_join(node, options);
    if (node.rank() == 0) {
      report_rank_result(out, {{"seconds", all.seconds},
                               {"build_seconds", all.build_seconds},
                               {"open_seconds", all.open_seconds},
                               {"matches", all.matches},
                               {"checksum", all.checksum},
                               {"probe_tuples", all.probe_tuples},
                               {"shipped_probe_tuples", all.shipped_probe_tuples}});
    }
    node.finish();
  } catch (const Error& e) {
    err << "bench join rank: " << e.what() << '\n';
    return 1;
  }
  return 0;
}

// Panel "open": how long the slowest rank took to open the join's flows (ops::Join's
// constructor), which the runtime panels leave out.
Panel& open_panel(Result& result, const std::string& x_label, const std::string& x_scale) {
  return result.panel("open", "Opening the join's flows, before the timed run (slowest rank)",
                      {x_label, "", x_scale}, {"open time", "s"}, Better::lower);
}

std::string million(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f M", v / 1e6);
  return text;
}

class JoinScenario : public Scenario {
 public:
  std::string name() const override { return "join"; }
  std::string title() const override {
    return "Radix hash join on flows vs an MPI radix join, 4 ranks";
  }
  std::string description() const override {
    return "A foreign-key equi-join of two generated relations of `tuples` 16 B tuples each (unique "
           "build keys, every probe tuple with one partner), 4 ranks. DFI: ops::Join, radix "
           "algorithm: two key-hash shuffle flows, partitioning threads push build then probe, "
           "join threads build a table as build tuples arrive and probe as probe tuples arrive (no "
           "histogram pass, no barrier); the join's flows are opened (ops::Join) before the start barrier "
           "and timed separately. MPI (bench/mpi/mpi_radix_join.cpp, 4 processes, OpenMPI "
           "over the same UCX transport): histogram, MPI_Alltoall of counts, then MPI_Put into "
           "exclusive window offsets + barrier (Barthels et al.) or one MPI_Alltoallv, then a "
           "bucket-chained build and probe. Same data, same partition function, same checksum; "
           "runtime from a barrier after data generation (and DFI's open; MPI connects in MPI_Init) "
           "to the slowest rank's last probe.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"tuples", json::array({1 << 20}), json::array({1 << 23, 1 << 25}),
         "tuples of each relation (build and probe), all ranks together"},
        {"threads", 1, 1, "DFI partitioning threads and join threads per rank"},
        {"timeout_s", 300, 1800, "bound of each DFI cluster run and each mpirun"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"openmpi",
             "bench/mpi/mpi_radix_join.cpp on 4 processes: histogram + MPI_Alltoall of counts, "
             "then MPI_Put of 64 KiB write-combine buffers into exclusive offsets of an "
             "MPI_Win_allocate window (passive target) + MPI_Barrier, or one MPI_Alltoallv; then "
             "a bucket-chained hash table per process; mpirun --oversubscribe --mca pml ucx with "
             "UCX_TLS=sm,self (shm) or tcp,self on lo with only the self and tcp BTLs, so that "
             "MPI_Put does not take the shared-memory BTL (tcp)"}};
  }
  std::string unavailable(const RunContext& context) const override {
    (void)context;
    return mpi_baseline_unavailable();
  }

  void run(RunContext& context, Result& result) override {
    const std::vector<std::uint64_t> sizes = context.param("tuples");
    const int threads = context.param("threads");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    if (sizes.empty() || threads < 1) throw Error(Errc::invalid_argument, "bench join: no sizes or no threads");
    result.set_parameters(context.resolved_parameters());
    result.add_baseline("openmpi", baselines()[0].description + "; " + mpi_version());
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    result.add_note("DFI runs " + std::to_string(2 * threads) +
                    " threads per rank (partitioning and join), MPI one process per rank; 4 ranks share "
                    "the machine's " + std::to_string(cores) +
                    " cores, so per-core rates divide by " + std::to_string(cores) +
                    ". Barthels et al. report 11.9 M input tuples/s per core for their MPI radix join "
                    "on InfiniBand.");
    result.add_note("The MPI join's local phase builds one bucket-chained table per process, like a "
                    "DFI join thread; neither does a second, cache-sized radix pass (the DFI join "
                    "streams its probe side, and probes with group prefetching instead).");
    Panel& runtime = result.panel("runtime", "Radix join runtime, 4 ranks, 16 B tuples",
                                  {"tuples per relation", "", "log2"}, {"runtime", "s"}, Better::lower);
    runtime.series("dfi", Role::dfi, "DFI radix join on two shuffle flows");
    runtime.series("mpi_put", Role::baseline, "MPI radix join, MPI_Put (Barthels)");
    runtime.series("mpi_alltoallv", Role::baseline, "MPI radix join, MPI_Alltoallv");
    runtime.compare("dfi", "mpi_put", 1 / 1.5);
    runtime.compare("dfi", "mpi_alltoallv", 1 / 1.5);
    Panel& rate = result.panel("per_core", "Input tuples/s per core (Barthels et al.: 11.9 M)",
                               {"tuples per relation", "", "log2"}, {"input tuples/s per core", "M/s"},
                               Better::higher);
    rate.series("dfi", Role::dfi, "DFI radix join");
    rate.series("mpi_put", Role::baseline, "MPI radix join, MPI_Put");
    rate.series("mpi_alltoallv", Role::baseline, "MPI radix join, MPI_Alltoallv");
    rate.series("barthels", Role::baseline, "Barthels et al. (paper, InfiniBand)");
    rate.compare("dfi", "mpi_put");
    Panel& open = open_panel(result, "tuples per relation", "log2");
    open.series("dfi", Role::dfi, "DFI radix join: two shuffle flows opened");

    for (int rep = 1; rep <= context.repeat; ++rep) {
      for (std::uint64_t tuples : sizes) {
        const std::string round = "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) +
                                  ", " + std::to_string(tuples) + " tuples per relation";
        const double input = 2.0 * static_cast<double>(tuples);
        auto per_core = [&](double seconds) { return input / seconds / cores / 1e6; };
        std::string reference_checksum;
        auto agree = [&](const std::string& who, std::uint64_t matches, const std::string& checksum) {
          if (matches != tuples) {
            throw Error(Errc::protocol, "bench join: " + who + " found " + std::to_string(matches) +
                                            " matches, expected " + std::to_string(tuples));
          }
          if (reference_checksum.empty()) reference_checksum = checksum;
          if (checksum != reference_checksum) {
            throw Error(Errc::protocol, "bench join: " + who + " checksum " + checksum + " differs from " +
                                            reference_checksum);
          }
        };
        auto run_dfi = [&] {
          context.say(round + ": DFI radix join over " + (context.netns ? "netns tcp" : context.transport));
          std::string command;
          const json r = run_dfi_join(context, name(),
                                      {{"name", "join"}, {"algorithm", "radix"}, {"build_tuples", tuples},
                                       {"probe_tuples", tuples}, {"threads", threads}, {"tuple_bytes", 16}},
                                      timeout, command);
          char checksum[24];
          std::snprintf(checksum, sizeof checksum, "0x%016llx",
                        static_cast<unsigned long long>(r.at("checksum").get<std::uint64_t>()));
          agree("DFI", r.at("matches"), checksum);
          const double seconds = r.at("seconds");
          const double open_seconds = r.at("open_seconds");
          context.say(round + ": DFI " + std::to_string(seconds) + " s, " + million(input / seconds) +
                      " tuples/s (flows opened before, in " + std::to_string(open_seconds) + " s)");
          open.add("dfi", tuples, open_seconds);
          open.add_command("dfi", command);
          runtime.add("dfi", tuples, seconds);
          runtime.add_command("dfi", command);
          rate.add("dfi", tuples, per_core(seconds));
          rate.add_command("dfi", command);
          rate.add("barthels", tuples, kBarthelsPerCore / 1e6);
          rate.add_command("barthels", "none: the number Barthels et al. report (VLDB 2017), not measured here");
        };
        auto run_mpi_join = [&](const std::string& exchange) {
          MpiRun m;
          m.program = "mpi_radix_join";
          m.ranks = kRanks;
          m.transport = context.netns ? "tcp" : context.transport;
          m.timeout = timeout;
          m.args = {"--build-tuples", std::to_string(tuples), "--probe-tuples", std::to_string(tuples),
                    "--tuple-bytes", "16", "--exchange", exchange};
          MpiResult r = run_mpi(m);
          agree("MPI " + exchange, r.data.at("matches"), r.data.at("checksum"));
          const double seconds = r.data.at("seconds");
          context.say(round + ": MPI " + exchange + " " + std::to_string(seconds) + " s");
          runtime.add("mpi_" + exchange, tuples, seconds);
          runtime.add_command("mpi_" + exchange, r.command);
          rate.add("mpi_" + exchange, tuples, per_core(seconds));
          rate.add_command("mpi_" + exchange, r.command);
        };
        run_alternating(rep, run_dfi, [&] {
          run_mpi_join("put");
          run_mpi_join("alltoallv");
        });
      }
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return join_rank(params, out, err);
  }
};

class JoinFrScenario : public Scenario {
 public:
  std::string name() const override { return "join-fr"; }
  std::string title() const override {
    return "Fragment-and-replicate join vs radix join as the inner side shrinks, 4 ranks";
  }
  std::string description() const override {
    return "The outer (probe) relation has `outer_tuples` 16 B tuples; the inner (build) relation is "
           "1, 1/10, 1/100 and 1/1000 of it (unique inner keys; outer keys uniform over the inner "
           "keys, so every outer tuple has exactly one partner). fragment-replicate: the inner side through one replicate "
           "flow to every rank, the outer side joined where it lies; radix: both sides through key-"
           "hash shuffle flows. Both are ops::Join on 4 ranks, alternating, same data; runtime from a "
           "barrier after the join's flows are open (the open timed separately).";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"outer_tuples", 1 << 20, 1 << 24, "tuples of the outer (probe) relation"},
        {"ratios", json::array({1, 10, 100, 1000}), json::array({1, 10, 100, 1000}),
         "outer:inner size ratios"},
        {"threads", 1, 1, "partitioning threads and join threads per rank"},
        {"timeout_s", 300, 1800, "bound of each DFI cluster run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"radix", "DFI's own radix join on two shuffle flows (ops::Join, radix), same data"}};
  }

  void run(RunContext& context, Result& result) override {
    const std::uint64_t outer = context.param("outer_tuples");
    const std::vector<std::uint64_t> ratios = context.param("ratios");
    const int threads = context.param("threads");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    result.set_parameters(context.resolved_parameters());
    result.add_baseline("radix", baselines()[0].description);
    Panel& all = result.panel("runtime", "Join runtime vs outer:inner ratio, outer " + std::to_string(outer) + " tuples",
                              {"outer:inner", "", "log10"}, {"runtime", "s"}, Better::lower);
    all.series("fr", Role::dfi, "fragment-and-replicate (replicate flow)");
    all.series("radix", Role::baseline, "radix (two shuffle flows)");
    all.compare("fr", "radix");
    Panel& open = open_panel(result, "outer:inner", "log10");
    open.series("fr", Role::dfi, "fragment-and-replicate: one replicate flow opened");
    open.series("radix", Role::dfi, "radix: two shuffle flows opened");
    const bool has_1000 = std::count(ratios.begin(), ratios.end(), 1000u) > 0;
    if (has_1000) {
      Panel& small = result.panel("inner_1000x_smaller", "Inner side 1000x smaller (003 Fig 14)",
                                  {"outer:inner", "", "category"}, {"runtime", "s"}, Better::lower);
      small.series("fr", Role::dfi, "fragment-and-replicate");
      small.series("radix", Role::baseline, "radix");
      small.compare("fr", "radix", 1 / 1.2);
    }
    for (int rep = 1; rep <= context.repeat; ++rep) {
      for (std::uint64_t ratio : ratios) {
        if (ratio < 1) throw Error(Errc::invalid_argument, "bench join-fr: ratios must be >= 1");
        const std::uint64_t inner = std::max<std::uint64_t>(1, outer / ratio);
        std::string expected_checksum;
        auto one = [&](const std::string& algorithm) {
          const std::string round = "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) +
                                    ", 1:" + std::to_string(ratio) + ", " + algorithm;
          context.say(round);
          std::string command;
          const json r = run_dfi_join(context, name(),
                                      {{"name", "jfr"}, {"algorithm", algorithm}, {"build_tuples", inner},
                                       {"probe_tuples", outer}, {"threads", threads}, {"tuple_bytes", 16}},
                                      timeout, command);
          const std::string checksum = std::to_string(r.at("checksum").get<std::uint64_t>());
          if (r.at("matches").get<std::uint64_t>() != outer) {
            throw Error(Errc::protocol, "bench join-fr: " + algorithm + " found " + r.at("matches").dump() +
                                            " matches, expected " + std::to_string(outer));
          }
          if (expected_checksum.empty()) expected_checksum = checksum;
          if (checksum != expected_checksum) {
            throw Error(Errc::protocol, "bench join-fr: the two algorithms' checksums differ at 1:" +
                                            std::to_string(ratio));
          }
          const double seconds = r.at("seconds");
          const double open_seconds = r.at("open_seconds");
          context.say(round + ": " + std::to_string(seconds) + " s (flows opened before, in " +
                      std::to_string(open_seconds) + " s)");
          const std::string series = algorithm == "radix" ? "radix" : "fr";
          open.add(series, ratio, open_seconds);
          open.add_command(series, command);
          all.add(series, ratio, seconds);
          all.add_command(series, command);
          if (ratio == 1000) {
            result.panel("inner_1000x_smaller").add(series, "1:1000", seconds);
            result.panel("inner_1000x_smaller").add_command(series, command);
          }
        };
        run_alternating(rep, [&] { one("fragment-replicate"); }, [&] { one("radix"); });
      }
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return join_rank(params, out, err);
  }
};

class GhjScenario : public Scenario {
 public:
  std::string name() const override { return "ghj"; }
  std::string title() const override {
    return "Grace hash join with and without Bloom-filter semi-join reduction, and the RDMA radix join, 4 ranks";
  }
  std::string description() const override {
    return "A join of a build relation of `build_tuples` and a probe relation of `probe_tuples` 16 B "
           "tuples (unique build keys; probe keys uniform over build keys / selectivity, so a "
           "`selectivity` fraction of probe tuples has a partner), 4 ranks. Both runs are "
           "ops::Join, grace algorithm (flows opened before the start barrier, the open timed separately): both sides through key-hash shuffle flows, the probe side "
           "only after the build side is in, both materialised and joined in cache-sized "
           "sub-partitions. With bloom, every rank's build keys go into a register-blocked Bloom "
           "filter (16 bits per key), the filters are ORed over a replicate flow, and probe tuples "
           "whose key misses the filter are dropped before they are shipped. RRJ (ops::Join, rrj "
           "algorithm): a histogram pass, the counts exchanged, exactly sized receive regions, every "
           "partitioning thread writes its tuples straight into its slices of the ranks' regions "
           "through 8 KiB staging buffers (shm: stores into the mapped region; tcp: one word-store "
           "active message per buffer), then each join thread joins its partition in place. Same data, "
           "rotating order; matches and checksums must agree.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"build_tuples", 1 << 18, 1 << 22, "tuples of the build relation, all ranks together"},
        {"probe_tuples", 1 << 20, 1 << 24, "tuples of the probe relation, all ranks together"},
        {"selectivities", json::array({1, 0.1, 0.01, 0.001}), json::array({1, 0.1, 0.01, 0.001}),
         "fractions of probe tuples with a partner"},
        {"threads", 1, 1, "partitioning threads and join threads per rank"},
        {"timeout_s", 300, 1800, "bound of each DFI cluster run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"no_bloom", "DFI's grace hash join without the Bloom filter (every probe tuple shipped), same data"}};
  }
  // The third series: the RDMA radix join, compared with no_bloom.
  static const char* rrj_description() {
    return "DFI's RDMA radix join (histogram, exactly sized receive regions, one-sided writes), same data";
  }

  void run(RunContext& context, Result& result) override {
    const std::uint64_t build = context.param("build_tuples");
    const std::uint64_t probe = context.param("probe_tuples");
    const std::vector<double> selectivities = context.param("selectivities");
    const int threads = context.param("threads");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    result.set_parameters(context.resolved_parameters());
    result.add_baseline("no_bloom", baselines()[0].description);
    result.add_note(std::string("Series rrj: ") + rrj_description() + ".");
    result.add_note("The Bloom filter costs a pass over the build side, a filter of 2 B per build key "
                    "replicated to every rank and one lookup per probe tuple; it pays where it saves "
                    "shipping and materialising probe tuples, that is at low selectivity.");
    Panel& runtime = result.panel("runtime", "Grace hash join runtime vs selectivity, build " +
                                                 std::to_string(build) + " x probe " + std::to_string(probe),
                                  {"selectivity", "", "log10"}, {"runtime", "s"}, Better::lower);
    runtime.series("bloom", Role::dfi, "GHJ with Bloom filter");
    runtime.series("no_bloom", Role::baseline, "GHJ without Bloom filter");
    runtime.series("rrj", Role::dfi, "RRJ (RDMA radix join)");
    runtime.compare("bloom", "no_bloom");
    runtime.compare("rrj", "no_bloom");
    Panel& shipped = result.panel("shipped", "Probe tuples shipped, fraction of the probe side",
                                  {"selectivity", "", "log10"}, {"shipped / probe tuples", ""}, Better::lower);
    shipped.series("bloom", Role::dfi, "GHJ with Bloom filter");
    shipped.series("no_bloom", Role::baseline, "GHJ without Bloom filter");
    shipped.compare("bloom", "no_bloom");
    Panel& open = open_panel(result, "selectivity", "log10");
    open.series("bloom", Role::dfi, "GHJ with Bloom filter: two shuffle flows and a replicate flow opened");
    open.series("no_bloom", Role::dfi, "GHJ without Bloom filter: two shuffle flows opened");
    open.series("rrj", Role::dfi, "RRJ: a worker and endpoints to every rank per partitioning thread");
    for (int rep = 1; rep <= context.repeat; ++rep) {
      for (double selectivity : selectivities) {
        if (!(selectivity > 0 && selectivity <= 1)) {
          throw Error(Errc::invalid_argument, "bench ghj: selectivities must be in (0, 1]");
        }
        std::string expected;  // matches and checksum of the first run at this selectivity
        // algorithm "grace" (bloom or not) or "rrj"
        auto one = [&](const std::string& algorithm, bool bloom) {
          const std::string series = algorithm == "rrj" ? "rrj" : bloom ? "bloom" : "no_bloom";
          const std::string round = "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) +
                                    ", selectivity " + json(selectivity).dump() + ", " + series;
          context.say(round);
          std::string command;
          const json r = run_dfi_join(context, name(),
                                      {{"name", "ghj"}, {"algorithm", algorithm}, {"bloom", bloom},
                                       {"build_tuples", build}, {"probe_tuples", probe}, {"threads", threads},
                                       {"tuple_bytes", 16}, {"selectivity", selectivity}},
                                      timeout, command);
          const std::string outcome = r.at("matches").dump() + " matches, checksum " + r.at("checksum").dump();
          if (expected.empty()) expected = outcome;
          if (outcome != expected) {
            throw Error(Errc::protocol, "bench ghj: at selectivity " + json(selectivity).dump() + " " + series +
                                            " found " + outcome + ", the other run " + expected);
          }
          const double seconds = r.at("seconds");
          const double open_seconds = r.at("open_seconds");
          const double fraction = r.at("shipped_probe_tuples").get<double>() / std::max<double>(1, probe);
          context.say(round + ": " + std::to_string(seconds) + " s, " + std::to_string(fraction) +
                      " of the probe side shipped (flows opened before, in " + std::to_string(open_seconds) + " s)");
          open.add(series, selectivity, open_seconds);
          open.add_command(series, command);
          runtime.add(series, selectivity, seconds);
          runtime.add_command(series, command);
          if (series != "rrj") {  // rrj ships every probe tuple, as no_bloom does
            shipped.add(series, selectivity, fraction);
            shipped.add_command(series, command);
          }
        };
        // Rotating order: each series runs first, second and third in turn over the repetitions.
        const std::vector<std::function<void()>> runs{[&] { one("grace", true); }, [&] { one("grace", false); },
                                                      [&] { one("rrj", false); }};
        for (std::size_t k = 0; k < runs.size(); ++k) runs[(k + static_cast<std::size_t>(rep) - 1) % runs.size()]();
      }
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return join_rank(params, out, err);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_join_scenario() { return std::make_unique<JoinScenario>(); }
std::unique_ptr<Scenario> make_join_fr_scenario() { return std::make_unique<JoinFrScenario>(); }
std::unique_ptr<Scenario> make_ghj_scenario() { return std::make_unique<GhjScenario>(); }

}  // namespace dfi::tools::bench
