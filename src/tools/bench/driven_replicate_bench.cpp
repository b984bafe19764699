// Scenarios driven-replicate (000 Fig 12) and driven-fairness (000 Fig 14): ordered replication,
// P producers to N consumers, through a driven replicate flow (one data mover) and, as the
// baseline in the same run, through DFI's replicate flow with a global order (naive + sequencer).
//
//   driven-replicate   P = 1, N = 1..4: bandwidth per consumer and in all vs N.
//   driven-fairness    P = 1..4, N = 4: what each producer and each consumer got, and Jain's
//                      fairness index over the producers and over the consumers (target >= 0.95).
//
// Rank layout (one cluster run per side and repetition, the points one after the other): rank 0
// runs the P producer threads, ranks 1..N_max one consumer each, and on the driven side one more
// rank runs only the mover (as in 000, where the mover is the switch). Ranks a point does not use
// wait at its barriers. Driven: DrivenOptions::pattern = replicate, one ring per producer and per
// consumer; the mover writes every segment into every consumer's ring before any shows it. Flow:
// flow::FlowType::replicate, naive, ordered (a sequencer fetch-add per segment, target 0 hosts
// it); every source writes every target's ring itself.
//
// Producers push for `seconds`, tuple at a time, as fast as they can (the clock read every 256
// tuples), then close. Tuple key = producer << 40 | its running number. Every consumer checks
// every tuple (per producer: numbers 0, 1, 2, ... — nothing lost, duplicated or reordered) and
// folds the keys into an order-dependent digest of the whole sequence it saw; the driver checks
// that every consumer saw every pushed tuple and that all digests are equal (one global order).
// Bandwidth of a consumer: its tuple bytes / (its end of stream - the start barrier); of a
// producer: its tuples as the consumers saw them x width / (the last end of stream - the start).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/driven/consumer.hpp"
#include "dfi/driven/flow.hpp"
#include "dfi/driven/producer.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/replicate.hpp"
#include "driven_mover_rank.hpp"
#include "rank_threads.hpp"
#include "scenarios.hpp"
#include "tuple_block.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kProducerShift = 40;  // key = producer << 40 | running number
constexpr double kJainTarget = 0.95;

std::int64_t ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Jain's fairness index of `x`: (sum x)^2 / (n * sum x^2), 1 when all are equal, 1/n when one
// has everything.
double jain(const std::vector<double>& x) {
  double sum = 0, squares = 0;
  for (double v : x) {
    sum += v;
    squares += v * v;
  }
  return squares > 0 ? sum * sum / (static_cast<double>(x.size()) * squares) : 0;
}

// One point: P producers, N consumers, one side.
struct Point {
  int producers = 1;
  int consumers = 1;
  json to_json() const { return {{"producers", producers}, {"consumers", consumers}}; }
};

// What one consumer saw: tuples per producer, the next number due per producer, tuples out of
// order, and the digest of the whole sequence (order-dependent: FNV-1a over the 64-bit keys).
struct Tally {
  explicit Tally(std::size_t producers) : count(producers, 0), next(producers, 0) {}
  std::vector<std::uint64_t> count, next;
  std::uint64_t disorder = 0, foreign = 0;
  std::uint64_t digest = 0xcbf29ce484222325ull;

  void add(const std::byte* data, std::size_t tuples, std::size_t tuple_bytes) {
    for (std::size_t i = 0; i < tuples; ++i, data += tuple_bytes) {
      std::uint64_t key;
      std::memcpy(&key, data, sizeof key);
      digest = (digest ^ key) * 0x100000001b3ull;
      const std::uint64_t p = key >> kProducerShift, seq = key & ((std::uint64_t{1} << kProducerShift) - 1);
      if (p >= count.size()) [[unlikely]] {
        ++foreign;
        continue;
      }
      disorder += seq != next[p] ? 1 : 0;
      next[p] = seq + 1;
      ++count[p];
    }
  }
};

flow::FlowSpec point_spec(const json& params, const Point& p, std::size_t index, bool driven) {
  flow::FlowSpec spec;
  spec.name = "bench-" + params.at("scenario").get<std::string>() + (driven ? "-driven-" : "-flow-") + std::to_string(index);
  for (int t = 0; t < p.producers; ++t) spec.sources.push_back({0, t});
  for (int c = 0; c < p.consumers; ++c) spec.targets.push_back({1 + c, 0});
  spec.schema = tuple_block_schema(params.at("tuple_bytes").get<std::size_t>());
  spec.options.segments = params.at("segments").get<std::uint32_t>();
  spec.options.segment_bytes = params.at("segment_bytes").get<std::uint32_t>();
  const auto timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  spec.options.stall_timeout = timeout;
  if (driven) {
    spec.type = driven::kDriven;
    spec.type_options = driven::DrivenOptions{.pattern = driven::Pattern::replicate,
                                              .poll_interval = std::chrono::microseconds(params.at("poll_us").get<long>())};
  } else {
    spec.type = flow::FlowType::replicate;
    // nothing is lost here: a gap would be a failure, not something to wait out
    spec.type_options = flow::ReplicateOptions{.replication = flow::Replication::naive, .ordered = true, .gap_timeout = timeout};
  }
  return spec;
}

// Rank 0: the point's producers, each pushing for `seconds`.
json run_producers(cluster::Node& node, const json& params, const flow::FlowSpec& spec, const Point& p,
                   const std::string& start, bool driven) {
  const std::size_t tb = params.at("tuple_bytes");
  const auto run_for = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(params.at("seconds").get<double>()));
  std::vector<std::uint64_t> pushed(p.producers, 0), stalls(p.producers, 0);
  RankThreads threads("bench " + params.at("scenario").get<std::string>() + ": rank 0");
  for (int t = 0; t < p.producers; ++t) {
    threads.start("producer " + std::to_string(t), [&, t](RankThreads::Gate& gate) {
      std::vector<std::byte> block(block_tuples(tb) * tb);
      fill_tuple_block(block, tb);
      auto produce = [&](auto& out) {
        gate.ready_and_wait();
        const std::uint64_t n = push_tagged_for(out, block, tb, static_cast<std::uint64_t>(t) << kProducerShift, run_for);
        if (Status s = out.close(); !s) throw Error(s.code(), s.message());
        pushed[t] = n;
        stalls[t] = out.counters().stalls;
      };
      if (driven) {
        driven::Producer out(node, spec.name, t);
        produce(out);
      } else {
        fabric::Worker worker(node.fabric(), "replicate producer " + std::to_string(t));
        flow::ReplicateSource out(node, worker, spec.name, t);
        produce(out);
      }
    });
  }
  threads.release([&] { node.barrier(start); });
  threads.join();
  return {{"pushed", pushed}, {"stalls", stalls}};
}

// Ranks 1..N: one consumer, every tuple checked.
json run_consumer(cluster::Node& node, const json& params, const flow::FlowSpec& spec, const Point& p,
                  const std::string& start, bool driven) {
  const std::size_t tb = params.at("tuple_bytes");
  const auto timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  Tally tally(static_cast<std::size_t>(p.producers));
  std::int64_t begin = 0, end = 0;
  auto consume = [&](auto& in) {
    node.barrier(start);
    begin = ns_of(Clock::now());
    flow::TupleBatch batch;
    for (;;) {
      if (Status s = in.consume(batch, timeout); !s) throw Error(s.code(), s.message());
      if (batch.empty()) break;
      tally.add(batch.data, batch.count, tb);
    }
    end = ns_of(Clock::now());
  };
  if (driven) {
    driven::Consumer in(node, spec.name, 0);
    consume(in);
  } else {
    flow::ReplicateTarget in(node, spec.name, 0);
    consume(in);
  }
  return {{"count", tally.count}, {"out_of_order", tally.disorder}, {"foreign", tally.foreign},
          {"digest", tally.digest}, {"start_ns", begin}, {"end_ns", end}};
}

int run_rank_program(const json& params, std::ostream& out) {
  cluster::Node node;
  const bool driven = params.at("side").get<std::string>() == "driven";
  const int me = node.rank();
  const int mover_rank = node.size() - 1;  // driven side only
  const auto timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  const std::string prefix = "bench/" + params.at("scenario").get<std::string>() + "/";
  json points = json::array();
  std::size_t index = 0;
  for (const json& j : params.at("points")) {
    const Point p{j.at("producers").get<int>(), j.at("consumers").get<int>()};
    const flow::FlowSpec spec = point_spec(params, p, index, driven);
    const std::string start = prefix + std::to_string(index) + "/start";
    if (me == 0) flow::create_flow(node, spec);
    json report = json::object();
    if (me == 0) {
      report = run_producers(node, params, spec, p, start, driven);
    } else if (me <= p.consumers) {
      report = run_consumer(node, params, spec, p, start, driven);
    } else if (driven && me == mover_rank) {
      report = run_mover_point(node, spec.name, start, timeout, params.at("seconds").get<double>());
    } else {
      node.barrier(start);
    }
    points.push_back(report);
    node.barrier(prefix + std::to_string(index) + "/done");
    ++index;
  }
  report_rank_result(out, {{"rank", me}, {"points", points}});
  node.finish();
  return 0;
}

// What the driver made of one point of one side.
struct Outcome {
  std::vector<double> producer_gbps;  // per producer
  std::vector<double> consumer_gbps;  // per consumer
};

// The scenarios' common driver part: runs one side's cluster job over `points` and checks it.
class ReplicationRuns {
 public:
  ReplicationRuns(const std::string& scenario, RunContext& context, const std::vector<Point>& points)
      : scenario_(scenario), context_(context), points_(points) {
    max_consumers_ = 0;
    for (const Point& p : points) max_consumers_ = std::max(max_consumers_, p.consumers);
  }

  // Runs one side of repetition `rep` — driven with the mover polling every `poll_us` µs, or the
  // flow (`poll_us` empty) — and returns one outcome per point.
  std::vector<Outcome> run(std::optional<long> poll_us, int rep, std::string& command) {
    const bool driven = poll_us.has_value();
    const std::string side = driven ? "driven (mover polls every " + std::to_string(*poll_us) + " µs)" : std::string("flow");
    RankJob job;
    job.scenario = scenario_;
    job.nodes = 1 + max_consumers_ + (driven ? 1 : 0);
    const auto timeout = std::chrono::seconds(context_.param("timeout_s").get<long>());
    job.timeout = timeout * 2;
    json planned = json::array();
    for (const Point& p : points_) planned.push_back(p.to_json());
    job.params = {{"scenario", scenario_},
                  {"side", driven ? "driven" : "flow"},
                  {"points", planned},
                  {"tuple_bytes", context_.param("tuple_bytes")},
                  {"seconds", context_.param("seconds")},
                  {"segments", context_.param("segments")},
                  {"poll_us", poll_us.value_or(0)},
                  {"segment_bytes", context_.param("segment_bytes")},
                  {"timeout_ms", std::chrono::milliseconds(timeout).count()}};
    context_.say("repetition " + std::to_string(rep) + "/" + std::to_string(context_.repeat) + ": " + side + ", " +
                 std::to_string(job.nodes) + " ranks over " + (context_.netns ? "netns tcp" : context_.transport));
    const std::map<int, json> reports = run_rank_job(job, context_);
    command = rank_job_command(job, context_);
    for (int r = 0; r < job.nodes; ++r) {
      if (!reports.count(r))
        throw Error(Errc::protocol, "bench " + scenario_ + ": " + side + " rank " + std::to_string(r) + " reported nothing");
    }
    const std::size_t tb = context_.param("tuple_bytes");
    std::vector<Outcome> outcomes;
    for (std::size_t i = 0; i < points_.size(); ++i) {
      const Point& p = points_[i];
      const std::string what = side + ", " + std::to_string(p.producers) + " producer(s) -> " + std::to_string(p.consumers) +
                               " consumer(s)";
      const std::vector<std::uint64_t> pushed = reports.at(0).at("points").at(i).at("pushed");
      Outcome o;
      std::int64_t start = INT64_MAX, last_end = INT64_MIN;
      std::uint64_t digest = 0;
      for (int c = 0; c < p.consumers; ++c) {
        const json& got = reports.at(1 + c).at("points").at(i);
        const std::vector<std::uint64_t> count = got.at("count");
        const std::uint64_t disorder = got.at("out_of_order"), foreign = got.at("foreign"), d = got.at("digest");
        if (count != pushed || disorder != 0 || foreign != 0) {
          throw Error(Errc::protocol, "bench " + scenario_ + ": " + what + ": consumer " + std::to_string(c) + " got " +
                                          json(count).dump() + " tuples per producer, pushed " + json(pushed).dump() +
                                          " (" + std::to_string(disorder) + " out of order, " + std::to_string(foreign) +
                                          " from no producer)");
        }
        if (c > 0 && d != digest) {
          throw Error(Errc::protocol, "bench " + scenario_ + ": " + what + ": consumer " + std::to_string(c) +
                                          " saw the tuples in another order than consumer 0 (sequence digests differ)");
        }
        digest = d;
        const std::int64_t s = got.at("start_ns"), e = got.at("end_ns");
        std::uint64_t tuples = 0;
        for (std::uint64_t n : count) tuples += n;
        o.consumer_gbps.push_back(static_cast<double>(tuples * tb) / static_cast<double>(std::max<std::int64_t>(1, e - s)));
        start = std::min(start, s);
        last_end = std::max(last_end, e);
      }
      for (std::uint64_t n : pushed) {
        o.producer_gbps.push_back(static_cast<double>(n * tb) / static_cast<double>(std::max<std::int64_t>(1, last_end - start)));
      }
      std::ostringstream said;
      said << "  " << what << ": every consumer got all " << json(pushed).dump()
           << " tuples in one order; GB/s per consumer";
      for (double g : o.consumer_gbps) said << ' ' << format_fixed(g, 3);
      said << ", per producer";
      for (double g : o.producer_gbps) said << ' ' << format_fixed(g, 3);
      said << "; ring-full waits " << reports.at(0).at("points").at(i).at("stalls").dump();
      if (driven) {
        const json& m = reports.at(job.nodes - 1).at("points").at(i);
        said << ", mover " << m.at("segments").dump() << " segment copies, " << m.at("idle_steps").dump() << " idle passes";
      }
      context_.say(said.str());
      outcomes.push_back(std::move(o));
    }
    return outcomes;
  }

 private:
  std::string scenario_;
  RunContext& context_;
  std::vector<Point> points_;
  int max_consumers_ = 1;
};

// Parameters both scenarios have.
std::vector<Parameter> common_parameters(double quick_seconds, double full_seconds) {
  return {
      {"tuple_bytes", 1024, 1024, "tuple width in bytes (>= 16, a multiple of 8)"},
      {"seconds", quick_seconds, full_seconds, "how long every producer pushes at each point"},
      {"segments", 0, 0, "segments per ring, both sides (0: the transport's flow default)"},
      {"segment_bytes", 0, 0, "segment size including the 16 B footer, both sides (0: the transport's flow default)"},
      {"timeout_s", 60, 300, "bound of each cluster run and of every wait inside it"},
  };
}

void check_common(const RunContext& context, const std::string& scenario) {
  const std::size_t tb = context.param("tuple_bytes");
  if (tb < 16 || tb % 8 != 0) {
    throw Error(Errc::invalid_argument, "bench " + scenario + ": tuple_bytes " + std::to_string(tb) +
                                            " must be a multiple of 8 and at least 16");
  }
  if (!(context.param("seconds").get<double>() > 0)) throw Error(Errc::invalid_argument, "bench " + scenario + ": seconds must be > 0");
}

// "P2 p1": producer (kind 'p') or consumer ('c') k of the point with P producers (appended: GCC
// 12's -Wrestrict misfires on "literal" + std::to_string).
std::string who(const Point& p, char kind, std::size_t k) {
  std::string label = "P";
  label += std::to_string(p.producers);
  label += ' ';
  label += kind;
  label += std::to_string(k + 1);
  return label;
}

const char* kFlowBaseline = "DFI replicate flow, ordered";
const char* kFlowBaselineText =
    "flow::FlowType::replicate, naive (every source writes every target's ring) with a global order (a sequencer "
    "fetch-add per segment, hosted by target 0's process); the same ranks minus the mover, the same producers "
    "and consumers";

class DrivenReplicate final : public Scenario {
 public:
  std::string name() const override { return "driven-replicate"; }
  std::string title() const override {
    return "Ordered replication 1 -> N: driven replicate flow (one mover) vs DFI's ordered replicate flow";
  }
  std::string description() const override {
    return "One producer (rank 0) pushes 1 KiB tuples for `seconds` as fast as it can into a replicate flow to N = "
           "1..4 consumers (ranks 1..N). Driven: pattern replicate, the mover (its own rank) writes every segment "
           "into every consumer's ring and shows it at all of them at once; one series per polling interval of the "
           "mover (poll_us: 0, where it spins and yields before it sleeps, and 20 µs). Baseline in the same run: DFI's "
           "replicate flow, naive + ordered (sequencer). Every consumer checks every tuple (nothing lost, "
           "duplicated or reordered) and the driver checks that all consumers saw one sequence (equal digests). "
           "GB/s per consumer = its bytes / (its end of stream - the start barrier); the slowest consumer, and all "
           "consumers together.";
  }
  std::vector<Parameter> parameters() const override {
    std::vector<Parameter> p = {{"consumers", json::array({1, 3}), json::array({1, 2, 3, 4}), "replica counts N"},
                                {"poll_us", json::array({0, 20}), json::array({0, 20}),
                                 "the mover's polling intervals in µs, one driven series each (DrivenOptions::poll_interval; "
                                 "0: it spins, yields, then sleeps by itself)"}};
    for (Parameter& c : common_parameters(0.4, 1.5)) p.push_back(std::move(c));
    return p;
  }
  std::vector<BaselineInfo> baselines() const override { return {{kFlowBaseline, kFlowBaselineText}}; }

  void run(RunContext& context, Result& result) override {
    check_common(context, name());
    const std::vector<int> consumers = context.param("consumers");
    std::vector<Point> points;
    for (int n : consumers) {
      if (n < 1 || n > 8) throw Error(Errc::invalid_argument, "bench driven-replicate: consumer count " + std::to_string(n) + " not in 1..8");
      points.push_back({1, n});
    }
    result.set_parameters(context.resolved_parameters());
    result.add_baseline(kFlowBaseline, kFlowBaselineText);
    result.add_note("Every point checked: each consumer got every pushed tuple once, in the producer's order, and all "
                    "consumers' order-dependent sequence digests are equal (one global order).");
    result.add_note("Ranks: 1 producer + N consumers (+ 1 mover rank on the driven side) on 2 shared vCPUs: every copy "
                    "the mover (driven) or the source (flow) makes per consumer is CPU time of the same two cores.");
    const Axis n_axis{"consumers", "", "linear"};
    Panel& slowest = result.panel("per_consumer", "Bandwidth per consumer (the slowest)", n_axis,
                                  {"tuple bandwidth per consumer", "GB/s"}, Better::higher);
    Panel& all = result.panel("aggregate", "Bandwidth delivered, all consumers together", n_axis,
                              {"tuple bandwidth, sum over consumers", "GB/s"}, Better::higher);
    const std::vector<long> polls = context.param("poll_us");
    for (long poll : polls) {
      if (poll < 0) throw Error(Errc::invalid_argument, "bench driven-replicate: poll interval " + std::to_string(poll) + " µs");
    }
    auto series_id = [](std::optional<long> poll) {
      if (!poll) return std::string("flow");
      std::string id = "driven";
      if (*poll > 0) {
        id += "_poll";
        id += std::to_string(*poll);
        id += "us";
      }
      return id;
    };
    for (Panel* panel : {&slowest, &all}) {
      panel->series("flow", Role::baseline, "DFI replicate flow, ordered");
      for (long poll : polls) {
        panel->series(series_id(poll), Role::dfi, "driven replicate flow, mover polls every " + std::to_string(poll) + " µs" +
                                                      (poll == 0 ? " (spins, yields, sleeps by itself)" : ""));
        panel->compare(series_id(poll), "flow");
      }
    }
    ReplicationRuns runs(name(), context, points);
    for (int rep = 1; rep <= context.repeat; ++rep) {
      auto side = [&](std::optional<long> poll) {
        std::string command;
        const std::vector<Outcome> outcomes = runs.run(poll, rep, command);
        const std::string id = series_id(poll);
        for (std::size_t i = 0; i < points.size(); ++i) {
          const std::vector<double>& g = outcomes[i].consumer_gbps;
          double sum = 0;
          for (double v : g) sum += v;
          slowest.add(id, points[i].consumers, *std::min_element(g.begin(), g.end()));
          all.add(id, points[i].consumers, sum);
        }
        slowest.add_command(id, command);
        all.add_command(id, command);
      };
      run_alternating(rep, [&] { for (long poll : polls) side(poll); }, [&] { side(std::nullopt); });
    }
  }

  // Errors propagate: BenchCli::run reports them, naming the scenario.
  int run_rank(const json& params, std::ostream& out, std::ostream& /*err*/) override {
    return run_rank_program(params, out);
  }
};

class DrivenFairness final : public Scenario {
 public:
  std::string name() const override { return "driven-fairness"; }
  std::string title() const override {
    return "Replication fairness: 1-4 producers into one replicate flow with 4 consumers, Jain's index";
  }
  std::string description() const override {
    return "P = 1..4 producer threads (rank 0) push 1 KiB tuples for `seconds` as fast as they can into one replicate "
           "flow to 4 consumers (ranks 1..4). Driven: pattern replicate, the mover (its own rank) takes the "
           "producers' segments round robin (the global order) and writes each into every consumer's ring; it "
           "polls every poll_us (20 µs). "
           "Baseline in the same run: DFI's replicate flow, naive + ordered (sequencer), P sources. Per producer: "
           "its tuples as delivered x width / the run's time; per consumer: its bytes / its time; Jain's fairness "
           "index over the producers (P >= 2) and over the consumers, target >= 0.95. Every tuple checked at every "
           "consumer, one sequence at all of them (equal digests).";
  }
  std::vector<Parameter> parameters() const override {
    std::vector<Parameter> p = {{"producers", json::array({1, 2}), json::array({1, 2, 3, 4}), "producer counts P"},
                                {"consumers", 4, 4, "consumers (replicas)"},
                                {"poll_us", 20, 20,
                                 "the mover's polling interval in µs (DrivenOptions::poll_interval): 20, with which it "
                                 "leaves the PUs the CPU between looks (see driven-replicate, which measures 0 too)"}};
    for (Parameter& c : common_parameters(0.4, 2)) p.push_back(std::move(c));
    return p;
  }
  std::vector<BaselineInfo> baselines() const override { return {{kFlowBaseline, kFlowBaselineText}}; }

  void run(RunContext& context, Result& result) override {
    check_common(context, name());
    const std::vector<int> producers = context.param("producers");
    const int consumers = context.param("consumers");
    if (consumers < 1 || consumers > 8) throw Error(Errc::invalid_argument, "bench driven-fairness: consumers " + std::to_string(consumers) + " not in 1..8");
    std::vector<Point> points;
    for (int n : producers) {
      if (n < 1 || n > 8) throw Error(Errc::invalid_argument, "bench driven-fairness: producer count " + std::to_string(n) + " not in 1..8");
      points.push_back({n, consumers});
    }
    result.set_parameters(context.resolved_parameters());
    result.add_baseline(kFlowBaseline, kFlowBaselineText);
    result.add_note("Every point checked: each consumer got every pushed tuple once, in each producer's order, and all "
                    "consumers' order-dependent sequence digests are equal (one global order).");
    result.add_note("Producers are threads of rank 0, consumers ranks 1..4, the mover its own rank: 2 shared vCPUs. A "
                    "producer's bandwidth is what it got delivered, so it measures the mover's (or the sequencer's) "
                    "fairness and the CPU each producer thread got alike.");
    const Axis category{"producers / who", "", "category"};
    const Axis count{"producers", "", "linear"};
    Panel& per_producer = result.panel("producers", "Bandwidth per producer (delivered to every consumer)", category,
                                       {"tuple bandwidth", "GB/s"}, Better::higher);
    Panel& per_consumer = result.panel("consumers", "Bandwidth per consumer", category, {"tuple bandwidth", "GB/s"},
                                       Better::higher);
    Panel& fairness = result.panel("jain", "Jain's fairness index (target >= 0.95)", count, {"Jain's index", ""},
                                   Better::higher);
    Panel& aggregate = result.panel("aggregate", "Bandwidth of one consumer, all producers together", count,
                                    {"tuple bandwidth per consumer", "GB/s"}, Better::higher);
    for (Panel* panel : {&per_producer, &per_consumer, &aggregate}) {
      panel->series("driven", Role::dfi, "driven replicate flow (one mover)");
      panel->series("flow", Role::baseline, "DFI replicate flow, ordered");
      panel->compare("driven", "flow");
    }
    fairness.series("driven_producers", Role::dfi, "driven, over the producers");
    fairness.series("driven_consumers", Role::dfi, "driven, over the consumers");
    fairness.series("flow_producers", Role::baseline, "flow, over the producers");
    fairness.series("flow_consumers", Role::baseline, "flow, over the consumers");
    fairness.compare("driven_producers", "flow_producers");
    fairness.compare("driven_consumers", "flow_consumers");

    // index[side/who][point]: one sample per repetition
    std::map<std::string, std::vector<std::vector<double>>> index;
    ReplicationRuns runs(name(), context, points);
    for (int rep = 1; rep <= context.repeat; ++rep) {
      const long poll = context.param("poll_us");
      auto side = [&](bool driven) {
        std::string command;
        const std::vector<Outcome> outcomes = runs.run(driven ? std::optional<long>(poll) : std::nullopt, rep, command);
        const std::string id = driven ? "driven" : "flow";
        for (std::size_t i = 0; i < points.size(); ++i) {
          const Outcome& o = outcomes[i];
          for (std::size_t k = 0; k < o.producer_gbps.size(); ++k) per_producer.add(id, who(points[i], 'p', k), o.producer_gbps[k]);
          for (std::size_t k = 0; k < o.consumer_gbps.size(); ++k) per_consumer.add(id, who(points[i], 'c', k), o.consumer_gbps[k]);
          double sum = 0;
          for (double v : o.producer_gbps) sum += v;
          aggregate.add(id, points[i].producers, sum);
          for (const char* who : {"producers", "consumers"}) {
            const std::vector<double>& x = std::string(who) == "producers" ? o.producer_gbps : o.consumer_gbps;
            if (x.size() < 2) continue;
            const double j = jain(x);
            const std::string series = id + "_" + who;
            fairness.add(series, points[i].producers, j);
            auto& samples = index[series];
            samples.resize(points.size());
            samples[i].push_back(j);
          }
        }
        for (Panel* panel : {&per_producer, &per_consumer, &aggregate}) panel->add_command(id, command);
        fairness.add_command(id + "_producers", command);
        fairness.add_command(id + "_consumers", command);
      };
      run_alternating(rep, [&] { side(true); }, [&] { side(false); });
    }
    for (const auto& [series, per_point] : index) {
      std::string note = "Jain's index, " + series + " (median, min-max over " + std::to_string(context.repeat) + " runs):";
      bool met = true;
      for (std::size_t i = 0; i < per_point.size(); ++i) {
        if (per_point[i].empty()) continue;
        const double med = median(per_point[i]);
        met = met && med >= kJainTarget;
        note += " P" + std::to_string(points[i].producers) + " " + format_fixed(med, 3) + " (" +
                format_fixed(*std::min_element(per_point[i].begin(), per_point[i].end()), 3) + "-" +
                format_fixed(*std::max_element(per_point[i].begin(), per_point[i].end()), 3) + ");";
      }
      if (series.rfind("driven", 0) == 0) note += met ? " target >= 0.95 met" : " target >= 0.95 MISSED";
      result.add_note(note);
      context.say(note);
    }
  }

  // Errors propagate: BenchCli::run reports them, naming the scenario.
  int run_rank(const json& params, std::ostream& out, std::ostream& /*err*/) override {
    return run_rank_program(params, out);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_driven_replicate_scenario() { return std::make_unique<DrivenReplicate>(); }
std::unique_ptr<Scenario> make_driven_fairness_scenario() { return std::make_unique<DrivenFairness>(); }

}  // namespace dfi::tools::bench
