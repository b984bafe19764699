// Scenario driven-lat (000 Fig 10): one-way latency of a 1:1 driven flow vs the offered rate, for
// several polling intervals of the data mover (DrivenOptions::poll_interval), next to DFI's shuffle
// flow in latency mode, in the same cluster run.
//
// Ranks: 0 the producer (one thread), 1 the consumer (one thread), 2 the mover (driven points
// only; it idles at the barriers of the baseline's points). Every point is a flow of its own, one
// after the other in one cluster run; per tuple size and rate the baseline and every polling
// interval follow each other (the baseline first on odd repetitions, last on even ones), so a
// drift in the machine's load hits them alike.
//
// Offered rate: the producer pushes tuple i when it is due, at start + i / rate. Whenever tuples
// are due it reads the clock once, writes that time (steady_clock, ns) and the tuple's number
// into each due tuple, pushes them, and flushes (driven: Producer::flush publishes the partial
// segment; the latency-mode flow publishes every tuple as its own segment anyway). So at low
// rates every segment carries one tuple, and a producer that fell behind (a ring was full, the
// thread was off the CPU) sends what is due in one segment: the PU side of adaptive batching.
// Between due times it waits with dfi::Backoff, spinning then yielding, never sleeping. It
// stops after `seconds` and closes.
//
// One-way latency = the consumer's steady_clock reading when a batch arrives - the stamp in each
// of its tuples. All ranks run on this one machine, where steady_clock (CLOCK_MONOTONIC) is the
// same clock in every process, so this is the one-way time itself, not half a round trip as in
// shuffle-lat (and 000, whose PUs are two hosts). The consumer polls with try_consume() and the
// same no-sleep Backoff (a sleep costs 60-150 us per wake-up on this VM: it would measure the
// consumer's naps, not the flow), checks every tuple's number (exactly once, in order), and
// reports the median and the 99th percentile over all tuples of the point. Over tcp the
// baseline's source progresses its worker while it waits (a latency-mode push may stay in UCX
// until then, as in shuffle-lat).
//
// The mover runs Mover::run(): after a pass that found nothing it sleeps poll_interval, or, with
// 0, backs off on its own (spin, yield, then sleeps of 1..wait_sleep_us). The doorbell series is
// DrivenOptions::doorbell with poll_interval 0: the mover reads the flow's words only after the
// producer rang (it publishes, and the mover had armed it) or the consumer gave a segment back,
// and between passes backs off the same way, reading only its own bell words.
//
// CPU per series: the mover rank reports the CPU time of its mover thread (CLOCK_THREAD_CPUTIME_ID)
// and of its whole process (getrusage) over the point, and each PU rank the CPU of its process
// minus its PU thread (the progress thread: over tcp it applies the mover's emulated gets, puts
// and word stores, and sends a bell's message to completion). The PU threads themselves spin by
// design and are not reported. Idle points (`idle_seconds`, one per mover series): the producer
// opens the flow and pushes nothing for that long, then closes: what each way of looking costs
// while there is nothing to move.
#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "cluster_job.hpp"
#include "cpu_time.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/error.hpp"
#include "dfi/driven/consumer.hpp"
#include "dfi/driven/flow.hpp"
#include "dfi/driven/producer.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "driven_mover_rank.hpp"
#include "rank_threads.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kName = "driven-lat";
constexpr int kBaseline = -1;  // Point::poll_us of the shuffle flow's points
constexpr int kDoorbell = -2;  // Point::poll_us of the doorbell series' points (the mover backs off)


std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// Waits that never sleep: spin, then yield for good (the wake-up of a sleep is what this
// scenario would otherwise measure).
BackoffSettings no_sleep() {
  BackoffSettings s = BackoffSettings::from_config();
  s.yield = std::numeric_limits<std::uint32_t>::max();
  return s;
}

struct Point {
  std::size_t tuple_bytes = 64;
  double rate = 1000;   // offered tuples per second; 0: an idle point (nothing pushed)
  int poll_us = 0;      // the mover's poll interval; kBaseline: the shuffle flow; kDoorbell
  bool baseline() const { return poll_us == kBaseline; }
  bool doorbell() const { return poll_us == kDoorbell; }
  bool idle() const { return rate == 0; }
  json to_json() const { return {{"tuple_bytes", tuple_bytes}, {"rate", rate}, {"poll_us", poll_us}}; }
  static Point from_json(const json& j) {
    return {j.at("tuple_bytes").get<std::size_t>(), j.at("rate").get<double>(), j.at("poll_us").get<int>()};
  }
};

std::string series_id(int poll_us) {
  return poll_us == kBaseline ? "flow" : poll_us == kDoorbell ? "doorbell" : "poll_" + std::to_string(poll_us) + "us";
}

std::string series_name(int poll_us) {
  if (poll_us == kDoorbell) return "driven, doorbell mode (the mover backs off between looks at its bells)";
  return "driven, mover polls every " + std::to_string(poll_us) + " µs" + (poll_us == 0 ? " (backoff)" : "");
}

std::string size_text(std::size_t bytes) {
  return bytes >= 1024 && bytes % 1024 == 0 ? std::to_string(bytes / 1024) + " KiB" : std::to_string(bytes) + " B";
}

// seq (the tuple's number), stamp (steady_clock ns at its push), payload.
flow::Schema lat_schema(std::size_t tuple_bytes) {
  return flow::Schema({{"seq", flow::Type::uint64, 1},
                       {"stamp", flow::Type::int64, 1},
                       {"payload", flow::Type::chars, static_cast<std::uint32_t>(tuple_bytes - 16)}});
}

flow::FlowSpec point_spec(const json& params, const Point& p, std::size_t index) {
  flow::FlowSpec spec;
  spec.name = std::string("bench-") + kName + "-" + std::to_string(index);
  spec.sources = {{0, 0}};
  spec.targets = {{1, 0}};
  spec.schema = lat_schema(p.tuple_bytes);
  spec.key_column = "seq";
  spec.options.segments = params.at("segments").get<std::uint32_t>();
  spec.options.stall_timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  if (p.baseline()) {
    spec.options.mode = flow::Mode::latency;  // one tuple per segment
  } else {
    spec.type = driven::kDriven;
    driven::DrivenOptions options;
    options.poll_interval = std::chrono::microseconds(p.doorbell() ? 0 : p.poll_us);
    options.doorbell = p.doorbell();
    spec.type_options = options;
  }
  return spec;
}

// Rank 0: pushes at the offered rate for `seconds` (see the top of the file), then closes.
template <class Out>
json produce(Out& out, fabric::Worker* progress, const Point& p, double seconds, Clock::time_point start) {
  if (p.idle()) {  // nothing to move for `seconds`: what the mover's looking costs by itself
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
    if (Status s = out.close(); !s) throw Error(s.code(), s.message());
    return {{"sent", 0}, {"flushes", 0}, {"push_seconds", seconds}, {"segments", 0}, {"stalls", 0}};
  }
  std::vector<std::byte> tuple(p.tuple_bytes, std::byte{0x5a});
  const double period_ns = 1e9 / p.rate;
  const std::int64_t begin = std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count();
  const std::int64_t end = begin + static_cast<std::int64_t>(seconds * 1e9);
  Backoff backoff(no_sleep(), 7);
  std::uint64_t sent = 0, flushes = 0;
  for (std::int64_t now = now_ns(); now < end; now = now_ns()) {
    const auto due = static_cast<std::uint64_t>(static_cast<double>(now - begin) / period_ns) + 1;
    if (sent >= due) {
      if (progress != nullptr) progress->progress();
      backoff.pause();
      continue;
    }
    backoff.reset();
    std::memcpy(tuple.data() + 8, &now, sizeof now);
    for (; sent < due; ++sent) {
      std::memcpy(tuple.data(), &sent, sizeof sent);
      if (Status s = out.push(tuple.data(), tuple.size()); !s) throw Error(s.code(), s.message());
    }
    if (Status s = out.flush(); !s) throw Error(s.code(), s.message());
    ++flushes;
  }
  const double pushed_for = static_cast<double>(now_ns() - begin) / 1e9;
  if (Status s = out.close(); !s) throw Error(s.code(), s.message());
  return {{"sent", sent}, {"flushes", flushes}, {"push_seconds", pushed_for}, {"segments", out.counters().segments},
          {"stalls", out.counters().stalls}};
}

// Rank 1: consumes until the end, one latency per tuple; checks numbers 0, 1, 2, ...
template <class In>
json consume(In& in, const Point& p, double seconds, std::chrono::milliseconds timeout) {
  std::vector<double> latency_us;
  latency_us.reserve(static_cast<std::size_t>(p.rate * seconds * 1.05) + 1024);
  flow::TupleBatch batch;
  Backoff backoff(no_sleep(), 11);
  std::uint64_t next = 0, disorder = 0, batches = 0;
  Clock::time_point last = Clock::now();
  for (std::uint64_t round = 1;; ++round) {
    Status s = in.try_consume(batch);
    if (s.code() == Errc::retry) {
      if ((round & 1023) == 0 && Clock::now() - last > timeout) {
        throw Error(Errc::timeout, std::string("bench ") + kName + ": nothing arrived within " +
                                       std::to_string(timeout.count()) + " ms");
      }
      backoff.pause();
      continue;
    }
    if (!s) throw Error(s.code(), s.message());
    if (batch.empty()) break;
    const std::int64_t arrived = now_ns();
    backoff.reset();
    ++batches;
    for (std::size_t i = 0; i < batch.count; ++i) {
      std::uint64_t seq = 0;
      std::int64_t stamp = 0;
      std::memcpy(&seq, batch.tuple(i), sizeof seq);
      std::memcpy(&stamp, batch.tuple(i) + 8, sizeof stamp);
      disorder += seq != next ? 1 : 0;
      next = seq + 1;
      latency_us.push_back(static_cast<double>(arrived - stamp) / 1e3);
    }
    last = Clock::now();
  }
  const std::size_t n = latency_us.size();
  if (n == 0) return {{"received", 0}, {"out_of_order", disorder}, {"batches", batches}, {"median_us", 0}, {"p99_us", 0}};
  return {{"received", n},
          {"out_of_order", disorder},
          {"batches", batches},
          {"median_us", median(latency_us)},
          {"p99_us", percentile(std::move(latency_us), 99)}};
}

std::string point_prefix(std::size_t index) { return std::string("bench/") + kName + "/" + std::to_string(index) + "/"; }

int run_rank_program(const json& params, std::ostream& out) {
  cluster::Node node;
  if (node.size() != 3) {
    throw Error(Errc::invalid_argument, std::string("bench ") + kName + ": needs 3 ranks, got " + std::to_string(node.size()));
  }
  const int me = node.rank();
  const double push_seconds = params.at("seconds");
  const double idle_seconds = params.value("idle_seconds", 0.0);
  const auto timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  fabric::Worker worker(node.fabric(), std::string(kName) + " rank " + std::to_string(me));
  json points = json::array();
  std::size_t index = 0;
  for (const json& j : params.at("points")) {
    const Point p = Point::from_json(j);
    const double seconds = p.idle() ? idle_seconds : push_seconds;
    const flow::FlowSpec spec = point_spec(params, p, index);
    if (me == 0) flow::create_flow(node, spec);
    const std::string start_barrier = point_prefix(index) + "start";
    json report = {{"rank", me}};
    std::int64_t cpu_start = 0, thread_start = 0;
    Clock::time_point wall_start;
    auto start_cpu = [&] {  // right after the start barrier
      cpu_start = process_cpu_ns();
      thread_start = thread_cpu_ns();
      wall_start = Clock::now();
    };
    if (me == 0) {
      auto run = [&](auto& producer, fabric::Worker* progress) {
        node.barrier(start_barrier);
        start_cpu();
        report = produce(producer, progress, p, seconds, Clock::now());
      };
      if (p.baseline()) {
        flow::ShuffleSource source(node, worker, spec.name, 0);
        run(source, source.direct() ? nullptr : &worker);
      } else {
        driven::Producer producer(node, spec.name, 0);
        run(producer, nullptr);
      }
    } else if (me == 1) {
      auto run = [&](auto& consumer) {
        node.barrier(start_barrier);
        start_cpu();
        report = consume(consumer, p, seconds, timeout);
      };
      if (p.baseline()) {
        flow::ShuffleTarget target(node, spec.name, 0);
        run(target);
      } else {
        driven::Consumer consumer(node, spec.name, 0);
        run(consumer);
      }
    } else if (p.baseline()) {
      node.barrier(start_barrier);
      start_cpu();
    } else {
      report = run_mover_point(node, spec.name, start_barrier, timeout, seconds, start_cpu);
    }
    // The CPU of the point: the mover's thread and process (rank 2), the PU processes' other
    // threads (ranks 0 and 1: process minus the PU thread).
    const double wall_s = std::chrono::duration<double>(Clock::now() - wall_start).count();
    const double thread_ms = static_cast<double>(thread_cpu_ns() - thread_start) / 1e6;
    const double process_ms = static_cast<double>(process_cpu_ns() - cpu_start) / 1e6;
    report["wall_s"] = wall_s;
    report["thread_cpu_ms"] = thread_ms;
    report["other_cpu_ms"] = process_ms - thread_ms;
    points.push_back(report);
    node.barrier(point_prefix(index) + "done");
    ++index;
  }
  report_rank_result(out, {{"rank", me}, {"points", points}});
  node.finish();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Driver

class DrivenLat final : public Scenario {
 public:
  std::string name() const override { return kName; }
  std::string title() const override {
    return "Driven 1:1 flow: one-way latency vs offered rate per mover polling interval, vs the latency-mode shuffle flow";
  }
  std::string description() const override {
    return "3 ranks: a producer (rank 0) pushes tuples at an offered rate (tuple i at start + i/rate; whatever is due "
           "is stamped with one steady_clock reading, pushed and flushed), a consumer (rank 1) polls with "
           "try_consume and takes arrival - stamp for every tuple (one machine: one clock for all processes, so "
           "this is the one-way time, not half a round trip), checking each tuple's number once and in order. "
           "Driven: a 1:1 driven flow moved by the mover on rank 2 with DrivenOptions::poll_interval = poll_us "
           "(0: the mover backs off by itself), and in doorbell mode (DrivenOptions::doorbell: the mover reads the "
           "flow's words only after a PU rang, backing off between looks at its own bell words). Baseline in the same "
           "run: the DFI shuffle flow rank 0 -> rank 1 in "
           "latency mode (a segment per tuple), the same producer and consumer loops. Median and 99th percentile "
           "per tuple size, rate and interval, over every tuple of `seconds`; the mover thread's CPU and the PU "
           "processes' other threads' CPU per point; and idle points (nothing pushed for idle_seconds) per mover mode.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"tuple_sizes", json::array({64, 1024}), json::array({64, 1024}), "tuple sizes in bytes (>= 16, multiples of 8)"},
        {"rates", json::array({1000, 100000}), json::array({1000, 10000, 100000, 1000000}),
         "offered rates, tuples per second"},
        {"poll_us", json::array({0, 50}), json::array({0, 10, 50, 200}), "the mover's polling intervals in µs"},
        {"doorbell", true, true, "also the doorbell series (DrivenOptions::doorbell)"},
        {"idle_seconds", 0.2, 1.0, "length of each idle point (one per mover mode; 0: none)"},
        {"seconds", 0.25, 0.5, "how long the producer pushes at each point"},
        {"segments", 64, 64, "segments per ring, both sides (driven: segment size the flow default)"},
        {"timeout_s", 60, 300, "bound of each cluster run and of every wait inside it"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"DFI shuffle flow, latency mode",
             "the same 1:1 path rank 0 -> rank 1 through a shuffle flow in latency mode (one tuple per segment, "
             "written by the source itself: no mover), the same producer pacing and consumer loop"}};
  }

  void run(RunContext& context, Result& result) override {
    const std::vector<std::size_t> sizes = context.param("tuple_sizes");
    const std::vector<double> rates = context.param("rates");
    const std::vector<int> polls = context.param("poll_us");
    const double seconds = context.param("seconds");
    const bool doorbell = context.param("doorbell");
    const double idle_seconds = context.param("idle_seconds");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    std::vector<int> movers = polls;  // every mover mode: the intervals, then the doorbell
    if (doorbell) movers.push_back(kDoorbell);
    for (std::size_t s : sizes) {
      if (s < 16 || s % 8 != 0)
        throw Error(Errc::invalid_argument, std::string("bench ") + kName + ": tuple size " + std::to_string(s) +
                                                " must be a multiple of 8 and at least 16");
    }
    for (double r : rates) {
      if (!(r > 0)) throw Error(Errc::invalid_argument, std::string("bench ") + kName + ": rate " + std::to_string(r));
    }
    for (int p : polls) {
      if (p < 0) throw Error(Errc::invalid_argument, std::string("bench ") + kName + ": poll interval " + std::to_string(p));
    }
    if (!(seconds > 0)) throw Error(Errc::invalid_argument, std::string("bench ") + kName + ": seconds must be > 0");
    if (!(idle_seconds >= 0)) throw Error(Errc::invalid_argument, std::string("bench ") + kName + ": idle_seconds must be >= 0");
    result.set_parameters(context.resolved_parameters());
    result.add_baseline(baselines()[0].name, baselines()[0].description);
    result.add_note("One-way latency from the push (the stamp) to the consumer's clock reading when the batch arrived, "
                    "over every tuple of a point; all processes read one CLOCK_MONOTONIC. 3 ranks, 2 vCPUs: producer "
                    "and consumer poll without sleeping (spin, then yield), the mover sleeps poll_us after a pass that "
                    "found nothing (0: spin, yield, then sleeps of 1..wait_sleep_us).");
    result.add_note("Doorbell mode: the producer rings after a publication and the consumer after it gave a segment "
                    "back, each only when the mover armed it (it does so when the flow ran out of work); what a bell "
                    "costs the PU's thread is a fence and a load per publication, and when armed a store into the "
                    "mover's mapped bell word (shm) or a one-word store_words_async, an active message (tcp).");
    result.add_note("CPU: mover = the mover thread's CPU time (CLOCK_THREAD_CPUTIME_ID) / the point's wall time, in % "
                    "of one core; PU other threads = CPU of the producer's and consumer's processes minus their "
                    "pushing/consuming thread (the progress threads: over tcp they apply the mover's emulated "
                    "operations), summed, in % of one core. The PU threads spin by design and are not reported.");

    const Axis rate_axis{"offered rate", "tuples/s", "log10"};
    struct Panels {
      Panel* median;
      Panel* p99;
    };
    std::map<std::size_t, Panels> panels;
    const bool backoff_series = std::find(polls.begin(), polls.end(), 0) != polls.end();
    std::map<std::size_t, Panel*> mover_cpu, pu_cpu;
    for (std::size_t s : sizes) {
      Panel& med = result.panel("median_" + std::to_string(s), size_text(s) + ": one-way median", rate_axis,
                                {"one-way latency", "us", "log10"}, Better::lower);
      Panel& p99 = result.panel("p99_" + std::to_string(s), size_text(s) + ": one-way 99th percentile", rate_axis,
                                {"one-way latency", "us", "log10"}, Better::lower);
      for (Panel* panel : {&med, &p99}) {
        panel->series("flow", Role::baseline, "DFI shuffle flow, latency mode");
        for (int mode : movers) {
          panel->series(series_id(mode), Role::dfi, series_name(mode));
          panel->compare(series_id(mode), "flow");
        }
        // The doorbell against polling with the mover's own backoff, in the same run.
        if (doorbell && backoff_series) panel->compare(series_id(kDoorbell), series_id(0));
      }
      panels[s] = {&med, &p99};
      Panel& cpu = result.panel("mover_cpu_" + std::to_string(s), size_text(s) + ": the mover thread's CPU", rate_axis,
                                {"mover CPU", "% of a core"}, Better::lower);
      Panel& pus = result.panel("pu_cpu_" + std::to_string(s), size_text(s) + ": CPU of the PU processes' other threads",
                                rate_axis, {"PU progress threads' CPU", "% of a core"}, Better::lower);
      pus.series("flow", Role::baseline, "DFI shuffle flow, latency mode");
      for (int mode : movers) {
        cpu.series(series_id(mode), Role::dfi, series_name(mode));
        pus.series(series_id(mode), Role::dfi, series_name(mode));
      }
      if (doorbell && backoff_series) {
        cpu.compare(series_id(kDoorbell), series_id(0));
        pus.compare(series_id(kDoorbell), series_id(0));
      }
      mover_cpu[s] = &cpu;
      pu_cpu[s] = &pus;
    }
    const Axis idle_axis{"mover mode", "", "category"};
    Panel* idle_mover = nullptr;
    Panel* idle_pus = nullptr;
    if (idle_seconds > 0) {
      idle_mover = &result.panel("idle_mover_cpu", "Nothing to move: the mover thread's CPU", idle_axis,
                                 {"mover CPU", "% of a core"}, Better::lower);
      idle_pus = &result.panel("idle_pu_cpu", "Nothing to move: CPU of the PU processes' other threads", idle_axis,
                               {"PU progress threads' CPU", "% of a core"}, Better::lower);
      for (Panel* panel : {idle_mover, idle_pus}) {
        for (int mode : movers) panel->series(series_id(mode), Role::dfi, series_name(mode));
        if (doorbell && backoff_series) panel->compare(series_id(kDoorbell), series_id(0));
      }
    }

    RankJob job;
    job.nodes = 3;
    job.scenario = name();
    job.timeout = timeout * 3;
    for (int rep = 1; rep <= context.repeat; ++rep) {
      std::vector<Point> points;
      for (std::size_t s : sizes) {
        for (double r : rates) {
          if (rep % 2 == 1) points.push_back({s, r, kBaseline});
          for (int mode : movers) points.push_back({s, r, mode});
          if (rep % 2 == 0) points.push_back({s, r, kBaseline});
        }
      }
      if (idle_seconds > 0) {  // one idle point per mover mode, the order alternating per repetition
        for (std::size_t k = 0; k < movers.size(); ++k) {
          points.push_back({64, 0, movers[rep % 2 == 1 ? k : movers.size() - 1 - k]});
        }
      }
      json planned = json::array();
      for (const Point& p : points) planned.push_back(p.to_json());
      job.params = {{"points", planned},
                    {"seconds", seconds},
                    {"idle_seconds", idle_seconds},
                    {"segments", context.param("segments")},
                    {"timeout_ms", std::chrono::milliseconds(timeout).count()}};
      context.say("repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) + ": " +
                  std::to_string(points.size()) + " points over " + (context.netns ? "netns tcp" : context.transport));
      const std::map<int, json> reports = run_rank_job(job, context);
      const std::string command = rank_job_command(job, context);
      for (int r : {0, 1, 2}) {
        if (!reports.count(r))
          throw Error(Errc::protocol, std::string("bench ") + kName + ": rank " + std::to_string(r) + " reported nothing");
      }
      for (std::size_t i = 0; i < points.size(); ++i) {
        const Point& p = points[i];
        const json& sent = reports.at(0).at("points").at(i);
        const json& got = reports.at(1).at("points").at(i);
        const std::uint64_t n = sent.at("sent"), received = got.at("received"), disorder = got.at("out_of_order");
        const std::string mode = p.baseline()   ? std::string("flow")
                                 : p.doorbell() ? std::string("driven doorbell")
                                                : "driven poll " + std::to_string(p.poll_us) + " µs";
        const std::string what = p.idle() ? "idle, " + mode
                                          : size_text(p.tuple_bytes) + " at " + format_fixed(p.rate, 0) + "/s, " + mode;
        if (received != n || disorder != 0) {
          throw Error(Errc::protocol, std::string("bench ") + kName + ": " + what + ": pushed " + std::to_string(n) +
                                          " tuples, received " + std::to_string(received) + " (" +
                                          std::to_string(disorder) + " out of order)");
        }
        // CPU over the point, in % of one core (see the notes).
        const json& m = reports.at(2).at("points").at(i);
        const double mover_pct = 100 * m.at("thread_cpu_ms").get<double>() / (1000 * m.at("wall_s").get<double>());
        const double pus_pct = 100 *
                               (sent.at("other_cpu_ms").get<double>() / sent.at("wall_s").get<double>() +
                                got.at("other_cpu_ms").get<double>() / got.at("wall_s").get<double>()) /
                               1000;
        if (p.idle()) {
          idle_mover->add(series_id(p.poll_us), "idle", mover_pct);
          idle_mover->add_command(series_id(p.poll_us), command);
          idle_pus->add(series_id(p.poll_us), "idle", pus_pct);
          idle_pus->add_command(series_id(p.poll_us), command);
          std::ostringstream said;
          said << "  " << what << ": mover thread " << format_fixed(mover_pct, 2) << " % of a core, PU other threads "
               << format_fixed(pus_pct, 2) << " %, " << m.at("idle_steps").dump() << " idle passes, "
               << m.at("bells").dump() << " bells, " << m.at("arms").dump() << " arms, " << m.at("safety_polls").dump()
               << " safety polls";
          context.say(said.str());
          continue;
        }
        if (!p.baseline()) {
          mover_cpu[p.tuple_bytes]->add(series_id(p.poll_us), p.rate, mover_pct);
          mover_cpu[p.tuple_bytes]->add_command(series_id(p.poll_us), command);
        }
        pu_cpu[p.tuple_bytes]->add(series_id(p.poll_us), p.rate, pus_pct);
        pu_cpu[p.tuple_bytes]->add_command(series_id(p.poll_us), command);
        const double med = got.at("median_us"), p99 = got.at("p99_us");
        const double achieved = static_cast<double>(n) / sent.at("push_seconds").get<double>();
        panels[p.tuple_bytes].median->add(series_id(p.poll_us), p.rate, med);
        panels[p.tuple_bytes].median->add_command(series_id(p.poll_us), command);
        panels[p.tuple_bytes].p99->add(series_id(p.poll_us), p.rate, p99);
        panels[p.tuple_bytes].p99->add_command(series_id(p.poll_us), command);
        std::ostringstream said;
        said << "  " << what << ": median " << format_fixed(med, 1) << " us, p99 " << format_fixed(p99, 1) << " us; pushed "
             << format_fixed(achieved, 0) << "/s, " << format_fixed(static_cast<double>(n) / std::max(1.0, got.at("batches").get<double>()), 1)
             << " tuples per batch, ring-full waits " << sent.at("stalls").dump();
        if (!p.baseline()) {
          said << ", mover: " << m.at("segments").dump() << " segments, " << m.at("idle_steps").dump()
               << " idle passes, thread " << format_fixed(mover_pct, 1) << " % of a core";
          if (p.doorbell()) {
            said << ", " << m.at("bells").dump() << " bells, " << m.at("arms").dump() << " arms, "
                 << m.at("safety_polls").dump() << " safety polls (" << m.at("safety_finds").dump() << " found work)";
            if (m.at("safety_finds").get<std::uint64_t>() > 0) {
              result.add_note("repetition " + std::to_string(rep) + ", " + what + ": the mover's safety poll found work " +
                              m.at("safety_finds").dump() + " times (a bell lost, or later than the safety poll)");
            }
          }
        }
        said << "; PU other threads " << format_fixed(pus_pct, 1) << " %";
        if (achieved < 0.9 * p.rate) {
          said << " (below 0.9x the offered rate)";
          result.add_note("repetition " + std::to_string(rep) + ", " + what + ": the producer pushed only " +
                          format_fixed(achieved, 0) + " tuples/s (ring-full waits " + sent.at("stalls").dump() + ")");
        }
        context.say(said.str());
      }
    }
  }

  // Errors propagate: BenchCli::run reports them, naming the scenario.
  int run_rank(const json& params, std::ostream& out, std::ostream& /*err*/) override {
    return run_rank_program(params, out);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_driven_lat_scenario() { return std::make_unique<DrivenLat>(); }

}  // namespace dfi::tools::bench
