// Scenario combiner (003 Fig 9): a combiner flow with SUM grouped by key, 3 sources -> 1 target,
// against a shuffle flow moving the same tuples 3 -> 1 to a target that sums them itself.
//
// DFI side: 1 + `sources` ranks under a local cluster (default 4): rank 0 runs the target,
// ranks 1..sources one source each (one thread per rank, each with its own fabric::Worker).
// Tuples are 16 B (key int64, value int64). Source s cycles through a block of 65536 pre-built
// tuples: tuple j has key (a * j + s) mod groups (a odd, groups a power of two <= 65536, so every
// `groups` consecutive tuples hold every key once) and a pseudo-random value in -1000..1000.
// Per number of groups, two flows run one after the other, each timed at the target from a
// barrier that every rank passes once its side is open until the final aggregates are in hand:
//   combiner: aggregates sum(value); the sources push tuple at a time
//             (CombinerSource::push: local table, shipped as partial rows), the target
//             consume()s the final rows.
//   shuffle:  the same tuples through a bandwidth-mode shuffle flow (ShuffleSource::push, one
//             target); the target consumes every raw tuple and adds its value into a dense array
//             indexed by key (keys are 0..groups-1: the cheapest hand-written aggregation).
// Throughput = sources x tuples_per_source / target time, in tuples/s.
//
// Verification: each source computes its own per-key reference sums (modulo 2^64, as the flow
// defines SUM) from the block and the tuple count, and reports R_s = sum over keys of
// ref_s[key] * w(key) (mod 2^64, w a 64-bit hash). The target reports, over its result rows,
// T = sum of sum * w(key), the row count and sum of w'(key) (another hash). The driver requires
// T = sum of R_s, rows = groups and the key hash sum of 0..groups-1, for both flows: a wrong,
// missing or duplicated aggregate fails the run (a linear check with random weights: a wrong
// result passes with probability about 2^-64).
//
// Baselines: the shuffle flow above (DFI's own flow without aggregation on the way: what an
// application would write without the combiner), and ucx_perftest ucp_put_bw at the segment
// size with the bytes of one point, converted to 16 B tuples per second: how many raw tuples one
// link can carry into the target.
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
#include "dfi/flow/combiner.hpp"
#include "dfi/flow/shuffle.hpp"
#include "perftest.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kBlockTuples = 65536;  // pre-built tuples a source cycles through
constexpr std::size_t kTupleBytes = 16;
constexpr std::uint64_t kKeyStride = 0x9e3779b97f4a7c15ull;  // odd: a bijection mod 2^k

struct Pair {
  std::int64_t key;
  std::int64_t value;
};
static_assert(sizeof(Pair) == kTupleBytes);

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  return x ^ (x >> 33);
}

// The weights of the two linear checks.
std::uint64_t sum_weight(std::uint64_t key) { return mix(key * 2 + 1); }
std::uint64_t key_weight(std::uint64_t key) { return mix(key ^ 0x5bd1e9955bd1e995ull); }

// Sum of key_weight over keys 0..groups-1: what the result rows' keys must add up to.
std::uint64_t expected_key_digest(std::uint64_t groups) {
  std::uint64_t d = 0;
  for (std::uint64_t k = 0; k < groups; ++k) d += key_weight(k);
  return d;
}

// The block of source `source` (1-based rank) for `groups` keys.
std::vector<Pair> make_block(int source, std::uint64_t groups) {
  std::vector<Pair> block(kBlockTuples);
  for (std::size_t j = 0; j < kBlockTuples; ++j) {
    const std::uint64_t key = (kKeyStride * j + static_cast<std::uint64_t>(source)) & (groups - 1);
    const std::uint64_t r = mix((static_cast<std::uint64_t>(source) << 40) + j);
    block[j] = {static_cast<std::int64_t>(key), static_cast<std::int64_t>(r % 2001) - 1000};
  }
  return block;
}

// R_s: the weighted sum of this source's per-key sums (mod 2^64) over `tuples` pushed tuples.
std::uint64_t reference_digest(const std::vector<Pair>& block, std::uint64_t groups,
                               std::uint64_t tuples) {
  std::vector<std::uint64_t> sums(groups, 0);
  const std::uint64_t laps = tuples / block.size();
  const std::uint64_t rest = tuples % block.size();
  for (std::size_t j = 0; j < block.size(); ++j) {
    const std::uint64_t times = laps + (j < rest ? 1 : 0);
    sums[static_cast<std::uint64_t>(block[j].key)] +=
        static_cast<std::uint64_t>(block[j].value) * times;
  }
  std::uint64_t digest = 0;
  for (std::uint64_t k = 0; k < groups; ++k) digest += sums[k] * sum_weight(k);
  return digest;
}

bool power_of_two(std::uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

void check(const Status& status, const std::string& what) {
  if (!status) throw Error(status.code(), "bench combiner: " + what + ": " + status.message());
}

// ---------------------------------------------------------------------------------------------
// Rank program

class CombinerRank {
 public:
  CombinerRank(const json& params, std::ostream& err) : params_(params), err_(err) {}

  int run(std::ostream& out) {
    cluster::Node node;
    const int sources = params_.at("sources").get<int>();
    if (node.size() != sources + 1) {
      err_ << "bench combiner: needs " << sources + 1 << " ranks (1 target + " << sources
           << " sources), got " << node.size() << '\n';
      return 2;
    }
    stall_ = std::chrono::milliseconds(params_.at("stall_timeout_ms").get<long>());
    const int me = node.rank();
    const std::uint64_t tuples = params_.at("tuples_per_source").get<std::uint64_t>();
    fabric::Worker worker(node.fabric(), "combiner bench rank " + std::to_string(me));
    json points = json::array();
    for (const json& g : params_.at("groups")) {
      const std::uint64_t groups = g.get<std::uint64_t>();
      std::vector<Pair> block;
      std::uint64_t reference = 0;
      if (me != 0) {
        block = make_block(me, groups);
        reference = reference_digest(block, groups, tuples);
      }
      for (const bool combiner : {true, false}) {
        const flow::FlowSpec spec = make_spec(combiner, groups, sources);
        if (me == 0) flow::create_flow(node, spec);
        json point = me == 0 ? run_target(node, spec, combiner, groups)
                             : run_source(node, worker, spec, combiner, block, tuples);
        point["groups"] = groups;
        point["flow"] = combiner ? "combiner" : "shuffle";
        if (me != 0) point["reference_digest"] = reference;
        points.push_back(point);
        node.barrier("bench/combiner/done/" + spec.name);
      }
    }
    report_rank_result(out,
                       {{"rank", me}, {"fabric", node.fabric().describe()}, {"points", points}});
    node.finish();
    return 0;
  }

 private:
  flow::FlowSpec make_spec(bool combiner, std::uint64_t groups, int sources) const {
    flow::FlowSpec spec;
    spec.name = std::string(combiner ? "bench-combiner-" : "bench-combiner-shuffle-") +
                std::to_string(groups);
    spec.type = combiner ? flow::FlowType::combiner : flow::FlowType::shuffle;
    for (int s = 1; s <= sources; ++s) spec.sources.push_back({s, 0});
    spec.targets = {{0, 0}};
    spec.schema = flow::Schema({{"key", flow::Type::int64, 1}, {"value", flow::Type::int64, 1}});
    spec.key_column = "key";
    if (combiner) {
      spec.type_options = flow::CombinerOptions{.aggregates = flow::parse_aggregates("sum(value)")};
    }
    spec.options.mode = flow::Mode::bandwidth;
    spec.options.segments = params_.at("segments").get<std::uint32_t>();
    spec.options.segment_bytes = params_.at("segment_bytes").get<std::uint32_t>();
    spec.options.stall_timeout = stall_;
    return spec;
  }

  // Ranks 1..: push `tuples` tuples from the block, tuple at a time, then close.
  json run_source(cluster::Node& node, fabric::Worker& worker, const flow::FlowSpec& spec,
                  bool combiner, const std::vector<Pair>& block, std::uint64_t tuples) {
    std::unique_ptr<flow::CombinerSource> comb;
    std::unique_ptr<flow::ShuffleSource> shuf;
    if (combiner) {
      flow::CombinerSourceOptions options;
      options.local_groups = params_.at("local_groups").get<std::size_t>();
      options.ship_tuples = params_.at("ship_tuples").get<std::size_t>();
      comb = std::make_unique<flow::CombinerSource>(node, worker, spec.name, 0, options);
    } else {
      shuf = std::make_unique<flow::ShuffleSource>(node, worker, spec.name, 0);
    }
    node.barrier("bench/combiner/open/" + spec.name);
    const Clock::time_point start = Clock::now();
    const Pair* p = block.data();
    const Pair* const end = block.data() + block.size();
    if (combiner) {
      for (std::uint64_t i = 0; i < tuples; ++i) {
        if (Status s = comb->push(p, kTupleBytes); !s) [[unlikely]]
          check(s, "combiner push");
        if (++p == end) p = block.data();
      }
      check(comb->close(), "combiner close");
    } else {
      for (std::uint64_t i = 0; i < tuples; ++i) {
        if (Status s = shuf->push(p, kTupleBytes); !s) [[unlikely]]
          check(s, "shuffle push");
        if (++p == end) p = block.data();
      }
      check(shuf->close(), "shuffle close");
    }
    const double seconds = seconds_between(start, Clock::now());
    json report = {{"sent_tuples", tuples}, {"source_seconds", seconds}};
    if (combiner) {
      const flow::CombinerCounters& c = comb->counters();
      report["pushed"] = c.tuples;
      report["rows_shipped"] = c.rows;
      report["bytes_shipped"] = c.bytes;
    } else {
      report["pushed"] = shuf->counters().tuples;
      report["bytes_shipped"] = shuf->counters().bytes;
    }
    return report;
  }

  // Rank 0: the final aggregates, timed from the start barrier; their digests.
  json run_target(cluster::Node& node, const flow::FlowSpec& spec, bool combiner,
                  std::uint64_t groups) {
    std::uint64_t rows = 0, sum_digest = 0, key_digest = 0, tuples_in = 0, out_of_range = 0;
    double seconds = 0;
    if (combiner) {
      flow::CombinerTarget target(node, spec.name);
      if (target.result_schema().tuple_bytes() != sizeof(Pair)) {
        throw Error(Errc::protocol, "bench combiner: result rows are " +
                                        std::to_string(target.result_schema().tuple_bytes()) +
                                        " B (" + target.result_schema().describe() +
                                        "), expected key and sum, 16 B");
      }
      node.barrier("bench/combiner/open/" + spec.name);
      const Clock::time_point start = Clock::now();
      flow::TupleBatch batch;
      for (;;) {
        check(target.consume(batch, stall_), "combiner consume");
        if (batch.empty()) break;
        for (const Pair& r : batch.as<Pair>()) {
          const auto key = static_cast<std::uint64_t>(r.key);
          sum_digest += static_cast<std::uint64_t>(r.value) * sum_weight(key);
          key_digest += key_weight(key);
          if (key >= groups) ++out_of_range;
        }
        rows += batch.count;
      }
      seconds = seconds_between(start, Clock::now());
      tuples_in = target.counters().tuples;
    } else {
      flow::ShuffleTarget target(node, spec.name, 0);
      std::vector<std::uint64_t> sums(groups, 0);
      std::vector<std::uint8_t> seen(groups, 0);
      node.barrier("bench/combiner/open/" + spec.name);
      const Clock::time_point start = Clock::now();
      flow::TupleBatch batch;
      for (;;) {
        check(target.consume(batch, stall_), "shuffle consume");
        if (batch.empty()) break;
        for (const Pair& t : batch.as<Pair>()) {
          const auto key = static_cast<std::uint64_t>(t.key);
          if (key >= groups) [[unlikely]] {
            ++out_of_range;
            continue;
          }
          sums[key] += static_cast<std::uint64_t>(t.value);
          seen[key] = 1;
        }
        tuples_in += batch.count;
      }
      for (std::uint64_t k = 0; k < groups; ++k) {
        if (seen[k] == 0) continue;
        ++rows;
        sum_digest += sums[k] * sum_weight(k);
        key_digest += key_weight(k);
      }
      seconds = seconds_between(start, Clock::now());
    }
    err_ << "bench combiner: " << (combiner ? "combiner SUM" : "shuffle + target SUM") << ", "
         << groups << " groups: " << tuples_in << " tuples in " << seconds << " s, " << rows
         << " rows\n";
    return {{"rows", rows},
            {"sum_digest", sum_digest},
            {"key_digest", key_digest},
            {"out_of_range", out_of_range},
            {"tuples_in", tuples_in},
            {"seconds", seconds}};
  }

  const json& params_;
  std::ostream& err_;
  std::chrono::milliseconds stall_{30000};
};

// ---------------------------------------------------------------------------------------------
// Driver

class CombinerBench final : public Scenario {
 public:
  std::string name() const override { return "combiner"; }
  std::string title() const override {
    return "Combiner flow 3 -> 1, SUM by key (003 Fig 9) vs a shuffle flow + target SUM and "
           "ucx_perftest";
  }
  std::string description() const override {
    return "3 source ranks, 1 target rank (4 ranks), 16 B tuples (int64 key, int64 value), "
           "`groups` distinct keys. A combiner flow with sum(value) grouped by key (sources "
           "push tuple at a time into a local table shipped as partial rows; the target merges "
           "and hands out the final rows) against a shuffle flow moving the same tuples 3 -> 1 "
           "to a target that sums them into a dense array itself. Throughput = all pushed "
           "tuples / time at the target from a common start barrier to the final aggregates. "
           "Both results are verified against references the sources compute. Baseline also: "
           "ucx_perftest ucp_put_bw at the segment size, in 16 B tuples per second (raw tuples "
           "one link can carry into the target).";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"groups", json::array({16, 4096}), json::array({16, 1024, 65536}),
         "numbers of distinct keys measured (powers of two, <= 65536)"},
        {"sources", 3, 3, "source ranks (one source each); the target is rank 0"},
        {"tuples_per_source",
         {{"shm", 4000000}, {"tcp", 500000}},
         {{"shm", 40000000}, {"tcp", 5000000}},
         "tuples every source pushes per flow (at least the largest groups)"},
        {"local_groups", 65536, 65536,
         "combiner: ship the local table at this many keys (flow default)"},
        {"ship_tuples", 1u << 20, 1u << 20,
         "combiner: ship the local table after this many pushed tuples (flow default)"},
        {"segments", {{"shm", 32}, {"tcp", 8}}, {{"shm", 32}, {"tcp", 8}},
         "segments per ring (the flow defaults, settings segments_shm / segments_tcp)"},
        {"segment_bytes", {{"shm", 8208}, {"tcp", 32784}}, {{"shm", 8208}, {"tcp", 32784}},
         "segment size including the 16 B footer (the flow defaults, settings segment_bytes_shm / "
         "segment_bytes_tcp)"},
        {"stall_timeout_s", 30, 60,
         "longest wait of a DFI rank for data or ring space before it fails the run"},
        {"timeout_s", 180, 900, "bound of the DFI cluster run and of each ucx_perftest run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"dfi-shuffle",
             "DFI's shuffle flow moving the same tuples 3 -> 1 (bandwidth mode, tuple at a "
             "time), the target summing every raw tuple into a dense array by key; timed like "
             "the combiner"},
            {"ucx_perftest",
             "ucp_put_bw at the flow's segment size (-s segment_bytes, -O segments) with the "
             "bytes of one point's raw tuples, in 16 B tuples per second; server and client as "
             "two local processes over 127.0.0.1, UCX_TLS=sm (shm) or UCX_TLS=tcp "
             "UCX_NET_DEVICES=lo (tcp)"}};
  }
  std::string unavailable(const RunContext& context) const override {
    (void)context;
    return perftest_unavailable();
  }

  void run(RunContext& context, Result& result) override {
    const std::vector<std::uint64_t> groups = context.param("groups");
    const int sources = context.param("sources");
    const std::uint64_t tuples = context.param("tuples_per_source");
    const std::size_t segments = context.param("segments");
    const std::size_t segment_bytes = context.param("segment_bytes");
    const long stall_s = context.param("stall_timeout_s");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    if (groups.empty()) throw Error(Errc::invalid_argument, "bench combiner: no groups");
    for (std::uint64_t g : groups) {
      if (!power_of_two(g) || g > kBlockTuples || g > tuples) {
        throw Error(Errc::invalid_argument, "bench combiner: groups " + std::to_string(g) +
                                                " must be a power of two, at most " +
                                                std::to_string(kBlockTuples) +
                                                " and at most tuples_per_source");
      }
    }
    if (sources < 1) throw Error(Errc::invalid_argument, "bench combiner: sources must be >= 1");
    if (stall_s < 1)
      throw Error(Errc::invalid_argument, "bench combiner: stall_timeout_s must be >= 1");

    json parameters = context.resolved_parameters();
    result.set_parameters(parameters);
    result.add_baseline("dfi-shuffle", baselines()[0].description);
    result.add_baseline("ucx_perftest", baselines()[1].description + "; UCX " + ucx_version());
    result.add_note(
        "Both flows' final aggregates are checked against references the sources compute "
        "(weighted sums of per-key sums mod 2^64, the row count and the key set); the run fails "
        "otherwise.");
    result.add_note(
        "The combiner ships partial rows (key, count, sum: 24 B) instead of 16 B tuples: with "
        "few groups each source sends a handful of rows per ship_tuples tuples; with groups close "
        "to local_groups it ships about one row per key per table fill, i.e. more bytes than the "
        "raw tuples when every key occurs once per fill.");
    result.add_note(
        "1 + " + std::to_string(sources) +
        " busy ranks share the machine's cores: on a 2-vCPU VM throughput is bounded by CPU time "
        "(hashing, copying, polling), not by a link.");

    if (context.transport == "shm" && !context.netns) {
      result.add_note(
          "shm: ucx_perftest rewrites one 8 KiB buffer between two processes (cache to cache); "
          "its put_bw in tuples/s is a memcpy-in-cache rate, not a link limit. Moving raw "
          "tuples costs almost nothing here, so the shuffle + SUM baseline is bounded by the "
          "sources' push loops and the target's additions, and the combiner's per-tuple hash "
          "table update at the sources is pure extra CPU work; its benefit (fewer bytes into "
          "the target) shows over tcp.");
    }

    Panel& panel = result.panel(
        "throughput",
        "SUM by key, " + std::to_string(sources) + " sources -> 1 target, 16 B tuples",
        {"distinct keys (groups)", "", "log2"}, {"throughput", "tuples/s"}, Better::higher);
    panel.series("combiner", Role::dfi, "DFI combiner flow, sum(value) by key",
                 "local tables at the sources, partial rows merged at the target");
    panel.series("shuffle", Role::baseline, "DFI shuffle flow + SUM at the target",
                 "the same tuples moved raw 3 -> 1; the target sums into a dense array");
    panel.series("ucx_perftest", Role::baseline, "ucx_perftest ucp_put_bw / 16 B",
                 "raw 16 B tuples per second one link carries at the segment size; the same "
                 "value at every number of groups");
    panel.compare("combiner", "shuffle");
    panel.compare("combiner", "ucx_perftest");

    RankJob job;
    job.nodes = sources + 1;
    job.scenario = name();
    job.params = {{"groups", groups},
                  {"sources", sources},
                  {"tuples_per_source", tuples},
                  {"local_groups", context.param("local_groups")},
                  {"ship_tuples", context.param("ship_tuples")},
                  {"segments", segments},
                  {"segment_bytes", segment_bytes},
                  {"stall_timeout_ms", stall_s * 1000}};
    job.timeout = timeout;
    const std::string dfi_command = rank_job_command(job, context);

    const std::uint64_t point_bytes = static_cast<std::uint64_t>(sources) * tuples * kTupleBytes;
    PerftestRun put_bw;
    put_bw.test = "ucp_put_bw";
    put_bw.message_bytes = segment_bytes;
    put_bw.iterations = std::max<std::size_t>(1000, point_bytes / segment_bytes);
    put_bw.warmup = std::max<std::size_t>(100, put_bw.iterations / 10);
    put_bw.transport = context.transport;
    put_bw.timeout = timeout;
    put_bw.extra_args = {"-O", std::to_string(segments)};

    for (int rep = 1; rep <= context.repeat; ++rep) {
      const std::string round =
          "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat);
      auto run_dfi = [&] {
        context.say(round + ": DFI, combiner and shuffle flows for " +
                    std::to_string(groups.size()) + " group count(s), " +
                    std::to_string(job.nodes) + " ranks over " +
                    (context.netns ? "netns tcp" : context.transport));
        std::map<int, json> reports = run_rank_job(job, context);
        for (int r = 0; r <= sources; ++r) {
          if (!reports.count(r))
            throw Error(Errc::protocol,
                        "bench combiner: rank " + std::to_string(r) + " reported no result");
        }
        const json& target_points = reports.at(0).at("points");
        for (std::size_t i = 0; i < target_points.size(); ++i) {
          const json& t = target_points.at(i);
          const std::string flow = t.at("flow");
          const std::uint64_t g = t.at("groups");
          std::uint64_t want = 0;
          for (int r = 1; r <= sources; ++r) {
            const json& s = reports.at(r).at("points").at(i);
            if (s.at("flow") != flow || s.at("groups") != g ||
                s.at("pushed").get<std::uint64_t>() != tuples) {
              throw Error(Errc::protocol, "bench combiner: source " + std::to_string(r) +
                                              " reported " + s.dump() + " for " + flow + ", " +
                                              std::to_string(g) + " groups");
            }
            want += s.at("reference_digest").get<std::uint64_t>();
          }
          const std::string what = flow + ", " + std::to_string(g) + " groups";
          if (t.at("rows").get<std::uint64_t>() != g || t.at("out_of_range") != 0 ||
              t.at("sum_digest").get<std::uint64_t>() != want ||
              t.at("key_digest").get<std::uint64_t>() != expected_key_digest(g) ||
              t.at("tuples_in").get<std::uint64_t>() != tuples * sources) {
            throw Error(Errc::protocol,
                        "bench combiner: " + what +
                            ": wrong aggregates at the target: " + t.dump() + " (expected " +
                            std::to_string(g) + " rows, sum digest " + std::to_string(want) +
                            ", key digest " + std::to_string(expected_key_digest(g)) + ", " +
                            std::to_string(tuples * sources) + " tuples)");
          }
          const double seconds = t.at("seconds").get<double>();
          if (seconds <= 0)
            throw Error(Errc::protocol, "bench combiner: " + what + ": no time measured");
          const double rate = static_cast<double>(tuples * sources) / seconds;
          panel.add(flow, g, rate);
        }
        panel.add_command("combiner", dfi_command);
        panel.add_command("shuffle", dfi_command);
      };
      auto run_baseline = [&] {
        PerftestResult pr = run_perftest(put_bw);
        const double rate = pr.final.bandwidth_gbps() * 1e9 / kTupleBytes;
        context.say(round + ": ucx_perftest ucp_put_bw " + std::to_string(segment_bytes) +
                    " B: " + std::to_string(pr.final.bandwidth_gbps()) +
                    " GB/s = " + std::to_string(rate / 1e6) + " M tuples/s of 16 B");
        for (std::uint64_t g : groups) panel.add("ucx_perftest", g, rate);
        panel.add_command("ucx_perftest", pr.command);
      };
      run_alternating(rep, run_dfi, run_baseline);
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return CombinerRank(params, err).run(out);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_combiner_scenario() { return std::make_unique<CombinerBench>(); }

}  // namespace dfi::tools::bench
