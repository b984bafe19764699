// Scenario memory (003 §6.1.4): flow buffer memory per node for several flow shapes.
//
// DFI side: for each setting (ranks x source threads per rank x targets per rank, segments x
// segment size, mode) one shuffle flow over a local cluster of that many ranks. Every rank runs
// its target threads (consuming until end of stream) and its source threads (each with its own
// worker), and the sources push `laps` ring-fulls of 64 B tuples per target, so that every ring
// is really written. While every local source and target is open — after all sources of the
// cluster have pushed and before any closes — the rank samples flow::memory_bytes(name): the
// buffers DFI accounts to the flow in this process (rings it hosts as a target plus its
// sources' staging segments). It also samples the process's resident set size (VmRSS) then and
// just before the flow was opened. Reported per node: the largest of the ranks.
//
// No speed baseline: the reference is a computed expectation from the ring layout,
//   targets_per_rank x all_sources x (segments x segment_bytes + 128) (rings, head and tail lines)
//   + sources_per_rank x all_targets x staging_segments(4) x segment_bytes   (put path only)
// and, for 2 ranks x 4 sources x 4 targets with defaults, the project's budget of 16 MiB.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "rank_threads.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;

constexpr std::size_t kTupleBytes = 64;
constexpr std::size_t kStagingSegments = 4;  // memory::RingWriterOptions::staging_segments
constexpr double kMiB = 1048576.0;
constexpr double kBudgetMiB = 16;  // issue 3: 2 ranks x 4 sources x 4 targets, defaults

struct Setting {
  int ranks = 2;
  int sources = 1;  // source threads per rank
  int targets = 1;  // targets per rank
  std::uint32_t segments = 32;
  std::uint32_t segment_bytes = 8208;  // 0 in latency mode: one tuple plus footer
  bool latency = false;
};

Setting setting_from(const json& j) {
  Setting s;
  s.ranks = j.at("ranks").get<int>();
  s.sources = j.at("sources").get<int>();
  s.targets = j.at("targets").get<int>();
  s.segments = j.value("segments", 32u);
  s.segment_bytes = j.value("segment_bytes", 8208u);
  s.latency = j.value("mode", std::string("bandwidth")) == "latency";
  return s;
}

json setting_json(const Setting& s) {
  return {{"ranks", s.ranks},
          {"sources", s.sources},
          {"targets", s.targets},
          {"segments", s.segments},
          {"segment_bytes", s.segment_bytes},
          {"mode", s.latency ? "latency" : "bandwidth"}};
}

flow::FlowSpec make_spec(const Setting& s, const std::string& name) {
  flow::FlowSpec spec;
  spec.name = name;
  for (int r = 0; r < s.ranks; ++r) {
    for (int t = 0; t < s.sources; ++t) spec.sources.push_back({r, t});
    for (int t = 0; t < s.targets; ++t) spec.targets.push_back({r, t});
  }
  spec.schema =
      flow::Schema({{"key", flow::Type::uint64, 1},
                    {"payload", flow::Type::chars, static_cast<std::uint32_t>(kTupleBytes - 8)}});
  spec.key_column = "key";
  spec.options.mode = s.latency ? flow::Mode::latency : flow::Mode::bandwidth;
  spec.options.segments = s.segments;
  spec.options.segment_bytes = s.segment_bytes;
  return spec;
}

std::string mib_text(double bytes) {
  std::ostringstream text;
  text.precision(3);
  text << bytes / kMiB;
  return text.str();
}

std::string size_text(std::uint32_t bytes) {
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes / 1024) + " KiB";
  return std::to_string(bytes) + " B";
}

// "2 ranks x 4 src x 4 tgt, 32 x 8 KiB": the x-axis category of a setting.
std::string label(const Setting& s, std::uint32_t segment_bytes) {
  std::string text = std::to_string(s.ranks) + " ranks x " + std::to_string(s.sources) + " src x " +
                     std::to_string(s.targets) + " tgt, " + std::to_string(s.segments) + " x " +
                     size_text(segment_bytes);
  if (s.latency) text += " (latency)";
  return text;
}

// Resident memory of this process from /proc/self/status, in bytes: VmRSS and its anonymous
// (heap, stacks, private mappings) and shared-memory (shm mappings, ours and peers') parts.
struct Resident {
  std::size_t total = 0;
  std::size_t anon = 0;
  std::size_t shmem = 0;
};

Resident resident() {
  Resident r;
  std::ifstream in("/proc/self/status");
  std::string line;
  auto kib = [&](std::size_t prefix) { return std::stoull(line.substr(prefix)) * 1024; };
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) r.total = kib(6);
    if (line.rfind("RssAnon:", 0) == 0) r.anon = kib(8);
    if (line.rfind("RssShmem:", 0) == 0) r.shmem = kib(9);
  }
  return r;
}

json growth(const Resident& before, const Resident& after) {
  auto minus = [](std::size_t a, std::size_t b) { return a > b ? a - b : 0; };
  return {{"total", minus(after.total, before.total)},
          {"anon", minus(after.anon, before.anon)},
          {"shmem", minus(after.shmem, before.shmem)}};
}

// ---------------------------------------------------------------------------------------------
// Rank program

int run_memory_rank(const json& params, std::ostream& out, std::ostream& err) {
  cluster::Node node;
  const int me = node.rank();
  const std::size_t laps = params.at("laps").get<std::size_t>();
  const auto timeout = std::chrono::milliseconds(params.at("consume_timeout_ms").get<long>());
  json points = json::array();
  std::size_t index = 0;
  for (const json& j : params.at("settings")) {
    const Setting s = setting_from(j);
    if (s.ranks != node.size()) {
      err << "bench memory: setting for " << s.ranks << " ranks in a cluster of " << node.size()
          << '\n';
      return 2;
    }
    const std::string name = "bench-memory-" + std::to_string(index);
    const std::string step = "bench/memory/" + std::to_string(index) + "/";
    const flow::FlowSpec spec = make_spec(s, name);
    const std::size_t payload = spec.layout().payload_capacity();
    const std::size_t per_segment = std::max<std::size_t>(1, payload / kTupleBytes);
    const std::uint64_t tuples_per_source = laps * s.segments * per_segment * spec.targets.size();

    node.barrier(step + "before");
    const Resident rss_before = resident();
    if (me == 0) flow::create_flow(node, spec);

    // Targets and sources say when they are open; sources push, then wait until this thread has
    // sampled, then close.
    std::atomic<std::uint64_t> received{0};
    std::atomic<bool> direct{true};
    const std::string what = "bench memory: rank " + std::to_string(me);
    RankThreads targets(what), sources(what);
    for (int t = 0; t < s.targets; ++t) {
      targets.start("target " + std::to_string(t), [&, t](RankThreads::Gate& gate) {
        flow::ShuffleTarget target(node, name, t);
        gate.ready();
        flow::TupleBatch batch;
        std::uint64_t count = 0;
        for (;;) {
          Status st = target.consume(batch, timeout);
          if (!st) throw Error(st.code(), st.message());
          if (batch.empty()) break;
          count += batch.count;
        }
        received += count;
      });
    }
    for (int t = 0; t < s.sources; ++t) {
      sources.start("source " + std::to_string(t), [&, t](RankThreads::Gate& gate) {
        fabric::Worker worker(node.fabric(), "memory source " + std::to_string(t));
        flow::ShuffleSource source(node, worker, name, t);
        if (!source.direct()) direct = false;
        gate.ready();
        std::byte tuple[kTupleBytes] = {};
        for (std::uint64_t i = 0; i < tuples_per_source; ++i) {
          std::memcpy(tuple, &i, sizeof i);
          if (Status st = source.push(tuple, sizeof tuple); !st)
            throw Error(st.code(), st.message());
        }
        gate.ready_and_wait();
        if (Status st = source.close(); !st) throw Error(st.code(), st.message());
      });
    }
    targets.release();
    sources.release();
    const std::size_t at_open = flow::memory_bytes(name);
    std::size_t at_peak = 0;
    Resident rss_peak{};
    sources.release([&] {
      // Every source of the cluster has pushed and none has closed: all rings are in use.
      node.barrier(step + "pushed");
      at_peak = flow::memory_bytes(name);
      rss_peak = resident();
    });
    try {
      sources.join();
      targets.join();
    } catch (const std::exception& e) {
      err << e.what() << '\n';
      return 1;
    }
    const std::size_t after = flow::memory_bytes(name);
    points.push_back({{"index", index},
                      {"flow_bytes", std::max(at_open, at_peak)},
                      {"flow_bytes_at_open", at_open},
                      {"flow_bytes_after_close", after},
                      {"rss_growth", growth(rss_before, rss_peak)},
                      {"direct", direct.load()},
                      {"received_tuples", received.load()},
                      {"pushed_tuples", tuples_per_source * s.sources},
                      {"segment_bytes", spec.layout().segment_bytes},
                      {"ring_bytes", spec.layout().bytes()}});
    node.barrier(step + "done");
    ++index;
  }
  report_rank_result(out, {{"rank", me}, {"points", points}});
  node.finish();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Driver

class MemoryUse final : public Scenario {
 public:
  std::string name() const override { return "memory"; }
  std::string title() const override {
    return "Flow buffer memory per node for several shuffle-flow shapes (003 §6.1.4)";
  }
  std::string description() const override {
    return "One shuffle flow per setting (ranks x source threads per rank x targets per rank, "
           "segments x segment size), every source pushing a ring-full of 64 B tuples per "
           "target. Each rank samples flow::memory_bytes(flow) while all its sources and "
           "targets are open (after every source pushed, before any closed); the value per "
           "node is the largest over the ranks. Reference: the expectation computed from the "
           "ring layout (rings hosted + staging segments), and for 2 ranks x 4 x 4 with "
           "defaults the project's budget of 16 MiB. Also shown: the growth of the process's "
           "resident set while the flow was open, which includes more than flow buffers.";
  }
  std::vector<Parameter> parameters() const override {
    const json quick = json::array({
        json{{"ranks", 2}, {"sources", 1}, {"targets", 1}},
        json{{"ranks", 2}, {"sources", 4}, {"targets", 4}},
    });
    const json full = json::array({
        json{{"ranks", 2}, {"sources", 1}, {"targets", 1}},
        json{{"ranks", 2}, {"sources", 4}, {"targets", 4}},
        json{{"ranks", 2},
             {"sources", 4},
             {"targets", 4},
             {"segments", 16},
             {"segment_bytes", 4096}},
        json{{"ranks", 2},
             {"sources", 4},
             {"targets", 4},
             {"segments", 32},
             {"segment_bytes", 0},
             {"mode", "latency"}},
        json{{"ranks", 2}, {"sources", 8}, {"targets", 8}},
        json{{"ranks", 4}, {"sources", 2}, {"targets", 2}},
    });
    return {
        {"settings", quick, full,
         "flow shapes: ranks, source threads and targets per rank, segments, segment_bytes "
         "(0 in latency mode: one tuple plus footer), mode"},
        {"laps", 1, 2, "ring-fulls of tuples each source pushes per target"},
        {"timeout_s", 120, 300, "bound of each DFI cluster run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"computed expectation",
             "no speed baseline: targets_per_rank x sources_in_flow x (segments x segment_bytes "
             "+ 128) for the rings a node hosts, plus sources_per_rank x targets_in_flow x 4 x "
             "segment_bytes of staging segments where the put path is used (not on shm with "
             "direct writes); and the project's budget of 16 MiB per node for 2 ranks x 4 "
             "sources x 4 targets with defaults"}};
  }

  void run(RunContext& context, Result& result) override {
    const json settings = context.param("settings");
    const std::size_t laps = context.param("laps");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    std::vector<Setting> all;
    for (const json& j : settings) {
      Setting s = setting_from(j);
      if (s.ranks < 1 || s.sources < 1 || s.targets < 1)
        throw Error(Errc::invalid_argument, "bench memory: bad setting " + j.dump());
      all.push_back(s);
    }
    if (all.empty()) throw Error(Errc::invalid_argument, "bench memory: no settings");
    result.set_parameters(context.resolved_parameters());
    result.add_baseline("computed expectation", baselines()[0].description);
    result.add_note(
        "flow::memory_bytes counts the bytes DFI asked for (registered ring regions, staging "
        "segments); it is accounting, so it matches the expectation by construction unless a "
        "flow allocates something unplanned. The RSS panel is the independent check: it also "
        "holds UCX workers (one per source thread), thread stacks and, on shm, the peer's rings "
        "this process wrote into (shared pages count in every process that touched them).");

    Panel& flow_panel = result.panel("flow_memory", "Flow buffers per node (flow::memory_bytes)",
                                     {"setting", "", "category"},
                                     {"memory per node", "MiB", "linear"}, Better::lower);
    flow_panel.series("dfi", Role::dfi, "DFI flow::memory_bytes, largest rank",
                      "sampled while every local source and target was open");
    flow_panel.series("expected", Role::baseline, "computed expectation",
                      "rings hosted + staging segments, from the ring layout");
    flow_panel.series("budget", Role::baseline, "project budget (16 MiB)",
                      "issue 3: 2 ranks x 4 sources x 4 targets with defaults");
    flow_panel.compare("dfi", "expected");
    flow_panel.compare("dfi", "budget", 1.0);
    Panel& rss_panel = result.panel(
        "rss_growth", "Process resident set growth while the flow is open (largest rank)",
        {"setting", "", "category"}, {"VmRSS growth", "MiB", "linear"}, Better::lower);
    rss_panel.series("dfi", Role::dfi, "VmRSS growth (sample - before opening)",
                     "includes UCX workers, thread stacks and shm pages touched");
    rss_panel.series("anon", Role::dfi, "of which anonymous (RssAnon)",
                     "heap and private mappings: UCX workers, stacks, staging off shm");
    rss_panel.series("shmem", Role::dfi, "of which shared memory (RssShmem)",
                     "shm mappings this process touched: its rings and the peers' it wrote into");

    // One cluster job per rank count, holding every setting of that size.
    std::map<int, std::vector<std::size_t>> by_ranks;
    for (std::size_t i = 0; i < all.size(); ++i) by_ranks[all[i].ranks].push_back(i);
    std::map<int, RankJob> jobs;
    for (const auto& [ranks, indices] : by_ranks) {
      RankJob job;
      job.nodes = ranks;
      job.scenario = name();
      json list = json::array();
      for (std::size_t i : indices) list.push_back(setting_json(all[i]));
      job.params = {{"settings", list},
                    {"laps", laps},
                    {"consume_timeout_ms", std::chrono::milliseconds(timeout).count()}};
      job.timeout = timeout;
      jobs[ranks] = job;
    }

    std::set<std::string> noted;
    for (int rep = 1; rep <= context.repeat; ++rep) {
      const std::string round =
          "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat);
      for (const auto& [ranks, indices] : by_ranks) {
        const RankJob& job = jobs.at(ranks);
        const std::string command = rank_job_command(job, context);
        context.say(round + ": DFI, " + std::to_string(ranks) + " ranks, " +
                    std::to_string(indices.size()) + " setting(s)");
        std::map<int, json> reports = run_rank_job(job, context);
        if (static_cast<int>(reports.size()) != ranks)
          throw Error(Errc::protocol, "bench memory: not every rank reported");
        for (std::size_t k = 0; k < indices.size(); ++k) {
          const Setting& s = all[indices[k]];
          std::size_t flow_bytes = 0, rss = 0, anon = 0, shmem = 0, pushed = 0, received = 0,
                      segment_bytes = 0;
          bool direct = true;
          for (const auto& [rank, report] : reports) {
            const json& p = report.at("points").at(k);
            flow_bytes = std::max(flow_bytes, p.at("flow_bytes").get<std::size_t>());
            const json& g = p.at("rss_growth");
            if (g.at("total").get<std::size_t>() >= rss) {  // the rank with the largest growth
              rss = g.at("total").get<std::size_t>();
              anon = g.at("anon").get<std::size_t>();
              shmem = g.at("shmem").get<std::size_t>();
            }
            pushed += p.at("pushed_tuples").get<std::size_t>();
            received += p.at("received_tuples").get<std::size_t>();
            direct = direct && p.at("direct").get<bool>();
            segment_bytes = p.at("segment_bytes").get<std::size_t>();
            if (p.at("flow_bytes_after_close").get<std::size_t>() != 0) {
              const std::string note =
                  label(s, segment_bytes) + ": flow::memory_bytes was not 0 after the flow closed";
              if (noted.insert(note).second) result.add_note(note);
            }
          }
          if (pushed != received) {
            throw Error(Errc::protocol, "bench memory: " + label(s, segment_bytes) + ": pushed " +
                                            std::to_string(pushed) + " tuples, received " +
                                            std::to_string(received));
          }
          const flow::FlowSpec spec = make_spec(s, "expected");
          const std::size_t ring = spec.layout().bytes();
          const std::size_t all_sources = spec.sources.size();
          const std::size_t all_targets = spec.targets.size();
          const std::size_t rings = s.targets * all_sources * ring;
          const std::size_t staging =
              direct ? 0 : s.sources * all_targets * kStagingSegments * spec.layout().segment_bytes;
          const std::string x = label(s, spec.layout().segment_bytes);
          flow_panel.add("dfi", x, flow_bytes / kMiB);
          flow_panel.add("expected", x, (rings + staging) / kMiB);
          const bool budgeted = s.ranks == 2 && s.sources == 4 && s.targets == 4 &&
                                s.segments == 32 && s.segment_bytes == 8208 && !s.latency;
          if (budgeted) flow_panel.add("budget", x, kBudgetMiB);
          rss_panel.add("dfi", x, rss / kMiB);
          rss_panel.add("anon", x, anon / kMiB);
          rss_panel.add("shmem", x, shmem / kMiB);
          flow_panel.add_command("dfi", command);
          for (const char* id : {"dfi", "anon", "shmem"}) rss_panel.add_command(id, command);
          context.say(round + ": " + x + ": " + mib_text(flow_bytes) + " MiB flow buffers (" +
                      (direct ? "direct" : "staging") + "), expected " + mib_text(rings + staging) +
                      " MiB, RSS +" + mib_text(rss) + " MiB (anon +" + mib_text(anon) +
                      ", shmem +" + mib_text(shmem) + ")");
          if (rep == 1) {
            const std::string how =
                x + ": " + std::to_string(s.targets) + " target(s) x " +
                std::to_string(all_sources) + " rings of " + std::to_string(ring) + " B" +
                (direct ? std::string(", no staging (direct writes)")
                        : ", + " + std::to_string(s.sources) + " source(s) x " +
                              std::to_string(all_targets) + " targets x " +
                              std::to_string(kStagingSegments) + " staging segments");
            result.add_note("expectation " + how);
          }
        }
      }
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return run_memory_rank(params, out, err);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_memory_scenario() { return std::make_unique<MemoryUse>(); }

}  // namespace dfi::tools::bench
