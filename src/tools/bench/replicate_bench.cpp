// Scenario replicate (003 Fig 8): a replicate flow from 1 source to 3 targets, naive vs relay vs
// ordered, bandwidth per target and the round trip source -> every target -> ack.
//
// DFI side: 1 + `targets` ranks under a local cluster (default 4): rank 0 runs the source, ranks
// 1..targets one target each (one thread per rank, each with its own fabric::Worker).
//
// Bandwidth, per mode and tuple size: one bandwidth-mode replicate flow. The source pushes tuple
// at a time (ReplicateSource::push) bytes_per_point bytes, cycling through a 64 KiB block of
// pre-built tuples; before each push it writes the running tuple number into the key (the first
// 8 bytes). Every target consumes (zero copy) until the end and checks every tuple: the key must
// be exactly the next number (nothing lost, duplicated or reordered) and the last byte must be
// the fill byte of its block slot (not torn); ordered flows must hand out sequence numbers
// 1, 2, 3, ... without gaps. GB/s per target = tuple bytes delivered after the first batch /
// (end of stream - arrival of the first batch) at that target; the panel shows the slowest
// target (the rate at which the flow delivers to all of them).
//   naive:   the source writes every segment into all 3 targets' rings.
//   relay:   the source writes each segment `fanout` times (default 1: a chain, source -> T0 ->
//            T1 -> T2), the targets forward it inside consume(); DFI's stand-in for the paper's
//            RDMA multicast, which UCX does not offer.
//   ordered: naive plus a global order: a remote fetch-add on the sequencer (hosted by target 0)
//            per segment.
//
// Latency, per mode: a latency-mode replicate flow (one 64 B tuple per segment) from rank 0 to
// the targets, and a latency-mode shuffle flow of acks from every target back to rank 0. Rank 0
// writes the round number into a tuple and pushes it; each target consumes it, checks the number
// and pushes an ack carrying the number and its own index; the round ends when rank 0 has one
// ack of that round from every target. One clock reading per round (the time between two
// consecutive completions); median and 99th percentile over the timed rounds, warm-up excluded.
// Waiting threads poll the flow with try_consume(), progress their worker (a put may sit in UCX
// until its worker is progressed) and yield the CPU after every empty poll: 4 busy ranks share 2
// cores on the machine of record (see poll()).
//
// Baselines (ucx_perftest, two local processes over the same transport):
//   ucp_put_bw at the segment size with at most `segments` puts outstanding, the same bytes as
//     one DFI point: one link's limit. A naive source writes 3 copies through its outgoing link,
//     so limit / 3 is what naive replication can reach per target on a real network.
//   ucp_put_lat at the latency tuple size (-R 50 and -R 99), one way per ucx_perftest, times 2:
//     one put round trip to ONE peer, the floor that a round to 3 targets is compared with.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/shuffle.hpp"
#include "perftest.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kBlockBytes = 64 * 1024;  // pre-built tuples the source cycles through
constexpr const char* kMedian = "round trip, median";
constexpr const char* kP99 = "round trip, 99th percentile";
const std::vector<std::string> kModes = {"naive", "relay", "ordered"};

struct Mode {
  flow::Replication replication = flow::Replication::naive;
  bool ordered = false;
};

Mode parse_mode(const std::string& mode) {
  if (mode == "naive") return {flow::Replication::naive, false};
  if (mode == "relay") return {flow::Replication::relay, false};
  if (mode == "ordered") return {flow::Replication::naive, true};
  throw Error(Errc::invalid_argument,
              "bench replicate: unknown mode '" + mode + "' (naive, relay or ordered)");
}

std::string mode_text(const std::string& mode, std::uint32_t fanout) {
  if (mode == "naive") return "naive (the source writes every target)";
  if (mode == "relay") {
    return "relay, fanout " + std::to_string(fanout) +
           (fanout == 1 ? " (a chain: the source writes once)" : "");
  }
  return "ordered (naive + sequencer fetch-add per segment)";
}

struct BwConfig {
  std::string mode;
  std::size_t tuple_bytes = 0;
  std::uint64_t tuples = 0;
};

std::size_t block_tuples(std::size_t tuple_bytes) {
  return std::max<std::size_t>(1, kBlockBytes / tuple_bytes);
}

std::byte fill_byte(std::uint64_t slot) { return static_cast<std::byte>((slot * 37 + 11) & 0xff); }


// Throws for a failed wait, saying what was awaited (built only then: no string per round).
template <class Describe>
void check_wait(const Status& status, Describe&& describe) {
  if (!status)
    throw Error(status.code(), "bench replicate: " + describe() + ": " + status.message());
}

// Calls `attempt` (returns Errc::retry while nothing is there) until it returns anything else,
// progressing `worker` and yielding the CPU in between. Errc::timeout after `timeout`.
// Why yield after every empty poll: 4 ranks share 2 cores on the machine of record. Spinning
// starves the rank that has work (round trips of 20+ ms); sleeping, even 1 us, costs 60-150 us
// per wake-up on that VM; sched_yield() hands the core over at once (a few us per round trip).
template <class Attempt>
Status poll(Attempt&& attempt, fabric::Worker& worker, std::chrono::milliseconds timeout) {
  const Clock::time_point give_up = Clock::now() + timeout;
  for (unsigned round = 1;; ++round) {
    Status s = attempt();
    if (s.code() != Errc::retry) return s;
    worker.progress();
    if ((round & 255) == 0 && Clock::now() > give_up) {
      return {Errc::timeout, "nothing within " + std::to_string(timeout.count()) + " ms"};
    }
    std::this_thread::yield();
  }
}

flow::Schema tuple_schema(std::size_t tuple_bytes) {
  return flow::Schema(
      {{"key", flow::Type::uint64, 1},
       {"payload", flow::Type::chars, static_cast<std::uint32_t>(tuple_bytes - 8)}});
}

// ---------------------------------------------------------------------------------------------
// Rank program

class ReplicateRank {
 public:
  ReplicateRank(const json& params, std::ostream& err) : params_(params), err_(err) {}

  int run(std::ostream& out) {
    cluster::Node node;
    const int targets = params_.at("targets").get<int>();
    if (node.size() != targets + 1) {
      err_ << "bench replicate: needs " << targets + 1 << " ranks (1 source + " << targets
           << " targets), got " << node.size() << '\n';
      return 2;
    }
    stall_ = std::chrono::milliseconds(params_.at("stall_timeout_ms").get<long>());
    const int me = node.rank();
    fabric::Worker worker(node.fabric(), "replicate bench rank " + std::to_string(me));
    json bw = json::array();
    std::size_t index = 0;
    for (const json& c : params_.at("bw_configs")) {
      const BwConfig config{c.at("mode").get<std::string>(), c.at("tuple_bytes").get<std::size_t>(),
                            c.at("tuples").get<std::uint64_t>()};
      const flow::FlowSpec spec = bw_spec(config, index, targets);
      if (me == 0) flow::create_flow(node, spec);
      json point = me == 0 ? bw_source(node, worker, spec, config)
                           : bw_target(node, worker, spec, config, me - 1);
      point["index"] = index;
      bw.push_back(point);
      node.barrier("bench/replicate/bw/" + std::to_string(index));
      ++index;
    }
    json lat = json::array();
    for (const json& m : params_.at("latency_modes")) {
      const std::string mode = m.get<std::string>();
      json point = latency_round_trips(node, worker, mode, targets);
      point["mode"] = mode;
      lat.push_back(point);
      node.barrier("bench/replicate/lat/" + mode);
    }
    report_rank_result(
        out, {{"rank", me}, {"fabric", node.fabric().describe()}, {"bw", bw}, {"lat", lat}});
    node.finish();
    return 0;
  }

 private:
  flow::FlowSpec base_spec(const std::string& name, const std::string& mode,
                           std::size_t tuple_bytes, int targets) const {
    const Mode m = parse_mode(mode);
    flow::FlowSpec spec;
    spec.name = name;
    spec.type = flow::FlowType::replicate;
    spec.sources = {{0, 0}};
    for (int t = 0; t < targets; ++t) spec.targets.push_back({t + 1, 0});
    spec.schema = tuple_schema(tuple_bytes);
    spec.options.stall_timeout = stall_;
    spec.type_options = flow::ReplicateOptions{
        .replication = m.replication,
        .fanout = params_.at("fanout").get<std::uint32_t>(),
        .ordered = m.ordered,
        .gap_timeout = stall_};  // nothing is lost here: a gap is a failure, not a wait
    return spec;
  }

  flow::FlowSpec bw_spec(const BwConfig& config, std::size_t index, int targets) const {
    flow::FlowSpec spec = base_spec("bench-replicate-bw-" + std::to_string(index), config.mode,
                                    config.tuple_bytes, targets);
    spec.options.mode = flow::Mode::bandwidth;
    spec.options.segments = params_.at("segments").get<std::uint32_t>();
    spec.options.segment_bytes = params_.at("segment_bytes").get<std::uint32_t>();
    return spec;
  }

  // Rank 0: pushes config.tuples tuples, key = running number.
  json bw_source(cluster::Node& node, fabric::Worker& worker, const flow::FlowSpec& spec,
                 const BwConfig& config) {
    const std::size_t tb = config.tuple_bytes;
    const std::size_t block = block_tuples(tb);
    flow::ReplicateSource source(node, worker, spec.name, 0);
    std::vector<std::byte> tuples(block * tb);
    for (std::size_t j = 0; j < block; ++j)
      std::memset(tuples.data() + j * tb + 8, static_cast<int>(fill_byte(j)), tb - 8);
    node.barrier("bench/replicate/bw-open/" + spec.name);
    const Clock::time_point start = Clock::now();
    std::byte* p = tuples.data();
    std::byte* const end = tuples.data() + block * tb;
    for (std::uint64_t i = 0; i < config.tuples; ++i) {
      std::memcpy(p, &i, sizeof i);
      if (Status s = source.push(p, tb); !s) [[unlikely]]
        throw Error(s.code(), "bench replicate: push: " + s.message());
      p += tb;
      if (p == end) p = tuples.data();
    }
    source.close().throw_if_error();
    const double seconds = seconds_between(start, Clock::now());
    const flow::FlowCounters c = source.counters();
    return {{"sent_tuples", c.tuples},
            {"segments", c.segments},
            {"stalls", c.stalls},
            {"links", source.link_count()},
            {"source_seconds", seconds}};
  }

  // Ranks 1..: consume until the end, checking every tuple; returns what arrived and how fast.
  json bw_target(cluster::Node& node, fabric::Worker& worker, const flow::FlowSpec& spec,
                 const BwConfig& config, int id) {
    const std::size_t tb = config.tuple_bytes;
    const std::uint64_t block = block_tuples(tb);
    flow::ReplicateTargetOptions options;
    options.worker = &worker;
    flow::ReplicateTarget target(node, spec.name, 0, options);
    node.barrier("bench/replicate/bw-open/" + spec.name);
    flow::ReplicateBatch batch;
    std::uint64_t next_key = 0, first_count = 0, next_sequence = 1, bad = 0;
    std::string first_error;
    Clock::time_point start{}, end{};
    bool started = false;
    auto error = [&](const std::string& text) {
      if (bad++ == 0) first_error = text;
    };
    for (;;) {
      Status s = target.consume(batch, stall_);
      if (!s)
        throw Error(s.code(), "bench replicate: target " + std::to_string(id) + ": " + s.message());
      if (batch.end) {
        end = Clock::now();
        break;
      }
      if (batch.gap()) {
        error("a gap of " + std::to_string(batch.gap_count) + " at sequence number " +
              std::to_string(batch.sequence));
        next_sequence = batch.sequence + batch.gap_count;
        continue;
      }
      if (!started) {
        start = Clock::now();
        first_count = batch.count;
        started = true;
      }
      if (spec.type_options.get<flow::ReplicateOptions>().ordered) {
        if (batch.sequence != next_sequence)
          error("sequence number " + std::to_string(batch.sequence) + " when " +
                std::to_string(next_sequence) + " was due");
        next_sequence = batch.sequence + 1;
      }
      const std::byte* t = batch.data;
      for (std::size_t i = 0; i < batch.count; ++i, t += tb) {
        std::uint64_t key;
        std::memcpy(&key, t, sizeof key);
        if (key != next_key) [[unlikely]] {
          error("tuple " + std::to_string(key) + " when " + std::to_string(next_key) +
                " was due (lost, duplicated or reordered)");
        }
        if (t[tb - 1] != fill_byte(key % block)) [[unlikely]]
          error("tuple " + std::to_string(key) + " has a wrong last byte (torn)");
        next_key = key + 1;
      }
    }
    const std::uint64_t received = target.counters().tuples;
    const std::uint64_t timed = received > first_count ? received - first_count : 0;
    const double seconds = started ? seconds_between(start, end) : 0;
    const double gbps = seconds > 0 ? static_cast<double>(timed * tb) / seconds / 1e9 : 0;
    err_ << "bench replicate: target " << id << ", " << config.mode << ", " << tb
         << " B tuples: " << received << " tuples, " << gbps << " GB/s"
         << (bad > 0 ? ", " + std::to_string(bad) + " errors: " + first_error : std::string())
         << '\n';
    return {{"target", id},
            {"received_tuples", received},
            {"last_key", next_key},
            {"errors", bad},
            {"first_error", first_error},
            {"forwarded", target.counters().forwarded},
            {"gaps", target.counters().gaps},
            {"seconds", seconds},
            {"gbps", gbps}};
  }

  // Round trips rank 0 -> every target -> ack back to rank 0, through a latency-mode replicate
  // flow and a latency-mode shuffle flow of acks.
  json latency_round_trips(cluster::Node& node, fabric::Worker& worker, const std::string& mode,
                           int targets) {
    const std::size_t tb = params_.at("latency_tuple_bytes").get<std::size_t>();
    const std::size_t iterations = params_.at("latency_iterations").get<std::size_t>();
    const std::size_t warmup = params_.at("latency_warmup").get<std::size_t>();
    flow::FlowSpec spec = base_spec("bench-replicate-lat-" + mode, mode, tb, targets);
    spec.options.mode = flow::Mode::latency;
    spec.options.segments = params_.at("latency_segments").get<std::uint32_t>();
    flow::FlowSpec acks;
    acks.name = "bench-replicate-ack-" + mode;
    for (int t = 0; t < targets; ++t) acks.sources.push_back({t + 1, 0});
    acks.targets = {{0, 0}};
    acks.schema = tuple_schema(tb);
    acks.key_column = "key";
    acks.options.mode = flow::Mode::latency;
    acks.options.segments = spec.options.segments;
    acks.options.stall_timeout = stall_;
    const int me = node.rank();
    if (me == 0) {
      flow::create_flow(node, spec);
      flow::create_flow(node, acks);
    }
    std::vector<std::byte> tuple(tb, std::byte{0x5a});
    const std::size_t total = warmup + iterations;
    if (me == 0) {
      // The ack target first: it publishes its rings, so the targets' ack sources can connect
      // while our replicate source waits for the targets.
      flow::ShuffleTarget ack_target(node, acks.name, 0);
      flow::ReplicateSource source(node, worker, spec.name, 0);
      node.barrier("bench/replicate/lat-open/" + mode);
      flow::TupleBatch batch;
      std::vector<double> rtt_us;
      rtt_us.reserve(iterations);
      const std::uint64_t all = (std::uint64_t{1} << targets) - 1;
      Clock::time_point previous = Clock::now();
      for (std::uint64_t i = 1; i <= total; ++i) {
        std::memcpy(tuple.data(), &i, sizeof i);
        source.push(tuple.data(), tb).throw_if_error();
        std::uint64_t acked = 0;
        while (acked != all) {
          check_wait(poll([&] { return ack_target.try_consume(batch); }, worker, stall_),
                     [&] { return mode + ": acks of round " + std::to_string(i); });
          if (batch.empty()) throw Error(Errc::protocol, "bench replicate: the acks ended early");
          for (std::size_t k = 0; k < batch.count; ++k) {
            std::uint64_t round = 0, from = 0;
            std::memcpy(&round, batch.tuple(k), 8);
            std::memcpy(&from, batch.tuple(k) + 8, 8);
            if (round != i || from >= static_cast<std::uint64_t>(targets) ||
                (acked & (std::uint64_t{1} << from)) != 0) {
              throw Error(Errc::protocol, "bench replicate: " + mode + ": round " +
                                              std::to_string(i) + " got an ack of round " +
                                              std::to_string(round) + " from target " +
                                              std::to_string(from));
            }
            acked |= std::uint64_t{1} << from;
          }
        }
        const Clock::time_point now = Clock::now();
        if (i > warmup)
          rtt_us.push_back(std::chrono::duration<double, std::micro>(now - previous).count());
        previous = now;
      }
      source.close().throw_if_error();
      // Every target closes its ack source after it saw the end.
      check_wait(poll([&] { return ack_target.try_consume(batch); }, worker, stall_),
                 [&] { return mode + ": the end of the acks"; });
      if (!batch.empty())
        throw Error(Errc::protocol, "bench replicate: " + mode + ": an extra ack arrived");
      const double med = median(rtt_us), p99 = percentile(rtt_us, 99);
      err_ << "bench replicate: " << mode << ", " << tb << " B to " << targets
           << " targets and back: median " << med << " us, p99 " << p99 << " us over "
           << rtt_us.size() << " rounds\n";
      return {{"median_us", med}, {"p99_us", p99}, {"rounds", rtt_us.size()}};
    }
    const int id = me - 1;
    flow::ReplicateTargetOptions options;
    options.worker = &worker;
    flow::ReplicateTarget target(node, spec.name, 0, options);
    flow::ShuffleSource ack(node, worker, acks.name, 0);
    node.barrier("bench/replicate/lat-open/" + mode);
    flow::ReplicateBatch batch;
    std::uint64_t expected = 1;
    const std::uint64_t from = static_cast<std::uint64_t>(id);
    for (;;) {
      check_wait(poll([&] { return target.try_consume(batch); }, worker, stall_), [&] {
        return mode + ": round " + std::to_string(expected) + " at target " + std::to_string(id);
      });
      if (batch.end) break;
      if (batch.gap()) {
        throw Error(Errc::protocol, "bench replicate: " + mode + ": target " + std::to_string(id) +
                                        " saw a gap at sequence number " +
                                        std::to_string(batch.sequence));
      }
      for (std::size_t k = 0; k < batch.count; ++k) {
        std::uint64_t round = 0;
        std::memcpy(&round, batch.tuple(k), 8);
        if (round != expected) {
          throw Error(Errc::protocol, "bench replicate: " + mode + ": target " +
                                          std::to_string(id) + " got round " +
                                          std::to_string(round) + " when " +
                                          std::to_string(expected) + " was due");
        }
        std::memcpy(tuple.data(), &round, 8);
        std::memcpy(tuple.data() + 8, &from, 8);
        ack.push(tuple.data(), tb).throw_if_error();
        ++expected;
      }
    }
    ack.close().throw_if_error();
    if (expected != total + 1) {
      throw Error(Errc::protocol, "bench replicate: " + mode + ": target " + std::to_string(id) +
                                      " saw " + std::to_string(expected - 1) + " rounds of " +
                                      std::to_string(total));
    }
    return {{"rounds", expected - 1}};
  }

  const json& params_;
  std::ostream& err_;
  std::chrono::milliseconds stall_{30000};
};

// ---------------------------------------------------------------------------------------------
// Driver

class ReplicateBench final : public Scenario {
 public:
  std::string name() const override { return "replicate"; }
  std::string title() const override {
    return "Replicate flow 1 -> 3: naive vs relay vs ordered, bandwidth and round trip (003 Fig "
           "8) vs ucx_perftest";
  }
  std::string description() const override {
    return "1 source rank, 3 target ranks (4 ranks). Bandwidth: one bandwidth-mode replicate "
           "flow per mode (naive, relay = a forwarding tree with `fanout` children per node, "
           "ordered = naive + a sequencer fetch-add per segment) and tuple size; the source "
           "pushes tuple at a time, every target consumes zero copy and checks every tuple "
           "(running key, no loss, duplicate or reorder; untorn; ordered: gapless sequence). "
           "GB/s per target = bytes after the first batch / time to end of stream at that "
           "target; the slowest target is reported. Latency: a latency-mode replicate flow "
           "carries a 64 B tuple to the 3 targets, each acks through a latency-mode shuffle flow "
           "back to the source; a round ends when all 3 acks are in (median, p99). Baselines: "
           "ucx_perftest ucp_put_bw at the segment size (one link's limit; naive's share per "
           "target on a real network is a third of it) and ucp_put_lat x 2 (one put round trip "
           "to one peer).";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"modes", json::array({"naive", "relay", "ordered"}),
         json::array({"naive", "relay", "ordered"}), "replication modes measured"},
        {"tuple_sizes", json::array({64, 1024}), json::array({64, 1024}),
         "bandwidth: tuple sizes in bytes (>= 16, multiples of 8)"},
        {"targets", 3, 3, "target ranks (one target each); the source is rank 0"},
        {"fanout", 1, 1, "relay: children per tree node (1: a chain, the source writes once)"},
        {"bytes_per_point",
         {{"shm", 32u << 20}, {"tcp", 2u << 20}},
         {{"shm", 256u << 20}, {"tcp", 16u << 20}},
         "bandwidth: tuple bytes every target receives per point (and ucx_perftest moves)"},
        {"segments", {{"shm", 32}, {"tcp", 8}}, {{"shm", 32}, {"tcp", 8}},
         "bandwidth: segments per ring (the flow defaults, settings segments_shm / segments_tcp)"},
        {"segment_bytes", {{"shm", 8208}, {"tcp", 32784}}, {{"shm", 8208}, {"tcp", 32784}},
         "bandwidth: segment size including the 16 B footer (the flow defaults, settings "
         "segment_bytes_shm / segment_bytes_tcp)"},
        {"latency_tuple_bytes", 64, 64, "latency: tuple width in bytes (>= 16, multiple of 8)"},
        {"latency_iterations",
         {{"shm", 2000}, {"tcp", 200}},
         {{"shm", 20000}, {"tcp", 2000}},
         "latency: timed rounds per mode (and ucx_perftest iterations)"},
        {"latency_segments", 32, 32, "latency: segments (credits) per ring"},
        {"stall_timeout_s", 30, 60,
         "longest wait of a DFI rank for data or ring space before it fails the run"},
        {"timeout_s", 180, 900, "bound of the DFI cluster run and of each ucx_perftest run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"ucx_perftest",
             "ucp_put_bw at the flow's segment size (-s segment_bytes, -O segments), the same "
             "bytes as one DFI point: one link's limit, shown at every tuple size; ucp_put_lat "
             "at the latency tuple size, -R 50 and -R 99, one way as printed x 2 = one put round "
             "trip to one peer. Server and client as two local processes over 127.0.0.1, "
             "UCX_TLS=sm (shm) or UCX_TLS=tcp UCX_NET_DEVICES=lo (tcp)"}};
  }
  std::string unavailable(const RunContext& context) const override {
    (void)context;
    return perftest_unavailable();
  }

  void run(RunContext& context, Result& result) override {
    const std::vector<std::string> modes = context.param("modes");
    const std::vector<std::size_t> sizes = context.param("tuple_sizes");
    const int targets = context.param("targets");
    const std::uint32_t fanout = context.param("fanout");
    const std::size_t bytes = context.param("bytes_per_point");
    const std::size_t segments = context.param("segments");
    const std::size_t segment_bytes = context.param("segment_bytes");
    const std::size_t lat_bytes = context.param("latency_tuple_bytes");
    const std::size_t iterations = context.param("latency_iterations");
    const std::size_t warmup = std::max<std::size_t>(100, iterations / 10);
    const long stall_s = context.param("stall_timeout_s");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    if (modes.empty()) throw Error(Errc::invalid_argument, "bench replicate: no modes");
    for (const std::string& m : modes) parse_mode(m);
    for (std::size_t s : sizes) {
      if (s < 16 || s % 8 != 0 || s + 8 + 16 > segment_bytes) {
        throw Error(Errc::invalid_argument,
                    "bench replicate: tuple size " + std::to_string(s) +
                        " must be a multiple of 8, at least 16 and fit a segment");
      }
    }
    if (lat_bytes < 16 || lat_bytes % 8 != 0)
      throw Error(Errc::invalid_argument,
                  "bench replicate: latency_tuple_bytes must be >= 16, a multiple of 8");
    if (targets < 1 || targets > 62)
      throw Error(Errc::invalid_argument, "bench replicate: targets must be 1..62");
    if (fanout < 1) throw Error(Errc::invalid_argument, "bench replicate: fanout must be >= 1");
    if (iterations < 1 || stall_s < 1)
      throw Error(Errc::invalid_argument,
                  "bench replicate: latency_iterations and stall_timeout_s must be >= 1");

    std::vector<BwConfig> configs;
    json planned = json::array();
    for (const std::string& mode : modes) {
      for (std::size_t size : sizes) {
        BwConfig c{mode, size, std::max<std::uint64_t>(1000, bytes / size)};
        configs.push_back(c);
        planned.push_back({{"mode", c.mode}, {"tuple_bytes", c.tuple_bytes}, {"tuples", c.tuples}});
      }
    }
    json parameters = context.resolved_parameters();
    parameters["bw_configs"] = planned;
    parameters["latency_warmup"] = warmup;
    result.set_parameters(parameters);
    result.add_baseline("ucx_perftest", baselines()[0].description + "; UCX " + ucx_version());
    result.add_note(
        "Every target checks every tuple (running key: nothing lost, duplicated or reordered; "
        "last byte: not torn; ordered: sequence numbers without gaps); the run fails otherwise. "
        "ucx_perftest's target reads nothing.");
    result.add_note(
        "relay is DFI's software stand-in for the paper's RDMA multicast (UCX has none): the "
        "targets forward segments, so the source link carries each segment `fanout` times "
        "instead of " +
        std::to_string(targets) + " times, at the price of a hop per tree level.");
    result.add_note(
        "1 + " + std::to_string(targets) +
        " busy ranks share the machine's cores: on a 2-vCPU VM every number here is bounded by "
        "CPU time (copies, polling) rather than by a link, and a round trip includes "
        "scheduling delays.");

    if (context.transport == "shm" && !context.netns) {
      result.add_note(
          "shm: ucx_perftest rewrites one 8 KiB buffer between two processes on two cores "
          "(cache to cache), so its put_bw is a memcpy-in-cache rate, far above what 4 ranks "
          "sharing 2 cores can move; ucp_put_lat is two processes spinning on two cores, while "
          "DFI's round trip needs 4 ranks to take turns on them. Read the ratios here as "
          "'how far from an uncontended two-process transport', not as a link limit.");
    }

    Panel& bw = result.panel("bw",
                             "Bandwidth per target, 1 source -> " + std::to_string(targets) +
                                 " targets (slowest target)",
                             {"tuple size", "B", "log2"}, {"tuple bandwidth per target", "GB/s"},
                             Better::higher);
    for (const std::string& m : modes) bw.series(m, Role::dfi, "DFI " + mode_text(m, fanout));
    bw.series("ucx_perftest", Role::baseline,
              "ucx_perftest ucp_put_bw " + std::to_string(segment_bytes) + " B",
              "one link's limit at the segment size; the same value at every tuple size");
    for (const std::string& m : modes) bw.compare(m, "ucx_perftest");

    const std::string lsize = std::to_string(lat_bytes) + " B";
    Panel& rtt = result.panel(
        "rtt", lsize + " round trip: source -> " + std::to_string(targets) + " targets -> acks",
        {"statistic", "", "category"}, {"round-trip time", "us", "linear"}, Better::lower);
    for (const std::string& m : modes) {
      rtt.series(m, Role::dfi, "DFI " + mode_text(m, fanout),
                 "push on the replicate flow, one ack per target on a shuffle flow back");
    }
    rtt.series("ucp_put_lat", Role::baseline, "ucx_perftest ucp_put_lat x 2",
               "put ping-pong with one peer; ucx_perftest's one-way number times 2");
    for (const std::string& m : modes) rtt.compare(m, "ucp_put_lat");

    RankJob job;
    job.nodes = targets + 1;
    job.scenario = name();
    job.params = {{"bw_configs", planned},
                  {"latency_modes", modes},
                  {"targets", targets},
                  {"fanout", fanout},
                  {"segments", segments},
                  {"segment_bytes", segment_bytes},
                  {"latency_tuple_bytes", lat_bytes},
                  {"latency_iterations", iterations},
                  {"latency_warmup", warmup},
                  {"latency_segments", context.param("latency_segments")},
                  {"stall_timeout_ms", stall_s * 1000}};
    job.timeout = timeout;
    const std::string dfi_command = rank_job_command(job, context);

    PerftestRun put_bw;
    put_bw.test = "ucp_put_bw";
    put_bw.message_bytes = segment_bytes;
    put_bw.iterations = std::max<std::size_t>(1000, bytes / segment_bytes);
    put_bw.warmup = std::max<std::size_t>(100, put_bw.iterations / 10);
    put_bw.transport = context.transport;
    put_bw.timeout = timeout;
    put_bw.extra_args = {"-O", std::to_string(segments)};

    std::vector<double> limits;
    for (int rep = 1; rep <= context.repeat; ++rep) {
      const std::string round =
          "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat);
      auto run_dfi = [&] {
        context.say(round + ": DFI, " + std::to_string(configs.size()) + " bandwidth flows and " +
                    std::to_string(modes.size()) + " latency pairs, " + std::to_string(job.nodes) +
                    " ranks over " + (context.netns ? "netns tcp" : context.transport));
        std::map<int, json> reports = run_rank_job(job, context);
        for (int r = 0; r <= targets; ++r) {
          if (!reports.count(r))
            throw Error(Errc::protocol,
                        "bench replicate: rank " + std::to_string(r) + " reported no result");
        }
        for (std::size_t i = 0; i < configs.size(); ++i) {
          const BwConfig& c = configs[i];
          const json& s = reports.at(0).at("bw").at(i);
          const std::string what = c.mode + ", " + std::to_string(c.tuple_bytes) + " B";
          if (s.at("sent_tuples").get<std::uint64_t>() != c.tuples) {
            throw Error(Errc::protocol, "bench replicate: " + what + ": the source pushed " +
                                            s.at("sent_tuples").dump() + " tuples, expected " +
                                            std::to_string(c.tuples));
          }
          double slowest = 0;
          for (int r = 1; r <= targets; ++r) {
            const json& t = reports.at(r).at("bw").at(i);
            if (t.at("errors").get<std::uint64_t>() != 0 ||
                t.at("received_tuples").get<std::uint64_t>() != c.tuples ||
                t.at("last_key").get<std::uint64_t>() != c.tuples) {
              throw Error(Errc::protocol,
                          "bench replicate: " + what + ": target " + std::to_string(r - 1) +
                              " received wrong data: " + t.dump() + " (the source pushed " +
                              std::to_string(c.tuples) + " tuples)");
            }
            const double gbps = t.at("gbps").get<double>();
            slowest = r == 1 ? gbps : std::min(slowest, gbps);
          }
          bw.add(c.mode, c.tuple_bytes, slowest);
        }
        for (const std::string& m : modes) bw.add_command(m, dfi_command);
        for (std::size_t i = 0; i < modes.size(); ++i) {
          const json& r = reports.at(0).at("lat").at(i);
          rtt.add(modes[i], kMedian, r.at("median_us").get<double>());
          rtt.add(modes[i], kP99, r.at("p99_us").get<double>());
          rtt.add_command(modes[i], dfi_command);
        }
      };
      auto run_baselines = [&] {
        PerftestResult pr = run_perftest(put_bw);
        const double gbps = pr.final.bandwidth_gbps();
        limits.push_back(gbps);
        context.say(round + ": ucx_perftest ucp_put_bw " + std::to_string(segment_bytes) +
                    " B: " + std::to_string(gbps) + " GB/s");
        for (std::size_t size : sizes) bw.add("ucx_perftest", size, gbps);
        bw.add_command("ucx_perftest", pr.command);
        for (const char* rank : {"50", "99"}) {
          PerftestRun run;
          run.test = "ucp_put_lat";
          run.message_bytes = lat_bytes;
          run.iterations = iterations;
          run.warmup = warmup;
          run.transport = context.transport;
          run.timeout = timeout;
          run.extra_args = {"-R", rank};
          PerftestResult lr = run_perftest(run);
          context.say(round + ": ucx_perftest ucp_put_lat " + lsize + " -R " + rank + ": " +
                      std::to_string(lr.final.latency_p50_us) + " us one way");
          rtt.add("ucp_put_lat", std::string(rank) == "50" ? kMedian : kP99,
                  2 * lr.final.latency_p50_us);
          rtt.add_command("ucp_put_lat", lr.command);
        }
      };
      run_alternating(rep, run_dfi, run_baselines);
    }
    const double limit = median(limits);
    result.add_note("Naive replication writes " + std::to_string(targets) +
                    " copies through the source's outgoing link: on a real network its per-target "
                    "share of the measured link limit (" +
                    std::to_string(limit) + " GB/s, median) is at most limit / " +
                    std::to_string(targets) + " = " + std::to_string(limit / targets) +
                    " GB/s. Over loopback shm/tcp there is no such link: every copy costs CPU.");
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return ReplicateRank(params, err).run(out);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_replicate_scenario() { return std::make_unique<ReplicateBench>(); }

}  // namespace dfi::tools::bench
