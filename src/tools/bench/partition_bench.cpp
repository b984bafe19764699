// Scenario partition (issue 28): a partitioned push_batch against the hand-written partitioner.
//
// DFI side (two ranks under a local cluster, shm): one bandwidth-mode shuffle flow per point
// (target count x tuple width), key-hash routing, one source on rank 0 and `targets` targets
// on rank 1. The source pushes the 64 KiB block of pre-built tuples (tuple_block.hpp) per
// ShuffleSource::push_batch call until it pushed its tuples, then closes. One consumer thread on
// rank 1 owns every target and polls them round robin (ShuffleTarget::try_consume), summing the
// key of every tuple, weighted by its target (the routed sum: every tuple at the target its key
// routes to). GB/s = tuple bytes after the first batch / (end of stream of every target - first
// batch), at the consumer.
//
// Limits, interleaved with DFI in every repetition (stream_baseline.hpp, copies "partition" and
// "partition-direct"): the same tuples partitioned by hand into `targets` rings of the flow's
// layout between two processes: route_rows over chunks of 256 rows, then software write-combine
// lines of a cache line per target stored whole into the segments (limit_lines) or each row
// straight into its segment (limit_direct); one consumer polling the rings round robin and
// summing every key; timed and checked the same way.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "rank_threads.hpp"
#include "scenarios.hpp"
#include "stream_baseline.hpp"
#include "tuple_block.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kName = "partition";

struct Point {
  std::size_t targets = 0;
  std::size_t tuple_bytes = 0;
  std::uint64_t tuples = 0;
};

json point_json(const Point& p) {
  return {{"targets", p.targets}, {"tuple_bytes", p.tuple_bytes}, {"tuples", p.tuples}};
}

Point point_from(const json& j) {
  return {j.at("targets").get<std::size_t>(), j.at("tuple_bytes").get<std::size_t>(),
          j.at("tuples").get<std::uint64_t>()};
}

[[noreturn]] void fail_on(const Status& s) { throw Error(s.code(), s.message()); }

// ---------------------------------------------------------------------------------------------
// Rank program

flow::FlowSpec make_spec(const json& params, const Point& point, std::size_t index) {
  flow::FlowSpec spec;
  spec.name = std::string("bench-") + kName + "-" + std::to_string(index);
  spec.sources.push_back({0, 0});
  for (std::size_t t = 0; t < point.targets; ++t) spec.targets.push_back({1, static_cast<int>(t)});
  spec.schema = tuple_block_schema(point.tuple_bytes);
  spec.key_column = "key";
  spec.routing = flow::Routing::key_hash;
  spec.options.mode = flow::Mode::bandwidth;
  spec.options.segments = params.at("segments").get<std::uint32_t>();
  spec.options.segment_bytes = params.at("segment_bytes").get<std::uint32_t>();
  return spec;
}

// Rank 0: the source pushes the block per push_batch call.
json run_source(cluster::Node& node, const flow::FlowSpec& spec, const Point& point) {
  const std::size_t tb = point.tuple_bytes;
  const std::size_t block = block_tuples(tb);
  flow::FlowCounters counters;
  RankThreads threads(std::string("bench ") + kName);
  threads.start("source", [&](RankThreads::Gate& gate) {
    fabric::Worker worker(node.fabric(), std::string(kName) + " source");
    flow::ShuffleSource source(node, worker, spec.name, 0);
    std::vector<std::byte> tuples(block * tb);
    fill_tuple_block(tuples, tb);
    gate.ready_and_wait();
    for (std::uint64_t left = point.tuples; left > 0;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, block));
      if (Status s = source.push_batch(tuples.data(), n * tb); !s) [[unlikely]]
        fail_on(s);
      left -= n;
    }
    if (Status s = source.close(); !s) fail_on(s);
    counters = source.counters();
  });
  threads.release();
  threads.join();
  return {{"sent_tuples", counters.tuples}};
}

// Rank 1: one thread consumes every target, round robin.
json run_consumer(cluster::Node& node, const flow::FlowSpec& spec, const Point& point,
                  std::chrono::milliseconds timeout) {
  const std::size_t tb = point.tuple_bytes;
  std::uint64_t tuples = 0, first_count = 0, key_sum = 0, routed_sum = 0;
  Clock::time_point first{}, end{};
  RankThreads threads(std::string("bench ") + kName);
  threads.start("consumer", [&](RankThreads::Gate&) {
    std::vector<std::unique_ptr<flow::ShuffleTarget>> targets;
    for (std::size_t t = 0; t < point.targets; ++t)
      targets.push_back(std::make_unique<flow::ShuffleTarget>(node, spec.name, static_cast<int>(t)));
    std::vector<bool> done(point.targets, false);
    std::size_t open = point.targets;
    // Waits as the limit's consumer does: spin, then yield; never sleep.
    Backoff backoff(BackoffSettings{64, UINT32_MAX, 50});
    Deadline idle(timeout);
    flow::TupleBatch batch;
    while (open > 0) {
      bool found = false;
      for (std::size_t t = 0; t < point.targets; ++t) {
        if (done[t]) continue;
        const Status s = targets[t]->try_consume(batch);
        if (s.code() == Errc::retry) continue;
        if (!s) fail_on(s);
        found = true;
        if (batch.empty()) {
          if (targets[t]->end()) {
            done[t] = true;
            --open;
          }
          continue;
        }
        if (tuples == 0) {
          first = Clock::now();
          first_count = batch.count;
        }
        const std::uint64_t sum = sum_tuple_keys(batch.data, batch.count, tb);
        key_sum += sum;
        routed_sum += sum * (t + 1);
        tuples += batch.count;
      }
      if (found) {
        backoff.reset();
      } else {
        if (backoff.rounds() == 0) {
          idle = Deadline(timeout);  // the clock is read only while idle
        } else if (idle.expired()) {
          std::ostringstream text;
          text << "no tuples for " << timeout.count() << " ms with " << open << " of " << point.targets
               << " targets open";
          throw Error(Errc::timeout, text.str());
        }
        backoff.pause();
      }
    }
    end = Clock::now();
  });
  threads.join();
  const double seconds = tuples > first_count ? seconds_between(first, end) : 0;
  const std::uint64_t timed = (tuples - first_count) * tb;
  return {{"received_tuples", tuples},
          {"received_key_sum", key_sum},
          {"received_routed_sum", routed_sum},
          {"seconds", seconds},
          {"gbps", seconds > 0 ? static_cast<double>(timed) / seconds / 1e9 : 0.0}};
}

int run_rank_program(const json& params, std::ostream& out, std::ostream& err) {
  cluster::Node node;
  if (node.size() != 2) {
    err << "bench " << kName << ": needs exactly 2 ranks, got " << node.size() << '\n';
    return 2;
  }
  const auto timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  json points = json::array();
  std::size_t index = 0;
  for (const json& p : params.at("points")) {
    const Point point = point_from(p);
    const flow::FlowSpec spec = make_spec(params, point, index);
    if (node.rank() == 0) flow::create_flow(node, spec);
    points.push_back(node.rank() == 0 ? run_source(node, spec, point) : run_consumer(node, spec, point, timeout));
    node.barrier(std::string("bench/") + kName + "/done/" + std::to_string(index));
    ++index;
  }
  report_rank_result(out, {{"rank", node.rank()}, {"points", points}});
  node.finish();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Driver

std::string panel_id(std::size_t tuple_bytes) { return "partition_" + std::to_string(tuple_bytes); }

// The two hand-written partitioners (stream_baseline.hpp): with write-combine lines, and rows
// straight into the segments; neither is always the faster on this machine, so DFI is held
// against both.
struct Limit {
  std::string id, copy, name;
};
const std::vector<Limit> kLimits = {
    {"limit_lines", "partition", "hand-written partitioner, 64 B write-combine lines"},
    {"limit_direct", "partition-direct", "hand-written partitioner, rows straight into the segments"}};

class PartitionScenario final : public Scenario {
 public:
  std::string name() const override { return kName; }
  std::string title() const override {
    return "Partitioned push_batch (1:M key hash) vs a hand-written radix partitioner";
  }
  std::string description() const override {
    return "Two ranks over shm, one bandwidth-mode shuffle flow per target count and tuple width: "
           "one source on rank 0 pushes the 64 KiB block of pre-built tuples per push_batch call "
           "(key-hash routing over M targets on rank 1); one consumer thread on rank 1 owns all M "
           "targets and polls them round robin with try_consume, summing every key (count, key "
           "sum and a per-target weighted sum are checked: every tuple once, at the target its "
           "key routes to). GB/s = tuple bytes after the first batch / time from it to the last "
           "end of stream, at the consumer. Limit, interleaved in every repetition: the same "
           "tuples partitioned between two processes by a hand-written partitioner into M rings "
           "of the flow's layout (memory::RingLayout, the same segments and footers): route_rows "
           "per chunk of 256 rows (AVX-512 where the CPU has it), software write-combine buffers "
           "of a cache line per target stored whole into the segments (Balkesen et al., Schuh et "
           "al.), one consumer polling the rings round robin, timed and checked the same way.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"targets", json::array({4, 64}), json::array({2, 4, 16, 64}), "target counts M"},
        {"tuple_sizes", json::array({16, 64}), json::array({16, 64}),
         "tuple sizes in bytes (>= 16, multiples of 8)"},
        {"bytes_per_point", 32u << 20, 512u << 20, "tuple bytes pushed per point"},
        {"max_tuples", 2000000, 32000000, "upper bound of tuples per point"},
        {"segments", 32, 32, "segments per ring (the flow default on shm)"},
        {"segment_bytes", 8208, 8208, "segment size including the 16 B footer (the flow default on shm)"},
        {"timeout_s", 60, 600, "bound of each cluster run and each limit run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"hand-written partitioner",
             "dfi bench-stream ring-producer --copy partition | partition-direct: one producer "
             "process routes chunks of 256 rows with kernels::route_rows (AVX-512) and either "
             "scatters them into write-combine lines of 64 B per target, storing full lines into "
             "M rings of the flow's layout (limit_lines), or stores each row straight into its "
             "target's segment (limit_direct); segments x segment_bytes with footers, published "
             "and released as a flow's; one consumer process polls the rings round robin and sums "
             "every key in place. The same tuples, checks and timing as DFI"}};
  }
  std::string unavailable(const RunContext& context) const override {
    if (context.transport != "shm" || context.netns)
      return "the partition limit is a shared-memory ring set; run it with --transport shm";
    return {};
  }

  void run(RunContext& context, Result& result) override {
    const std::vector<std::size_t> target_counts = context.param("targets");
    const std::vector<std::size_t> sizes = context.param("tuple_sizes");
    const std::size_t bytes = context.param("bytes_per_point");
    const std::uint64_t max_tuples = context.param("max_tuples");
    const std::size_t segments = context.param("segments");
    const std::size_t segment_bytes = context.param("segment_bytes");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    if (target_counts.empty() || sizes.empty())
      throw Error(Errc::invalid_argument, "bench partition: nothing to measure");
    for (std::size_t s : sizes) {
      if (s < 16 || s % 8 != 0 || s + 16 > segment_bytes || !ring_copies_width(s)) {
        throw Error(Errc::invalid_argument, "bench partition: tuple size " + std::to_string(s) +
                                                " must be a multiple of 8, at least 16, fit a segment and be one "
                                                "of the limit's " + ring_tuple_widths_text());
      }
    }
    for (std::size_t m : target_counts) {
      if (m < 2 || m > 4096)
        throw Error(Errc::invalid_argument, "bench partition: " + std::to_string(m) + " targets (2 .. 4096)");
    }
    std::vector<Point> points;
    for (std::size_t size : sizes) {
      for (std::size_t m : target_counts)
        points.push_back({m, size, std::clamp<std::uint64_t>(bytes / size, 1000, max_tuples)});
    }
    json planned = json::array();
    for (const Point& p : points) planned.push_back(point_json(p));
    json parameters = context.resolved_parameters();
    parameters["points"] = planned;
    result.set_parameters(parameters);
    result.add_baseline(baselines()[0].name, baselines()[0].description);
    result.add_note("Two busy threads (source and consumer) on a 2-vCPU VM: both sides are bound by "
                    "the producer's routing and scatter and the consumer's polling of M rings.");
    result.add_note("Target (issue 28): partitioned push_batch at 4 and 64 targets >= 0.7x the "
                    "hand-written partitioner.");
    for (std::size_t size : sizes) {
      Panel& panel = result.panel(panel_id(size), std::to_string(size) + " B tuples, 1 source -> M targets",
                                  {"targets", "", "log2"}, {"tuple bandwidth", "GB/s"}, Better::higher);
      panel.series("dfi", Role::dfi, "DFI push_batch, key hash, 1:M");
      for (const Limit& limit : kLimits) {
        panel.series(limit.id, Role::baseline, limit.name);
        panel.compare("dfi", limit.id, 0.7);
      }
    }

    RankJob job;
    job.nodes = 2;
    job.scenario = name();
    job.params = {{"points", planned},
                  {"segments", segments},
                  {"segment_bytes", segment_bytes},
                  {"timeout_ms", std::chrono::milliseconds(timeout).count()}};
    job.timeout = timeout * 2;

    auto measure_dfi = [&](int rep) {
      context.say("repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) + ": DFI");
      const std::map<int, json> reports = run_rank_job(job, context);
      const std::string command = rank_job_command(job, context);
      if (!reports.count(0) || !reports.count(1))
        throw Error(Errc::protocol, "bench partition: a rank reported no result");
      for (std::size_t i = 0; i < points.size(); ++i) {
        const Point& p = points[i];
        const json& sent = reports.at(0).at("points").at(i);
        const json& got = reports.at(1).at("points").at(i);
        const std::uint64_t block = block_tuples(p.tuple_bytes);
        const std::uint64_t key_sum = expected_key_sum(p.tuples, block);
        const std::uint64_t routed = expected_routed_sum(p.tuples, block, p.targets);
        if (sent.at("sent_tuples").get<std::uint64_t>() != p.tuples ||
            got.at("received_tuples").get<std::uint64_t>() != p.tuples ||
            got.at("received_key_sum").get<std::uint64_t>() != key_sum ||
            got.at("received_routed_sum").get<std::uint64_t>() != routed) {
          throw Error(Errc::protocol, "bench partition: " + std::to_string(p.targets) + " targets, " +
                                          std::to_string(p.tuple_bytes) + " B: expected " +
                                          point_json(p).dump() + " with key sum " + std::to_string(key_sum) +
                                          " and routed sum " + std::to_string(routed) + ", got " + got.dump());
        }
        const double gbps = got.at("gbps").get<double>();
        context.say("  DFI " + std::to_string(p.targets) + " targets, " + std::to_string(p.tuple_bytes) +
                    " B: " + std::to_string(gbps) + " GB/s");
        Panel& panel = result.panel(panel_id(p.tuple_bytes));
        panel.add("dfi", p.targets, gbps);
        panel.add_command("dfi", command);
      }
    };
    auto measure_limit = [&](int rep) {
      context.say("repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) + ": limit");
      for (const Point& p : points) {
        for (const Limit& limit : kLimits) {
        StreamRun run;
        run.transport = "shm";
        run.copy = limit.copy;
        run.targets = p.targets;
        run.tuple_bytes = p.tuple_bytes;
        run.tuples = p.tuples;
        run.ring_bytes = segments * (segment_bytes - 16);
        run.batch_bytes = segment_bytes - 16;
        run.dfi_binary = context.dfi_binary;
        run.timeout = timeout;
        const StreamResult r = run_stream_baseline(run);
        context.say("  " + limit.id + " " + std::to_string(p.targets) + " targets, " +
                    std::to_string(p.tuple_bytes) + " B: " + std::to_string(r.gbps) + " GB/s");
        Panel& panel = result.panel(panel_id(p.tuple_bytes));
        panel.add(limit.id, p.targets, r.gbps);
        panel.add_command(limit.id, r.command);
        }
      }
    };
    for (int rep = 1; rep <= context.repeat; ++rep)
      run_alternating(rep, [&] { measure_dfi(rep); }, [&] { measure_limit(rep); });
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return run_rank_program(params, out, err);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_partition_scenario() { return std::make_unique<PartitionScenario>(); }

}  // namespace dfi::tools::bench
