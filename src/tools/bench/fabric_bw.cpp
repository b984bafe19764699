// Scenario fabric-bw: DFI's fabric layer against the transport limit (ucx_perftest).
//
// DFI side (two ranks under a local cluster, rank 0 initiates):
//  - bandwidth: rank 0 streams `messages` puts of one size with Endpoint::put_nbi into rank 1's
//    region (wrapping around target_bytes, one DFI ring of 32 x 8 KiB = 256 KiB) and flushes
//    whenever flush_window_bytes were issued (a DFI ring signals completion once per wrap), then
//    a final flush; bandwidth = bytes / time. Baseline: ucx_perftest -t ucp_put_bw with the same
//    size, iteration and warm-up counts, and at most flush_window_bytes outstanding (-O): left
//    unbounded, ucx_perftest collapses over tcp for large messages (1 MiB: ~0.2 instead of
//    ~1.1 GiB/s).
//  - latency (8 B): put ping-pong (rank 0 puts a sequence number into rank 1's region, rank 1
//    polls its memory and puts it back), reported as half the round trip like ucp_put_lat; an
//    active-message ping-pong (reply from rank 1's service worker) like ucp_am_lat; and put +
//    flush completion time (no ucx_perftest equivalent).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/registry/client.hpp"
#include "perftest.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr std::uint16_t kPing = 11;
constexpr std::uint16_t kPong = 12;
constexpr std::size_t kWordOffset = 0;     // ping-pong word
constexpr std::size_t kDataOffset = 4096;  // bandwidth area
constexpr std::size_t kDataBytes = 8u << 20;
constexpr std::size_t kLatencyBytes = 8;
constexpr auto kSpinBound = std::chrono::seconds(10);  // one ping-pong round trip at most

constexpr const char* kPutPingPong = "put 8 B ping-pong (one way)";
constexpr const char* kAmPingPong = "AM 8 B ping-pong (one way)";
constexpr const char* kPutFlush = "put 8 B + flush";

struct Point {
  std::size_t size = 0;
  std::size_t messages = 0;
  std::size_t warmup = 0;
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void check(const Status& status) { status.throw_if_error(); }

// ---------------------------------------------------------------------------------------------
// Rank program

class FabricBwRank {
 public:
  FabricBwRank(const json& params, std::ostream& err) : params_(params), err_(err) {}

  int run(std::ostream& out) {
    cluster::NodeOptions options = cluster::node_options_from_environment();
    options.setup_service = [](fabric::Worker& service) {
      service.set_am_handler(kPing,
                             [](const fabric::AmMessage& message, fabric::AmReplier& replier) {
                               (void)replier.reply(kPong, message.data);
                             });
    };
    cluster::Node node(std::move(options));
    if (node.size() != 2) {
      err_ << "bench fabric-bw: needs exactly 2 ranks, got " << node.size() << '\n';
      return 2;
    }
    const int me = node.rank();
    const int peer = 1 - me;
    fabric::MemoryRegion region(node.fabric(), kDataOffset + kDataBytes);
    node.registry().publish("bench/fabric-bw/region/" + std::to_string(me),
                            region.descriptor().serialize(), true);
    fabric::Worker worker(node.fabric(), "bench rank " + std::to_string(me));
    worker.set_am_handler(kPong,
                          [this](const fabric::AmMessage&, fabric::AmReplier&) { ++pongs_; });
    fabric::Endpoint ep = node.connect(worker, peer);
    fabric::RemoteMemory remote =
        ep.attach(fabric::RegionDescriptor::parse(node.registry().wait_for(
            "bench/fabric-bw/region/" + std::to_string(peer), std::chrono::seconds(30))));
    node.barrier("bench/fabric-bw/attached");

    json report = {
        {"transport", std::string(fabric::transport_name(node.fabric().options().transport))},
        {"fabric", node.fabric().describe()}};
    if (me == 0) {
      json bandwidth = json::array();
      for (const json& p : params_.at("points")) {
        Point point{p.at("size").get<std::size_t>(), p.at("messages").get<std::size_t>(),
                    p.at("warmup").get<std::size_t>()};
        const double gbps = put_bandwidth(ep, remote, point);
        err_ << "bench fabric-bw: DFI put_nbi " << point.size << " B x " << point.messages << ": "
             << gbps << " GB/s\n";
        bandwidth.push_back({{"size", point.size}, {"messages", point.messages}, {"gbps", gbps}});
      }
      report["bandwidth"] = bandwidth;
      report["put_flush_us"] = put_flush_latency(ep, remote);
    }
    node.barrier("bench/fabric-bw/put-pingpong");
    const double put_pingpong = put_ping_pong(worker, ep, remote, region, me);
    node.barrier("bench/fabric-bw/am-pingpong");
    if (me == 0) {
      report["put_pingpong_us"] = put_pingpong;
      report["am_pingpong_us"] = am_ping_pong(worker, ep);
    }
    node.barrier("bench/fabric-bw/done");
    if (me == 0) report_rank_result(out, report);
    node.finish();
    return 0;
  }

 private:
  std::size_t latency_iterations() const {
    return params_.at("latency_iterations").get<std::size_t>();
  }
  std::size_t latency_warmup() const {
    return std::max<std::size_t>(10, latency_iterations() / 10);
  }

  // put_nbi stream with a flush every flush_window_bytes; returns GB/s of the timed part.
  double put_bandwidth(fabric::Endpoint& ep, fabric::RemoteMemory& remote, const Point& point) {
    const std::size_t window_bytes = params_.at("flush_window_bytes").get<std::size_t>();
    const std::size_t window = std::max<std::size_t>(1, window_bytes / point.size);
    const std::size_t area = std::clamp<std::size_t>(params_.at("target_bytes").get<std::size_t>(),
                                                     point.size, kDataBytes);
    const std::size_t slots = area / point.size;
    std::vector<std::uint8_t> source(point.size, 0x5a);
    // Counters instead of `%`: two 64-bit divisions per put were a quarter of the 64 B profile.
    auto stream = [&](std::size_t count) {
      std::size_t slot = 0;
      std::size_t in_window = 0;
      for (std::size_t i = 0; i < count; ++i) {
        Status status =
            ep.put_nbi(source.data(), point.size, remote, kDataOffset + slot * point.size);
        if (!status) [[unlikely]]
          status.throw_if_error();
        if (++slot == slots) slot = 0;
        if (++in_window == window) {
          in_window = 0;
          check(ep.flush());
        }
      }
      check(ep.flush());
    };
    stream(point.warmup);
    const Clock::time_point start = Clock::now();
    stream(point.messages);
    return static_cast<double>(point.messages * point.size) / seconds_since(start) / 1e9;
  }

  // Median time of put(8 B) + flush, in microseconds.
  double put_flush_latency(fabric::Endpoint& ep, fabric::RemoteMemory& remote) {
    std::uint64_t word = 0;
    std::vector<double> samples;
    samples.reserve(latency_iterations());
    for (std::size_t i = 0; i < latency_warmup() + latency_iterations(); ++i) {
      word = i;
      const Clock::time_point start = Clock::now();
      check(ep.put(&word, sizeof word, remote, kDataOffset));
      check(ep.flush());
      if (i >= latency_warmup()) samples.push_back(seconds_since(start) * 1e6);
    }
    return median(samples);
  }

  // Both ranks: rank 0 puts i into the peer's word and waits for i to come back; rank 1 waits for
  // i and puts it back. Returns half the median round trip (rank 0), in microseconds.
  double put_ping_pong(fabric::Worker& worker, fabric::Endpoint& ep, fabric::RemoteMemory& remote,
                       fabric::MemoryRegion& region, int me) {
    std::atomic_ref<std::uint64_t> mine(*static_cast<std::uint64_t*>(region.data()));
    auto await = [&](std::uint64_t expected) {
      const Clock::time_point start = Clock::now();
      unsigned spins = 0;
      while (mine.load(std::memory_order_acquire) != expected) {
        worker.progress();
        if ((++spins & 4095u) == 0 && Clock::now() - start > kSpinBound) {
          throw Error(Errc::timeout, "bench fabric-bw: put ping-pong " + std::to_string(expected) +
                                         " did not arrive from " + ep.peer_name());
        }
      }
    };
    std::vector<double> samples;
    samples.reserve(latency_iterations());
    const std::size_t total = latency_warmup() + latency_iterations();
    Clock::time_point previous = Clock::now();
    for (std::uint64_t i = 1; i <= total; ++i) {
      if (me == 0) {
        check(ep.put(&i, sizeof i, remote, kWordOffset));
        await(i);
        const Clock::time_point now = Clock::now();
        if (i > latency_warmup())
          samples.push_back(std::chrono::duration<double, std::micro>(now - previous).count() / 2);
        previous = now;
      } else {
        await(i);
        check(ep.put(&i, sizeof i, remote, kWordOffset));
      }
    }
    check(ep.flush());
    return median(samples);
  }

  // Rank 0: active message to the peer's service worker, which replies; half the median RTT.
  double am_ping_pong(fabric::Worker& worker, fabric::Endpoint& ep) {
    std::uint64_t payload = 0;
    std::vector<double> samples;
    samples.reserve(latency_iterations());
    const std::size_t total = latency_warmup() + latency_iterations();
    Clock::time_point previous = Clock::now();
    for (std::size_t i = 0; i < total; ++i) {
      const unsigned before = pongs_;
      payload = i;
      check(ep.am_send(kPing, std::as_bytes(std::span(&payload, 1))));
      unsigned spins = 0;
      while (pongs_ == before) {
        worker.progress();
        if ((++spins & 4095u) == 0 && Clock::now() - previous > kSpinBound) {
          throw Error(Errc::timeout, "bench fabric-bw: no pong from " + ep.peer_name());
        }
      }
      const Clock::time_point now = Clock::now();
      if (i >= latency_warmup())
        samples.push_back(std::chrono::duration<double, std::micro>(now - previous).count() / 2);
      previous = now;
    }
    return median(samples);
  }

  const json& params_;
  std::ostream& err_;
  unsigned pongs_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Driver

class FabricBw final : public Scenario {
 public:
  std::string name() const override { return "fabric-bw"; }
  std::string title() const override {
    return "DFI fabric put bandwidth and 8 B latency vs ucx_perftest";
  }
  std::string description() const override {
    return "Two ranks. Bandwidth: rank 0 streams fabric::Endpoint::put_nbi of one message size "
           "into "
           "rank 1 and flushes every flush_window_bytes (256 KiB = one DFI ring of 32 x 8 KiB), "
           "versus ucx_perftest -t ucp_put_bw with the same size and iteration counts and the same "
           "bound on data in flight (-O flush_window_bytes/size). Latency: 8 B "
           "put ping-pong and active-message ping-pong (half the round trip, as ucx_perftest "
           "ucp_put_lat / ucp_am_lat report), plus put + flush completion time (DFI only).";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"sizes", json::array({64, 4096, 65536, 1048576}),
         json::array({64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}),
         "message sizes in bytes"},
        {"bytes_per_size",
         {{"shm", 32u << 20}, {"tcp", 8u << 20}},
         {{"shm", 512u << 20}, {"tcp", 128u << 20}},
         "bytes moved per message size (messages = bytes / size, clamped)"},
        {"max_messages",
         {{"shm", 200000}, {"tcp", 20000}},
         {{"shm", 2000000}, {"tcp", 200000}},
         "upper bound of messages per size"},
        {"min_messages", 32, 64, "lower bound of messages per size"},
        {"flush_window_bytes", 262144, 262144, "DFI flushes after this many bytes of put_nbi"},
        {"target_bytes", 262144, 262144,
         "DFI's puts wrap around this much of the target region (one DFI ring, 32 x 8 KiB); "
         "ucx_perftest always writes one message-sized buffer"},
        {"latency_iterations",
         {{"shm", 2000}, {"tcp", 300}},
         {{"shm", 50000}, {"tcp", 5000}},
         "round trips per latency measurement"},
        {"timeout_s", 60, 300, "bound of each DFI cluster run and each ucx_perftest run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"ucx_perftest",
             "ucp_put_bw (bandwidth), ucp_put_lat and ucp_am_lat (8 B latency); server and "
             "client as two local processes over 127.0.0.1, UCX_TLS=sm (shm) or "
             "UCX_TLS=tcp UCX_NET_DEVICES=lo (tcp)"}};
  }
  std::string unavailable(const RunContext& context) const override {
    (void)context;
    return perftest_unavailable();
  }

  void run(RunContext& context, Result& result) override {
    const std::vector<Point> points = plan(context);
    const std::size_t latency_iterations = context.param("latency_iterations");
    const std::size_t latency_warmup = std::max<std::size_t>(10, latency_iterations / 10);
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    const bool am_lat = perftest_supports("ucp_am_lat");
    const std::size_t window_bytes = context.param("flush_window_bytes");

    json parameters = context.resolved_parameters();
    json planned = json::array();
    for (const Point& p : points)
      planned.push_back({{"size", p.size}, {"messages", p.messages}, {"warmup", p.warmup}});
    parameters["points"] = planned;
    result.set_parameters(parameters);
    result.add_baseline("ucx_perftest", baselines()[0].description + "; UCX " + ucx_version());
    if (context.netns) {
      result.add_note(
          "DFI ranks ran in network namespaces (TCP across a bridge); ucx_perftest ran "
          "over loopback in the root namespace, so its path is shorter.");
    }
    result.add_note(
        "Latency is timed per round trip with steady_clock (about 20 ns per reading on "
        "this kind of VM); ucx_perftest reads the TSC.");
    if (!am_lat)
      result.add_note("This ucx_perftest has no ucp_am_lat; the AM row has no baseline.");

    Panel& bw = result.panel("put_bw", "Put bandwidth, 1 initiator to 1 target",
                             {"message size", "B", "log2"}, {"bandwidth", "GB/s", "linear"},
                             Better::higher);
    bw.series("dfi", Role::dfi, "DFI fabric put_nbi + flush",
              "fabric::Endpoint::put_nbi, flush every flush_window_bytes");
    bw.series("ucx_perftest", Role::baseline, "ucx_perftest ucp_put_bw");
    bw.compare("dfi", "ucx_perftest");
    Panel& lat = result.panel("latency", "8 B latency", {"operation", "", "category"},
                              {"latency", "us", "linear"}, Better::lower);
    lat.series("dfi", Role::dfi, "DFI fabric",
               "median over round trips; ping-pongs report half the RTT");
    lat.series("ucp_put_lat", Role::baseline, "ucx_perftest ucp_put_lat",
               "50th percentile, half the round trip");
    lat.series("ucp_am_lat", Role::baseline, "ucx_perftest ucp_am_lat",
               "50th percentile, half the round trip");
    lat.compare("dfi", "ucp_put_lat");
    lat.compare("dfi", "ucp_am_lat");

    RankJob job;
    job.nodes = 2;
    job.scenario = name();
    job.params = {{"points", planned},
                  {"flush_window_bytes", context.param("flush_window_bytes")},
                  {"target_bytes", context.param("target_bytes")},
                  {"latency_iterations", latency_iterations}};
    job.timeout = timeout;
    const std::string dfi_command = rank_job_command(job, context);

    for (int rep = 1; rep <= context.repeat; ++rep) {
      const std::string round =
          "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat);
      context.say(round + ": DFI, 2 ranks over " +
                  (context.netns ? "netns tcp" : context.transport));
      std::map<int, json> reports = run_rank_job(job, context);
      if (!reports.count(0))
        throw Error(Errc::protocol, "bench fabric-bw: rank 0 reported no result");
      const json& r = reports.at(0);
      for (const json& b : r.at("bandwidth"))
        bw.add("dfi", b.at("size"), b.at("gbps").get<double>());
      lat.add("dfi", kPutPingPong, r.at("put_pingpong_us").get<double>());
      lat.add("dfi", kAmPingPong, r.at("am_pingpong_us").get<double>());
      lat.add("dfi", kPutFlush, r.at("put_flush_us").get<double>());
      bw.add_command("dfi", dfi_command);
      lat.add_command("dfi", dfi_command);

      for (const Point& p : points) {
        PerftestRun run;
        run.test = "ucp_put_bw";
        run.message_bytes = p.size;
        run.iterations = p.messages;
        run.warmup = p.warmup;
        run.transport = context.transport;
        run.timeout = timeout;
        run.extra_args = {"-O", std::to_string(std::max<std::size_t>(1, window_bytes / p.size))};
        PerftestResult pr = run_perftest(run);
        context.say(round + ": ucx_perftest ucp_put_bw " + std::to_string(p.size) +
                    " B: " + std::to_string(pr.final.bandwidth_gbps()) + " GB/s");
        bw.add("ucx_perftest", p.size, pr.final.bandwidth_gbps());
        bw.add_command("ucx_perftest", pr.command);
      }
      for (const char* test : {"ucp_put_lat", "ucp_am_lat"}) {
        if (std::string(test) == "ucp_am_lat" && !am_lat) continue;
        PerftestRun run;
        run.test = test;
        run.message_bytes = kLatencyBytes;
        run.iterations = latency_iterations;
        run.warmup = latency_warmup;
        run.transport = context.transport;
        run.timeout = timeout;
        PerftestResult pr = run_perftest(run);
        context.say(round + ": ucx_perftest " + test +
                    " 8 B: " + std::to_string(pr.final.latency_p50_us) + " us");
        lat.add(test, std::string(test) == "ucp_put_lat" ? kPutPingPong : kAmPingPong,
                pr.final.latency_p50_us);
        lat.add_command(test, pr.command);
      }
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return FabricBwRank(params, err).run(out);
  }

 private:
  static std::vector<Point> plan(const RunContext& context) {
    const std::size_t bytes = context.param("bytes_per_size");
    const std::size_t max_messages = context.param("max_messages");
    const std::size_t min_messages = context.param("min_messages");
    std::vector<Point> points;
    for (const json& s : context.param("sizes")) {
      const std::size_t size = s.get<std::size_t>();
      if (size < 8 || size > kDataBytes) {
        throw Error(Errc::invalid_argument, "bench fabric-bw: message size " +
                                                std::to_string(size) + " outside [8, " +
                                                std::to_string(kDataBytes) + "]");
      }
      Point p;
      p.size = size;
      p.messages = std::clamp(bytes / size, min_messages, std::max(min_messages, max_messages));
      p.warmup = std::max<std::size_t>(1, std::min<std::size_t>(p.messages / 10, 10000));
      points.push_back(p);
    }
    return points;
  }
};

}  // namespace

std::unique_ptr<Scenario> make_fabric_bw_scenario() { return std::make_unique<FabricBw>(); }

}  // namespace dfi::tools::bench
