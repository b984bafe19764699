// Scenario driven-elastic (000 Fig 13): a 4:N load-balancing driven flow whose consumers join
// one by one (1 -> 4) and leave again (4 -> 1) while the producers push, oblivious; per-consumer
// bandwidth over time (a stacked area plot) and every tuple delivered exactly once.
//
// Ranks: 0 runs the 4 producer threads, 1 the 4 consumer threads, 2 the mover. The run has 7
// phases of phase_seconds; consumer c (0..3) joins at the start of phase c (opens its
// driven::Consumer: the mover attaches it within kShareRefresh) and consumers 3, 2, 1 leave at the
// start of phases 4, 5, 6 (Consumer::leave: the mover stops giving them segments, they drain what
// they hold and see end-of-stream), so 1, 2, 3, 4, 3, 2, 1 consumers are active. Consumer 0 stays
// until the producers close after the last phase.
//
// Consumer speed: each consumer handles at most consumer_mbps (after a batch it sleeps until its
// bytes fit that rate), as an accelerator would whose work does not run on these 2 vCPUs; so the
// consumers are the bottleneck, and adding one adds its rate. The producers push as fast as their
// rings let them: a balance flow gives each consumer what its pace allows.
//
// Exactly once: tuple key = producer << 40 | its running number. Each consumer counts per
// producer, checks that it sees each producer's tuples in increasing order (a subsequence: the
// others took the rest), and sums a hash of every key; the driver checks that per producer the
// counts over all consumers equal what it pushed and that the hash sum equals the one of all
// pushed keys.
//
// Baseline, in the same cluster run after the elastic one: a static balance flow with k = 1..4
// consumers present from the start, phase_seconds each. Per phase, the elastic flow's aggregate
// bandwidth (after settle_seconds) is compared with the static flow of the same consumer count:
// joining and leaving should cost nothing (target >= 0.9x).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/driven/consumer.hpp"
#include "dfi/driven/flow.hpp"
#include "dfi/driven/producer.hpp"
#include "dfi/kernels/hash.hpp"
#include "driven_mover_rank.hpp"
#include "rank_threads.hpp"
#include "scenarios.hpp"
#include "tuple_block.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kName = "driven-elastic";
constexpr int kProducers = 4;
constexpr int kConsumers = 4;
constexpr int kProducerShift = 40;
constexpr double kTarget = 0.9;  // elastic aggregate vs the static flow with as many consumers

// Elastic schedule: consumer c joins at the start of phase kJoin[c], leaves at the start of phase
// kLeave[c] (-1: stays to the end).
constexpr std::array<int, kConsumers> kJoin = {0, 1, 2, 3};
constexpr std::array<int, kConsumers> kLeave = {-1, 6, 5, 4};
constexpr int kPhases = 7;

std::uint64_t key_hash(std::uint64_t key) { return kernels::mix64(key); }

// "c1" .. "c4": consumer c's series (appended: GCC 12's -Wrestrict misfires on "c" + std::to_string).
std::string consumer_id(int c) {
  std::string id = "c";
  id += std::to_string(c + 1);
  return id;
}

// One flow of the cluster run: its consumers' join and leave times (seconds from the start; a
// negative join: the consumer never joins, a negative leave: it stays) and how long producers push.
struct Run {
  std::string flow;
  double seconds = 0;
  std::vector<double> join, leave;
  json to_json() const { return {{"flow", flow}, {"seconds", seconds}, {"join", join}, {"leave", leave}}; }
  static Run from_json(const json& j) {
    return {j.at("flow"), j.at("seconds"), j.at("join").get<std::vector<double>>(), j.at("leave").get<std::vector<double>>()};
  }
};

json run_producers(cluster::Node& node, const json& params, const Run& run, const std::string& start) {
  const std::size_t tb = params.at("tuple_bytes");
  const auto run_for = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(run.seconds));
  std::vector<std::uint64_t> pushed(kProducers, 0), stalls(kProducers, 0);
  RankThreads threads(std::string("bench ") + kName + ": rank 0");
  for (int t = 0; t < kProducers; ++t) {
    threads.start("producer " + std::to_string(t), [&, t](RankThreads::Gate& gate) {
      driven::Producer out(node, run.flow, t);
      std::vector<std::byte> block(block_tuples(tb) * tb);
      fill_tuple_block(block, tb);
      gate.ready_and_wait();
      const std::uint64_t n = push_tagged_for(out, block, tb, static_cast<std::uint64_t>(t) << kProducerShift, run_for);
      if (Status s = out.close(); !s) throw Error(s.code(), s.message());
      pushed[t] = n;
      stalls[t] = out.counters().stalls;
    });
  }
  threads.release([&] { node.barrier(start); });
  threads.join();
  return {{"pushed", pushed}, {"stalls", stalls}};
}

// Rank 1: the consumers, each paced to consumer_mbps, binning its bytes by arrival.
json run_consumers(cluster::Node& node, const json& params, const Run& run, const std::string& start) {
  const std::size_t tb = params.at("tuple_bytes");
  const double bytes_per_second = params.at("consumer_mbps").get<double>() * 1e6;
  const double bin_seconds = params.at("bin_seconds");
  const auto timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  const std::size_t bins = static_cast<std::size_t>(std::ceil(run.seconds / bin_seconds)) + 1;
  std::vector<std::vector<double>> binned(kConsumers, std::vector<double>(bins, 0));
  std::vector<std::vector<std::uint64_t>> counts(kConsumers, std::vector<std::uint64_t>(kProducers, 0));
  std::vector<std::uint64_t> hash_sums(kConsumers, 0), disorder(kConsumers, 0), foreign(kConsumers, 0);
  RankThreads threads(std::string("bench ") + kName + ": rank 1");
  for (int c = 0; c < kConsumers; ++c) {
    if (run.join[c] < 0) continue;
    threads.start("consumer " + std::to_string(c), [&, c](RankThreads::Gate& gate) {
      gate.ready_and_wait();
      const Clock::time_point begin = Clock::now();  // released with the others, after the start barrier
      auto at = [&](double s) { return begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
      std::this_thread::sleep_until(at(run.join[c]));
      driven::Consumer in(node, run.flow, c);
      const Clock::time_point leave_at = run.leave[c] >= 0 ? at(run.leave[c]) : Clock::time_point::max();
      std::vector<std::uint64_t> next(kProducers, 0);
      std::vector<double>& bin = binned[c];
      Clock::time_point ready = Clock::now();  // when this consumer is done with what it got
      flow::TupleBatch batch;
      for (bool left = false;;) {
        if (!left && Clock::now() >= leave_at) {
          if (Status s = in.leave(); !s) throw Error(s.code(), s.message());
          left = true;
        }
        // the producers push until the end: a joined consumer gets data until it left
        if (Status s = in.consume(batch, timeout); !s) throw Error(s.code(), s.message());
        if (batch.empty()) break;
        const Clock::time_point now = Clock::now();
        const double bytes = static_cast<double>(batch.count * tb);
        bin[std::min(bins - 1, static_cast<std::size_t>(std::chrono::duration<double>(now - begin).count() / bin_seconds))] += bytes;
        const std::byte* t = batch.data;
        for (std::size_t i = 0; i < batch.count; ++i, t += tb) {
          std::uint64_t key;
          std::memcpy(&key, t, sizeof key);
          const std::uint64_t p = key >> kProducerShift, seq = key & ((std::uint64_t{1} << kProducerShift) - 1);
          if (p >= static_cast<std::uint64_t>(kProducers)) [[unlikely]] {
            ++foreign[c];
            continue;
          }
          disorder[c] += seq < next[p] ? 1 : 0;  // a subsequence of the producer's order
          next[p] = seq + 1;
          ++counts[c][p];
          hash_sums[c] += key_hash(key);
        }
        // the emulated work: this batch takes bytes / rate of the consumer's time
        ready = std::max(ready, now) + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(bytes / bytes_per_second));
        std::this_thread::sleep_until(ready);
      }
    });
  }
  threads.release([&] { node.barrier(start); });
  threads.join();
  return {{"bins", binned}, {"counts", counts}, {"hash_sums", hash_sums}, {"out_of_order", disorder}, {"foreign", foreign}};
}

int run_rank_program(const json& params, std::ostream& out) {
  cluster::Node node;
  if (node.size() != 3) {
    throw Error(Errc::invalid_argument, std::string("bench ") + kName + ": needs 3 ranks, got " + std::to_string(node.size()));
  }
  const int me = node.rank();
  const auto timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  json reports = json::array();
  std::size_t index = 0;
  for (const json& j : params.at("runs")) {
    const Run run = Run::from_json(j);
    const std::string start = std::string("bench/") + kName + "/" + std::to_string(index) + "/start";
    if (me == 0) {
      flow::FlowSpec spec;
      spec.name = run.flow;
      spec.type = driven::kDriven;
      for (int t = 0; t < kProducers; ++t) spec.sources.push_back({0, t});
      for (int c = 0; c < kConsumers; ++c) spec.targets.push_back({1, c});
      spec.schema = tuple_block_schema(params.at("tuple_bytes").get<std::size_t>());
      spec.options.segments = params.at("segments").get<std::uint32_t>();
      spec.options.segment_bytes = params.at("segment_bytes").get<std::uint32_t>();
      spec.options.stall_timeout = timeout;
      spec.type_options = driven::DrivenOptions{.pattern = driven::Pattern::balance};
      flow::create_flow(node, spec);
    }
    json report;
    if (me == 0) {
      report = run_producers(node, params, run, start);
    } else if (me == 1) {
      report = run_consumers(node, params, run, start);
    } else {
      report = run_mover_point(node, run.flow, start, timeout, run.seconds);
    }
    reports.push_back(report);
    node.barrier(std::string("bench/") + kName + "/" + std::to_string(index) + "/done");
    ++index;
  }
  report_rank_result(out, {{"rank", me}, {"runs", reports}});
  node.finish();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Driver

class DrivenElastic final : public Scenario {
 public:
  std::string name() const override { return kName; }
  std::string title() const override {
    return "Elastic 4:N load balancing: consumers join 1 -> 4 and leave 4 -> 1 while the producers push";
  }
  std::string description() const override {
    return "A driven balance flow from 4 producer threads (rank 0, pushing 1 KiB tuples as fast as their rings "
           "let them) to up to 4 consumer threads (rank 1), moved by the mover on rank 2. Consumers join one per "
           "phase (phase_seconds) and leave again in reverse (Consumer::leave), so 1, 2, 3, 4, 3, 2, 1 are active; "
           "the producers do not know. Each consumer is paced to consumer_mbps (it sleeps until its bytes fit: an "
           "accelerator whose work does not use these cores). Per-consumer bandwidth over time (bin_ms bins, "
           "stacked). Every tuple exactly once: per producer, the counts over all consumers equal what it pushed "
           "and a hash sum of the keys matches; each consumer sees each producer's tuples in order. Baseline in the "
           "same cluster run: static balance flows with 1..4 consumers present from the start; per phase, the "
           "elastic aggregate (after settle_seconds) vs the static flow with as many consumers, target >= 0.9x.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"phase_seconds", 0.6, 3, "length of a phase (one consumer joins or leaves at each boundary)"},
        {"settle_seconds", 0.2, 0.5, "start of a phase left out of its aggregate (joining, draining)"},
        {"bin_ms", 100, 100, "time bin of the bandwidth timeline"},
        {"consumer_mbps", json{{"shm", 200}, {"tcp", 10}}, json{{"shm", 200}, {"tcp", 10}},
         "each consumer's emulated speed, MB/s (over tcp the mover's emulated gets and puts move ~60 MB/s in all)"},
        {"tuple_bytes", 1024, 1024, "tuple width (>= 16, a multiple of 8)"},
        {"segments", 16, 16, "segments per ring (what a leaving consumer still drains)"},
        {"segment_bytes", json{{"shm", 65536}, {"tcp", 32768}}, json{{"shm", 65536}, {"tcp", 32768}}, "segment size"},
        {"timeout_s", 60, 300, "bound of each cluster run and of every wait inside it"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"static", "the same producers, consumers (same pacing) and mover, a balance flow with k = 1..4 consumers "
                       "present from the start for phase_seconds each: what k consumers deliver without joining or "
                       "leaving"}};
  }

  void run(RunContext& context, Result& result) override {
    const double phase = context.param("phase_seconds");
    const double settle = context.param("settle_seconds");
    const double bin = context.param("bin_ms").get<double>() / 1000;
    const std::size_t tb = context.param("tuple_bytes");
    if (tb < 16 || tb % 8 != 0 || !(bin > 0) || !(settle >= 0) || settle + bin >= phase ||
        !(context.param("consumer_mbps").get<double>() > 0)) {
      throw Error(Errc::invalid_argument, "bench driven-elastic: need tuple_bytes >= 16 (x8), bin_ms > 0, "
                                          "consumer_mbps > 0 and settle_seconds + a bin < phase_seconds");
    }
    result.set_parameters(context.resolved_parameters());
    result.add_baseline("static", baselines()[0].description);
    result.add_note("Consumers are paced (sleep until their bytes fit consumer_mbps); producers, consumers and the "
                    "mover share 2 vCPUs. A joining consumer is served from the mover's next registry look (every "
                    "20 ms); a leaving one drains its ring (segments x segment_bytes) at its own pace.");

    std::vector<Run> runs;
    Run elastic{"bench-driven-elastic-elastic", phase * kPhases, {}, {}};
    for (int c = 0; c < kConsumers; ++c) {
      elastic.join.push_back(phase * kJoin[c]);
      elastic.leave.push_back(kLeave[c] < 0 ? -1.0 : phase * kLeave[c]);
    }
    runs.push_back(elastic);
    for (int k = 1; k <= kConsumers; ++k) {
      Run fixed_run{"bench-driven-elastic-static-" + std::to_string(k), phase, {}, {}};
      for (int c = 0; c < kConsumers; ++c) {
        fixed_run.join.push_back(c < k ? 0.0 : -1.0);
        fixed_run.leave.push_back(-1.0);
      }
      runs.push_back(fixed_run);
    }
    std::vector<int> active(kPhases, 0);  // consumers active per phase
    for (int k = 0; k < kPhases; ++k) {
      for (int c = 0; c < kConsumers; ++c) active[k] += kJoin[c] <= k && (kLeave[c] < 0 || k < kLeave[c]) ? 1 : 0;
    }

    const Axis time{"time", "s", "linear"};
    const Axis bandwidth{"bandwidth", "GB/s", "linear"};
    Panel& timeline = result.panel("timeline", "Per-consumer bandwidth over time (stacked)", time, bandwidth, Better::higher);
    timeline.stacked();
    for (int c = 0; c < kConsumers; ++c) {
      std::string when = "joins " + format_fixed(phase * kJoin[c], 1) + " s";
      when += kLeave[c] < 0 ? ", stays" : ", leaves " + format_fixed(phase * kLeave[c], 1) + " s";
      timeline.series(consumer_id(c), Role::dfi, "consumer " + std::to_string(c + 1) + " (" + when + ")");
    }
    Panel& aggregate = result.panel("aggregate", "Aggregate per phase vs a static flow with as many consumers",
                                    {"phase (active consumers)", "", "category"}, bandwidth, Better::higher);
    aggregate.series("elastic", Role::dfi, "elastic: consumers join and leave");
    aggregate.series("static", Role::baseline, "static: the consumers there from the start");
    aggregate.compare("elastic", "static", kTarget);

    RankJob job;
    job.nodes = 3;
    job.scenario = name();
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    job.timeout = timeout * 2;
    json planned = json::array();
    for (const Run& r : runs) planned.push_back(r.to_json());
    job.params = {{"runs", planned},
                  {"tuple_bytes", tb},
                  {"consumer_mbps", context.param("consumer_mbps")},
                  {"bin_seconds", bin},
                  {"segments", context.param("segments")},
                  {"segment_bytes", context.param("segment_bytes")},
                  {"timeout_ms", std::chrono::milliseconds(timeout).count()}};
    const std::string command = rank_job_command(job, context);
    auto phase_label = [&](int k) { return std::to_string(k + 1) + " (" + std::to_string(active[k]) + ")"; };
    for (int rep = 1; rep <= context.repeat; ++rep) {
      context.say("repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) + ": elastic run, then static 1..4, over " +
                  (context.netns ? "netns tcp" : context.transport));
      const std::map<int, json> reports = run_rank_job(job, context);
      for (int r : {0, 1, 2}) {
        if (!reports.count(r)) throw Error(Errc::protocol, std::string("bench ") + kName + ": rank " + std::to_string(r) + " reported nothing");
      }
      std::vector<double> static_gbps;
      for (std::size_t i = 0; i < runs.size(); ++i) {
        const json& sent = reports.at(0).at("runs").at(i);
        const json& got = reports.at(1).at("runs").at(i);
        check_exactly_once(runs[i], sent, got);
        const auto bins = got.at("bins").get<std::vector<std::vector<double>>>();
        std::ostringstream said;
        said << "  " << runs[i].flow << ": every tuple exactly once (" << sent.at("pushed").dump() << " pushed); mover "
             << reports.at(2).at("runs").at(i).at("segments").dump() << " segments";
        if (i == 0) {
          for (int c = 0; c < kConsumers; ++c) {
            const std::string id = consumer_id(c);
            for (std::size_t b = 0; b + 1 < bins[c].size(); ++b) {
              timeline.add(id, (static_cast<double>(b) + 0.5) * bin, bins[c][b] / bin / 1e9);
            }
            timeline.add_command(id, command);
          }
          said << "; GB/s per phase:";
          for (int k = 0; k < kPhases; ++k) {
            const double g = window_gbps(bins, k * phase + settle, (k + 1) * phase, bin);
            aggregate.add("elastic", phase_label(k), g);
            said << ' ' << format_fixed(g, 3);
          }
        } else {
          const double g = window_gbps(bins, settle, phase, bin);
          static_gbps.push_back(g);
          said << "; " << format_fixed(g, 3) << " GB/s after the settle time";
        }
        context.say(said.str());
      }
      for (int k = 0; k < kPhases; ++k) aggregate.add("static", phase_label(k), static_gbps[active[k] - 1]);
      aggregate.add_command("elastic", command);
      aggregate.add_command("static", command);
    }
  }

  // Errors propagate: BenchCli::run reports them, naming the scenario.
  int run_rank(const json& params, std::ostream& out, std::ostream& /*err*/) override {
    return run_rank_program(params, out);
  }

 private:
  // GB/s of all consumers together over the whole bins inside [from, to] seconds.
  static double window_gbps(const std::vector<std::vector<double>>& bins, double from, double to, double bin) {
    const auto first = static_cast<std::size_t>(std::ceil(from / bin - 1e-9));
    const auto last = static_cast<std::size_t>(std::floor(to / bin + 1e-9));
    double bytes = 0;
    for (const auto& consumer : bins) {
      for (std::size_t b = first; b < last && b < consumer.size(); ++b) bytes += consumer[b];
    }
    const double seconds = static_cast<double>(last > first ? last - first : 0) * bin;
    return seconds > 0 ? bytes / seconds / 1e9 : 0;
  }

  // Per producer: counts over all consumers == pushed; the hash sum of every key received equals
  // that of every key pushed; no consumer saw a producer's tuples out of order; every consumer that
  // joined got some.
  static void check_exactly_once(const Run& run, const json& sent, const json& got) {
    const std::vector<std::uint64_t> pushed = sent.at("pushed");
    const auto counts = got.at("counts").get<std::vector<std::vector<std::uint64_t>>>();
    const std::vector<std::uint64_t> hash_sums = got.at("hash_sums"), disorder = got.at("out_of_order"), foreign = got.at("foreign");
    std::uint64_t want = 0, have = 0;
    for (int p = 0; p < kProducers; ++p) {
      const std::uint64_t tag = static_cast<std::uint64_t>(p) << kProducerShift;
      for (std::uint64_t n = 0; n < pushed[p]; ++n) want += key_hash(tag | n);
      std::uint64_t received = 0;
      for (int c = 0; c < kConsumers; ++c) received += counts[c][p];
      if (received != pushed[p]) {
        throw Error(Errc::protocol, std::string("bench ") + kName + ": " + run.flow + ": producer " + std::to_string(p) +
                                        " pushed " + std::to_string(pushed[p]) + " tuples, the consumers got " +
                                        std::to_string(received));
      }
    }
    for (int c = 0; c < kConsumers; ++c) {
      have += hash_sums[c];
      if (disorder[c] != 0 || foreign[c] != 0) {
        throw Error(Errc::protocol, std::string("bench ") + kName + ": " + run.flow + ": consumer " + std::to_string(c) + " saw " +
                                        std::to_string(disorder[c]) + " tuples out of their producer's order, " +
                                        std::to_string(foreign[c]) + " of no producer");
      }
      std::uint64_t total = 0;
      for (std::uint64_t n : counts[c]) total += n;
      if (run.join[c] >= 0 && total == 0) {
        throw Error(Errc::protocol, std::string("bench ") + kName + ": " + run.flow + ": consumer " + std::to_string(c) +
                                        " joined and got nothing");
      }
    }
    if (have != want) {
      throw Error(Errc::protocol, std::string("bench ") + kName + ": " + run.flow +
                                      ": the counts match but the key checksum does not (a tuple lost and another duplicated)");
    }
  }
};

}  // namespace

std::unique_ptr<Scenario> make_driven_elastic_scenario() { return std::make_unique<DrivenElastic>(); }

}  // namespace dfi::tools::bench
