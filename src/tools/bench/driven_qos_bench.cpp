// Scenario driven-qos (000 Fig 11): three driven flows between two processing units through one
// data mover, their rate shares changed every few seconds while they run (driven::set_share; the
// PUs do not know). Rank 0 runs the three producers (one thread each, pushing as fast as they can
// for the whole run), rank 1 the three consumers (one thread each, checking every tuple), rank 2
// the mover and the controller that changes the shares at each phase boundary. The consumers bin
// the bytes they receive per bin_ms: per-flow bandwidth over time, and per phase (after
// settle_seconds) each flow's part of the bytes against its set share (target: within 10 %).
//
// The mover is capped at mover_gbps (Mover::limit_rate), like the switch port whose bandwidth
// 000's QoS divides: on 2 shared vCPUs the producers, not the mover's copies, are otherwise the
// bottleneck, the mover idles between their segments, and there is nothing for shares to divide.
// The same shares with the mover uncapped are measured too (series "uncapped") to show that. Over
// tcp no cap is needed (default 0): the mover's gets and puts, which UCX emulates with messages,
// are slower than the producers, so the mover is the bottleneck by itself.
//
// Baseline, measured in the same run on the same cluster shape: the same three flows with equal
// shares throughout. It shows what the same mover, PUs and flows give without QoS (the split the
// machine's scheduling yields by itself) and whether QoS costs aggregate bandwidth; the DFI
// shuffle flow would be no baseline here, as it has no mover to share and no shares to set.
#include <algorithm>
#include <array>
#include <cmath>
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
#include "dfi/driven/mover.hpp"
#include "dfi/driven/producer.hpp"
#include "dfi/flow/shuffle.hpp"
#include "rank_threads.hpp"
#include "scenarios.hpp"
#include "tuple_block.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using driven::MoverCounters;

constexpr std::size_t kFlows = 3;
constexpr double kTarget = 0.10;  // relative error of an achieved share

std::string flow_name(std::size_t f) { return "bench-qos-" + std::to_string(f); }

using Shares = std::array<std::int64_t, kFlows>;

std::string shares_label(const Shares& s) {
  return std::to_string(s[0]) + ":" + std::to_string(s[1]) + ":" + std::to_string(s[2]);
}

// One run's parameters, as the rank program gets them.
struct Plan {
  std::vector<Shares> phases;
  bool qos = true;  // false: the baseline, equal shares throughout
  double mover_bytes_per_second = 0;  // Mover::limit_rate, 0: none
  double phase_seconds = 4;
  double bin_seconds = 0.1;
  std::size_t tuple_bytes = 1024;
  std::uint32_t segments = 64;
  std::uint32_t segment_bytes = 64 * 1024;

  double seconds() const { return phase_seconds * static_cast<double>(phases.size()); }
  std::size_t bins() const { return static_cast<std::size_t>(std::ceil(seconds() / bin_seconds)) + 1; }

  json to_json() const {
    return {{"phases", phases},          {"qos", qos},           {"phase_seconds", phase_seconds},
            {"bin_seconds", bin_seconds}, {"tuple_bytes", tuple_bytes}, {"segments", segments},
            {"segment_bytes", segment_bytes}, {"mover_bytes_per_second", mover_bytes_per_second}};
  }
  static Plan from_json(const json& j) {
    Plan p;
    p.phases = j.at("phases").get<std::vector<Shares>>();
    p.qos = j.at("qos");
    p.phase_seconds = j.at("phase_seconds");
    p.bin_seconds = j.at("bin_seconds");
    p.tuple_bytes = j.at("tuple_bytes");
    p.segments = j.at("segments");
    p.segment_bytes = j.at("segment_bytes");
    p.mover_bytes_per_second = j.at("mover_bytes_per_second");
    return p;
  }
};

class DrivenQosScenario : public Scenario {
 public:
  std::string name() const override { return "driven-qos"; }
  std::string title() const override {
    return "Driven flows: per-flow rate shares changed at run time, 3 flows through one mover";
  }
  std::string description() const override {
    return "Three driven 1:1 flows from rank 0 (one producer thread each, pushing tuple_bytes tuples as fast as it "
           "can) to rank 1 (one consumer thread each, checking that every tuple arrives once and in order), moved "
           "by one data mover on rank 2, which divides its copy work between the flows by deficit round robin in "
           "proportion to their shares. A controller on rank 2 sets the shares of each phase with "
           "driven::set_share (phase_seconds each; the PUs do not know). Consumers bin received bytes per bin_ms: "
           "per-flow bandwidth over time; per phase, after settle_seconds, each flow's part of the bytes vs its set "
           "share (target: within 10 % relative). Baseline: the same flows, same cluster, equal shares throughout.";
  }
  std::vector<Parameter> parameters() const override {
    const json phases = json::array({json::array({1, 1, 1}), json::array({3, 2, 1}), json::array({1, 1, 4})});
    return {
        {"phases", phases, phases, "the shares of flows 0:1:2 in each phase"},
        {"phase_seconds", 1.5, 4, "length of a phase"},
        {"settle_seconds", 0.3, 0.5, "start of a phase left out of its achieved shares"},
        {"bin_ms", 100, 100, "time bin of the bandwidth timeline"},
        {"tuple_bytes", 1024, 1024, "tuple width (>= 8)"},
        {"segments", 128, 128, "segments per ring (8 MiB: a producer the loaded machine leaves off the CPU for a while still has segments queued)"},
        {"segment_bytes", 65536, 65536, "segment size"},
        {"mover_gbps", json{{"shm", 0.25}, {"tcp", 0}}, json{{"shm", 0.25}, {"tcp", 0}},
         "the mover's bandwidth cap (the link 000's QoS divides; 0: none — over tcp the mover's emulated gets "
         "and puts are the bottleneck by themselves)"},
        {"timeout_s", 120, 300, "bound of each cluster run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"equal", "the same three driven flows through the same mover with equal shares throughout (no "
                      "set_share): the split without QoS and the aggregate bandwidth QoS is measured against"}};
  }

  void run(RunContext& context, Result& result) override {
    Plan plan;
    plan.phases = context.param("phases").get<std::vector<Shares>>();
    plan.phase_seconds = context.param("phase_seconds");
    plan.bin_seconds = context.param("bin_ms").get<double>() / 1000;
    plan.tuple_bytes = context.param("tuple_bytes");
    plan.segments = context.param("segments");
    plan.segment_bytes = context.param("segment_bytes");
    plan.mover_bytes_per_second = context.param("mover_gbps").get<double>() * 1e9;
    const double settle = context.param("settle_seconds");
    if (plan.phases.empty() || plan.tuple_bytes < 8 || plan.bin_seconds <= 0 || settle + plan.bin_seconds >= plan.phase_seconds) {
      throw Error(Errc::invalid_argument, "bench driven-qos: need phases, tuple_bytes >= 8, bin_ms > 0 and "
                                          "settle_seconds + a bin < phase_seconds");
    }
    for (const Shares& s : plan.phases) {
      for (std::int64_t v : s) {
        if (v < 1 || v > driven::kMaxShare) throw Error(Errc::invalid_argument, "bench driven-qos: share " + std::to_string(v));
      }
    }
    result.set_parameters(context.resolved_parameters());
    result.add_baseline("equal", baselines()[0].description);
    result.add_note("2 vCPUs shared by 3 producer, 3 consumer and the mover thread (and the PUs' progress threads): "
                    "a flow is only backlogged at the mover when its producer got the CPU to fill its ring.");

    const Axis time{"time", "s", "linear"};
    const Axis bandwidth{"bandwidth", "GB/s", "linear"};
    Panel& timeline = result.panel("timeline", "QoS: per-flow bandwidth over time, shares " + phases_label(plan.phases),
                                   time, bandwidth, Better::higher);
    Panel& equal_timeline = result.panel("timeline_equal", "Baseline: the same flows with equal shares", time, bandwidth,
                                         Better::higher);
    Panel& uncapped_timeline = result.panel("timeline_uncapped", "The same shares, the mover not capped", time,
                                            bandwidth, Better::higher);
    Panel& share = result.panel("share", "Achieved part of the bytes per phase and flow (set share in the label)",
                                {"phase / flow", "", "category"}, {"part of the bytes", ""}, Better::higher);
    Panel& aggregate = result.panel("aggregate", "Aggregate bandwidth per phase (QoS should cost none)",
                                    {"phase", "", "category"}, bandwidth, Better::higher);
    for (std::size_t f = 0; f < kFlows; ++f) {
      std::string shares;
      for (const Shares& s : plan.phases) shares += (shares.empty() ? "" : "→") + std::to_string(s[f]);
      timeline.series("flow" + std::to_string(f), Role::dfi, "flow " + std::to_string(f) + " (share " + shares + ")");
      equal_timeline.series("equal" + std::to_string(f), Role::baseline, "flow " + std::to_string(f) + " (share 1)");
      uncapped_timeline.series("uncapped" + std::to_string(f), Role::dfi, "flow " + std::to_string(f) + " (share " + shares + ")");
    }
    share.series("qos", Role::dfi, "shares set per phase");
    share.series("equal", Role::baseline, "equal shares");
    share.series("uncapped", Role::dfi, "shares set per phase, mover not capped");
    aggregate.series("qos", Role::dfi, "shares set per phase");
    aggregate.series("equal", Role::baseline, "equal shares");
    aggregate.series("uncapped", Role::dfi, "shares set per phase, mover not capped");
    aggregate.compare("qos", "equal", 0.9);

    // achieved[phase][flow]: one sample per repetition
    std::vector<std::array<std::vector<double>, kFlows>> achieved(plan.phases.size());
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    for (int rep = 1; rep <= context.repeat; ++rep) {
      // kind: "qos" (shares set, mover capped), "equal" (the baseline), "uncapped" (shares set)
      auto one = [&](const std::string& kind) {
        Plan p = plan;
        p.qos = kind != "equal";
        if (kind == "uncapped") p.mover_bytes_per_second = 0;
        const bool qos = kind == "qos";
        const std::string round = "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) + ", " +
                                  (p.qos ? "shares " + phases_label(plan.phases) : std::string("equal shares")) +
                                  (p.mover_bytes_per_second > 0 ? ", mover capped" : ", mover not capped");
        context.say(round);
        RankJob job;
        job.nodes = 3;
        job.scenario = name();
        job.params = p.to_json();
        job.timeout = timeout;
        const std::string command = rank_job_command(job, context);
        std::map<int, json> reports = run_rank_job(job, context);
        for (int r : {0, 1, 2}) {
          if (!reports.count(r)) throw Error(Errc::protocol, "bench driven-qos: rank " + std::to_string(r) + " reported nothing (" + round + ")");
        }
        check_delivery(reports.at(0), reports.at(1), round);
        const auto bins = reports.at(1).at("bins").get<std::vector<std::vector<double>>>();
        Panel& t = qos ? timeline : kind == "equal" ? equal_timeline : uncapped_timeline;
        const std::string prefix = qos ? "flow" : kind;
        for (std::size_t f = 0; f < kFlows; ++f) {
          // the bins of the run itself (the last one holds what drained after the producers stopped)
          for (std::size_t b = 0; b + 1 < bins[f].size(); ++b) {
            t.add(prefix + std::to_string(f), (static_cast<double>(b) + 0.5) * p.bin_seconds, bins[f][b] / p.bin_seconds / 1e9);
          }
          t.add_command(prefix + std::to_string(f), command);
        }
        std::string said;
        for (std::size_t k = 0; k < p.phases.size(); ++k) {
          // whole bins inside [phase start + settle, phase end]
          const auto first = static_cast<std::size_t>(std::ceil((static_cast<double>(k) * p.phase_seconds + settle) / p.bin_seconds - 1e-9));
          const auto last = static_cast<std::size_t>(std::floor((static_cast<double>(k + 1) * p.phase_seconds) / p.bin_seconds + 1e-9));
          std::array<double, kFlows> bytes{};
          for (std::size_t f = 0; f < kFlows; ++f) {
            for (std::size_t b = first; b < last && b < bins[f].size(); ++b) bytes[f] += bins[f][b];
          }
          const double sum = bytes[0] + bytes[1] + bytes[2];
          const double seconds = static_cast<double>(last - first) * p.bin_seconds;
          const std::string phase = phase_label(k, plan.phases[k]);
          aggregate.add(kind, phase, seconds > 0 ? sum / seconds / 1e9 : 0);
          aggregate.add_command(kind, command);
          said += ' ';
          said += phase;
          said += ':';
          for (std::size_t f = 0; f < kFlows; ++f) {
            const double part = sum > 0 ? bytes[f] / sum : 0;
            share.add(kind, flow_label(k, f, plan.phases[k]), part);
            if (qos) achieved[k][f].push_back(part);
            said += ' ';
            said += format_fixed(part, 3);
          }
          said += " (";
          said += format_fixed(sum / std::max(seconds, 1e-9) / 1e9, 2);
          said += " GB/s)";
        }
        share.add_command(kind, command);
        context.say(round + ":" + said + "; producer ring-full waits " + reports.at(0).at("stalls").dump() +
                    ", mover passes that moved nothing " + reports.at(2).at("idle_steps").dump() + " (segments moved " +
                    reports.at(2).at("segments").dump() + ")");
      };
      run_alternating(rep, [&] { one("qos"); }, [&] { one("equal"); });
      if (plan.mover_bytes_per_second > 0) one("uncapped");
    }
    // Per phase: the set share vs the median (min-max) achieved, against the 10 % target.
    for (std::size_t k = 0; k < plan.phases.size(); ++k) {
      const Shares& s = plan.phases[k];
      const double total = static_cast<double>(s[0] + s[1] + s[2]);
      std::string note = "phase " + phase_label(k, s) + ": achieved (median, min-max over " +
                         std::to_string(context.repeat) + " runs) vs set:";
      bool held = true;
      for (std::size_t f = 0; f < kFlows; ++f) {
        const double set = static_cast<double>(s[f]) / total;
        const std::vector<double>& a = achieved[k][f];
        const double med = median(a);
        const double error = std::fabs(med - set) / set;
        held = held && error <= kTarget;
        note += " flow " + std::to_string(f) + " " + format_fixed(med, 3) + " (" + format_fixed(*std::min_element(a.begin(), a.end()), 3) +
                "-" + format_fixed(*std::max_element(a.begin(), a.end()), 3) + ") vs " + format_fixed(set, 3) + ", error " +
                format_fixed(100 * error, 1) + " %;";
      }
      note += held ? " within the 10 % target" : " NOT within the 10 % target";
      result.add_note(note);
      context.say(note);
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    try {
      const Plan plan = Plan::from_json(params);
      cluster::Node node;
      json report;
      if (node.rank() == 0) {
        create_flows(node, plan);
        report = run_producers(node, plan);
      } else if (node.rank() == 1) {
        report = run_consumers(node, plan);
      } else if (node.rank() == 2) {
        report = run_mover(node, plan);
      }
      report_rank_result(out, report);
      node.finish();
      return 0;
    } catch (const std::exception& e) {
      err << "bench driven-qos rank: " << e.what() << '\n';
      return 1;
    }
  }

 private:
  static std::string phases_label(const std::vector<Shares>& phases) {
    std::string label;
    for (const Shares& s : phases) label += (label.empty() ? "" : " → ") + shares_label(s);
    return label;
  }
  static std::string phase_label(std::size_t k, const Shares& s) {
    return std::to_string(k + 1) + " (" + shares_label(s) + ")";
  }
  static std::string flow_label(std::size_t k, std::size_t f, const Shares& s) {
    const double set = static_cast<double>(s[f]) / static_cast<double>(s[0] + s[1] + s[2]);
    // Composed with a stream: GCC 12's -Wrestrict misfires on "literal" + std::to_string(...) here.
    std::ostringstream label;
    label << 'p' << k + 1 << " f" << f << " (" << format_fixed(set, 2) << ')';
    return label.str();
  }

  // Every tuple pushed arrived exactly once and in order, per flow.
  static void check_delivery(const json& sent, const json& received, const std::string& round) {
    for (std::size_t f = 0; f < kFlows; ++f) {
      const std::uint64_t pushed = sent.at("tuples").at(f), got = received.at("tuples").at(f);
      const std::uint64_t want_sum = sent.at("key_sum").at(f), got_sum = received.at("key_sum").at(f);
      const std::uint64_t out_of_order = received.at("out_of_order").at(f);
      if (pushed != got || want_sum != got_sum || out_of_order != 0) {
        throw Error(Errc::protocol, "bench driven-qos: " + round + ": flow " + std::to_string(f) + " pushed " +
                                        std::to_string(pushed) + " tuples, received " + std::to_string(got) + " (" +
                                        std::to_string(out_of_order) + " out of order, key sum " +
                                        (want_sum == got_sum ? "right" : "wrong") + ")");
      }
    }
  }

  static void create_flows(cluster::Node& node, const Plan& plan) {
    for (std::size_t f = 0; f < kFlows; ++f) {
      flow::FlowSpec spec;
      spec.name = flow_name(f);
      spec.type = driven::kDriven;
      spec.sources = {{0, static_cast<int>(f)}};
      spec.targets = {{1, static_cast<int>(f)}};
      spec.schema = tuple_block_schema(plan.tuple_bytes);
      spec.routing = flow::Routing::explicit_target;
      spec.options.segments = plan.segments;
      spec.options.segment_bytes = plan.segment_bytes;
      spec.type_options = driven::DrivenOptions{.share = plan.qos ? plan.phases[0][f] : 1};
      flow::create_flow(node, spec);
    }
  }

  // Rank 0: each producer pushes for the whole run (the clock read every 256 tuples), then closes.
  static json run_producers(cluster::Node& node, const Plan& plan) {
    const std::size_t tb = plan.tuple_bytes;
    const std::size_t block = block_tuples(tb);
    const auto run_for = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(plan.seconds()));
    std::array<std::uint64_t, kFlows> pushed{}, stalls{};
    RankThreads threads("bench driven-qos: rank 0");
    for (std::size_t f = 0; f < kFlows; ++f) {
      threads.start("producer " + std::to_string(f), [&, f](RankThreads::Gate& gate) {
        driven::Producer out(node, flow_name(f), static_cast<int>(f));
        std::vector<std::byte> tuples(block * tb);
        fill_tuple_block(tuples, tb);
        gate.ready_and_wait();
        const Clock::time_point end = Clock::now() + run_for;
        std::uint64_t n = 0;
        std::size_t j = 0;
        for (bool running = true; running; running = Clock::now() < end) {
          for (int i = 0; i < 256; ++i, ++n) {
            if (Status s = out.push_to(0, tuples.data() + j * tb, tb); !s) [[unlikely]]
              throw Error(s.code(), s.message());
            if (++j == block) j = 0;
          }
        }
        if (Status s = out.close(); !s) throw Error(s.code(), s.message());
        pushed[f] = n;
        stalls[f] = out.counters().stalls;
      });
    }
    threads.release([&] { node.barrier("bench-qos-start"); });
    threads.join();
    json key_sums = json::array();
    for (std::size_t f = 0; f < kFlows; ++f) key_sums.push_back(expected_key_sum(pushed[f], block));
    return {{"tuples", pushed}, {"key_sum", key_sums}, {"stalls", stalls}};
  }

  // Rank 1: each consumer checks every tuple (its key is the next in the block's cycle) and adds
  // the batch's bytes to the bin of the batch's arrival (the clock read once per batch).
  static json run_consumers(cluster::Node& node, const Plan& plan) {
    const std::size_t tb = plan.tuple_bytes;
    const std::uint64_t block = block_tuples(tb);
    const std::size_t bins = plan.bins();
    std::vector<std::vector<double>> bytes(kFlows, std::vector<double>(bins, 0));
    std::array<std::uint64_t, kFlows> tuples{}, key_sums{}, out_of_order{};
    RankThreads threads("bench driven-qos: rank 1");
    for (std::size_t f = 0; f < kFlows; ++f) {
      threads.start("consumer " + std::to_string(f), [&, f](RankThreads::Gate& gate) {
        driven::Consumer in(node, flow_name(f), static_cast<int>(f));
        flow::TupleBatch batch;
        std::vector<double>& bin = bytes[f];
        std::uint64_t next = 0, count = 0, sum = 0, disorder = 0;
        gate.ready_and_wait();
        const Clock::time_point start = Clock::now();
        for (;;) {
          if (Status s = in.consume(batch, std::chrono::seconds(60)); !s) throw Error(s.code(), s.message());
          if (batch.empty()) break;
          const double at = std::chrono::duration<double>(Clock::now() - start).count();
          bin[std::min(bins - 1, static_cast<std::size_t>(at / plan.bin_seconds))] += static_cast<double>(batch.count * tb);
          for (std::size_t i = 0; i < batch.count; ++i) {
            std::uint64_t key;
            std::memcpy(&key, batch.tuple(i), sizeof key);
            disorder += key != next ? 1 : 0;
            next = key + 1 == block ? 0 : key + 1;
            sum += key;
          }
          count += batch.count;
        }
        tuples[f] = count;
        key_sums[f] = sum;
        out_of_order[f] = disorder;
      });
    }
    threads.release([&] { node.barrier("bench-qos-start"); });
    threads.join();
    return {{"bins", bytes}, {"tuples", tuples}, {"key_sum", key_sums}, {"out_of_order", out_of_order}};
  }

  // Rank 2: the mover in its own thread; this thread sets each phase's shares at its start.
  static json run_mover(cluster::Node& node, const Plan& plan) {
    std::array<std::uint64_t, kFlows> moved{};
    std::array<std::int64_t, kFlows> last_share{};
    MoverCounters total;
    RankThreads threads("bench driven-qos: rank 2");
    threads.start("mover", [&](RankThreads::Gate& gate) {
      driven::Mover mover(node);
      mover.limit_rate(plan.mover_bytes_per_second);
      for (std::size_t f = 0; f < kFlows; ++f) mover.add_flow(flow_name(f));
      gate.ready_and_wait();
      if (Status s = mover.run(std::chrono::milliseconds(static_cast<long>(plan.seconds() * 1000) + 60000)); !s) {
        throw Error(s.code(), s.message());
      }
      for (std::size_t f = 0; f < kFlows; ++f) {
        moved[f] = mover.counters(flow_name(f)).bytes;
        last_share[f] = mover.share(flow_name(f));
      }
      total = mover.counters();
    });
    const Clock::time_point start = threads.release([&] { node.barrier("bench-qos-start"); });
    for (std::size_t k = 1; k < plan.phases.size() && plan.qos; ++k) {
      std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(plan.phase_seconds * static_cast<double>(k))));
      for (std::size_t f = 0; f < kFlows; ++f) driven::set_share(node, flow_name(f), plan.phases[k][f]);
    }
    threads.join();
    return {{"moved", moved}, {"shares", last_share}, {"idle_steps", total.idle_steps}, {"segments", total.segments}};
  }
};

}  // namespace

std::unique_ptr<Scenario> make_driven_qos_scenario() { return std::make_unique<DrivenQosScenario>(); }

}  // namespace dfi::tools::bench
