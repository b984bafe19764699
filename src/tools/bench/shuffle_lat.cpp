// Scenario shuffle-lat (003 Fig 7b): round trip of one tuple through two latency-mode flows.
//
// DFI side (two ranks under a local cluster, one thread each): flow A (source rank 0 thread 0 ->
// target rank 1 id 0) and flow B (source rank 1 thread 0 -> target rank 0 id 0), both shuffle
// flows in latency mode (one tuple per segment, credits), tuple_bytes wide. Rank 0 writes a
// sequence number into a tuple, pushes it on A and consumes on B until that tuple comes back;
// rank 1 consumes on A and pushes the tuple it got (straight from the ring view, zero copy) on B.
// Each round trip is timed on rank 0 with steady_clock (one reading per round trip: the time
// between two consecutive returns); we report the median and the 99th percentile over all timed
// round trips, warm-up excluded.
//
// Baselines: ucx_perftest -t ucp_put_lat and -t ucp_am_lat with the same size and iteration
// counts. Both are ping-pongs that report HALF the round trip (one way); we multiply their
// numbers by 2 so that every number in this scenario is a round trip. Their percentile (-R 50,
// -R 99) is computed over the last 2048 iterations only (ucx_perftest's TIMING_QUEUE_SIZE).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "perftest.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kMedian = "round trip, median";
constexpr const char* kP99 = "round trip, 99th percentile";


// The next batch of `target`. Where the source writes with puts (every transport but shm with
// direct writes), a pushed tuple may still sit in UCX until the source's worker is progressed:
// the ring writer issues put, fence, put and returns. A thread that pushes and then only waits
// on another flow's target would never send it, so there we poll with try_consume() and
// progress the source's worker in between. With direct writes there is nothing to progress and
// we use the plain consume().
Status next_batch(flow::ShuffleTarget& target, fabric::Worker& worker, bool progress,
                  flow::TupleBatch& batch, std::chrono::milliseconds timeout) {
  if (!progress) return target.consume(batch, timeout);
  const Clock::time_point give_up = Clock::now() + timeout;
  for (unsigned round = 1;; ++round) {
    Status s = target.try_consume(batch);
    if (s.code() != Errc::retry) return s;
    worker.progress();
    if ((round & 1023) == 0 && Clock::now() > give_up) {
      return {Errc::timeout, "bench shuffle-lat: nothing arrived within " +
                                 std::to_string(timeout.count()) + " ms"};
    }
  }
}

flow::FlowSpec latency_spec(const std::string& name, int from, int to, std::size_t tuple_bytes,
                            std::uint32_t segments, std::uint32_t segment_bytes) {
  flow::FlowSpec spec;
  spec.name = name;
  spec.sources = {{from, 0}};
  spec.targets = {{to, 0}};
  spec.schema =
      flow::Schema({{"seq", flow::Type::uint64, 1},
                    {"payload", flow::Type::chars, static_cast<std::uint32_t>(tuple_bytes - 8)}});
  spec.key_column = "seq";
  spec.options.mode = flow::Mode::latency;
  spec.options.segments = segments;
  spec.options.segment_bytes = segment_bytes;  // 0: one tuple plus footer
  return spec;
}

// ---------------------------------------------------------------------------------------------
// Rank program

int run_lat_rank(const json& params, std::ostream& out, std::ostream& err) {
  cluster::Node node;
  if (node.size() != 2) {
    err << "bench shuffle-lat: needs exactly 2 ranks, got " << node.size() << '\n';
    return 2;
  }
  const int me = node.rank();
  const std::size_t tuple_bytes = params.at("tuple_bytes").get<std::size_t>();
  const std::size_t iterations = params.at("iterations").get<std::size_t>();
  const std::size_t warmup = params.at("warmup").get<std::size_t>();
  const auto segments = params.at("segments").get<std::uint32_t>();
  const auto segment_bytes = params.at("segment_bytes").get<std::uint32_t>();
  const auto timeout = std::chrono::milliseconds(params.at("consume_timeout_ms").get<long>());
  if (me == 0) {
    flow::create_flow(
        node, latency_spec("bench-shuffle-lat-a", 0, 1, tuple_bytes, segments, segment_bytes));
    flow::create_flow(
        node, latency_spec("bench-shuffle-lat-b", 1, 0, tuple_bytes, segments, segment_bytes));
  }
  // Each rank hosts the target of one flow and the source of the other; opening the target first
  // publishes its ring, so the peer's source can connect while we wait for ours.
  fabric::Worker worker(node.fabric(), "shuffle-lat rank " + std::to_string(me));
  flow::ShuffleTarget target(node, me == 0 ? "bench-shuffle-lat-b" : "bench-shuffle-lat-a", 0);
  flow::ShuffleSource source(node, worker, me == 0 ? "bench-shuffle-lat-a" : "bench-shuffle-lat-b",
                             0);
  node.barrier("bench/shuffle-lat/open");
  const bool progress = !source.direct();

  std::vector<std::byte> tuple(tuple_bytes, std::byte{0x5a});
  flow::TupleBatch batch;
  const std::size_t total = warmup + iterations;
  json report = {{"rank", me}, {"fabric", node.fabric().describe()}, {"direct", source.direct()}};
  if (me == 0) {
    std::vector<double> rtt_us;
    rtt_us.reserve(iterations);
    Clock::time_point previous = Clock::now();
    for (std::uint64_t i = 1; i <= total; ++i) {
      std::memcpy(tuple.data(), &i, sizeof i);
      source.push(tuple.data(), tuple.size()).throw_if_error();
      next_batch(target, worker, progress, batch, timeout).throw_if_error();
      std::uint64_t echoed = 0;
      if (batch.count != 1 || (std::memcpy(&echoed, batch.data, sizeof echoed), echoed != i)) {
        throw Error(Errc::protocol, "bench shuffle-lat: round trip " + std::to_string(i) +
                                        " returned " + std::to_string(batch.count) +
                                        " tuple(s), sequence " + std::to_string(echoed));
      }
      const Clock::time_point now = Clock::now();
      if (i > warmup)
        rtt_us.push_back(std::chrono::duration<double, std::micro>(now - previous).count());
      previous = now;
    }
    source.close().throw_if_error();
    // The peer closes B after it saw A end.
    next_batch(target, worker, progress, batch, timeout).throw_if_error();
    if (!batch.empty())
      throw Error(Errc::protocol, "bench shuffle-lat: an extra tuple came back on flow B");
    double sum = 0;
    for (double v : rtt_us) sum += v;
    const flow::FlowCounters c = source.counters();
    report["median_us"] = median(rtt_us);
    report["p99_us"] = percentile(rtt_us, 99);
    report["mean_us"] = rtt_us.empty() ? 0 : sum / static_cast<double>(rtt_us.size());
    report["min_us"] = rtt_us.empty() ? 0 : *std::min_element(rtt_us.begin(), rtt_us.end());
    report["stalls"] = c.stalls;
    err << "bench shuffle-lat: " << tuple_bytes << " B round trip: median "
        << report["median_us"].get<double>() << " us, p99 " << report["p99_us"].get<double>()
        << " us over " << rtt_us.size() << " round trips\n";
  } else {
    std::uint64_t echoed = 0;
    for (;;) {
      next_batch(target, worker, progress, batch, timeout).throw_if_error();
      if (batch.empty()) break;
      for (std::size_t k = 0; k < batch.count; ++k) source.push(batch.tuple(k), tuple_bytes).throw_if_error();
      echoed += batch.count;
    }
    source.close().throw_if_error();
    if (echoed != total) {
      throw Error(Errc::protocol, "bench shuffle-lat: echoed " + std::to_string(echoed) +
                                      " tuples, expected " + std::to_string(total));
    }
  }
  node.barrier("bench/shuffle-lat/done");
  if (me == 0) report_rank_result(out, report);
  node.finish();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Driver

class ShuffleLat final : public Scenario {
 public:
  std::string name() const override { return "shuffle-lat"; }
  std::string title() const override {
    return "Latency-mode shuffle: 64 B round trip through two flows (003 Fig 7b) vs ucx_perftest";
  }
  std::string description() const override {
    return "Two ranks, two latency-mode shuffle flows: rank 0 pushes a tuple on flow A to rank "
           "1, which pushes it back on flow B; rank 0 times each round trip (push to consume of "
           "the echo) and reports the median and 99th percentile. Baselines: ucx_perftest "
           "ucp_put_lat and ucp_am_lat ping-pongs with the same size and iterations; they report "
           "one way (half the round trip), so their numbers are multiplied by 2 here: every "
           "value is a full round trip.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"tuple_bytes", 64, 64, "tuple width in bytes (>= 16, multiple of 8)"},
        {"iterations",
         {{"shm", 20000}, {"tcp", 2000}},
         {{"shm", 200000}, {"tcp", 20000}},
         "timed round trips (DFI and each ucx_perftest run)"},
        {"segments", 32, 32, "segments (credits) per latency-mode ring"},
        {"segment_bytes", 0, 0,
         "latency-mode segment size including the 16 B footer; 0: the flow default (one tuple "
         "plus footer)"},
        {"timeout_s", 60, 300, "bound of each DFI cluster run and each ucx_perftest run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"ucx_perftest",
             "ucp_put_lat and ucp_am_lat ping-pongs at the tuple size, -R 50 and -R 99 (the "
             "percentile over the last 2048 iterations), reported one way by ucx_perftest and "
             "multiplied by 2 here (round trip); server and client as two local processes over "
             "127.0.0.1, UCX_TLS=sm (shm) or UCX_TLS=tcp UCX_NET_DEVICES=lo (tcp)"}};
  }
  std::string unavailable(const RunContext& context) const override {
    (void)context;
    return perftest_unavailable();
  }

  void run(RunContext& context, Result& result) override {
    const std::size_t tuple_bytes = context.param("tuple_bytes");
    const std::size_t iterations = context.param("iterations");
    const std::size_t warmup = std::max<std::size_t>(100, iterations / 10);
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    if (tuple_bytes < 16 || tuple_bytes % 8 != 0)
      throw Error(Errc::invalid_argument, "bench shuffle-lat: tuple_bytes must be >= 16, x8");
    const bool am_lat = perftest_supports("ucp_am_lat");

    json parameters = context.resolved_parameters();
    parameters["warmup"] = warmup;
    result.set_parameters(parameters);
    result.add_baseline("ucx_perftest", baselines()[0].description + "; UCX " + ucx_version());
    result.add_note(
        "All values are round trips. ucx_perftest prints one-way latency (half its ping-pong "
        "round trip); the baseline values here are 2 x that number.");
    result.add_note(
        "DFI times every round trip with steady_clock (one reading per round trip, about 20 ns "
        "on this kind of VM, included in the DFI numbers); its percentiles cover all timed "
        "round trips, ucx_perftest's only the last 2048.");
    if (!am_lat) result.add_note("This ucx_perftest has no ucp_am_lat; that baseline is missing.");

    const std::string size = std::to_string(tuple_bytes) + " B";
    Panel& panel = result.panel("rtt", size + " round trip", {"statistic", "", "category"},
                                {"round-trip time", "us", "linear"}, Better::lower);
    panel.series("dfi", Role::dfi, "DFI: flow A there, flow B back (latency mode)",
                 "push on flow A, consume the echo on flow B; timed on rank 0");
    panel.series("ucp_put_lat", Role::baseline, "ucx_perftest ucp_put_lat x 2",
                 "put ping-pong; ucx_perftest's one-way number times 2");
    panel.compare("dfi", "ucp_put_lat", 1.25);
    if (am_lat) {
      panel.series("ucp_am_lat", Role::baseline, "ucx_perftest ucp_am_lat x 2",
                   "active-message ping-pong; ucx_perftest's one-way number times 2");
      panel.compare("dfi", "ucp_am_lat");
    }

    RankJob job;
    job.nodes = 2;
    job.scenario = name();
    job.params = {{"tuple_bytes", tuple_bytes},
                  {"iterations", iterations},
                  {"warmup", warmup},
                  {"segments", context.param("segments")},
                  {"segment_bytes", context.param("segment_bytes")},
                  {"consume_timeout_ms", std::chrono::milliseconds(timeout).count()}};
    job.timeout = timeout;
    const std::string dfi_command = rank_job_command(job, context);

    for (int rep = 1; rep <= context.repeat; ++rep) {
      const std::string round =
          "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat);
      auto run_dfi = [&] {
        context.say(round + ": DFI, 2 ranks over " +
                    (context.netns ? "netns tcp" : context.transport));
        std::map<int, json> reports = run_rank_job(job, context);
        if (!reports.count(0))
          throw Error(Errc::protocol, "bench shuffle-lat: rank 0 reported no result");
        const json& r = reports.at(0);
        panel.add("dfi", kMedian, r.at("median_us").get<double>());
        panel.add("dfi", kP99, r.at("p99_us").get<double>());
        panel.add_command("dfi", dfi_command);
      };
      auto run_baselines = [&] {
        for (const char* test : {"ucp_put_lat", "ucp_am_lat"}) {
          if (std::string(test) == "ucp_am_lat" && !am_lat) continue;
          for (const char* rank : {"50", "99"}) {
            PerftestRun run;
            run.test = test;
            run.message_bytes = tuple_bytes;
            run.iterations = iterations;
            run.warmup = warmup;
            run.transport = context.transport;
            run.timeout = timeout;
            run.extra_args = {"-R", rank};
            PerftestResult pr = run_perftest(run);
            const double rtt = 2 * pr.final.latency_p50_us;  // the -R percentile, one way
            context.say(round + ": ucx_perftest " + test + " " + size + " -R " + rank + ": " +
                        std::to_string(pr.final.latency_p50_us) + " us one way");
            panel.add(test, std::string(rank) == "50" ? kMedian : kP99, rtt);
            panel.add_command(test, pr.command);
          }
        }
      };
      run_alternating(rep, run_dfi, run_baselines);
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return run_lat_rank(params, out, err);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_shuffle_lat_scenario() { return std::make_unique<ShuffleLat>(); }

}  // namespace dfi::tools::bench
