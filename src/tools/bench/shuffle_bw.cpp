// Scenario shuffle-bw (003 Fig 7a): bandwidth of a shuffle flow against the transport's limits.
//
// DFI side (two ranks under a local cluster): one bandwidth-mode shuffle flow per configuration
// (push API x tuple size x source threads x direct_write). Rank 0 runs `threads` source threads,
// each with its own fabric::Worker and ShuffleSource; rank 1 runs `targets` target threads
// (default 1, so 1 thread = a 1:1 flow and 2 threads = 2 sources on rank 0 into 1 target on
// rank 1, a 2:1 flow; `--set targets=2` gives 1:2 and 2:2). Sources push from a 64 KiB block of
// pre-built tuples whose key column cycles through 0..block-1 (tuple_block.hpp), key-hash
// routing (the default): tuple at a time (ShuffleSource::push) or the whole block per call
// (ShuffleSource::push_batch); every source pushes bytes_per_point / threads bytes, then closes. Each target consumes (zero copy) and reads the 8-byte key of every tuple to count
// and checksum what arrived. Bandwidth = tuple payload bytes delivered after the first batch /
// (end of stream of every source - arrival of the first batch), measured at the targets. The
// driver checks that the tuple count and the key checksum at the targets equal what the sources
// pushed, so nothing was lost or duplicated.
//
// Baselines, interleaved with DFI in every repetition:
//   - ucx_perftest -t ucp_put_bw and -t ucp_am_bw with the flow's segment size (8 KiB by
//     default: a flow moves tuples in segments of that size), as many bytes as one configuration
//     moves, and at most `segments` messages outstanding (-O, the ring's depth). One measurement
//     per repetition, shown at every tuple size: it does not depend on how the flow batches.
//   - the hand-written limits of a 1:1 stream of the same tuples between two processes
//     (stream_baseline.hpp): over tcp a plain TCP socket over loopback, over shm a
//     single-producer/single-consumer ring in shared memory of the flow's ring size, fed two
//     ways: tuple after tuple with a copy of compile-time width (ring_tuple, the limit of push)
//     and by memcpy of whole runs (ring_bulk, the limit of push_batch). The same tuples as a
//     one-thread configuration, every key summed at the receiver, GB/s timed the same way; one
//     measurement per tuple size, producer and repetition.
//
// On shm the flow can write tuples straight into the target's ring through UCX's mapping
// (direct_write = true, the default) or batch them in a local staging segment and put it
// (direct_write = false, what every other transport does); both are measured.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "perftest.hpp"
#include "rank_threads.hpp"
#include "scenarios.hpp"
#include "stream_baseline.hpp"
#include "tuple_block.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Config {
  std::size_t tuple_bytes = 0;
  int threads = 1;
  bool direct_write = true;
  std::uint64_t tuples_per_source = 0;
  bool batch = false;  // push_batch of the whole block per call, else push per tuple
  bool per_rank = false;  // one ring per target shared by the source threads (FlowOptions::rings)
};

json config_json(const Config& c) {
  return {{"tuple_bytes", c.tuple_bytes},
          {"threads", c.threads},
          {"direct_write", c.direct_write},
          {"tuples_per_source", c.tuples_per_source},
          {"api", c.batch ? "push_batch" : "push"},
          {"rings", c.per_rank ? "per_rank" : "per_thread"}};
}

Config config_from(const json& j) {
  return {j.at("tuple_bytes").get<std::size_t>(), j.at("threads").get<int>(),
          j.at("direct_write").get<bool>(), j.at("tuples_per_source").get<std::uint64_t>(),
          j.at("api").get<std::string>() == "push_batch", j.at("rings").get<std::string>() == "per_rank"};
}

// ---------------------------------------------------------------------------------------------
// Rank program

class ShuffleBwRank {
 public:
  ShuffleBwRank(const json& params, std::ostream& err) : params_(params), err_(err) {}

  int run(std::ostream& out) {
    cluster::Node node;
    if (node.size() != 2) {
      err_ << "bench shuffle-bw: needs exactly 2 ranks, got " << node.size() << '\n';
      return 2;
    }
    const int me = node.rank();
    json points = json::array();
    std::size_t index = 0;
    for (const json& c : params_.at("configs")) {
      const Config config = config_from(c);
      const flow::FlowSpec spec = make_spec(config, index);
      if (me == 0) flow::create_flow(node, spec);
      json point = me == 0 ? run_sources(node, spec, config) : run_targets(node, spec, config);
      point["index"] = index;
      points.push_back(point);
      // The next flow starts only when both sides are done with this one.
      node.barrier("bench/shuffle-bw/done/" + std::to_string(index));
      ++index;
    }
    report_rank_result(out,
                       {{"rank", me}, {"fabric", node.fabric().describe()}, {"points", points}});
    node.finish();
    return 0;
  }

 private:
  flow::FlowSpec make_spec(const Config& config, std::size_t index) const {
    flow::FlowSpec spec;
    spec.name = "bench-shuffle-bw-" + std::to_string(index);
    for (int t = 0; t < config.threads; ++t) spec.sources.push_back({0, t});
    const int targets = params_.at("targets").get<int>();
    for (int t = 0; t < targets; ++t) spec.targets.push_back({1, t});
    spec.schema = flow::Schema(
        {{"key", flow::Type::uint64, 1},
         {"payload", flow::Type::chars, static_cast<std::uint32_t>(config.tuple_bytes - 8)}});
    spec.key_column = "key";
    spec.routing = params_.at("routing").get<std::string>() == "explicit"
                       ? flow::Routing::explicit_target
                       : flow::Routing::key_hash;
    spec.options.mode = flow::Mode::bandwidth;
    spec.options.segments = params_.at("segments").get<std::uint32_t>();
    spec.options.segment_bytes = params_.at("segment_bytes").get<std::uint32_t>();
    spec.options.direct_write = config.direct_write;
    spec.options.rings = config.per_rank ? flow::RingSharing::per_rank : flow::RingSharing::per_thread;
    return spec;
  }

  // Rank 0: `threads` sources push, all starting together; returns what they sent.
  json run_sources(cluster::Node& node, const flow::FlowSpec& spec, const Config& config) {
    const std::size_t tb = config.tuple_bytes;
    const std::size_t block = block_tuples(tb);
    const std::size_t targets = spec.targets.size();
    const bool explicit_routing = spec.routing == flow::Routing::explicit_target;
    struct Sent {
      flow::FlowCounters counters;
      bool direct = true;
      double seconds = 0;
    };
    std::vector<Sent> sent(static_cast<std::size_t>(config.threads));
    RankThreads threads("bench shuffle-bw");
    for (int t = 0; t < config.threads; ++t) {
      threads.start("source " + std::to_string(t), [&, t](RankThreads::Gate& gate) {
        fabric::Worker worker(node.fabric(), "shuffle-bw source " + std::to_string(t));
        flow::ShuffleSource source(node, worker, spec.name, t);
        std::vector<std::byte> tuples(block * tb);
        fill_tuple_block(tuples, tb);
        // Width and count as locals of this thread: through the captured references they would be
        // reloaded after every tuple store (a std::byte store may alias them).
        const std::size_t width = tb;
        const std::uint64_t count = config.tuples_per_source;
        gate.ready_and_wait();
        const Clock::time_point start = Clock::now();
        const std::byte* p = tuples.data();
        const std::byte* const end = tuples.data() + block * tb;
        // Separate loops, so that the timed loop holds nothing but the push and the pointer walk.
        if (config.batch) {
          // The block from its start per call, so that keys cycle as with push.
          std::size_t next_target = 0;
          for (std::uint64_t left = count; left > 0;) {
            const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, block));
            Status s = explicit_routing ? source.push_batch_to(next_target, tuples.data(), n * width)
                                        : source.push_batch(tuples.data(), n * width);
            if (!s) [[unlikely]] throw Error(s.code(), s.message());
            if (++next_target == targets) next_target = 0;
            left -= n;
          }
        } else if (explicit_routing) {
          std::size_t next_target = 0;
          for (std::uint64_t i = 0; i < count; ++i) {
            if (Status s = source.push_to(next_target, p, width); !s) [[unlikely]]
              throw Error(s.code(), s.message());
            if (++next_target == targets) next_target = 0;
            p += width;
            if (p == end) p = tuples.data();
          }
        } else {
          for (std::uint64_t i = 0; i < count; ++i) {
            if (Status s = source.push(p, width); !s) [[unlikely]]
              throw Error(s.code(), s.message());
            p += width;
            if (p == end) p = tuples.data();
          }
        }
        if (Status s = source.close(); !s) throw Error(s.code(), s.message());
        sent[t] = {source.counters(), source.direct(), seconds_between(start, Clock::now())};
      });
    }
    threads.release();
    threads.join();
    std::uint64_t stalls = 0, segments = 0, tuples = 0;
    bool direct = true;
    double slowest = 0;
    for (const Sent& s : sent) {
      stalls += s.counters.stalls;
      segments += s.counters.segments;
      tuples += s.counters.tuples;
      direct = direct && s.direct;
      slowest = std::max(slowest, s.seconds);
    }
    return {{"sent_tuples", tuples},
            {"sent_key_sum", config.threads * expected_key_sum(config.tuples_per_source, block)},
            {"stalls", stalls},
            {"segments", segments},
            {"direct", direct},
            {"source_seconds", slowest}};
  }

  // Rank 1: `targets` threads consume until end of stream; returns what arrived and how fast.
  json run_targets(cluster::Node& node, const flow::FlowSpec& spec, const Config& config) {
    const std::size_t tb = config.tuple_bytes;
    const auto timeout = std::chrono::milliseconds(params_.at("consume_timeout_ms").get<long>());
    std::mutex mutex;
    std::uint64_t tuples = 0, timed_tuples = 0, key_sum = 0;
    Clock::time_point first = Clock::time_point::max(), last = Clock::time_point::min();
    RankThreads threads("bench shuffle-bw");
    for (std::size_t t = 0; t < spec.targets.size(); ++t) {
      threads.start("target " + std::to_string(t), [&, t](RankThreads::Gate&) {
        flow::ShuffleTarget target(node, spec.name, static_cast<int>(t));
        flow::TupleBatch batch;
        std::uint64_t count = 0, first_count = 0, sum = 0;
        Clock::time_point start{}, end{};
        bool started = false;
        for (;;) {
          Status s = target.consume(batch, timeout);
          if (!s) throw Error(s.code(), s.message());
          if (batch.empty()) {
            end = Clock::now();
            break;
          }
          if (!started) {
            start = Clock::now();
            first_count = batch.count;
            started = true;
          }
          count += batch.count;
          const std::byte* p = batch.data;
          for (std::size_t i = 0; i < batch.count; ++i, p += tb) {
            std::uint64_t key;
            std::memcpy(&key, p, sizeof key);
            sum += key;
          }
        }
        std::lock_guard lock(mutex);
        tuples += count;
        key_sum += sum;
        if (started) {
          timed_tuples += count - first_count;
          first = std::min(first, start);
          last = std::max(last, end);
        }
      });
    }
    threads.join();
    const double seconds = timed_tuples > 0 ? seconds_between(first, last) : 0;
    const double gbps = seconds > 0 ? static_cast<double>(timed_tuples * tb) / seconds / 1e9 : 0;
    err_ << "bench shuffle-bw: " << (config.batch ? "push_batch, " : "push, ") << tb << " B tuples, "
         << config.threads << " source thread(s), " << (config.direct_write ? "direct" : "staged")
         << ": " << tuples << " tuples, " << gbps << " GB/s\n";
    return {{"received_tuples", tuples},
            {"received_key_sum", key_sum},
            {"timed_bytes", timed_tuples * tb},
            {"seconds", seconds},
            {"gbps", gbps}};
  }

  const json& params_;
  std::ostream& err_;
};

// ---------------------------------------------------------------------------------------------
// Driver

std::string threads_text(int threads, int targets) {
  return std::to_string(threads) + " source thread" + (threads == 1 ? "" : "s") + " on rank 0 -> " +
         std::to_string(targets) + " target" + (targets == 1 ? "" : "s") + " on rank 1 (" +
         std::to_string(threads) + ":" + std::to_string(targets) + ")";
}

class ShuffleBw final : public Scenario {
 public:
  std::string name() const override { return "shuffle-bw"; }
  std::string title() const override {
    return "Shuffle flow bandwidth vs tuple size and source threads (003 Fig 7a) vs ucx_perftest "
           "and a hand-written stream";
  }
  std::string description() const override {
    return "Two ranks, one bandwidth-mode shuffle flow per push API, tuple size and thread "
           "count: rank 0 runs 1 or 2 source threads (each its own worker) pushing tuple at a "
           "time (push) or 64 KiB per call (push_batch) with key-hash routing into `targets` "
           "targets on rank 1 (default 1: 1:1 and 2:1 flows); "
           "each target consumes zero-copy and reads every tuple's 8-byte key (count and "
           "checksum are checked against what the sources pushed). GB/s = tuple bytes delivered "
           "between the first batch and the end of stream of every source, at the targets. On "
           "shm both direct writes into the mapped ring (default) and staging + put "
           "(direct_write=false) are measured. Baselines, interleaved with DFI: ucx_perftest -t "
           "ucp_put_bw and ucp_am_bw at the flow's segment size (8 KiB), the same bytes, at most "
           "`segments` messages outstanding; and the same tuples streamed 1:1 between two "
           "processes by hand, the receiver summing every key and timed the same way: a TCP "
           "socket over loopback (tcp) or a single-producer/single-consumer ring in shared "
           "memory (shm), fed tuple after tuple with a compile-time-width copy (ring_tuple: the "
           "limit of push) and by memcpy of whole runs (ring_bulk: the limit of push_batch).";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"tuple_sizes", json::array({16, 64, 4096}), json::array({16, 64, 256, 1024, 4096}),
         "tuple sizes in bytes (>= 16, multiples of 8)"},
        {"threads", json::array({1, 2}), json::array({1, 2}), "source threads on rank 0"},
        {"targets", 1, 1, "target threads on rank 1"},
        {"direct_write",
         {{"shm", json::array({true, false})}, {"tcp", json::array({true})}},
         {{"shm", json::array({true, false})}, {"tcp", json::array({true})}},
         "direct_write settings measured (only shm can write directly; tcp always stages)"},
        {"bytes_per_point",
         {{"shm", 64u << 20}, {"tcp", 16u << 20}},
         {{"shm", 512u << 20}, {"tcp", 128u << 20}},
         "tuple bytes pushed per configuration (all sources together), by ucx_perftest and by "
         "the stream baseline"},
        {"max_tuples_per_source",
         {{"shm", 4000000}, {"tcp", 1000000}},
         {{"shm", 32000000}, {"tcp", 8000000}},
         "upper bound of tuples per source (keeps 16 B points from dominating the run)"},
        {"segments", {{"shm", 32}, {"tcp", 8}}, {{"shm", 32}, {"tcp", 8}},
         "segments per ring (the flow defaults, settings segments_shm / segments_tcp)"},
        {"segment_bytes", {{"shm", 8208}, {"tcp", 32784}}, {{"shm", 8208}, {"tcp", 32784}},
         "segment size including the 16 B footer (the flow defaults, settings segment_bytes_shm / "
         "segment_bytes_tcp)"},
        {"routing", "key_hash", "key_hash",
         "key_hash (push / push_batch, the default routing) or explicit (push_to / push_batch_to, "
         "round robin)"},
        {"apis", json::array({"push", "push_batch"}), json::array({"push", "push_batch"}),
         "push APIs measured: push (tuple at a time) and push_batch (the 64 KiB block per call)"},
        {"rings", json::array({"per_thread"}), json::array({"per_thread", "per_rank"}),
         "ring sharing measured (FlowOptions::rings): per_thread (a ring per source thread and "
         "target) and per_rank (one ring per target shared by rank 0's source threads; measured "
         "at 2 threads and more, direct write, against per_thread in the same run)"},
        {"perftest_tests", json::array({"ucp_put_bw", "ucp_am_bw"}),
         json::array({"ucp_put_bw", "ucp_am_bw"}),
         "ucx_perftest tests run at the segment size (ucp_put_bw, ucp_am_bw)"},
        {"timeout_s", 120, 600,
         "bound of each DFI cluster run, each ucx_perftest run and each stream baseline run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"ucx_perftest",
             "ucp_put_bw and ucp_am_bw at the flow's segment size (-s segment_bytes, -O "
             "segments), the same bytes as one DFI configuration; server and client as two local "
             "processes over 127.0.0.1, UCX_TLS=sm (shm) or UCX_TLS=tcp UCX_NET_DEVICES=lo (tcp). "
             "One measurement per repetition, shown at every tuple size"},
            {"TCP socket stream / shared-memory ring",
             "the same tuples as a one-thread configuration, streamed 1:1 between two processes "
             "(dfi bench-stream): over tcp a TCP socket over loopback (64 KiB writes, 64 KiB "
             "reads), over shm a single-producer/single-consumer ring in shared memory of "
             "segments x segment_bytes (batches of segment_bytes), its producer copying tuple "
             "after tuple with a copy of compile-time width (ring_tuple, the limit of push) or "
             "each batch with one memcpy of the whole run (ring_bulk, the limit of push_batch); "
             "the receiver sums every tuple's key (count and sum checked), GB/s from its first "
             "batch to the end of the stream. One measurement per tuple size, producer and "
             "repetition"}};
  }
  std::string unavailable(const RunContext& context) const override {
    (void)context;
    return perftest_unavailable();
  }

  void run(RunContext& context, Result& result) override {
    const std::vector<std::size_t> sizes = context.param("tuple_sizes");
    const std::vector<int> thread_counts = context.param("threads");
    const std::vector<bool> directs = context.param("direct_write");
    const int targets = context.param("targets");
    const std::size_t bytes = context.param("bytes_per_point");
    const std::uint64_t max_tuples = context.param("max_tuples_per_source");
    const std::size_t segments = context.param("segments");
    const std::size_t segment_bytes = context.param("segment_bytes");
    const std::string routing = context.param("routing");
    const std::vector<std::string> perftest_tests = context.param("perftest_tests");
    const std::vector<std::string> apis = context.param("apis");
    const std::vector<std::string> ring_sharings = context.param("rings");
    for (const std::string& r : ring_sharings) {
      if (r != "per_thread" && r != "per_rank")
        throw Error(Errc::invalid_argument, "bench shuffle-bw: no rings '" + r + "' (rings: per_thread, per_rank)");
    }
    const bool measure_per_rank = std::count(ring_sharings.begin(), ring_sharings.end(), "per_rank") > 0;
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    for (std::size_t s : sizes) {
      if (s < 16 || s % 8 != 0 || s + 16 > segment_bytes) {
        throw Error(Errc::invalid_argument,
                    "bench shuffle-bw: tuple size " + std::to_string(s) +
                        " must be a multiple of 8, at least 16 and fit a segment");
      }
      if (!ring_copies_width(s)) {
        throw Error(Errc::invalid_argument, "bench shuffle-bw: tuple size " + std::to_string(s) +
                                                ": the ring baseline has " + ring_tuple_widths_text());
      }
    }
    if (targets < 1 || thread_counts.empty() || directs.empty() || sizes.empty() || apis.empty())
      throw Error(Errc::invalid_argument, "bench shuffle-bw: nothing to measure");
    for (const std::string& api : apis) {
      if (api != "push" && api != "push_batch")
        throw Error(Errc::invalid_argument, "bench shuffle-bw: no api '" + api + "' (apis: push, push_batch)");
    }
    const bool measure_push = std::count(apis.begin(), apis.end(), "push") > 0;
    const bool measure_batch = std::count(apis.begin(), apis.end(), "push_batch") > 0;
    std::vector<bool> batch_modes;
    if (measure_push) batch_modes.push_back(false);
    if (measure_batch) batch_modes.push_back(true);
    if (routing != "key_hash" && routing != "explicit")
      throw Error(Errc::invalid_argument, "bench shuffle-bw: routing is key_hash or explicit");
    for (const std::string& test : perftest_tests) {
      if (test != "ucp_put_bw" && test != "ucp_am_bw")
        throw Error(Errc::invalid_argument, "bench shuffle-bw: no perftest test '" + test +
                                                "' (perftest_tests: ucp_put_bw, ucp_am_bw)");
    }

    auto tuples_per_source = [&](std::size_t size, int threads) {
      return std::clamp<std::uint64_t>(bytes / size / threads, 1000, max_tuples);
    };
    std::vector<Config> configs;
    for (bool batch : batch_modes) {
      for (bool direct : directs) {
        for (int threads : thread_counts) {
          for (std::size_t size : sizes) {
            Config c;
            c.tuple_bytes = size;
            c.threads = threads;
            c.direct_write = direct;
            c.tuples_per_source = tuples_per_source(size, threads);
            c.batch = batch;
            configs.push_back(c);
            if (measure_per_rank && threads >= 2 && direct) {
              c.per_rank = true;
              configs.push_back(c);
            }
          }
        }
      }
    }
    json planned = json::array();
    for (const Config& c : configs) planned.push_back(config_json(c));
    json parameters = context.resolved_parameters();
    parameters["configs"] = planned;
    result.set_parameters(parameters);
    const bool shm = context.transport == "shm" && !context.netns;
    const std::string stream_transport = context.netns ? "tcp" : context.transport;
    const bool tcp = stream_transport == "tcp";
    // The hand-written streams: over tcp the socket (for push and push_batch); over shm the
    // ring, fed per tuple (the limit of push) and by whole runs (the limit of push_batch).
    struct Stream {
      std::string id, copy, name;
    };
    std::vector<Stream> streams;
    if (tcp) {
      streams.push_back({"tcp_stream", "tuple", stream_baseline_name("tcp")});
    } else {
      if (measure_push) streams.push_back({"ring_tuple", "tuple", stream_baseline_name("shm", "tuple")});
      if (measure_batch) streams.push_back({"ring_bulk", "bulk", stream_baseline_name("shm", "bulk")});
    }
    // The stream each API is held against.
    auto stream_of = [&](bool batch) { return tcp ? std::string("tcp_stream") : batch ? "ring_bulk" : "ring_tuple"; };
    const std::string stream_name = stream_baseline_name(stream_transport);
    if (!perftest_tests.empty())
      result.add_baseline("ucx_perftest", baselines()[0].description + "; UCX " + ucx_version());
    result.add_baseline(tcp ? stream_name : "shared-memory ring", baselines()[1].description);
    result.add_note(
        "Targets read the 8-byte key of every tuple (count and checksum, verified against the "
        "sources), not the whole payload; so does the receiver of the " +
        std::string(tcp ? stream_name : "shared-memory ring") + " baselines. ucx_perftest's target reads nothing.");
    if (shm) {
      result.add_note(
          "shm: both sides are memcpy into shared memory that stays in cache (the ring is 32 x "
          "8 KiB = 256 KiB per source, ucx_perftest rewrites one 8 KiB buffer): these are "
          "cache-to-cache copy rates of a 2-vCPU VM, not a network's limit.");
    }
    if (context.netns) {
      result.add_note(
          "netns: DFI crosses a bridge between network namespaces; ucx_perftest and "
          "the TCP socket stream run over loopback.");
    }
    result.add_note(std::string(tcp ? "The 0.9x targets (0.5x against the TCP socket stream)"
                                    : "The 0.9x targets (push against ring_tuple; push_batch 0.8x against ring_bulk)") +
                    " apply from 64 B tuples; the 16 B row is shown for completeness.");

    auto dfi_name = [&](bool batch, bool direct) {
      const std::string api = batch ? "DFI push_batch" : "DFI push";
      if (!shm) return api + " (staging + one active message per segment: the path where RMA is emulated)";
      return api + (direct ? ", direct write into the mapped ring" : ", staging + put (direct_write=false)");
    };
    auto series_id = [](bool batch, bool direct, int threads) {
      return std::string(batch ? "batch_" : "") + (direct ? "direct" : "staged") + "_t" + std::to_string(threads);
    };
    // The targets for DFI's default path: 0.9x the transport's one-sided limit, 0.5x the socket
    // stream and 0.9x ucp_am_bw over tcp; over shm 0.9x the per-tuple ring for push and 0.8x
    // the bulk ring for push_batch (issue 28).
    auto target = [&](bool direct, const std::string& baseline) -> std::optional<double> {
      if (!direct || (baseline == "ucp_am_bw" && !tcp)) return std::nullopt;
      if (baseline == "tcp_stream") return 0.5;
      return baseline == "ring_bulk" ? 0.8 : 0.9;
    };
    // Per-rank rings against per-thread rings, the same flows otherwise (issue 27: >= 0.8x).
    auto rings_id = [](bool batch, bool per_rank) {
      return std::string(batch ? "batch_" : "") + (per_rank ? "per_rank" : "per_thread");
    };
    auto rings_panel = [&](int threads) { return "rings_t" + std::to_string(threads); };
    const bool rings_panels = measure_per_rank && std::count(directs.begin(), directs.end(), true) > 0;
    if (rings_panels) {
      for (int threads : thread_counts) {
        if (threads < 2) continue;
        Panel& p = result.panel(rings_panel(threads),
                                "Per-rank vs per-thread rings, " + std::to_string(threads) + ":" +
                                    std::to_string(targets) + " (ratio > 1: shared is faster)",
                                {"tuple size", "B", "log2"}, {"tuple payload bandwidth", "GB/s"}, Better::higher);
        for (bool batch : batch_modes) {
          const std::string api = batch ? "push_batch" : "push";
          p.series(rings_id(batch, true), Role::dfi, "DFI " + api + ", one ring per target shared by the threads");
          p.series(rings_id(batch, false), Role::baseline, "DFI " + api + ", a ring per thread and target",
                   "the same flow with per-thread rings (the default); a DFI variant used as the reference");
          p.compare(rings_id(batch, true), rings_id(batch, false), 0.8);
        }
      }
    }
    for (int threads : thread_counts) {
      Panel& p = result.panel("bw_t" + std::to_string(threads), threads_text(threads, targets),
                              {"tuple size", "B", "log2"}, {"tuple payload bandwidth", "GB/s"},
                              Better::higher);
      for (bool batch : batch_modes) {
        for (bool direct : directs) p.series(series_id(batch, direct, threads), Role::dfi, dfi_name(batch, direct));
      }
      for (const std::string& test : perftest_tests) {
        p.series(test, Role::baseline,
                 "ucx_perftest " + test + " " + std::to_string(segment_bytes) + " B",
                 "the transport's limit at the segment size; the same value at every tuple size");
      }
      for (const Stream& stream : streams) {
        p.series(stream.id, Role::baseline, stream.name + ", 1:1",
                 "the same tuples between two processes by hand, every key summed at the receiver");
      }
      for (bool batch : batch_modes) {
        for (bool direct : directs) {
          for (const std::string& test : perftest_tests)
            p.compare(series_id(batch, direct, threads), test, target(direct, test));
          p.compare(series_id(batch, direct, threads), stream_of(batch), target(direct, stream_of(batch)));
        }
      }
    }
    const bool both = shm && measure_push && std::count(directs.begin(), directs.end(), true) > 0 &&
                      std::count(directs.begin(), directs.end(), false) > 0;
    if (both) {
      Panel& p = result.panel(
          "direct_vs_staged", "Direct write vs staging + put on shm (ratio > 1: direct is faster)",
          {"tuple size", "B", "log2"}, {"tuple payload bandwidth", "GB/s"}, Better::higher);
      for (int threads : thread_counts) {
        const std::string t = std::to_string(threads);
        p.series("direct_t" + t, Role::dfi, "direct write, " + t + " source thread(s)");
        p.series("staged_t" + t, Role::baseline,
                 "DFI's own staging + put path, " + t + " source thread(s)",
                 "the same flow with direct_write=false; a DFI variant used as the reference");
        p.compare("direct_t" + t, "staged_t" + t);
      }
    }

    RankJob job;
    job.nodes = 2;
    job.scenario = name();
    job.params = {{"configs", planned},   {"targets", targets},
                  {"segments", segments}, {"segment_bytes", segment_bytes},
                  {"routing", routing},   {"consume_timeout_ms", timeout.count() * 1000}};
    job.timeout = timeout * 2;
    const std::string dfi_command = rank_job_command(job, context);

    PerftestRun perf;
    perf.message_bytes = segment_bytes;
    perf.iterations = std::max<std::size_t>(1000, bytes / segment_bytes);
    perf.warmup = std::max<std::size_t>(100, perf.iterations / 10);
    perf.transport = context.transport;
    perf.timeout = timeout;
    perf.extra_args = {"-O", std::to_string(segments)};

    StreamRun stream;
    stream.transport = stream_transport;
    stream.ring_bytes = segments * segment_bytes;
    stream.batch_bytes = segment_bytes;
    stream.dfi_binary = context.dfi_binary;
    stream.timeout = timeout;

    for (int rep = 1; rep <= context.repeat; ++rep) {
      const std::string round =
          "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat);
      auto run_dfi = [&] {
        context.say(round + ": DFI, " + std::to_string(configs.size()) + " flows, 2 ranks over " +
                    (context.netns ? "netns tcp" : context.transport));
        std::map<int, json> reports = run_rank_job(job, context);
        if (!reports.count(0) || !reports.count(1))
          throw Error(Errc::protocol, "bench shuffle-bw: a rank reported no result");
        const json& sources = reports.at(0).at("points");
        const json& targets_report = reports.at(1).at("points");
        for (std::size_t i = 0; i < configs.size(); ++i) {
          const Config& c = configs[i];
          const json& s = sources.at(i);
          const json& t = targets_report.at(i);
          if (s.at("sent_tuples") != t.at("received_tuples") ||
              s.at("sent_key_sum") != t.at("received_key_sum") ||
              s.at("sent_tuples").get<std::uint64_t>() != c.tuples_per_source * c.threads) {
            throw Error(Errc::protocol, "bench shuffle-bw: " + std::string(c.batch ? "push_batch, " : "push, ") +
                                            std::to_string(c.tuple_bytes) + " B, " + std::to_string(c.threads) +
                                            " thread(s): sent " + s.dump() + " but received " +
                                            t.dump());
          }
          if (shm && c.direct_write && !s.at("direct").get<bool>()) {
            result.add_note(
                "direct_write=true did not write directly (no mapped ring) in "
                "repetition " +
                std::to_string(rep));
          }
          const double gbps = t.at("gbps").get<double>();
          if (rings_panels && c.threads >= 2 && c.direct_write) {
            Panel& p = result.panel(rings_panel(c.threads));
            p.add(rings_id(c.batch, c.per_rank), c.tuple_bytes, gbps);
            p.add_command(rings_id(c.batch, c.per_rank), dfi_command);
          }
          if (c.per_rank) continue;
          result.panel("bw_t" + std::to_string(c.threads))
              .add(series_id(c.batch, c.direct_write, c.threads), c.tuple_bytes, gbps);
          if (both && !c.batch)
            result.panel("direct_vs_staged")
                .add(series_id(false, c.direct_write, c.threads), c.tuple_bytes, gbps);
        }
        for (int threads : thread_counts) {
          for (bool direct : directs) {
            for (bool batch : batch_modes) {
              result.panel("bw_t" + std::to_string(threads))
                  .add_command(series_id(batch, direct, threads), dfi_command);
            }
            if (both)
              result.panel("direct_vs_staged").add_command(series_id(false, direct, threads), dfi_command);
          }
        }
      };
      // One baseline measurement, shown in every thread count's panel.
      auto add_baseline = [&](const std::string& id, std::size_t size, double gbps,
                              const std::string& command) {
        for (int threads : thread_counts) {
          Panel& p = result.panel("bw_t" + std::to_string(threads));
          p.add(id, size, gbps);
          p.add_command(id, command);
        }
      };
      auto run_baselines = [&] {
        for (const std::string& test : perftest_tests) {
          perf.test = test;
          PerftestResult pr = run_perftest(perf);
          const double gbps = pr.final.bandwidth_gbps();
          context.say(round + ": ucx_perftest " + test + " " + std::to_string(segment_bytes) +
                      " B: " + std::to_string(gbps) + " GB/s");
          for (std::size_t size : sizes) add_baseline(test, size, gbps, pr.command);
        }
        for (std::size_t size : sizes) {
          for (const Stream& s : streams) {
            stream.tuple_bytes = size;
            stream.tuples = tuples_per_source(size, 1);
            stream.copy = s.copy;
            StreamResult sr = run_stream_baseline(stream);
            context.say(round + ": " + s.name + ", " + std::to_string(size) +
                        " B tuples: " + std::to_string(sr.gbps) + " GB/s");
            add_baseline(s.id, size, sr.gbps, sr.command);
          }
        }
      };
      run_alternating(rep, run_dfi, run_baselines);
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return ShuffleBwRank(params, err).run(out);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_shuffle_bw_scenario() { return std::make_unique<ShuffleBw>(); }

}  // namespace dfi::tools::bench
