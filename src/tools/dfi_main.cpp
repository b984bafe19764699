// The `dfi` command: local clusters, fabric self-check, configuration.
//
//   dfi cluster run --nodes 4 --transport shm -- dfi fabric check
//   dfi cluster run --nodes 3 --netns -- dfi fabric check --quick
//   dfi info --config
//   dfi bench fabric-bw --transport tcp        (see bench/README.md)
//   dfi cluster run --nodes 4 -- dfi txn --protocol rsi --servers 2
//   dfi cluster run --nodes 2 -- dfi commtier --test consuming --buffers 4
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "dfi/common/config.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/context.hpp"
#include "bench/bench_cli.hpp"
#include "dfi/launch/local_cluster.hpp"
#include "dfi/version.hpp"
#include "demo.hpp"
#include "fabric_check.hpp"
#include "agg_command.hpp"
#include "join_command.hpp"
#include "mover.hpp"
#include "kv_command.hpp"
#include "txn.hpp"
#include "commtier_command.hpp"
#include "registry_command.hpp"

namespace {

int print_config() {
  std::printf("%-22s %-26s %-16s %s\n", "setting", "environment", "value", "meaning");
  for (const dfi::config::Entry& e : dfi::config::entries()) {
    std::string value = dfi::config::get_string(e.name);
    std::printf("%-22.*s %-26.*s %-16s %.*s\n", static_cast<int>(e.name.size()), e.name.data(),
                static_cast<int>(e.env.size()), e.env.data(), value.empty() ? "(empty)" : value.c_str(),
                static_cast<int>(e.help.size()), e.help.data());
  }
  return 0;
}

// The options of the kv service that `dfi kv bench` and `dfi kv serve` share, and what their
// values become in apps::kv::ServiceOptions once parsed.
struct KvServiceCli {
  std::string protocol = "paxos";
  std::string sequencer = "stamp";
  double timeout_s = 30, gap_timeout_ms = 500, retry_timeout_ms = 1500;

  void add(CLI::App* app, dfi::apps::kv::ServiceOptions& service, const std::string& threads_help) {
    app->add_option("--protocol", protocol, "paxos, nopaxos or unreplicated")
        ->check(CLI::IsMember({"paxos", "nopaxos", "unreplicated"}));
    app->add_option("--replicas", service.replicas, "Replicas: ranks 0..N-1 (rank 0 leads)");
    app->add_option("--threads", service.client_threads, threads_help)->check(CLI::Range(1, 64));
    app->add_option("--window", service.window, "Outstanding requests per client thread");
    app->add_option("--value-bytes", service.value_bytes,
                    "Width of every value (a multiple of 8, 8..4096; every rank must use the same)");
    app->add_option("--name", service.name, "Service name (its flows are <name>.v<view>.requests, ...)");
    app->add_option("--timeout", timeout_s, "Seconds to wait for set-up and for a silent peer");
    app->add_option("--gap-timeout-ms", gap_timeout_ms, "NOPaxos: how long a sequence number may be missing before it is a gap")
        ->check(CLI::PositiveNumber);
    app->add_option("--sequencer", sequencer,
                    "NOPaxos: who numbers the requests: stamp (the leader, forwarding them to the followers; the "
                    "default) or counter (each client, by a fetch-add at the leader)")
        ->check(CLI::IsMember({"counter", "stamp"}));
    app->add_option("--retry-timeout-ms", retry_timeout_ms,
                    "NOPaxos: how long a client waits for a majority before it sends a request again")
        ->check(CLI::PositiveNumber);
  }

  void apply(const CLI::App* app, dfi::apps::kv::ServiceOptions& service) const {
    service.protocol = dfi::apps::kv::parse_protocol(protocol);
    if (service.protocol == dfi::apps::kv::Protocol::unreplicated && app->count("--replicas") == 0) service.replicas = 1;
    service.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
    service.gap_timeout = std::chrono::milliseconds(static_cast<long long>(gap_timeout_ms));
    service.retry_timeout = std::chrono::milliseconds(static_cast<long long>(retry_timeout_ms));
    service.sequencer = dfi::flow::parse_sequencer(sequencer);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dfi — Data Flow Interface: flows between threads of many machines"};
  // DFI's version and the UCX it runs on (the library loaded, not the headers it was built with).
  app.set_version_flag("--version", [] {
    return std::string("dfi " DFI_VERSION_STRING "\n") + dfi::fabric::ucx_runtime();
  });
  app.require_subcommand(1);

  auto* cluster = app.add_subcommand("cluster", "Local multi-process clusters");
  cluster->require_subcommand(1);
  auto* run = cluster->add_subcommand("run", "Start N ranks of PROGRAM with rank/size/registry in their environment");
  dfi::launch::ClusterOptions cluster_options;
  double timeout_s = 0;
  double grace_s = 3;
  run->add_option("--nodes,-n", cluster_options.nodes, "Number of ranks")->required()->check(CLI::Range(1, 256));
  run->add_option("--transport", cluster_options.transport, "shm or tcp")->check(CLI::IsMember({"shm", "tcp"}));
  run->add_flag("--netns", cluster_options.netns, "One network namespace per rank, joined by a bridge (TCP; needs root)");
  run->add_option("--qdisc", cluster_options.qdisc,
                  "With --netns: tc qdisc on every rank's link, e.g. \"netem delay 1ms loss 0.1%\"");
  run->add_option("--timeout", timeout_s, "Kill the cluster after this many seconds (0 = never)");
  run->add_option("--grace", grace_s, "Seconds the other ranks get to finish after one fails");
  bool registry_apart = false;
  run->add_flag("--registry-apart", registry_apart,
                "Serve the registry from the launcher instead of rank 0, so that any rank may die (not with --netns)");
  std::string registry_address;
  run->add_option("--registry", registry_address,
                  "Coordinate through this registry instead of one in rank 0: etcd://host:port[,host:port...] (an "
                  "etcd v3 cluster; records under a prefix of this run's own) or host:port (dfi registry serve)");
  run->add_option("program", cluster_options.argv, "PROGRAM ARGS... (after --)")->required();

  auto* fabric = app.add_subcommand("fabric", "Fabric tools");
  fabric->require_subcommand(1);
  auto* check = fabric->add_subcommand("check", "put/get/atomics/AM between all ranks, verified and timed");
  dfi::tools::FabricCheckOptions check_options;
  check->add_flag("--quick", check_options.quick, "Fewer repetitions");
  check->add_flag("--json", check_options.json, "One JSON object per pair");
  check->add_option("--message", check_options.bandwidth_message, "Bandwidth message size in bytes");

  auto* demo = app.add_subcommand("demo", "Quick-start demo: an N:M shuffle across all ranks, verified and timed");
  dfi::tools::DemoOptions demo_options;
  demo->add_option("--sources", demo_options.sources_per_rank, "Source threads per rank")->check(CLI::Range(1, 64));
  demo->add_option("--targets", demo_options.targets_per_rank, "Target threads per rank")->check(CLI::Range(1, 64));
  demo->add_option("--tuples", demo_options.tuples_per_source, "Tuples each source pushes");
  demo->add_option("--tuple-bytes", demo_options.tuple_bytes, "Tuple width (multiple of 8, >= 16)");

  auto* mover = app.add_subcommand(
      "mover", "Serve driven flows as their data mover, as one rank of a cluster (under dfi cluster run)");
  dfi::tools::MoverCommandOptions mover_options;
  double mover_timeout_s = 3600;
  mover->add_option("flows", mover_options.flows,
                    "The driven flows to serve (each is waited for; a flow whose earlier mover died is continued "
                    "where its buffers say: restart a killed mover with the same command)")
      ->required();
  mover->add_option("--timeout", mover_timeout_s, "Fail when the flows have not ended after this many seconds");
  mover->add_option("--crash-at", mover_options.crash_at,
                    "Test seam: kill this process at the N-th transfer reaching link:N (link word written, nothing "
                    "published) or publish:N (published, producer not released)");

  auto* join = app.add_subcommand(
      "join", "A distributed join on generated data, checked against a single-node join (under dfi cluster run)");
  dfi::tools::JoinCommandOptions join_options;
  join->add_option("--algorithm", join_options.algorithm, "radix, fragment-replicate (fr), grace or rrj");
  join->add_flag("--bloom", join_options.bloom, "Grace: drop probe tuples whose key misses a Bloom filter of the build keys before shipping them");
  join->add_option("--partitions", join_options.partitions, "Grace: sub-partitions per join thread (0: cache-sized)");
  join->add_option("--build-tuples", join_options.build_tuples, "Tuples of the build (inner) relation, all ranks together");
  join->add_option("--probe-tuples", join_options.probe_tuples, "Tuples of the probe (outer) relation, all ranks together");
  join->add_option("--threads", join_options.threads, "Partitioning threads and join threads per rank")
      ->check(CLI::Range(1, 64));
  join->add_option("--tuple-bytes", join_options.tuple_bytes, "Tuple width: key, payload, padding (multiple of 8, >= 16)");
  join->add_option("--selectivity", join_options.selectivity, "Fraction of probe tuples with a partner, (0, 1]");
  join->add_option("--duplicates", join_options.duplicates, "Build tuples per key");
  join->add_option("--seed", join_options.seed, "Seed of the probe keys");
  join->add_option("--verify", join_options.verify, "yes, no or auto (relations of at most 16 M tuples)");
  join->add_option("--name", join_options.name, "Name of the join and its flows");
  join->add_option("--dump", join_options.dump, "Write the inputs, every rank's pairs and the result as CSV into this directory (small data)");
  join->add_flag("--json", join_options.json, "Rank 0 prints one JSON object");

  auto* agg = app.add_subcommand(
      "agg", "A distributed GROUP BY on generated data, checked against a single-node aggregation (under dfi cluster run)");
  dfi::tools::AggCommandOptions agg_options;
  agg->add_option("--algorithm", agg_options.algorithm, "rdma or hierarchical");
  agg->add_option("--tuples", agg_options.tuples, "Input tuples, all ranks together");
  agg->add_option("--groups", agg_options.groups, "Distinct keys the input draws from");
  agg->add_option("--zipf", agg_options.zipf, "Zipf exponent of the keys (0: uniform)");
  agg->add_option("--threads", agg_options.threads, "Aggregation threads per rank")->check(CLI::Range(1, 64));
  agg->add_option("--cache-groups", agg_options.cache_groups, "rdma: groups of a thread's pre-aggregation table");
  agg->add_option("--pass-through-below", agg_options.pass_through_below,
                  "rdma: hit rate of a full pre-aggregation table below which tuples pass through unaggregated for a while (0: never)");
  agg->add_option("--seed", agg_options.seed, "Seed of the keys");
  agg->add_option("--verify", agg_options.verify, "yes, no or auto (at most 16 M tuples)");
  agg->add_option("--name", agg_options.name, "Name of the aggregation and its flow");
  agg->add_option("--dump", agg_options.dump, "Write the input, every rank's groups and the result as CSV into this directory (small data)");
  agg->add_flag("--json", agg_options.json, "Rank 0 prints one JSON object");

  auto* txn = app.add_subcommand(
      "txn", "Bank transfers or checkouts with RSI or 2PC snapshot isolation, as every rank of a cluster (under dfi cluster run)");
  dfi::apps::rsi::TxnOptions txn_options;
  std::string txn_protocol = "rsi";
  std::string txn_workload = "bank";
  std::uint64_t txn_products = 10000;
  double txn_timeout_s = 30;
  txn->add_option("--protocol", txn_protocol, "rsi (one-sided) or 2pc (two-phase commit over messages)")
      ->check(CLI::IsMember({"rsi", "2pc"}));
  txn->add_option("--workload", txn_workload, "bank (transfers between accounts) or checkout (001's TPC-W-like checkout)")
      ->check(CLI::IsMember({"bank", "checkout"}));
  txn->add_option("--servers", txn_options.servers, "Storage servers: ranks 0..N-1 (rank 0 also hosts the timestamps)");
  txn->add_option("--threads", txn_options.threads, "Client threads on every other rank")->check(CLI::Range(1, 64));
  auto* txn_accounts =
      txn->add_option("--accounts", txn_options.records, "bank: accounts (records); fewer means more conflicts");
  auto* txn_products_option =
      txn->add_option("--products", txn_products, "checkout: products (and as many stock records); fewer means more conflicts");
  txn->add_option("--order-slots", txn_options.order_slots, "checkout: orders in each client's insert ring");
  txn->add_option("--balance", txn_options.initial_balance, "Initial balance of every account");
  auto* txn_bytes = txn->add_option("--record-bytes", txn_options.payload_bytes,
                                    "Payload bytes of a record (bank: >= 8, default 8; checkout: >= 64, default 1024)");
  txn->add_option("--seconds", txn_options.seconds, "Run length");
  txn->add_option("--transactions", txn_options.transactions, "Commits per client, then stop (0: run --seconds)");
  txn->add_option("--timestamps", txn_options.timestamps, "Bits of the timestamp vector (timestamps of the whole run)");
  txn->add_option("--table", txn_options.table, "Table name (registry records rsi/<table>/...; default: the workload's name)");
  txn->add_option("--timeout", txn_timeout_s, "Seconds to wait for set-up and for a 2PC answer");
  txn->add_flag("!--no-progress", txn_options.progress, "No progress line per second");

  auto* kv = app.add_subcommand("kv", "The replicated key-value store (Multi-Paxos or NOPaxos on flows)");
  kv->require_subcommand(1);
  auto* kv_bench = kv->add_subcommand(
      "bench", "YCSB-style load on the replicated store, as every rank of a cluster (under dfi cluster run)");
  dfi::apps::kv::BenchOptions kv_options;
  KvServiceCli kv_bench_service;
  kv_bench_service.add(kv_bench, kv_options.service, "Client threads on every other rank");
  kv_bench->add_option("--keys", kv_options.keys, "Keys the requests draw from");
  kv_bench->add_option("--zipf", kv_options.zipf, "Zipf exponent of the keys (0: uniform; YCSB: 0.99)");
  kv_bench->add_option("--reads", kv_options.read_ratio, "Share of gets (YCSB B: 0.95)");
  kv_bench->add_option("--deletes", kv_options.delete_ratio, "Share of the writes that are deletes");
  kv_bench->add_option("--seconds", kv_options.seconds, "Run length of every client");
  kv_bench->add_option("--requests", kv_options.requests, "Requests per client, then stop (0: run --seconds)");
  kv_bench->add_option("--batch", kv_options.batch,
                       "A client refills its window only once this many places are free: its requests go in groups "
                       "(1 .. window; 1: every place at once)");
  kv_bench->add_option("--rate", kv_options.rate, "Requests per second each client offers at most (0: as the window allows)");
  kv_bench->add_option("--idle-threads", kv_options.idle_threads,
                       "The last N client threads of every client rank open their client and send nothing (idle "
                       "gateways) until the others finished");
  kv_bench->add_option("--history", kv_options.history_dir, "Directory for the clients' histories (kv-<rank>.history)");
  kv_bench->add_option("--seed", kv_options.seed, "Seed of the workload");
  kv_bench->add_flag("!--no-progress", kv_options.progress, "No progress line per second");
  double kv_fault_delay_ms = 2000;
  std::string kv_fault = "none";
  kv_bench->add_option("--fault", kv_fault, "Test seam (NOPaxos with --sequencer counter): the last client dies (kill) or waits (delay) holding a sequence number")
      ->check(CLI::IsMember({"none", "kill", "delay"}));
  kv_bench->add_option("--fault-segment", kv_options.fault_segment, "Test seam: at the last client's N-th sequence number")
      ->check(CLI::PositiveNumber);
  kv_bench->add_option("--fault-delay-ms", kv_fault_delay_ms, "Test seam: how long --fault delay waits")->check(CLI::PositiveNumber);

  auto* kv_serve = kv->add_subcommand(
      "serve", "Serve the replicated store until SIGINT/SIGTERM, as every rank of a cluster (under dfi cluster run): "
               "replicas on ranks 0..N-1, a gateway socket per client thread on the others for dfi kv put/get/delete");
  dfi::tools::KvServeOptions kv_serve_options;
  KvServiceCli kv_serve_service;
  kv_serve_service.add(kv_serve, kv_serve_options.service, "Gateways (client threads, one socket each) on every other rank");
  kv_serve->add_option("--socket-dir", kv_serve_options.socket_dir,
                       "Existing directory for the gateways' sockets (kv-<rank>-<thread>.sock)")
      ->required();
  dfi::tools::KvRequestOptions kv_request;
  std::vector<CLI::App*> kv_requests;
  for (const std::string op : {"put", "get", "delete", "stop"}) {
    const std::string what = op == "put"      ? "Put VALUE (text, at most the service's value width) under KEY"
                             : op == "get"    ? "Print the value of KEY (exit status 2: not found)"
                             : op == "delete" ? "Delete KEY (exit status 2: not found)"
                                              : "Stop the whole service (every rank leaves with status 0)";
    auto* c = kv->add_subcommand(op, what + " through a gateway of dfi kv serve");
    c->add_option("--socket", kv_request.socket, "A gateway's socket (<socket-dir>/kv-<rank>-<thread>.sock)")->required();
    if (op != "stop") c->add_option("key", kv_request.key, "The key (an unsigned 64-bit number)")->required();
    if (op == "put") c->add_option("value", kv_request.value, "The value")->required();
    c->add_option("--timeout", kv_request.timeout_seconds, "Seconds to wait for the gateway's answer");
    kv_requests.push_back(c);
  }

  auto* commtier = app.add_subcommand(
      "commtier", "002's throughput or consuming test between an SU and a CU rank, as every rank of a cluster (under dfi cluster run)");
  dfi::apps::commtier::TestOptions commtier_options;
  std::string commtier_test = "consuming", commtier_via = "tier", commtier_buffer_bytes = "1MiB";
  std::string commtier_bytes_per_size = "64MiB";
  std::vector<std::string> commtier_sizes = {"8", "1KiB", "64KiB", "1MiB", "16MiB"};
  double commtier_timeout_s = 60;
  bool commtier_json = false;
  commtier->add_option("--test", commtier_test, "consuming (the CU copies every transfer out) or throughput (it gives the buffers back unread)")
      ->check(CLI::IsMember({"consuming", "throughput"}));
  commtier->add_option("--via", commtier_via, "tier (receive buffers, apps/commtier) or flow (the same transfers through DFI shuffle flows)")
      ->check(CLI::IsMember({"tier", "flow"}));
  commtier->add_option("--buffers", commtier_options.buffers.count, "Receive buffers per lane at the CU (1: single-buffer mode)");
  commtier->add_option("--buffer-bytes", commtier_buffer_bytes, "Size of one receive buffer (e.g. 256KiB)");
  commtier->add_option("--lanes", commtier_options.lanes, "Sending threads at the SU and receiving threads at the CU");
  commtier->add_option("--sizes", commtier_sizes, "Transfer sizes (e.g. 8 1KiB 1MiB)")->delimiter(',');
  commtier->add_option("--bytes-per-size", commtier_bytes_per_size, "Data moved per transfer size (transfers = this / size)");
  commtier->add_option("--max-transfers", commtier_options.max_transfers, "At most this many transfers per size");
  commtier->add_option("--su-rank", commtier_options.su_rank, "The storage unit's rank (it sends)");
  commtier->add_option("--cu-rank", commtier_options.cu_rank, "The compute unit's rank (it receives)");
  commtier->add_option("--flow-tuple-bytes", commtier_options.flow_tuple_bytes, "--via flow: the data flow's tuple width");
  commtier->add_option("--name", commtier_options.name, "Tier name (flows <name>.to_cu.<lane>, ...)");
  commtier->add_option("--timeout", commtier_timeout_s, "Seconds to wait for set-up and for a silent peer");
  commtier->add_flag("--json", commtier_json, "Also print the result as one JSON line (commtier-json: ...)");
  commtier->add_flag("!--no-progress", commtier_options.progress, "No line per transfer size while it runs");

  auto* registry = app.add_subcommand("registry", "The registry as a process of its own");
  registry->require_subcommand(1);
  auto* registry_serve = registry->add_subcommand(
      "serve", "Serve the registry at DFI_REGISTRY (ranks then run with DFI_REGISTRY_EXTERNAL=1), so any rank may die");
  dfi::tools::RegistryServeOptions registry_options;
  registry_serve->add_option("--address", registry_options.address, "host:port to listen on (default: DFI_REGISTRY)");
  registry_serve->add_option("--ranks", registry_options.ranks,
                             "Exit once this many ranks joined and all of them left (0: until SIGINT/SIGTERM)");
  registry_serve->add_option("--timeout", registry_options.timeout_seconds,
                             "With --ranks: give up if they have not all joined within this many seconds");

  auto* info = app.add_subcommand("info", "Configuration and environment");
  bool show_config = false;
  info->add_flag("--config", show_config, "Every setting with its environment variable, value and meaning");

  dfi::tools::bench::BenchCli bench(app);

  CLI11_PARSE(app, argc, argv);
  try {
    if (std::optional<int> code = bench.run(argc, argv)) return *code;
    if (*run) {
      if (cluster_options.netns) cluster_options.transport = "tcp";
      cluster_options.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
      cluster_options.grace = std::chrono::milliseconds(static_cast<long long>(grace_s * 1000));
      std::optional<dfi::tools::RegistryApart> apart;
      if (registry_apart && !registry_address.empty()) {
        throw dfi::Error(dfi::Errc::invalid_argument, "dfi cluster run: --registry and --registry-apart exclude each other");
      }
      if (!registry_address.empty()) {
        cluster_options.extra_env.insert(cluster_options.extra_env.begin(),
                                         {{"DFI_REGISTRY", registry_address}, {"DFI_REGISTRY_EXTERNAL", "1"}});
      }
      if (registry_apart) {
        if (cluster_options.netns) {
          throw dfi::Error(dfi::Errc::invalid_argument,
                           "dfi cluster run: --registry-apart listens on this host's loopback, which ranks in network "
                           "namespaces cannot reach");
        }
        apart.emplace();
        for (auto& setting : apart->environment()) cluster_options.extra_env.insert(cluster_options.extra_env.begin(), setting);
      }
      return dfi::launch::run_cluster(cluster_options, std::cout, std::cerr);
    }
    if (*check) return dfi::tools::run_fabric_check(check_options, std::cout, std::cerr);
    if (*demo) return dfi::tools::run_demo(demo_options, std::cout, std::cerr);
    if (*mover) {
      mover_options.timeout = std::chrono::milliseconds(static_cast<long long>(mover_timeout_s * 1000));
      return dfi::tools::run_mover(mover_options, std::cout, std::cerr);
    }
    if (*agg) return dfi::tools::run_agg_command(agg_options, std::cout, std::cerr);
    if (*join) return dfi::tools::run_join_command(join_options, std::cout, std::cerr);
    if (*txn) {
      txn_options.protocol = dfi::apps::rsi::parse_protocol(txn_protocol);
      txn_options.workload = dfi::apps::rsi::parse_workload(txn_workload);
      if (txn_options.workload == dfi::apps::rsi::Workload::checkout) {
        if (txn_accounts->count() != 0) throw dfi::Error(dfi::Errc::invalid_argument, "dfi txn: --accounts is for the bank workload (checkout: --products)");
        txn_options.records = txn_products;
        if (txn_bytes->count() == 0) txn_options.payload_bytes = 1024;
      } else if (txn_products_option->count() != 0) {
        throw dfi::Error(dfi::Errc::invalid_argument, "dfi txn: --products is for the checkout workload (bank: --accounts)");
      }
      txn_options.timeout = std::chrono::milliseconds(static_cast<long long>(txn_timeout_s * 1000));
      return dfi::tools::run_txn(txn_options, std::cout, std::cerr);
    }
    if (*kv_bench) {
      kv_bench_service.apply(kv_bench, kv_options.service);
      kv_options.fault_delay = std::chrono::milliseconds(static_cast<long long>(kv_fault_delay_ms));
      using Fault = dfi::apps::kv::BenchOptions::Fault;
      kv_options.fault = kv_fault == "kill" ? Fault::kill : kv_fault == "delay" ? Fault::delay : Fault::none;
      if (kv_options.fault != Fault::none && kv_options.service.protocol != dfi::apps::kv::Protocol::nopaxos) {
        throw dfi::Error(dfi::Errc::invalid_argument, "dfi kv bench: --fault is a seam of the NOPaxos requests flow (--protocol nopaxos)");
      }
      if (kv_options.fault != Fault::none && kv_options.service.sequencer != dfi::flow::Sequencer::counter) {
        throw dfi::Error(dfi::Errc::invalid_argument,
                         "dfi kv bench: --fault makes a client hold a sequence number, which needs --sequencer counter");
      }
      return dfi::tools::run_kv_bench(kv_options, std::cout, std::cerr);
    }
    if (*kv_serve) {
      kv_serve_service.apply(kv_serve, kv_serve_options.service);
      return dfi::tools::run_kv_serve(kv_serve_options, std::cout, std::cerr);
    }
    for (CLI::App* c : kv_requests) {
      if (!*c) continue;
      kv_request.op = c->get_name();
      return dfi::tools::run_kv_request(kv_request, std::cout, std::cerr);
    }
    if (*commtier) {
      commtier_options.test = dfi::apps::commtier::parse_test(commtier_test);
      commtier_options.via = dfi::apps::commtier::parse_via(commtier_via);
      const std::uint64_t buffer_bytes = dfi::tools::parse_bytes(commtier_buffer_bytes);
      if (buffer_bytes > dfi::apps::commtier::kMaxBufferBytes) {
        throw dfi::Error(dfi::Errc::invalid_argument, "dfi commtier: --buffer-bytes " + commtier_buffer_bytes +
                                                          " is larger than the largest receive buffer (1 GiB)");
      }
      commtier_options.buffers.bytes = static_cast<std::uint32_t>(buffer_bytes);
      commtier_options.bytes_per_size = dfi::tools::parse_bytes(commtier_bytes_per_size);
      commtier_options.sizes.clear();
      for (const std::string& s : commtier_sizes) commtier_options.sizes.push_back(dfi::tools::parse_bytes(s));
      commtier_options.timeout = std::chrono::milliseconds(static_cast<long long>(commtier_timeout_s * 1000));
      return dfi::tools::run_commtier(commtier_options, commtier_json, std::cout, std::cerr);
    }
    if (*registry_serve) return dfi::tools::run_registry_serve(registry_options, std::cout, std::cerr);
    if (*info) return print_config();
  } catch (const dfi::Error& e) {
    std::cerr << "dfi: " << e.what() << '\n';
    return 2;
  }
  return 0;
}
