// Scenario driven-restart: how long a driven flow stalls while its killed mover is restarted
// (driven::Mover, Recovery), split into the restart's parts.
//
// Ranks: 0 the producer, 1 the consumer of a 1:1 driven flow (small rings, so that the producer
// waits for the mover within a few segments), 2 the mover — not a rank program of its own but
// `dfi mover FLOW` processes that rank 2's program starts one after the other, the existing
// restart machinery of the tests (tests/driven, run_chaos_mover): each but the last is started
// with the crash_at seam (`--crash-at publish:N`: SIGKILL right after its N-th transfer was
// published at the consumer, which it prints with the steady_clock time), and as soon as it died
// the next one is started with the same command. A restarted `dfi mover` prints its restart
// timings (src/tools/mover.cpp): when its main started, when it had joined the cluster
// (cluster::Node: registry, UCX context, the rank's rejoin), when add_flow started and had found
// and attached every buffer, when recover() was done, and when its first pass moved data. All
// processes run on this machine and read one CLOCK_MONOTONIC, so the parts line up:
//
//   process start   kill -> main() of the new process (the harness noticing the death through a
//                   pidfd, fork and exec, loading, argument parsing)
//   join            main() -> cluster joined (cluster::Node)
//   attach          joined -> every PU's buffers found in the registry and attached (the Mover's
//                   worker, endpoints, remote keys)
//   recover         recover(): the rings' head, tail, state and link words read, the half-done
//                   transfer finished
//   first move      recovered -> the first pass of run() that moved data
//   pause           kill -> first move: the last tuple the old mover moved to the first the new
//                   one moved (the crash fires right after a publication)
//
// Baseline in the same run: the pause as the consumer saw it — its longest wait between two
// batches over the flow — which must match the mover's own account (it includes the consumer's
// polling, so it is a little longer). The consumer checks every tuple once and in order.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/error.hpp"
#include "dfi/driven/consumer.hpp"
#include "dfi/driven/flow.hpp"
#include "dfi/driven/producer.hpp"
#include "dfi/launch/child_process.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kName = "driven-restart";
constexpr const char* kFlow = "bench-driven-restart";

// The parts of a restart, in order (see the top of the file).
constexpr const char* kParts[] = {"process_start", "join", "attach", "recover", "first_move"};
constexpr const char* kPartNames[] = {"process start (kill to main)", "join the cluster (cluster::Node)",
                                      "find and attach the buffers", "recover() the rings' words",
                                      "first pass that moved data"};

flow::FlowSpec restart_spec(const json& params) {
  flow::FlowSpec spec;
  spec.name = kFlow;
  spec.type = driven::kDriven;
  spec.sources = {{0, 0}};
  spec.targets = {{1, 0}};
  spec.schema = flow::Schema({{"seq", flow::Type::uint64}, {"stamp", flow::Type::int64}});
  spec.key_column = "seq";
  spec.options.segments = params.at("segments").get<std::uint32_t>();
  spec.options.segment_bytes = params.at("segment_bytes").get<std::uint32_t>();
  spec.options.stall_timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  return spec;
}

// "<key> <number>" pairs of a restart timings line into `into` (values in ns).
void read_timings(const std::string& line, json& into) {
  std::istringstream words(line.substr(line.find("restart timings:") + 16));
  std::string key;
  while (words >> key) {
    if (key == "flow") {  // "flow '<name>'": the per-flow keys follow
      words >> key;
      continue;
    }
    long long value = 0;
    if (!(words >> value)) break;
    into[key] = value;
  }
}

// Rank 2: the mover processes (see the top of the file); no cluster::Node of its own (each
// `dfi mover` joins as rank 2 in turn).
json run_movers(const json& params) {
  const std::string dfi = params.at("dfi");
  const int kills = params.at("kills");
  json restarts = json::array();
  long long crashed = 0;
  for (int k = 0; k <= kills; ++k) {
    launch::ChildSpec spec;
    spec.argv = {dfi, "mover", kFlow, "--timeout", std::to_string(params.at("timeout_ms").get<long>() / 1000)};
    const bool last = k == kills;
    if (!last) spec.argv.insert(spec.argv.end(), {"--crash-at", "publish:" + std::to_string(40 + 17 * k)});
    launch::ChildProcess child = launch::ChildProcess::start(spec);
    const launch::ChildResult r = child.wait(std::chrono::milliseconds(params.at("timeout_ms").get<long>()));
    json timings = json::object();
    long long fired = 0;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("restart timings:") != std::string::npos) read_timings(line, timings);
      if (const std::size_t at = line.find("crash_at fired at "); at != std::string::npos) {
        fired = std::stoll(line.substr(at + 18));
        if (const std::size_t first = line.find("first move at "); first != std::string::npos) {
          timings["first_move"] = std::stoll(line.substr(first + 14));
        }
      }
      if (const std::size_t at = line.find("): first move at "); at != std::string::npos) {
        timings["first_move"] = std::stoll(line.substr(at + 17));
      }
    }
    if (last ? r.exit_code != 0 : r.exit_code != 128 + 9 || fired == 0) {
      throw Error(Errc::io, std::string("bench ") + kName + ": mover " + std::to_string(k) + " ended with " +
                                std::to_string(r.exit_code) + (last ? "" : " (expected its crash_at kill)") +
                                ":\n" + r.output);
    }
    if (k > 0) {
      if (!timings.contains("first_move") || timings.at("first_move").get<long long>() == 0) {
        throw Error(Errc::protocol, std::string("bench ") + kName + ": restarted mover " + std::to_string(k) +
                                        " printed no restart timings (did it resume the flow?):\n" + r.output);
      }
      timings["crash"] = crashed;
      restarts.push_back(timings);
    }
    crashed = fired;
  }
  return {{"rank", 2}, {"restarts", restarts}};
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

int run_rank_program(const json& params, std::ostream& out) {
  if (const char* rank = std::getenv("DFI_RANK"); rank != nullptr && std::string(rank) == "2") {
    report_rank_result(out, run_movers(params));
    return 0;
  }
  cluster::Node node;
  if (node.size() != 3) {
    throw Error(Errc::invalid_argument, std::string("bench ") + kName + ": needs 3 ranks, got " + std::to_string(node.size()));
  }
  const std::uint64_t tuples = params.at("tuples");
  json report = {{"rank", node.rank()}};
  if (node.rank() == 0) {
    flow::create_flow(node, restart_spec(params));
    driven::Producer producer(node, kFlow, 0);
    for (std::uint64_t i = 0; i < tuples; ++i) {
      const std::int64_t t[2] = {static_cast<std::int64_t>(i), now_ns()};
      if (Status s = producer.push(t, sizeof t); !s) throw Error(s.code(), s.message());
    }
    if (Status s = producer.close(); !s) throw Error(s.code(), s.message());
  } else {
    driven::Consumer consumer(node, kFlow, 0);
    flow::TupleBatch batch;
    std::uint64_t next = 0, disorder = 0;
    std::int64_t last = 0, longest = 0;
    for (;;) {
      if (Status s = consumer.consume(batch); !s) throw Error(s.code(), s.message());
      if (batch.empty()) break;
      const std::int64_t arrived = now_ns();
      if (last != 0) longest = std::max(longest, arrived - last);
      last = arrived;
      for (std::size_t i = 0; i < batch.count; ++i) {
        std::uint64_t seq = 0;
        std::memcpy(&seq, batch.tuple(i), sizeof seq);
        disorder += seq != next ? 1 : 0;
        next = seq + 1;
      }
    }
    report["received"] = next;
    report["out_of_order"] = disorder;
    report["longest_gap_ns"] = longest;
  }
  report_rank_result(out, report);
  node.finish();
  return 0;
}

class DrivenRestart final : public Scenario {
 public:
  std::string name() const override { return kName; }
  std::string title() const override { return "Driven flow: the pause while a killed mover is restarted, by part"; }
  std::string description() const override {
    return "3 ranks: a producer (rank 0) pushes `tuples` 16-byte tuples into a 1:1 driven flow with small rings, a "
           "consumer (rank 1) takes them, checking each once and in order; rank 2 runs `dfi mover` processes one "
           "after the other, each but the last killed by the crash_at seam (SIGKILL right after a publication) and "
           "restarted at once with the same command. Per restart, from the kill to the new mover's first move, split "
           "into process start, joining the cluster, finding and attaching the buffers, recover() and the first "
           "pass (steady_clock stamps the processes print; one clock on this machine). Baseline in the same run: the "
           "consumer's longest wait between two batches.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"tuples", 20000, 60000, "tuples the producer pushes"},
        {"kills", 2, 5, "mover kills (and restarts) per repetition"},
        {"segments", 4, 4, "segments per ring"},
        {"segment_bytes", 1024, 1024, "bytes per segment"},
        {"timeout_s", 60, 120, "bound of each mover process and of every wait"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"the consumer's longest wait",
             "the same pause seen by the consumer: its longest time between two batches over the flow (it polls, so "
             "it sees the first move a little later)"}};
  }

  void run(RunContext& context, Result& result) override {
    const int kills = context.param("kills");
    const std::uint64_t tuples = context.param("tuples");
    if (kills < 1) throw Error(Errc::invalid_argument, std::string("bench ") + kName + ": kills must be >= 1");
    if (tuples < 10000) throw Error(Errc::invalid_argument, std::string("bench ") + kName + ": tuples must be >= 10000 (the flow must outlast the kills)");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    result.set_parameters(context.resolved_parameters());
    result.add_baseline(baselines()[0].name, baselines()[0].description);
    result.add_note("Each restart's parts from steady_clock stamps that the killed mover (at the kill) and the new one "
                    "(main, cluster joined, buffers attached, recovered, first move) print; medians over every restart "
                    "of every repetition.");

    const Axis restart_axis{"restart", "", "category"};
    Panel& parts = result.panel("parts", "Where a mover restart's pause goes", restart_axis, {"time", "ms"}, Better::lower);
    for (std::size_t i = 0; i < std::size(kParts); ++i) parts.series(kParts[i], Role::dfi, kPartNames[i]);
    Panel& pause = result.panel("pause", "The flow's pause: last tuple of the old mover to the first of the new",
                                restart_axis, {"time", "ms"}, Better::lower);
    pause.series("mover", Role::dfi, "kill to the new mover's first move (the movers' stamps; the longest restart of a repetition)");
    pause.series("consumer", Role::baseline, "the consumer's longest wait between two batches");
    pause.compare("mover", "consumer");

    RankJob job;
    job.nodes = 3;
    job.scenario = name();
    job.timeout = timeout * (kills + 2);
    job.params = {{"tuples", tuples},
                  {"kills", kills},
                  {"segments", context.param("segments")},
                  {"segment_bytes", context.param("segment_bytes")},
                  {"timeout_ms", std::chrono::milliseconds(timeout).count()},
                  {"dfi", context.dfi_binary}};
    for (int rep = 1; rep <= context.repeat; ++rep) {
      context.say("repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) + ": " +
                  std::to_string(kills) + " kills over " + (context.netns ? "netns tcp" : context.transport));
      const std::map<int, json> reports = run_rank_job(job, context);
      const std::string command = rank_job_command(job, context);
      for (int r : {0, 1, 2}) {
        if (!reports.count(r))
          throw Error(Errc::protocol, std::string("bench ") + kName + ": rank " + std::to_string(r) + " reported nothing");
      }
      const json& got = reports.at(1);
      if (got.at("received").get<std::uint64_t>() != tuples || got.at("out_of_order").get<std::uint64_t>() != 0) {
        throw Error(Errc::protocol, std::string("bench ") + kName + ": pushed " + std::to_string(tuples) +
                                        " tuples, the consumer saw " + got.at("received").dump() + " (" +
                                        got.at("out_of_order").dump() + " out of order)");
      }
      const double gap_ms = got.at("longest_gap_ns").get<double>() / 1e6;
      double longest_ms = 0;
      for (const json& t : reports.at(2).at("restarts")) {
        auto at = [&](const char* key) { return t.at(key).get<double>(); };
        const double values[] = {at("started") - at("crash"), at("joined") - at("started"),
                                 at("attached") - at("joined"), at("recovered") - at("attached"),
                                 at("first_move") - at("recovered")};
        std::ostringstream said;
        said << "  restart:";
        for (std::size_t i = 0; i < std::size(kParts); ++i) {
          parts.add(kParts[i], "restart", values[i] / 1e6);
          parts.add_command(kParts[i], command);
          said << ' ' << kParts[i] << ' ' << format_fixed(values[i] / 1e6, 2) << " ms";
        }
        const double total = (at("first_move") - at("crash")) / 1e6;
        longest_ms = std::max(longest_ms, total);
        said << "; pause " << format_fixed(total, 2) << " ms";
        context.say(said.str());
      }
      // One sample per repetition each: the longest pause by the movers' stamps against the
      // consumer's longest wait (the same pause, seen from the PU).
      pause.add("mover", "restart", longest_ms);
      pause.add_command("mover", command);
      pause.add("consumer", "restart", gap_ms);
      pause.add_command("consumer", command);
      context.say("  longest pause " + format_fixed(longest_ms, 2) + " ms; the consumer's longest wait " +
                  format_fixed(gap_ms, 2) + " ms");
    }
  }

  // Errors propagate: BenchCli::run reports them, naming the scenario.
  int run_rank(const json& params, std::ostream& out, std::ostream& /*err*/) override {
    return run_rank_program(params, out);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_driven_restart_scenario() { return std::make_unique<DrivenRestart>(); }

}  // namespace dfi::tools::bench
