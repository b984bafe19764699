// Scenario kv (003 Fig 15): the replicated key-value store (apps/kv) under YCSB 95/5 with 64 B
// values, Multi-Paxos vs NOPaxos vs the unreplicated store, over offered load (requests each client keeps
// outstanding). One fresh cluster per run: `replicas` replica ranks and 2 client ranks of
// `threads` client threads each; the protocols take turns at every load (NOPaxos, then Multi-Paxos
// and unreplicated alternating). Throughput is the
// sum over clients of completed requests over their run time; latency percentiles are over every
// request of the run. A run whose replicas disagree fails the scenario.
//
// Scenario kv-etcd: the same load on Multi-Paxos and on etcd (Debian's etcd-server, as many
// members as replicas, its log on tmpfs and, in full runs, on disk) through the real etcd Go client
// (etcd_baseline.hpp), with linearizable reads on both. DFI's clients are 2 ranks of `threads`
// threads with `window` requests outstanding each; etcd's load generator opens 2 x `threads`
// client connections with `window` goroutines each: the same offered load.
//
// Scenario kv-failover: Multi-Paxos under the kv load while one replica is killed (kill -9) in
// the middle of the run — the leader or a follower — with the registry served by the launcher
// (so rank 0 may die). Reports the longest time any client went without a completion (the
// failover time as clients see it: detection, the view change and the resent requests) and
// checks that the survivors agree. `gateways`: client threads per client rank of which all but
// one are idle (BenchOptions::idle_threads, the unused gateways of `dfi kv serve`: issue 29),
// each count its own series.
//
// Scenario kv-jepsen: many short Multi-Paxos runs (NOPaxos with protocol=nopaxos) with randomized
// loads (window, keys, read and delete ratios) and randomized faults (none, the leader killed, a follower killed, and with 5
// replicas the leader and then a follower), each run's client histories checked for
// linearizability by Porcupine (tests/porcupine/kvcheck). Counts linearizable histories and
// violations per fault; a violating run's histories are kept for inspection.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <ostream>
#include <string>
#include <vector>

#include <thread>

#include "dfi/apps/kv/bench.hpp"
#include "dfi/launch/child_process.hpp"
#include "dfi/launch/environment.hpp"
#include "dfi/launch/netns.hpp"
#include "cluster_job.hpp"
#include "etcd_baseline.hpp"
#include "go_tool.hpp"
#include "paths.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/config.hpp"
#include "dfi/registry/client.hpp"
#include "dfi/common/error.hpp"
#include "scenarios.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;

constexpr int kClientRanks = 2;

struct KvLoad {
  int threads = 2;
  std::uint64_t window = 1;
  std::uint64_t keys = 100000;
  double seconds = 1;
  std::chrono::milliseconds timeout{120000};
  double reads = 0.95;
  double deletes = 0;
  double rate = 0;          // per client, 0: as the window allows
  double zipf = 0;          // key skew, 0: uniform
  std::string history_dir;  // non-empty: the clients write their histories there
  std::uint64_t value_bytes = apps::kv::kDefaultValueBytes;  // width of every value
  std::string sequencer = "stamp";  // NOPaxos: stamp (the leader) or counter (the clients)
  std::uint64_t batch = 1;          // a client refills once this many places are free (BenchOptions::batch)
  int idle_threads = 0;             // of `threads`, per client rank: idle clients (BenchOptions::idle_threads)
};

// The load of the kv and kv-etcd scenarios: the rest at its defaults. (A function, not a brace
// list: -Wmissing-field-initializers.)
KvLoad make_load(int threads, std::uint64_t window, std::uint64_t keys, double seconds,
                 std::chrono::milliseconds timeout, std::uint64_t value_bytes) {
  KvLoad load;
  load.value_bytes = value_bytes;
  load.threads = threads;
  load.window = window;
  load.keys = keys;
  load.seconds = seconds;
  load.timeout = timeout;
  return load;
}

// The `sequencer` setting of the scenarios that run NOPaxos (kv, kv-etcd, kv-jepsen), and its
// value (checked once, before any rank starts).
Parameter sequencer_parameter() {
  return {"sequencer", "stamp", "stamp",
          "NOPaxos: who numbers the requests: stamp (the leader, forwarding them to the followers) or counter "
          "(each client, by a fetch-add on a counter at the leader)"};
}
std::string sequencer_of(RunContext& context) {
  std::string sequencer = context.param("sequencer").get<std::string>();
  (void)flow::parse_sequencer(sequencer);  // a bad name fails here, not in every rank
  return sequencer;
}

// A rank (replica or client) to kill in the middle of a run (kv-failover, kv-jepsen). With
// cut_seconds > 0 (netns hosts only) its link is cut at after_seconds instead (a partition:
// launch::netns_set_own_link) and restored cut_seconds later, long after the others declared it
// dead: the isolated rank runs on meanwhile, as a partitioned one would, and once healed it must
// end on its own (within kHealedEndSeconds; its exit and output are reported) instead of being
// killed.
struct KvKill {
  int rank = 0;
  double after_seconds = 0;
  double cut_seconds = 0;
};

// What a kv run injects besides kills (kv-jepsen): the flow_faults rules (drop or delay chosen
// segments, flow/detail/faults.hpp), NOPaxos' timeouts, and with netns the registry served by
// the rank `registry_rank` (not rank 0, so that a partitioned leader does not take it along).
struct KvFaults {
  std::string flow_rules;
  std::chrono::milliseconds gap_timeout{0};    // 0: the service's default
  std::chrono::milliseconds retry_timeout{0};  // 0: the service's default
  int registry_rank = -1;
};

// The port the registry listens on in registry_rank's own network namespace (nothing else
// listens there).
constexpr int kNetnsRegistryPort = 7420;

// How long a replica cut off and healed (KvKill::cut_seconds) may take to end on its own.
constexpr int kHealedEndSeconds = 20;

// One `dfi kv bench` cluster run: the summary of the rank that summarized (the lowest that
// reported; fails when the replicas disagree).
json run_dfi_kv(RunContext& context, const std::string& scenario, const std::string& protocol, int replicas,
                const KvLoad& load, std::string& command, const std::vector<KvKill>& kills = {},
                const KvFaults& faults = {}) {
  RankJob job;
  job.nodes = replicas + kClientRanks;
  job.scenario = scenario;
  job.timeout = load.timeout;
  job.params = {{"protocol", protocol}, {"replicas", replicas}, {"threads", load.threads},
                {"window", load.window},  {"keys", load.keys},      {"seconds", load.seconds},
                {"reads", load.reads},    {"deletes", load.deletes}, {"rate", load.rate},
                {"zipf", load.zipf},      {"value_bytes", load.value_bytes}, {"sequencer", load.sequencer},
                {"batch", std::min(load.batch, load.window)}, {"idle_threads", load.idle_threads}};
  if (!load.history_dir.empty()) job.params["history"] = load.history_dir;
  if (!kills.empty()) {
    json list = json::array();
    for (const KvKill& k : kills) list.push_back({{"rank", k.rank}, {"after_s", k.after_seconds}, {"cut_s", k.cut_seconds}});
    job.params["kills"] = list;
    job.registry_apart = faults.registry_rank < 0;
  }
  if (!faults.flow_rules.empty()) job.env.emplace_back("DFI_FLOW_FAULTS", faults.flow_rules);
  if (faults.gap_timeout.count() > 0) job.params["gap_timeout_ms"] = faults.gap_timeout.count();
  if (faults.retry_timeout.count() > 0) job.params["retry_timeout_ms"] = faults.retry_timeout.count();
  if (faults.registry_rank >= 0) {
    if (!context.netns) throw Error(Errc::invalid_argument, "bench " + scenario + ": a registry on another rank needs --netns");
    job.params["registry_rank"] = faults.registry_rank;
    job.env.emplace_back("DFI_REGISTRY", launch::netns_rank_address(faults.registry_rank) + ":" +
                                             std::to_string(kNetnsRegistryPort));
    job.env.emplace_back("DFI_REGISTRY_EXTERNAL", "1");
  }
  command = rank_job_command(job, context);
  std::map<int, json> reports = run_rank_job(job, context);
  if (reports.empty()) throw Error(Errc::protocol, "bench " + scenario + ": no rank reported a result");
  const json& r = reports.begin()->second;
  if (!r.at("replicas_agree").get<bool>()) {
    throw Error(Errc::protocol, "bench " + scenario + ": the replicas disagree (" + protocol + ", window " +
                                    std::to_string(load.window) + ")");
  }
  return r;
}

// Every rank of a `dfi kv bench` run of any kv scenario. A rank named in "kills" runs its part as
// a child process and kills it (SIGKILL to its process group) "after_s" after the service served
// every client (each client's first completion, apps::kv::serving_record).
int run_kv_rank_part(const json& params, std::ostream& out, std::ostream& err);

int run_kv_rank(const json& params, std::ostream& out, std::ostream& err) {
  if (params.value("registry_rank", -1) != launch::discover_launch().rank) return run_kv_rank_part(params, out, err);
  // This rank serves the registry (netns partitions), until every rank has left it.
  launch::ChildProcess registry = launch::ChildProcess::start(
      {{"/proc/self/exe", "registry", "serve", "--ranks", std::to_string(launch::discover_launch().size), "--timeout", "60"},
       {}});
  const int status = run_kv_rank_part(params, out, err);
  const launch::ChildResult served = registry.wait(std::chrono::seconds(90));
  if (served.exit_code != 0) {
    err << "bench kv rank: the registry this rank served ended with exit " << served.exit_code << ":\n" << served.output;
    return status != 0 ? status : 1;
  }
  return status;
}

// This rank's part of a kv run: a replica or client, or (a rank named in "kills") its parent.
int run_kv_rank_part(const json& params, std::ostream& out, std::ostream& err) {
  const int me = launch::discover_launch().rank;
  const json kills = params.value("kills", json::array());
  const auto mine = std::find_if(kills.begin(), kills.end(), [&](const json& k) { return k.at("rank").get<int>() == me; });
  if (mine != kills.end()) {
    json rest = params;
    rest.erase("kills");
    rest.erase("registry_rank");
    launch::ChildProcess victim =
        // Every kv scenario's ranks run this function: scenario kv's rank program will do.
        launch::ChildProcess::start({{"/proc/self/exe", "bench-rank", "kv", rest.dump()}, {}});
    const auto victim_started = std::chrono::steady_clock::now();
    // The kill clock starts when the service serves: every client completed its first request
    // (on a loaded machine start-up may take longer than the kill time; a kill before it tests
    // the start-up, not the service).
    try {
      registry::Client registry(config::get_string("registry"), config::get_string("registry_token"),
                                std::chrono::seconds(30));
      const int ranks = launch::discover_launch().size;
      const int replicas = params.at("replicas");
      const int threads = params.at("threads");
      const std::size_t clients = static_cast<std::size_t>(ranks - replicas) * static_cast<std::size_t>(threads);
      for (std::size_t c = 0; c < clients; ++c) {
        (void)registry.wait_for(apps::kv::serving_record(apps::kv::ServiceOptions().name, c), std::chrono::seconds(60));
      }
    } catch (const Error& e) {
      err << "bench kv rank: the service did not start serving every client: " << e.what() << "\n";
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(mine->at("after_s").get<double>()));
    if (!victim.running()) {
      err << "bench kv rank: rank " << me << ", to be killed, ended before it was killed:\n" << victim.output();
      return 1;
    }
    if (const double cut = mine->value("cut_s", 0.0); cut > 0) {
      try {
        launch::netns_set_own_link(false);
        std::this_thread::sleep_for(std::chrono::duration<double>(cut));
        launch::netns_set_own_link(true);
      } catch (const Error& e) {
        err << "bench kv rank: rank " << me << ": " << e.what() << "\n";
        return 1;
      }
      // Healed: the replica learns that the others went on without it and ends on its own
      // (ChildProcess::wait counts from the child's start).
      const launch::ChildResult healed = victim.wait(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - victim_started) +
          std::chrono::seconds(kHealedEndSeconds));
      if (healed.timed_out) {
        err << "bench kv rank: rank " << me << ", cut off and healed, did not end within " << kHealedEndSeconds
            << " s:\n" << healed.output;
        return 1;
      }
      out << "bench kv rank: rank " << me << ", cut off and healed, ended with exit " << healed.exit_code << ":\n"
          << healed.output;
    }
    return 0;  // ~ChildProcess: SIGKILL
  }
  apps::kv::BenchOptions options;
  options.service.protocol = apps::kv::parse_protocol(params.at("protocol").get<std::string>());
  options.service.replicas = params.at("replicas");
  options.service.client_threads = params.at("threads");
  options.service.window = params.at("window");
  options.service.value_bytes = params.value("value_bytes", std::uint64_t{apps::kv::kDefaultValueBytes});
  options.keys = params.at("keys");
  options.seconds = params.at("seconds");
  options.read_ratio = params.value("reads", 0.95);
  options.delete_ratio = params.value("deletes", 0.0);
  options.rate = params.value("rate", 0.0);
  options.batch = params.value("batch", std::size_t{1});
  options.idle_threads = params.value("idle_threads", 0);
  options.zipf = params.value("zipf", 0.0);
  options.history_dir = params.value("history", std::string());
  if (params.contains("gap_timeout_ms")) options.service.gap_timeout = std::chrono::milliseconds(params.at("gap_timeout_ms").get<long>());
  if (params.contains("retry_timeout_ms")) options.service.retry_timeout = std::chrono::milliseconds(params.at("retry_timeout_ms").get<long>());
  if (params.contains("sequencer")) {
    try {
      options.service.sequencer = flow::parse_sequencer(params.at("sequencer").get<std::string>());
    } catch (const Error& e) {
      err << "bench kv rank: " << e.what() << "\n";
      return 1;
    }
  }
  options.progress = false;
  try {
    cluster::Node node;
    apps::kv::BenchSummary summary;
    const int status = apps::kv::run_bench(node, options, err, err, &summary);
    if (status != 0) return status;
    if (summary.summarized) {
      report_rank_result(out, {{"requests", summary.requests},
                               {"requests_per_second", summary.requests_per_second},
                               {"p50_us", summary.p50_us},
                               {"p95_us", summary.p95_us},
                               {"p99_us", summary.p99_us},
                               {"longest_wait_us", summary.longest_wait_us},
                               {"view", summary.view},
                               {"replicas_agree", summary.replicas_agree}});
    }
    node.finish();
  } catch (const Error& e) {
    err << "bench kv rank: " << e.what() << '\n';
    return 1;
  }
  return 0;
}

class KvScenario : public Scenario {
 public:
  std::string name() const override { return "kv"; }
  std::string title() const override {
    return "Replicated key-value store: NOPaxos and Multi-Paxos on flows vs unreplicated, YCSB 95/5, 64 B values";
  }
  std::string description() const override {
    return "apps/kv under a YCSB-B-like load (95 % gets, 5 % puts, `value_bytes` values (64 B by default), keys uniform or Zipf-distributed "
           "with exponent `zipf`): "
           "`replicas` replica ranks (rank 0 leads) and 2 client ranks of `threads` client threads, "
           "each keeping `window` requests outstanding (the offered load). paxos: Multi-Paxos over "
           "four flows (requests shuffle, accept replicate, accepted shuffle, replies shuffle) with "
           "pipelined rounds and quorum-round reads. nopaxos: NOPaxos' normal case, the requests on an "
           "ordered replicate flow from every client to every replica (its sequencer, standing in for the "
           "switch, set by `sequencer`: the leader numbering and forwarding the segments, or a counter in "
           "its memory that every client's segment takes a number from), every replica answering, a "
           "client done at a majority including the leader. unreplicated: the leader alone executes and replies. Every run "
           "checks that all replicas applied the same writes.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"replicas", 5, 5, "replica ranks of the Multi-Paxos and NOPaxos runs"},
        {"threads", 2, 3, "client threads per client rank"},
        {"windows", json::array({1, 16}), json::array({1, 4, 16, 64}), "requests outstanding per client (offered load)"},
        {"keys", 100000, 1000000, "keys the requests draw from"},
        {"zipf", 0.0, 0.0, "Zipf exponent of the keys (0: uniform; YCSB's skew: 0.99)"},
        {"value_bytes", 64, 64, "width of every value in bytes (a multiple of 8, 8..4096)"},
        sequencer_parameter(),
        {"batch", 1, 1, "a client refills its window only once this many places are free (at most the window): its "
                        "requests travel in groups, one segment each (NOPaxos: one sequence number)"},
        {"seconds", 1.0, 3.0, "run length of every client"},
        {"timeout_s", 120, 300, "bound of each cluster run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"unreplicated",
             "the same store and flows without replication: the leader executes each request at once "
             "(the upper bound of any replication protocol on this transport)"}};
  }

  void run(RunContext& context, Result& result) override {
    const int replicas = context.param("replicas");
    const int threads = context.param("threads");
    const std::vector<std::uint64_t> windows = context.param("windows");
    const std::uint64_t keys = context.param("keys");
    const double zipf = context.param("zipf");
    const double seconds = context.param("seconds");
    const std::uint64_t value_bytes = context.param("value_bytes");
    const std::string sequencer = sequencer_of(context);
    const std::uint64_t batch = context.param("batch");
    if (batch < 1) throw Error(Errc::invalid_argument, "bench kv: batch must be at least 1");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    result.set_parameters(context.resolved_parameters());
    result.add_baseline("unreplicated", baselines()[0].description);
    result.add_note("etcd is measured in kv-etcd; the ratios here are "
                    "the cost of replication on the same flows.");
    Panel& tput = result.panel("throughput", "Throughput vs offered load", {"window", "requests/client", "log2"},
                               {"throughput", "k req/s", "log10"}, Better::higher);
    Panel& p99 = result.panel("p99", "p99 latency vs offered load", {"window", "requests/client", "log2"},
                              {"p99 latency", "us", "log10"}, Better::lower);
    Panel& p95 = result.panel("p95", "p95 latency vs offered load", {"window", "requests/client", "log2"},
                              {"p95 latency", "us", "log10"}, Better::lower);
    Panel& p50 = result.panel("p50", "Median latency vs offered load", {"window", "requests/client", "log2"},
                              {"median latency", "us", "log10"}, Better::lower);
    for (Panel* p : {&tput, &p99, &p95, &p50}) {
      p->series("nopaxos", Role::dfi, "NOPaxos, " + std::to_string(replicas) + " replicas");
      p->series("paxos", Role::dfi, "Multi-Paxos, " + std::to_string(replicas) + " replicas");
      p->series("unreplicated", Role::baseline, "unreplicated (1 replica)");
    }
    tput.compare("nopaxos", "paxos", 1.3);
    tput.compare("nopaxos", "unreplicated", 0.5);
    tput.compare("paxos", "unreplicated");
    for (int rep = 1; rep <= context.repeat; ++rep) {
      for (std::uint64_t window : windows) {
        auto one = [&](const std::string& protocol) {
          const int n = protocol == "unreplicated" ? 1 : replicas;
          const std::string round = "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) +
                                    ", window " + std::to_string(window) + ", " + protocol;
          context.say(round);
          std::string command;
          KvLoad load = make_load(threads, window, keys, seconds, timeout, value_bytes);
          load.zipf = zipf;
          load.sequencer = sequencer;
          load.batch = batch;
          const json r = run_dfi_kv(context, name(), protocol, n, load, command);
          const double kreq = r.at("requests_per_second").get<double>() / 1000.0;
          context.say(round + ": " + std::to_string(kreq) + " k req/s, p99 " + r.at("p99_us").dump() + " us");
          tput.add(protocol, window, kreq);
          p99.add(protocol, window, r.at("p99_us").get<double>());
          p95.add(protocol, window, r.at("p95_us").get<double>());
          p50.add(protocol, window, r.at("p50_us").get<double>());
          for (Panel* p : {&tput, &p99, &p95, &p50}) p->add_command(protocol, command);
        };
        one("nopaxos");
        run_alternating(rep, [&] { one("paxos"); }, [&] { one("unreplicated"); });
      }
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return run_kv_rank(params, out, err);
  }
};

class KvEtcdScenario : public Scenario {
 public:
  std::string name() const override { return "kv-etcd"; }
  std::string title() const override {
    return "Replicated key-value store: Multi-Paxos and NOPaxos on flows vs etcd, YCSB 95/5, 64 B values";
  }
  std::string description() const override {
    return "The kv scenario's load (95 % gets, 5 % puts, `value_bytes` values (64 B by default), uniform keys, linearizable reads) "
           "on DFI's store (Multi-Paxos and NOPaxos) with `replicas` replicas and on an etcd cluster of as many members "
           "on loopback (Debian's etcd-server 3.4, driven by the Go client go.etcd.io/etcd/client/v3: "
           "bench/etcd/ycsb), its log on tmpfs (fsync free) and, when data includes disk, on disk. Same "
           "offered load: 2 x `threads` clients with `window` requests outstanding each.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"replicas", 5, 5, "replicas of DFI's store and members of the etcd cluster"},
        {"threads", 2, 2, "client threads per client rank (etcd: 2 x threads client connections)"},
        {"windows", json::array({1, 16}), json::array({1, 4, 16, 64}), "requests outstanding per client (offered load)"},
        {"keys", 10000, 100000, "keys the requests draw from (etcd preloads them)"},
        {"value_bytes", 64, 64, "width of every value in bytes (DFI and etcd; a multiple of 8, 8..4096)"},
        sequencer_parameter(),
        {"seconds", 1.0, 3.0, "run length of every client"},
        {"data", json::array({"tmpfs"}), json::array({"tmpfs", "disk"}), "where etcd keeps its log: tmpfs, disk"},
        {"timeout_s", 120, 300, "bound of each cluster run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"etcd-tmpfs", "etcd 3.4 (Debian etcd-server), log on tmpfs, real Go client, linearizable reads"},
            {"etcd-disk", "etcd 3.4 (Debian etcd-server), log on disk (fsync per commit), real Go client"}};
  }
  std::string unavailable(const RunContext&) const override {
    const std::string why = etcd_unavailable();
    return why.empty() ? why : "the etcd baseline cannot run: " + why;
  }

  void run(RunContext& context, Result& result) override {
    const int replicas = context.param("replicas");
    const int threads = context.param("threads");
    const std::string sequencer = sequencer_of(context);
    const std::vector<std::uint64_t> windows = context.param("windows");
    const std::uint64_t keys = context.param("keys");
    const double seconds = context.param("seconds");
    const std::uint64_t value_bytes = context.param("value_bytes");
    const std::vector<std::string> data = context.param("data");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    result.set_parameters(context.resolved_parameters());
    for (const BaselineInfo& b : baselines()) {
      if (std::find(data.begin(), data.end(), b.name.substr(5)) != data.end()) result.add_baseline(b.name, b.description);
    }
    result.add_note("etcd runs on loopback TCP whatever the transport of DFI's run; its members use the CPU "
                    "the DFI ranks use in their runs (the same 2 cores).");
    Panel& tput = result.panel("throughput", "Throughput vs offered load", {"window", "requests/client", "log2"},
                               {"throughput", "k req/s", "log10"}, Better::higher);
    Panel& p99 = result.panel("p99", "p99 latency vs offered load", {"window", "requests/client", "log2"},
                              {"p99 latency", "us", "log10"}, Better::lower);
    Panel& p95 = result.panel("p95", "p95 latency vs offered load", {"window", "requests/client", "log2"},
                              {"p95 latency", "us", "log10"}, Better::lower);
    Panel& p50 = result.panel("p50", "Median latency vs offered load", {"window", "requests/client", "log2"},
                              {"median latency", "us", "log10"}, Better::lower);
    for (Panel* p : {&tput, &p99, &p95, &p50}) {
      p->series("paxos", Role::dfi, "DFI Multi-Paxos, " + std::to_string(replicas) + " replicas");
      p->series("nopaxos", Role::dfi, "DFI NOPaxos, " + std::to_string(replicas) + " replicas");
      for (const std::string& d : data) {
        p->series("etcd-" + d, Role::baseline, "etcd, " + std::to_string(replicas) + " members, log on " + d);
      }
    }
    for (const char* protocol : {"paxos", "nopaxos"}) {
      tput.compare(protocol, "etcd-tmpfs", 10.0);
      p99.compare(protocol, "etcd-tmpfs", 1.0);
      p95.compare(protocol, "etcd-tmpfs");
      p50.compare(protocol, "etcd-tmpfs");
    }
    for (int rep = 1; rep <= context.repeat; ++rep) {
      for (std::uint64_t window : windows) {
        const std::string round = "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) +
                                  ", window " + std::to_string(window);
        auto dfi = [&] {
          for (const std::string protocol : {"paxos", "nopaxos"}) {
            context.say(round + ", " + protocol);
            std::string command;
            KvLoad load = make_load(threads, window, keys, seconds, timeout, value_bytes);
            load.sequencer = sequencer;
            const json r = run_dfi_kv(context, name(), protocol, replicas, load, command);
            const double kreq = r.at("requests_per_second").get<double>() / 1000.0;
            context.say(round + ", " + protocol + ": " + std::to_string(kreq) + " k req/s, p99 " + r.at("p99_us").dump() + " us");
            tput.add(protocol, window, kreq);
            p99.add(protocol, window, r.at("p99_us").get<double>());
            p95.add(protocol, window, r.at("p95_us").get<double>());
            p50.add(protocol, window, r.at("p50_us").get<double>());
            for (Panel* p : {&tput, &p99, &p95, &p50}) p->add_command(protocol, command);
          }
        };
        auto etcd = [&] {
          for (const std::string& d : data) {
            context.say(round + ", etcd (" + d + ")");
            launch::EtcdCluster cluster(replicas, etcd_data_root(d == "disk" ? EtcdData::disk : EtcdData::tmpfs));
            std::string command;
            const json r = run_etcd_ycsb(cluster,
                                         {.clients = kClientRanks * threads, .window = window, .keys = keys,
                                          .reads = 0.95, .value_bytes = static_cast<int>(value_bytes), .seconds = seconds},
                                         &command);
            const double kreq = r.at("requests_per_second").get<double>() / 1000.0;
            context.say(round + ", etcd (" + d + "): " + std::to_string(kreq) + " k req/s, p99 " +
                        r.at("p99_us").dump() + " us");
            tput.add("etcd-" + d, window, kreq);
            p99.add("etcd-" + d, window, r.at("p99_us").get<double>());
            p95.add("etcd-" + d, window, r.at("p95_us").get<double>());
            p50.add("etcd-" + d, window, r.at("p50_us").get<double>());
            for (Panel* p : {&tput, &p99, &p95, &p50}) p->add_command("etcd-" + d, cluster.command() + " (x" + std::to_string(replicas) + "); " + command);
          }
        };
        run_alternating(rep, dfi, etcd);
      }
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return run_kv_rank(params, out, err);
  }
};

class KvFailoverScenario : public Scenario {
 public:
  std::string name() const override { return "kv-failover"; }
  std::string title() const override { return "Replicated key-value store: Multi-Paxos failover when a replica is killed"; }
  std::string description() const override {
    return "The kv scenario's load on Multi-Paxos with `replicas` replicas; `kill_after_s` into each run one "
           "replica is killed with SIGKILL — the leader (rank 0) or a follower — while the launcher serves the "
           "registry. The survivors and the clients move to a new view (the longest log leads, clients send "
           "their unanswered requests again). Measured: the longest time any client went without a completion "
           "(failover as the clients see it: detection through the registry, the view change, the resent "
           "requests) and the run's throughput; every run checks that the surviving replicas agree.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"replicas", 3, 5, "replica ranks"},
        {"threads", 2, 2, "client threads per client rank"},
        {"window", 4, 16, "requests outstanding per client"},
        {"keys", 1000, 100000, "keys the requests draw from"},
        {"value_bytes", 64, 64, "width of every value in bytes (a multiple of 8, 8..4096)"},
        {"seconds", 2.5, 4.0, "run length of every client"},
        {"kill_after_s", 1.0, 1.5, "when the replica is killed, after the service served every client"},
        {"victims", json::array({"leader", "follower"}), json::array({"leader", "follower"}), "which replica is killed"},
        {"gateways", json::array({0}), json::array({0}),
         "per entry a series: 0 = `threads` sending clients per client rank; N > 0 = N client threads per client rank, "
         "one sending and N-1 idle (unused gateways of dfi kv serve)"},
        {"timeout_s", 120, 300, "bound of each cluster run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"no-failure", "the same load and cluster with no replica killed: the longest wait of a client "
                           "in a run without a view change"}};
  }

  void run(RunContext& context, Result& result) override {
    const int replicas = context.param("replicas");
    const int threads = context.param("threads");
    const std::uint64_t window = context.param("window");
    const std::uint64_t keys = context.param("keys");
    const double seconds = context.param("seconds");
    const std::uint64_t value_bytes = context.param("value_bytes");
    const double kill_after = context.param("kill_after_s");
    const std::vector<std::string> victims = context.param("victims");
    const std::vector<int> gateway_counts = context.param("gateways");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    result.set_parameters(context.resolved_parameters());
    result.add_baseline("no-failure", baselines()[0].description);
    result.add_note("Target (issue 12): service back within 1 s of the kill, read off the clients' completions.");
    Panel& wait = result.panel("failover", "Longest wait of a client for a completion",
                               {"killed replica", "", "category"}, {"longest wait", "ms", "linear"}, Better::lower);
    Panel& tput = result.panel("throughput", "Throughput of the run", {"killed replica", "", "category"},
                               {"throughput", "k req/s", "linear"}, Better::higher);
    // A series per entry of `gateways`: "paxos" (0: every client sends), "paxos-<N>gw".
    const auto series_of = [](int gateways) {
      return gateways == 0 ? std::string("paxos") : "paxos-" + std::to_string(gateways) + "gw";
    };
    for (Panel* p : {&wait, &tput}) {
      for (int g : gateway_counts) {
        p->series(series_of(g), Role::dfi,
                  "Multi-Paxos, " + std::to_string(replicas) + " replicas, one killed" +
                      (g == 0 ? std::string()
                              : ", " + std::to_string(g) + " gateway(s) per client rank, " + std::to_string(g - 1) +
                                    " idle"));
      }
      p->series("no-failure", Role::baseline, "Multi-Paxos, no replica killed");
    }
    tput.compare(series_of(gateway_counts.front()), "no-failure");
    for (int rep = 1; rep <= context.repeat; ++rep) {
      for (const std::string& victim : victims) {
        for (int gateways : gateway_counts) {
          KvLoad load = make_load(gateways == 0 ? threads : gateways, window, keys, seconds, timeout, value_bytes);
          load.idle_threads = gateways == 0 ? 0 : gateways - 1;
          const std::string series = series_of(gateways);
          if (victim != "leader" && victim != "follower") {
            throw Error(Errc::invalid_argument, "bench kv-failover: victim '" + victim + "' (leader or follower)");
          }
          const std::string round = "repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) + ", " +
                                    victim + " killed, " + series;
          auto killed = [&] {
            context.say(round);
            std::string command;
            const KvKill kill{victim == "leader" ? 0 : replicas - 1, kill_after, 0};
            const json r = run_dfi_kv(context, name(), "paxos", replicas, load, command, {kill});
            if (r.at("view").get<std::uint64_t>() == 0) {
              throw Error(Errc::protocol, "bench kv-failover: the run ended in view 0 although a replica was killed");
            }
            const double ms = r.at("longest_wait_us").get<double>() / 1000.0;
            context.say(round + ": longest wait " + std::to_string(ms) + " ms, view " + r.at("view").dump());
            wait.add(series, victim, ms);
            tput.add(series, victim, r.at("requests_per_second").get<double>() / 1000.0);
            for (Panel* p : {&wait, &tput}) p->add_command(series, command);
          };
          auto calm = [&] {
            context.say(round + " (baseline: none killed)");
            std::string command;
            const json r = run_dfi_kv(context, name(), "paxos", replicas, load, command);
            wait.add("no-failure", victim, r.at("longest_wait_us").get<double>() / 1000.0);
            tput.add("no-failure", victim, r.at("requests_per_second").get<double>() / 1000.0);
            for (Panel* p : {&wait, &tput}) p->add_command("no-failure", command);
          };
          // The baseline once per repetition and victim (with the first series' clients).
          if (gateways == gateway_counts.front()) {
            run_alternating(rep, killed, calm);
          } else {
            killed();
          }
        }
      }
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return run_kv_rank(params, out, err);
  }
};

constexpr const char* kGoHint = "install Go (the README set-up does) to build the Porcupine checker tests/porcupine/kvcheck";

class KvJepsenScenario : public Scenario {
 public:
  std::string name() const override { return "kv-jepsen"; }
  std::string title() const override {
    return "Replicated key-value store: randomized faults, every history checked by Porcupine";
  }
  std::string description() const override {
    return "`histories` short runs of `protocol` (paxos: Multi-Paxos, nopaxos: NOPaxos; `replicas` replicas, 2 client "
           "ranks x 2 threads, `seconds` each) "
           "with a randomized load (window 1/4/8, 4/16/64 keys, 50/80/95 % reads, 0/20 % of the writes deletes, "
           "each client offering at most `rate` requests/s) "
           "and a fault taking turns: none, the leader killed, a follower killed, a client rank killed (its "
           "journaled history, operations in flight with unknown outcome, is checked with the others), and with "
           "5 replicas the leader and then a follower — each kill (SIGKILL) at a random time while the clients "
           "run, the registry served by the launcher. `faults` picks the faults that take turns, also: drop "
           "(NOPaxos: chosen segments of the ordered requests flow dropped at one or two random replicas, "
           "flow_faults), delay (a slow follower: chosen segments to and from a random follower held back "
           "20-300 ms), partition (with --netns: a random replica's link cut at a random time and restored 5 s "
           "later, when the replica, counted as dead, must end on its own within 20 s; the registry then runs on "
           "the last client rank). Every run's client histories go to Porcupine "
           "(tests/porcupine/kvcheck, partitioned by key); every run also checks that the surviving replicas agree.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"histories", 8, 1000, "runs, each one history per client rank"},
        {"replicas", 3, 5, "replica ranks"},
        {"seconds", 1.5, 2.0, "run length of every client"},
        {"rate", 500, 500, "requests per second each of the 4 clients offers (keeps histories checkable)"},
        {"value_bytes", 64, 64, "width of every value in bytes (a multiple of 8, 8..4096)"},
        {"seed", 1, 1, "seed of the randomized loads and faults"},
        {"protocol", "paxos", "paxos", "replication protocol: paxos or nopaxos"},
        sequencer_parameter(),
        {"faults", "none,leader,follower,client,leader+follower", "none,leader,follower,client,leader+follower",
         "faults taking turns: none, leader, follower, client, leader+follower (5 replicas), drop (nopaxos), delay, "
         "partition (--netns)"},
        {"timeout_s", 60, 120, "bound of each cluster run"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"none", "the same randomized loads without a fault"}};
  }
  std::string unavailable(const RunContext&) const override {
    return go_binary() ? std::string() : std::string("no Go: ") + kGoHint;
  }

  void run(RunContext& context, Result& result) override {
    namespace fs = std::filesystem;
    const int histories = context.param("histories");
    const std::string sequencer = sequencer_of(context);
    const int replicas = context.param("replicas");
    const double seconds = context.param("seconds");
    const std::uint64_t value_bytes = context.param("value_bytes");
    const double rate = context.param("rate");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    const std::string protocol = context.param("protocol").get<std::string>();
    if (protocol != "paxos" && protocol != "nopaxos") {
      throw Error(Errc::invalid_argument, "bench kv-jepsen: protocol must be paxos or nopaxos (got '" + protocol + "')");
    }
    const std::string series = protocol == "paxos" ? "Multi-Paxos" : "NOPaxos";
    std::mt19937_64 rng(context.param("seed").get<std::uint64_t>());
    result.set_parameters(context.resolved_parameters());
    result.add_baseline("none", baselines()[0].description);
    const std::string kvcheck = build_go_tool(
        (fs::path(bench_source_dir()).parent_path() / "tests" / "porcupine" / "kvcheck").string(),
        (fs::path(bench_build_dir()) / "porcupine" / "kvcheck").string(), "the Porcupine checker kvcheck", kGoHint);
    const fs::path work = fs::path(bench_build_dir()) / "kv-jepsen";
    std::vector<std::string> faults;
    const std::string fault_list = context.param("faults").get<std::string>();
    for (std::string_view rest = fault_list; !rest.empty();) {
      const std::size_t comma = rest.find(',');
      const std::string fault(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      const auto bad = [&](const std::string& why) {
        return Error(Errc::invalid_argument, "bench kv-jepsen: fault '" + fault + "' " + why);
      };
      if (fault != "none" && fault != "leader" && fault != "follower" && fault != "client" &&
          fault != "leader+follower" && fault != "drop" && fault != "delay" && fault != "partition") {
        throw bad("is unknown (none, leader, follower, client, leader+follower, drop, delay, partition)");
      }
      if (fault == "leader+follower" && replicas < 5) continue;  // the default list's: needs 5 replicas
      if (fault == "drop" && protocol != "nopaxos") {
        throw bad("needs protocol=nopaxos: only its ordered requests flow may lose a segment (Multi-Paxos' flows are reliable)");
      }
      if (fault == "partition" && !context.netns) throw bad("needs --netns (a replica's link is cut)");
      faults.push_back(fault);
    }
    if (faults.empty()) throw Error(Errc::invalid_argument, "bench kv-jepsen: no fault in faults=");
    Panel& checked = result.panel("histories", "Histories checked by Porcupine", {"fault", "", "category"},
                                  {"histories", "", "linear"}, Better::higher);
    checked.series("linearizable", Role::dfi, "linearizable");
    checked.series("violations", Role::dfi, "not linearizable (or replicas disagree)");
    checked.series("failed", Role::dfi, "run ended in an error (not checked)");
    Panel& wait = result.panel("wait", "Longest wait of a client for a completion (median over the runs)",
                               {"fault", "", "category"}, {"longest wait", "ms", "linear"}, Better::lower);
    wait.series(protocol, Role::dfi, series + ", " + std::to_string(replicas) + " replicas");
    std::map<std::string, int> linearizable, violations, failed;
    std::uint64_t operations = 0;
    const auto pick = [&](std::initializer_list<double> options) {
      return *(options.begin() + static_cast<std::ptrdiff_t>(rng() % options.size()));
    };
    for (int i = 0; i < histories; ++i) {
      const std::string& fault = faults[static_cast<std::size_t>(i) % faults.size()];
      KvLoad load;
      load.threads = 2;
      load.window = static_cast<std::uint64_t>(pick({1, 4, 8}));
      load.keys = static_cast<std::uint64_t>(pick({4, 16, 64}));
      load.rate = rate;
      load.reads = pick({0.5, 0.8, 0.95});
      load.deletes = pick({0.0, 0.2});
      load.seconds = seconds;
      load.timeout = timeout;
      load.value_bytes = value_bytes;
      load.sequencer = sequencer;
      const fs::path dir = work / std::to_string(i);
      fs::remove_all(dir);
      fs::create_directories(dir);
      load.history_dir = dir.string();
      std::uniform_real_distribution<double> when(0.3, std::max(0.4, seconds - 0.5));
      std::vector<KvKill> kills;
      KvFaults injected;
      // With netns the registry cannot live in the launcher: the last client rank serves it (and
      // is never killed), so that the leader may be killed or cut off.
      if (context.netns) injected.registry_rank = replicas + kClientRanks - 1;
      const int clients_to_kill = context.netns ? kClientRanks - 1 : kClientRanks;
      const auto any_follower = [&] { return 1 + static_cast<int>(rng() % static_cast<unsigned>(replicas - 1)); };
      if (fault == "leader" || fault == "leader+follower") kills.push_back({0, when(rng), 0});
      if (fault == "follower") kills.push_back({any_follower(), when(rng), 0});
      if (fault == "client") kills.push_back({replicas + static_cast<int>(rng() % static_cast<unsigned>(clients_to_kill)), when(rng), 0});
      if (fault == "leader+follower") kills.push_back({replicas - 1, kills[0].after_seconds + 0.3 * (static_cast<double>(rng() % 100) / 100.0), 0});
      if (fault == "partition") kills.push_back({static_cast<int>(rng() % static_cast<unsigned>(replicas)), when(rng), 5.0});
      std::string detail;
      if (fault == "drop") {
        // Segments of the ordered requests flow lost at one replica (the leader too: a NO-OP), or at
        // two; each gap costs gap_timeout, a request the leader lost retry_timeout.
        const int first = static_cast<int>(rng() % static_cast<unsigned>(replicas));
        const int every = static_cast<int>(pick({7, 20, 50}));
        std::ostringstream rules;
        rules << "flow=kv.v*.requests,to=" << first << ",drop,first=" << 3 + rng() % 20 << ",every=" << every;
        std::ostringstream what;
        what << " (drops at rank " << first;
        if (rng() % 2 == 0) {
          const int second = (first + 1 + static_cast<int>(rng() % static_cast<unsigned>(replicas - 1))) % replicas;
          rules << ";flow=kv.v*.requests,to=" << second << ",drop,first=" << 3 + rng() % 20 << ",every=" << every * 2;
          what << " and " << second;
        }
        what << ", every " << every << ")";
        detail = what.str();
        injected.flow_rules = rules.str();
        injected.gap_timeout = std::chrono::milliseconds(100);
        injected.retry_timeout = std::chrono::milliseconds(300);
      }
      if (fault == "delay") {
        // A slow follower: chosen segments to it (and, Multi-Paxos, its answers) held back; a link
        // is FIFO, so the follower lags. NOPaxos: a delay beyond gap_timeout makes a gap there.
        const int slow = any_follower();
        const int delay_ms = static_cast<int>(pick({20, 100, 300}));
        const int every = static_cast<int>(pick({3, 10, 30}));
        std::ostringstream rules;
        rules << "flow=kv.v*." << (protocol == "paxos" ? "accept" : "requests") << ",to=" << slow << ",delay=" << delay_ms
              << ",every=" << every;
        if (protocol == "paxos") rules << ";flow=kv.v*.accepted,from=" << slow << ",delay=" << delay_ms << ",every=" << every;
        injected.flow_rules = rules.str();
        if (protocol == "nopaxos") {
          injected.gap_timeout = std::chrono::milliseconds(100);
          injected.retry_timeout = std::chrono::milliseconds(300);
        }
        std::ostringstream what;
        what << " (rank " << slow << ", " << delay_ms << " ms every " << every << ")";
        detail = what.str();
      }
      if (fault == "partition") {
        std::ostringstream what;
        what << " (rank " << kills[0].rank << ")";
        detail = what.str();
      }
      std::ostringstream round;
      round << "history " << i + 1 << "/" << histories << ": " << fault << detail << ", window " << load.window << ", "
            << load.keys << " keys, " << load.reads * 100 << " % reads";
      std::string command;
      json r;
      try {
        r = run_dfi_kv(context, name(), protocol, replicas, load, command, kills, injected);
      } catch (const Error& e) {
        // A run that ends in an error is a finding too, not the end of the bench: counted and
        // shown with its history kept (replicas that disagree count as a violation).
        const std::string what = e.what();
        const bool disagree = what.find("replicas disagree") != std::string::npos;
        ++(disagree ? violations : failed)[fault];
        context.say(round.str() + (disagree ? ": REPLICAS DISAGREE" : ": RUN FAILED") + ", kept in " + dir.string() +
                    "\n" + (what.size() <= 2500 ? what : what.substr(0, 500) + "\n...\n" + what.substr(what.size() - 2000)));
        continue;
      }
      std::vector<std::string> argv = {kvcheck};
      for (const auto& entry : fs::directory_iterator(dir)) argv.push_back(entry.path().string());
      const launch::ChildResult check = launch::run_child({argv, {}}, std::chrono::minutes(10));
      if (check.exit_code == 0) {
        ++linearizable[fault];
        fs::remove_all(dir);
      } else if (check.exit_code == 1) {
        ++violations[fault];
        context.say(round.str() + ": NOT LINEARIZABLE, histories kept in " + dir.string() + "\n" + check.output);
      } else {
        throw Error(Errc::io, "bench kv-jepsen: kvcheck failed (exit " + std::to_string(check.exit_code) + ") on " +
                                  dir.string() + ": " + check.output);
      }
      // What kvcheck checked ("kvcheck: N operations on K keys: ..."): with a client killed, more
      // than the survivors completed (its journal and its operations in flight).
      const std::size_t at = check.output.find("kvcheck: ");
      const std::uint64_t checked_ops = at == std::string::npos ? 0 : std::strtoull(check.output.c_str() + at + 9, nullptr, 10);
      operations += checked_ops;
      wait.add(protocol, fault, r.at("longest_wait_us").get<double>() / 1000.0);
      wait.add_command(protocol, command);
      context.say(round.str() + ": " + (check.exit_code == 0 ? "linearizable" : "VIOLATION") + " (" +
                  std::to_string(checked_ops) + " operations checked, " + r.at("requests").dump() +
                  " completed by the surviving clients, view " + r.at("view").dump() + ")");
    }
    int total_violations = 0, total_failed = 0;
    for (const std::string& fault : faults) {
      checked.add("linearizable", fault, linearizable[fault]);
      checked.add("violations", fault, violations[fault]);
      checked.add("failed", fault, failed[fault]);
      total_violations += violations[fault];
      total_failed += failed[fault];
    }
    std::ostringstream summary;
    summary << histories << " runs, " << operations << " operations checked: " << total_violations
            << " not linearizable or with disagreeing replicas, " << total_failed << " ended in an error";
    if (total_violations + total_failed > 0) summary << " (their histories are kept under " << work.string() << ")";
    summary << ".";
    result.add_note(summary.str());
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return run_kv_rank(params, out, err);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_kv_jepsen_scenario() { return std::make_unique<KvJepsenScenario>(); }
std::unique_ptr<Scenario> make_kv_failover_scenario() { return std::make_unique<KvFailoverScenario>(); }
std::unique_ptr<Scenario> make_kv_scenario() { return std::make_unique<KvScenario>(); }
std::unique_ptr<Scenario> make_kv_etcd_scenario() { return std::make_unique<KvEtcdScenario>(); }

}  // namespace dfi::tools::bench
