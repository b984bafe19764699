// Scenario driven-shuffle (000 Fig 9): a 4-rank CPU-to-CPU key shuffle, bandwidth vs tuple size,
// network-driven (a driven shuffle flow through one data mover) against the DFI shuffle flow and
// OpenMPI's MPI_Alltoallv, all in the same run; plus the processing units' CPU cost per pushed
// tuple, driven vs flow.
//
// Rank layout. Flow and MPI: 4 ranks, each one producer (source) and one consumer (target) of a
// 4:4 key shuffle. Driven: the same 4 PU ranks (producer thread 0 and consumer 0 on each) plus a
// fifth rank that is only the data mover (driven::Mover in one thread), as in 000 where the
// mover is the switch: the PUs' shuffle is the same 4:4 as the flow's and MPI's. All ranks share
// the machine's cores: the mover's copies (on shm) are CPU time the flow's sources spend
// themselves, so the driven side is not given an extra core.
//
// Both DFI sides push the tuples of tuple_block.hpp with key-hash routing, tuple at a time
// (driven::Producer::push, flow::ShuffleSource::push), and every consumer sums the key of every
// tuple; aggregate GB/s = all tuple bytes delivered / (last end of stream at any consumer - the
// first release from the start barrier), as in shuffle-nm. MPI: bench/mpi/mpi_alltoall.cpp in
// batched mode (partition, MPI_Alltoall of counts, one MPI_Alltoallv, consume), the same tuple
// size and tuples per rank, its own time (slowest rank from a barrier to all its tuples) and its
// own check of counts, key sums and routing. The driver checks counts and key sums of both DFI
// sides.
//
// PU cost: perf's instruction counters are not available on this VM (`perf stat -e
// instructions:u true` says <not supported>), so the cost is CPU time, per pushed tuple:
//   push_cpu   separate runs (cost_bytes_per_source per producer) whose rings hold twice a
//              producer's share, so no push waits for space: CLOCK_THREAD_CPUTIME_ID of the
//              producer thread over its push loop and flush (close, which waits for the mover or
//              the targets, left out). Driven vs flow is the PU cost (target <= 0.25x),
//              next to the floor of any push: the same loop routing and copying into a local
//              segment buffer per consumer, no flow. Both sides write fresh ring memory here (the
//              flow's source its staging segments and, on shm, the target's ring), page faults
//              included;
//   producer_cpu  the same thread in the bandwidth runs, push loop and close: waiting for ring
//              space included (both sides wait with the same Backoff: spin, yield, sleep);
//   process_cpu   getrusage(RUSAGE_SELF) of the PU ranks from the start barrier until their
//              threads are joined; helper_cpu: that minus the producer's and the consumer's
//              thread CPU, i.e. the progress thread, which over tcp serves UCX's emulated gets
//              and puts of the mover; the mover rank's process CPU is shown apart.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "cluster_job.hpp"
#include "cpu_time.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/driven/consumer.hpp"
#include "dfi/driven/flow.hpp"
#include "dfi/driven/mover.hpp"
#include "dfi/driven/producer.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/kernels/hash.hpp"
#include "mpi_baseline.hpp"
#include "rank_threads.hpp"
#include "scenarios.hpp"
#include "tuple_block.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kName = "driven-shuffle";
constexpr int kPuRanks = 4;
constexpr double kCostTarget = 0.25;  // driven producer CPU per item vs the flow's

std::int64_t ns_since_epoch(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

struct Point {
  std::size_t tuple_bytes = 0;
  std::uint64_t tuples = 0;     // per producer
  std::uint32_t segments = 0;   // per ring
};

// What one PU rank did for one point; the driver adds the ranks up.
struct PuReport {
  std::uint64_t sent = 0, received = 0, received_sum = 0, stalls = 0;
  std::int64_t start_ns = 0, end_ns = 0, producer_cpu_ns = 0, push_cpu_ns = 0, consumer_cpu_ns = 0,
               process_cpu_ns = 0, local_cpu_ns = 0;
  json to_json(std::size_t tuple_bytes) const {
    return {{"sent_tuples", sent},
            {"sent_key_sum", expected_key_sum(sent, block_tuples(tuple_bytes))},
            {"received_tuples", received},
            {"received_key_sum", received_sum},
            {"stalls", stalls},
            {"start_ns", start_ns},
            {"end_ns", end_ns},
            {"producer_cpu_ns", producer_cpu_ns},
            {"push_cpu_ns", push_cpu_ns},
            {"consumer_cpu_ns", consumer_cpu_ns},
            {"process_cpu_ns", process_cpu_ns},
            {"local_cpu_ns", local_cpu_ns}};
  }
};


// The producer's push loop, the same for both sides: tuple at a time through the 64 KiB block.
template <class Push>
void push_all(const Point& point, Push&& push) {
  const std::size_t tb = point.tuple_bytes;
  std::vector<std::byte> tuples(block_tuples(tb) * tb);
  fill_tuple_block(tuples, tb);
  const std::byte* p = tuples.data();
  const std::byte* const end = tuples.data() + tuples.size();
  for (std::uint64_t i = 0; i < point.tuples; ++i) {
    if (Status s = push(p, tb); !s) [[unlikely]]
      throw Error(s.code(), s.message());
    p += tb;
    if (p == end) p = tuples.data();
  }
}

// The floor under any push, no flow at all: the same loop routing every tuple with the flows' key
// hash and copying it into a segment-sized buffer per consumer (a full buffer starts over).
// Both producers do at least this; its CPU time per tuple bounds how far below the flow's the
// driven producer can go. Measured on the producer thread before the start barrier.
std::int64_t local_push_cpu_ns(const Point& point, std::size_t segment_bytes) {
  const std::size_t tb = point.tuple_bytes;
  const std::size_t capacity = std::max(tb, segment_bytes / tb * tb);
  std::vector<std::vector<std::byte>> segments(kPuRanks, std::vector<std::byte>(capacity));
  std::vector<std::size_t> fill(kPuRanks, 0);
  const std::int64_t cpu = thread_cpu_ns();
  push_all(point, [&](const std::byte* tuple, std::size_t bytes) {
    const std::size_t d = kernels::route(kernels::load_key(tuple, sizeof(std::uint64_t)), kPuRanks);
    std::memcpy(segments[d].data() + fill[d], tuple, bytes);
    if ((fill[d] += bytes) == capacity) {
      asm volatile("" : : "r"(segments[d].data()) : "memory");  // the segment "goes out"
      fill[d] = 0;
    }
    return Status::ok();
  });
  return thread_cpu_ns() - cpu;
}

std::string point_prefix(std::size_t index) { return std::string("bench/") + kName + "/" + std::to_string(index) + "/"; }

// One point on a PU rank: a consumer and a producer thread, both sides.
json run_pu(cluster::Node& node, const json& params, const Point& point, std::size_t index, bool driven) {
  const std::size_t tb = point.tuple_bytes;
  const auto timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  flow::FlowSpec spec;
  spec.name = std::string("bench-") + kName + (driven ? "-driven-" : "-flow-") + std::to_string(index);
  for (int r = 0; r < kPuRanks; ++r) {
    spec.sources.push_back({r, 0});
    spec.targets.push_back({r, 0});
  }
  spec.schema = tuple_block_schema(tb);
  spec.key_column = "key";
  spec.options.segments = point.segments;
  spec.options.segment_bytes = params.at("segment_bytes").get<std::uint32_t>();
  if (driven) {
    spec.type = driven::kDriven;
    spec.type_options = driven::DrivenOptions{.pattern = driven::Pattern::shuffle};
  }
  if (node.rank() == 0) flow::create_flow(node, spec);

  PuReport report;
  RankThreads threads(std::string("bench ") + kName + ": rank " + std::to_string(node.rank()));
  threads.start("consumer", [&](RankThreads::Gate& gate) {
    flow::TupleBatch batch;
    auto consume_all = [&](auto& in) {
      const std::int64_t cpu = thread_cpu_ns();
      for (;;) {
        if (Status s = in.consume(batch, timeout); !s) throw Error(s.code(), s.message());
        if (batch.empty()) break;
        report.received_sum += sum_tuple_keys(batch.data, batch.count, tb);
        report.received += batch.count;
      }
      report.end_ns = ns_since_epoch(Clock::now());
      report.consumer_cpu_ns = thread_cpu_ns() - cpu;
    };
    if (driven) {
      driven::Consumer in(node, spec.name, 0);
      gate.ready_and_wait();
      consume_all(in);
    } else {
      flow::ShuffleTarget in(node, spec.name, 0);
      gate.ready();  // open: the sources may connect; consuming starts at once
      consume_all(in);
    }
  });
  threads.start("producer", [&](RankThreads::Gate& gate) {
    // the timed part, the same for both sides
    auto produce = [&](auto& out) {
      gate.ready_and_wait();
      const std::int64_t cpu = thread_cpu_ns();
      push_all(point, [&](const std::byte* t, std::size_t b) { return out.push(t, b); });
      if (Status s = out.flush(); !s) throw Error(s.code(), s.message());
      report.push_cpu_ns = thread_cpu_ns() - cpu;
      if (Status s = out.close(); !s) throw Error(s.code(), s.message());
      report.producer_cpu_ns = thread_cpu_ns() - cpu;
      report.stalls = out.counters().stalls;
    };
    if (driven) {
      driven::Producer out(node, spec.name, 0);
      produce(out);
      report.sent = point.tuples;  // every push succeeded (a failed one throws)
    } else {
      fabric::Worker worker(node.fabric(), std::string(kName) + " source");
      flow::ShuffleSource out(node, worker, spec.name, 0);
      if (params.at("cost").get<bool>()) report.local_cpu_ns = local_push_cpu_ns(point, spec.options.segment_bytes);
      produce(out);
      report.sent = out.counters().tuples;
    }
  });
  std::int64_t cpu = 0;
  const Clock::time_point start = threads.release([&] {
    node.barrier(point_prefix(index) + (driven ? "driven" : "flow") + "/start");
    cpu = process_cpu_ns();
  });
  threads.join();
  report.process_cpu_ns = process_cpu_ns() - cpu;
  report.start_ns = ns_since_epoch(start);
  return report.to_json(tb);
}

// One point on the mover rank (driven only): the mover in its own thread.
json run_mover(cluster::Node& node, const json& params, std::size_t index) {
  const auto timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  const std::string name = std::string("bench-") + kName + "-driven-" + std::to_string(index);
  driven::MoverCounters counters;
  std::int64_t thread_cpu = 0;
  RankThreads threads(std::string("bench ") + kName + ": mover rank " + std::to_string(node.rank()));
  threads.start("mover", [&](RankThreads::Gate& gate) {
    driven::Mover mover(node);
    mover.add_flow(name, timeout);
    gate.ready_and_wait();
    const std::int64_t cpu = thread_cpu_ns();
    if (Status s = mover.run(timeout); !s) throw Error(s.code(), s.message());
    thread_cpu = thread_cpu_ns() - cpu;
    counters = mover.counters();
  });
  std::int64_t cpu = 0;
  threads.release([&] {
    node.barrier(point_prefix(index) + "driven/start");
    cpu = process_cpu_ns();
  });
  threads.join();
  return {{"mover", true},
          {"segments", counters.segments},
          {"bytes", counters.bytes},
          {"idle_steps", counters.idle_steps},
          {"thread_cpu_ns", thread_cpu},
          {"process_cpu_ns", process_cpu_ns() - cpu}};
}

int run_rank_program(const json& params, std::ostream& out, std::ostream& err) {
  cluster::Node node;
  const bool driven = params.at("side").get<std::string>() == "driven";
  json points = json::array();
  std::size_t index = 0;
  for (const json& p : params.at("points")) {
    const Point point{p.at("tuple_bytes").get<std::size_t>(), p.at("tuples").get<std::uint64_t>(),
                      p.at("segments").get<std::uint32_t>()};
    points.push_back(node.rank() < kPuRanks ? run_pu(node, params, point, index, driven)
                                            : run_mover(node, params, index));
    node.barrier(point_prefix(index) + "done");
    ++index;
  }
  report_rank_result(out, {{"rank", node.rank()}, {"points", points}});
  node.finish();
  (void)err;
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Driver

class DrivenShuffle final : public Scenario {
 public:
  std::string name() const override { return kName; }
  std::string title() const override {
    return "4-rank shuffle: network-driven (one mover) vs DFI shuffle flow vs MPI_Alltoallv";
  }
  std::string description() const override {
    return "A 4:4 key-hash shuffle, every rank one producer and one consumer, bandwidth vs tuple size. Driven: a "
           "driven shuffle flow (driven::Producer::push / driven::Consumer, local loads and stores only) on 4 PU "
           "ranks and one data mover (driven::Mover) on a fifth rank that moves the segments. Baselines, "
           "interleaved in the same run: the DFI shuffle flow (ShuffleSource::push / ShuffleTarget) on the same 4 "
           "ranks and the same tuples, and OpenMPI's batched MPI_Alltoallv (bench/mpi/mpi_alltoall.cpp --mode "
           "batched, 4 ranks, the same tuple size and tuples per rank). Aggregate GB/s = tuple bytes delivered / "
           "(last end of stream - first release from the start barrier); MPI: its own slowest rank. Counts and "
           "key sums checked on every side. PU cost: the producer thread's CPU time per pushed tuple "
           "(CLOCK_THREAD_CPUTIME_ID; perf's instruction counters are not supported on this VM), driven vs flow, "
           "target <= 0.25x, next to the floor of any push (key hash + copy into a local buffer, no flow); and the PU ranks' process CPU time per tuple (every thread: over tcp the progress "
           "thread serving UCX's emulated gets and puts), plus the mover rank's.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"tuple_sizes", json::array({64, 1024}), json::array({16, 64, 256, 1024}),
         "tuple sizes in bytes (>= 16, multiples of 8)"},
        {"bytes_per_source", {{"shm", 32u << 20}, {"tcp", 8u << 20}}, {{"shm", 128u << 20}, {"tcp", 32u << 20}},
         "tuple bytes each producer pushes"},
        {"max_tuples_per_source", {{"shm", 1000000}, {"tcp", 250000}}, {{"shm", 4000000}, {"tcp", 1000000}},
         "upper bound of tuples per producer"},
        {"segments", {{"shm", 32}, {"tcp", 8}}, {{"shm", 32}, {"tcp", 8}},
         "segments per ring in the bandwidth runs, both DFI sides (the flow defaults)"},
        {"cost_bytes_per_source", {{"shm", 4u << 20}, {"tcp", 2u << 20}}, {{"shm", 8u << 20}, {"tcp", 4u << 20}},
         "tuple bytes each producer pushes in the PU cost runs (rings sized to hold them)"},
        {"segment_bytes", {{"shm", 8208}, {"tcp", 32784}}, {{"shm", 8208}, {"tcp", 32784}},
         "segment size including the 16 B footer, both DFI sides (the flow defaults)"},
        {"mpi", true, true, "also run the MPI_Alltoallv baseline"},
        {"timeout_s", 120, 600, "bound of each cluster run and of every wait inside it"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"DFI shuffle flow", "the same 4:4 key-hash shuffle with ShuffleSource/ShuffleTarget on the same 4 ranks, "
                                 "the same tuples, the same ring shape"},
            {"MPI_Alltoallv", "OpenMPI batched all-to-all (bench/mpi/mpi_alltoall.cpp --mode batched) on 4 ranks, the "
                              "same tuple size and tuples per rank (its own random keys)"}};
  }

  void run(RunContext& context, Result& result) override {
    const std::vector<std::size_t> sizes = context.param("tuple_sizes");
    const std::size_t bytes = context.param("bytes_per_source");
    const std::uint64_t max_tuples = context.param("max_tuples_per_source");
    const std::size_t cost_bytes = context.param("cost_bytes_per_source");
    const std::uint32_t segments = context.param("segments");
    const std::size_t segment_payload = context.param("segment_bytes").get<std::size_t>() - 16;
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    std::vector<Point> points, cost_points;
    for (std::size_t s : sizes) {
      if (s < 16 || s % 8 != 0)
        throw Error(Errc::invalid_argument, "bench driven-shuffle: tuple size " + std::to_string(s) +
                                                " must be a multiple of 8 and at least 16");
      points.push_back({s, std::clamp<std::uint64_t>(bytes / s, 1000, max_tuples), segments});
      // cost runs: every ring holds twice its share of the producer's tuples, so no push waits
      const std::uint64_t tuples = std::max<std::uint64_t>(1000, cost_bytes / s);
      const std::uint64_t per_ring = (tuples + kPuRanks - 1) / kPuRanks;
      const std::uint64_t per_segment = std::max<std::uint64_t>(1, segment_payload / s);
      cost_points.push_back({s, tuples, static_cast<std::uint32_t>(2 * ((per_ring + per_segment - 1) / per_segment) + 4)});
    }
    auto plan = [](const std::vector<Point>& ps) {
      json planned = json::array();
      for (const Point& p : ps)
        planned.push_back({{"tuple_bytes", p.tuple_bytes}, {"tuples", p.tuples}, {"segments", p.segments}});
      return planned;
    };
    json parameters = context.resolved_parameters();
    parameters["points"] = plan(points);
    parameters["cost_points"] = plan(cost_points);
    result.set_parameters(parameters);
    const std::string why_no_mpi = context.param("mpi").get<bool>() ? mpi_unavailable() : "not asked for (mpi=false)";
    const bool mpi = why_no_mpi.empty();
    result.add_baseline(baselines()[0].name, baselines()[0].description);
    if (mpi) result.add_baseline(baselines()[1].name, baselines()[1].description);
    else result.add_note("MPI_Alltoallv baseline not run: " + why_no_mpi);
    const bool tcp = context.transport == "tcp" || context.netns;
    result.add_note("Rank layout: flow and MPI 4 ranks (each a producer and a consumer); driven the same 4 PU "
                    "ranks plus a 5th rank that only runs the mover. Every rank shares the machine's cores, so the "
                    "mover's work is CPU time taken from the PUs, not an extra core.");
    result.add_note("PU cost is CPU time, not instructions: `perf stat -e instructions:u` reports <not supported> "
                    "on this VM. push_cpu: separate runs of cost_bytes_per_source per producer with rings that hold "
                    "twice a producer's share (no push waits for space; ring-full waits are printed), the producer "
                    "thread's CPU over its push loop and flush (close, which waits for the mover or the targets, "
                    "left out). producer_cpu: the bandwidth runs, the whole push loop and close, waiting for ring "
                    "space included (both sides wait with the same Backoff: spin, yield, then sleep).");
    result.add_note("push_cpu runs write fresh ring memory on both sides (page faults included); the no-flow floor "
                    "reuses one segment buffer per consumer, cache-resident.");
    if (tcp) {
      result.add_note("tcp: UCX emulates the mover's gets and puts with active messages that the PU ranks' "
                      "progress threads serve; that CPU time is in the PU process cost and helper_cpu (process minus "
                      "producer and consumer threads), not in the producer's.");
    }

    const Axis size{"tuple size", "B", "log2"};
    Panel& bandwidth = result.panel("bandwidth", "4:4 shuffle, aggregate over all ranks", size,
                                    {"aggregate tuple bandwidth", "GB/s"}, Better::higher);
    bandwidth.series("driven", Role::dfi, "driven shuffle flow, 4 PU ranks + 1 mover rank");
    bandwidth.series("flow", Role::baseline, "DFI shuffle flow 4:4");
    bandwidth.compare("driven", "flow");
    if (mpi) {
      bandwidth.series("mpi", Role::baseline, "MPI_Alltoallv (batched), 4 ranks");
      bandwidth.compare("driven", "mpi");
    }
    Panel& push = result.panel("push_cpu", "PU cost: producer CPU per tuple, rings never full",
                               size, {"CPU time per tuple", "ns"}, Better::lower);
    push.series("driven", Role::dfi, "driven::Producer::push");
    push.series("flow", Role::baseline, "ShuffleSource::push");
    push.series("local", Role::baseline, "no flow: key hash + copy into a local segment per consumer (the floor of any push)");
    push.compare("driven", "flow", kCostTarget);
    push.compare("driven", "local");
    Panel& producer = result.panel("producer_cpu", "Producer CPU per tuple, bandwidth runs (waits, close)",
                                   size, {"CPU time per tuple", "ns"}, Better::lower);
    producer.series("driven", Role::dfi, "driven::Producer::push");
    producer.series("flow", Role::baseline, "ShuffleSource::push");
    producer.compare("driven", "flow");
    Panel& process = result.panel("process_cpu", "PU ranks' process CPU per tuple (all threads)", size,
                                  {"CPU time per tuple", "ns"}, Better::lower);
    process.series("driven", Role::dfi, "driven PU ranks");
    process.series("driven_mover", Role::dfi, "driven mover rank (not a PU; the switch in 000)");
    process.series("flow", Role::baseline, "flow ranks");
    process.compare("driven", "flow");
    Panel& helpers = result.panel("helper_cpu", "PU CPU outside producer/consumer (progress thread)",
                                  size, {"CPU time per tuple", "ns"}, Better::lower);
    helpers.series("driven", Role::dfi, "driven PU ranks");
    helpers.series("flow", Role::baseline, "flow ranks");
    helpers.compare("driven", "flow");

    RankJob job;
    job.scenario = name();
    job.params = {{"cost", false},
                  {"segment_bytes", context.param("segment_bytes")},
                  {"timeout_ms", std::chrono::milliseconds(timeout).count()}};
    job.timeout = timeout * 2;

    auto measure_dfi = [&](bool driven, bool cost, int rep) {
      const std::string side = driven ? "driven" : "flow";
      const std::vector<Point>& run_points = cost ? cost_points : points;
      RankJob j = job;
      j.nodes = driven ? kPuRanks + 1 : kPuRanks;
      j.params["side"] = side;
      j.params["cost"] = cost;
      j.params["points"] = plan(run_points);
      context.say("repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) + ": " + side +
                  (cost ? " (PU cost, rings never full)" : "") + " over " + (context.netns ? "netns tcp" : context.transport));
      const std::map<int, json> reports = run_rank_job(j, context);
      const std::string command = rank_job_command(j, context);
      for (int r = 0; r < j.nodes; ++r) {
        if (!reports.count(r))
          throw Error(Errc::protocol, "bench driven-shuffle: " + side + " rank " + std::to_string(r) + " reported nothing");
      }
      for (std::size_t i = 0; i < run_points.size(); ++i) {
        const Point& point = run_points[i];
        std::uint64_t sent = 0, sent_sum = 0, received = 0, received_sum = 0, stalls = 0;
        std::int64_t start = INT64_MAX, end = INT64_MIN, producer_cpu = 0, push_cpu = 0, pu_cpu = 0, local_cpu = 0, consumer_cpu = 0;
        for (int r = 0; r < kPuRanks; ++r) {
          const json& p = reports.at(r).at("points").at(i);
          sent += p.at("sent_tuples").get<std::uint64_t>();
          sent_sum += p.at("sent_key_sum").get<std::uint64_t>();
          received += p.at("received_tuples").get<std::uint64_t>();
          received_sum += p.at("received_key_sum").get<std::uint64_t>();
          stalls += p.at("stalls").get<std::uint64_t>();
          start = std::min(start, p.at("start_ns").get<std::int64_t>());
          end = std::max(end, p.at("end_ns").get<std::int64_t>());
          producer_cpu += p.at("producer_cpu_ns").get<std::int64_t>();
          push_cpu += p.at("push_cpu_ns").get<std::int64_t>();
          consumer_cpu += p.at("consumer_cpu_ns").get<std::int64_t>();
          pu_cpu += p.at("process_cpu_ns").get<std::int64_t>();
          local_cpu += p.at("local_cpu_ns").get<std::int64_t>();
        }
        const std::size_t tb = point.tuple_bytes;
        const std::uint64_t expected = point.tuples * kPuRanks;
        if (sent != expected || received != sent || received_sum != sent_sum) {
          throw Error(Errc::protocol, "bench driven-shuffle: " + side + ", " + std::to_string(tb) + " B: sent " +
                                          std::to_string(sent) + " tuples (key sum " + std::to_string(sent_sum) +
                                          "), received " + std::to_string(received) + " (key sum " +
                                          std::to_string(received_sum) + "), expected " + std::to_string(expected));
        }
        const double per = static_cast<double>(sent);
        std::string said = "  " + std::to_string(tb) + " B: ";
        if (cost) {
          const double push_ns = static_cast<double>(push_cpu) / per;
          push.add(side, tb, push_ns);
          push.add_command(side, command);
          said += "push " + format_fixed(push_ns, 1) + " ns/tuple (" + std::to_string(point.segments) +
                  " segments per ring, ring-full waits " + std::to_string(stalls) + ")";
          if (!driven) {
            const double local_ns = static_cast<double>(local_cpu) / per;
            push.add("local", tb, local_ns);
            push.add_command("local", command);
            said += ", no-flow push floor " + format_fixed(local_ns, 1) + " ns/tuple";
          }
          context.say(said);
          continue;
        }
        const double seconds = static_cast<double>(end - start) / 1e9;
        const double gbps = seconds > 0 ? static_cast<double>(received * tb) / seconds / 1e9 : 0;
        const double producer_ns = static_cast<double>(producer_cpu) / per;
        const double pu_ns = static_cast<double>(pu_cpu) / per;
        bandwidth.add(side, tb, gbps);
        bandwidth.add_command(side, command);
        producer.add(side, tb, producer_ns);
        producer.add_command(side, command);
        process.add(side, tb, pu_ns);
        process.add_command(side, command);
        const double helper_ns = static_cast<double>(pu_cpu - producer_cpu - consumer_cpu) / per;
        helpers.add(side, tb, helper_ns);
        helpers.add_command(side, command);
        said += format_fixed(gbps, 3) + " GB/s; producer " + format_fixed(producer_ns, 1) + " ns/tuple, PU processes " +
                format_fixed(pu_ns, 1) + " ns/tuple (outside producer and consumer " + format_fixed(helper_ns, 1) +
                "), ring-full waits " + std::to_string(stalls);
        if (driven) {
          const json& m = reports.at(kPuRanks).at("points").at(i);
          const double mover_ns = m.at("process_cpu_ns").get<double>() / per;
          process.add("driven_mover", tb, mover_ns);
          process.add_command("driven_mover", command);
          said += ", mover " + format_fixed(mover_ns, 1) + " ns/tuple (" + m.at("segments").dump() + " segments, " +
                  m.at("idle_steps").dump() + " idle passes)";
        }
        context.say(said);
      }
    };
    auto measure_mpi = [&](int rep) {
      for (const Point& p : points) {
        MpiRun m;
        m.program = "mpi_alltoall";
        m.ranks = kPuRanks;
        m.transport = tcp ? "tcp" : "shm";
        m.timeout = timeout;
        m.args = {"--mode", "batched", "--tuple-bytes", std::to_string(p.tuple_bytes), "--tuples-per-rank",
                  std::to_string(p.tuples)};
        const MpiResult r = run_mpi(m);
        if (!r.data.value("ok", false) || r.data.at("seconds").get<double>() <= 0)
          throw Error(Errc::protocol, "bench driven-shuffle: MPI delivered wrongly: " + r.data.dump() + "\n" + r.command);
        const double gbps = r.data.at("gbps");
        context.say("repetition " + std::to_string(rep) + ": MPI_Alltoallv " + std::to_string(p.tuple_bytes) +
                    " B: " + format_fixed(gbps, 3) + " GB/s");
        bandwidth.add("mpi", p.tuple_bytes, gbps);
        bandwidth.add_command("mpi", r.command);
      }
    };
    for (int rep = 1; rep <= context.repeat; ++rep) {
      run_alternating(rep, [&] { measure_dfi(true, false, rep); }, [&] {
        measure_dfi(false, false, rep);
        if (mpi) measure_mpi(rep);
      });
      run_alternating(rep, [&] { measure_dfi(true, true, rep); }, [&] { measure_dfi(false, true, rep); });
    }
  }

  // Errors propagate: BenchCli::run reports them, naming the scenario.
  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return run_rank_program(params, out, err);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_driven_shuffle_scenario() { return std::make_unique<DrivenShuffle>(); }

}  // namespace dfi::tools::bench
