// Rank program for the multi-process operator tests (ops::run_join, ops::run_aggregation),
// started by launch::run_cluster on 4 ranks.
//
//   ops_node sink ALGORITHM THREADS [bloom]   every rank's build keys are its own range of 0..B-1 and every
//       probe key i % B, so each probe tuple has exactly one partner; the sink sees every pair,
//       with equal keys, and the pairs add up to the result (bloom: a grace join with the Bloom
//       filter, which must ship every probe tuple: each has a partner)
//   ops_node prepared ALGORITHM THREADS [bloom]   the same through ops::Join: every rank opens the
//       join, passes a barrier, then runs it; a second run() and a wrong fragment count are refused
//   ops_node prepared-kill ALGORITHM   every rank opens the join (ops::Join) and passes a barrier;
//       rank 2 dies (SIGKILL) before its run(); every other rank's run() throws peer_failed
//       naming rank 2
//   ops_node kill                     rank 2 dies (SIGKILL) in its 20th sink call of a radix
//       join; every other rank's run_join throws peer_failed naming rank 2
//   ops_node grace-kill               rank 2 dies (SIGKILL) 300 ms into pushing a large build side of
//       a grace join; every other rank's run_join throws peer_failed naming rank 2 (their join
//       threads fail, and release their partitioning threads from the phase wait)
//   ops_node rrj-kill                 rank 2 dies (SIGKILL) 300 ms into partitioning a large input of
//       an rrj join; every other rank's run_join throws peer_failed naming rank 2
//   ops_node errors                   bad specs and arguments give clear errors
//   ops_node agg-kill ALGORITHM        rank 2 dies (SIGKILL) 200 ms into a large aggregation; every
//       other rank's run_aggregation or gather_aggregation_results throws peer_failed naming it
//   ops_node agg-prepared ALGORITHM    every rank opens the aggregation (ops::Aggregation), passes a
//       barrier, then runs it (2 threads): 1000 groups with the expected checksum; a second run()
//       and a wrong fragment count are refused
//   ops_node agg-prepared-kill ALGORITHM   every rank opens the aggregation and passes a barrier;
//       rank 2 dies before its run(); every other rank's run() or gather throws peer_failed
//
// Exit status 0 means the scenario held; every failure prints why.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/kernels/hash.hpp"
#include "dfi/ops/aggregate.hpp"
#include "dfi/ops/join.hpp"
#include "node_checks.hpp"

namespace {

using namespace dfi;

using testing::fail;
using testing::failures;

struct Tuple {
  std::uint64_t key;
  std::uint64_t payload;
};

const flow::Schema kSchema({{"key", flow::Type::uint64, 1}, {"payload", flow::Type::uint64, 1}});

ops::JoinSpec make_spec(const std::string& name, ops::JoinAlgorithm algorithm, int threads) {
  ops::JoinSpec spec;
  spec.name = name;
  spec.algorithm = algorithm;
  spec.build = {kSchema, "key"};
  spec.probe = {kSchema, "key"};
  spec.threads = threads;
  return spec;
}

struct Data {
  std::vector<std::vector<Tuple>> build, probe;
  std::vector<ops::Fragment> build_fragments, probe_fragments;
};

// Rank r, thread t: build keys [B/(ranks*threads) * slice, ...), probe keys i % B.
Data make_data(const cluster::Node& node, int threads, std::uint64_t build_per_slice, std::uint64_t probe_per_slice) {
  Data d;
  const std::uint64_t total_build = build_per_slice * node.size() * threads;
  for (int t = 0; t < threads; ++t) {
    const std::uint64_t slice = static_cast<std::uint64_t>(node.rank()) * threads + t;
    std::vector<Tuple> b(build_per_slice), p(probe_per_slice);
    for (std::uint64_t i = 0; i < build_per_slice; ++i) b[i] = {slice * build_per_slice + i, 1000 + i};
    for (std::uint64_t i = 0; i < probe_per_slice; ++i) p[i] = {(slice * probe_per_slice + i) % total_build, i};
    d.build.push_back(std::move(b));
    d.probe.push_back(std::move(p));
  }
  for (int t = 0; t < threads; ++t) {
    d.build_fragments.push_back({d.build[t].data(), d.build[t].size()});
    d.probe_fragments.push_back({d.probe[t].data(), d.probe[t].size()});
  }
  return d;
}

template <class F>
void expect_error(const std::string& what, Errc code, const std::string& part, F&& call) {
  try {
    call();
    fail(what + ": no error");
  } catch (const Error& e) {
    if (e.code() != code || std::string(e.what()).find(part) == std::string::npos) {
      fail(what + ": got " + std::string(errc_name(e.code())) + " '" + e.what() + "'");
    }
  }
}

void run_sink(cluster::Node& node, ops::JoinAlgorithm algorithm, int threads, bool bloom, bool prepared) {
  const std::string name = std::string(prepared ? "prepared-" : "sink-") +
                           std::string(ops::join_algorithm_name(algorithm)) + (bloom ? "-bloom" : "");
  ops::JoinSpec spec = make_spec(name, algorithm, threads);
  spec.bloom = bloom;
  if (node.rank() == 0) ops::create_join(node, spec);
  const std::uint64_t probe_per_slice = 30000;
  Data d = make_data(node, threads, 5000, probe_per_slice);
  std::atomic<std::uint64_t> pairs{0}, bad{0};
  ops::JoinRunOptions options;
  options.sink = [&](int thread, std::span<const ops::Match> matches) {
    if (thread < 0 || thread >= threads || matches.empty()) ++bad;
    for (const ops::Match& m : matches) {
      Tuple b, p;
      std::memcpy(&b, m.build, sizeof b);
      std::memcpy(&p, m.probe, sizeof p);
      if (b.key != p.key || b.payload != 1000 + b.key % 5000) ++bad;
    }
    pairs += matches.size();
  };
  ops::JoinResult mine;
  if (prepared) {
    ops::Join join(node, spec, options);
    if (!(join.open_seconds() > 0)) fail("open_seconds is " + std::to_string(join.open_seconds()));
    node.barrier(name + "/start");
    expect_error("fragment count", Errc::invalid_argument, "0 build and 0 probe fragments for " + std::to_string(threads),
                 [&] { join.run({}, {}); });
    mine = join.run(d.build_fragments, d.probe_fragments);
    if (mine.open_seconds != join.open_seconds()) fail("the result's open_seconds is not the open's");
    expect_error("second run", Errc::invalid_argument, "run() called twice",
                 [&] { join.run(d.build_fragments, d.probe_fragments); });
  } else {
    mine = ops::run_join(node, spec, d.build_fragments, d.probe_fragments, options);
  }
  if (pairs != mine.matches) fail("the sink saw " + std::to_string(pairs.load()) + " pairs, the result says " + std::to_string(mine.matches));
  if (bad != 0) fail(std::to_string(bad.load()) + " bad pairs or sink calls");
  const ops::JoinResult all = ops::gather_join_results(node, spec, mine);
  const std::uint64_t probes = probe_per_slice * node.size() * threads;
  if (all.matches != probes || all.probe_tuples != probes ||
      (algorithm != ops::JoinAlgorithm::fragment_replicate && all.shipped_probe_tuples != probes)) {
    fail("expected " + std::to_string(probes) + " matches, got " + std::to_string(all.matches) + " of " +
         std::to_string(all.probe_tuples) + " probes");
  }
  if (node.rank() == 0 && failures == 0) {
    std::printf("join sink %s: %llu pairs, each probe tuple with its one partner\n", name.c_str(),
                static_cast<unsigned long long>(all.matches));
  }
}

// Rank 2 dies `after` into its run_join (or run_aggregation) call.
void kill_rank_2_after(const cluster::Node& node, std::chrono::milliseconds after) {
  if (node.rank() != 2) return;
  std::thread([after] {
    std::this_thread::sleep_for(after);
    ::raise(SIGKILL);
  }).detach();
}

// The end of a kill scenario on a surviving rank: `call` must throw peer_failed.
template <class F>
void expect_peer_failed(const cluster::Node& node, const char* what, F&& call) {
  try {
    call();
    fail("rank " + std::to_string(node.rank()) + ": the " + what + " ended although rank 2 died");
  } catch (const Error& e) {
    std::printf("rank %d: %s: %s\n", node.rank(), std::string(errc_name(e.code())).c_str(), e.what());
    std::fflush(stdout);
    if (e.code() != Errc::peer_failed) fail("expected peer_failed, got " + std::string(e.what()));
  }
  std::_Exit(failures == 0 ? 3 : 1);  // the cluster lost a rank: no finish()
}

// grace-kill, rrj-kill: rank 2 dies 300 ms into partitioning a large input.
void run_partitioning_kill(cluster::Node& node, ops::JoinAlgorithm algorithm) {
  const std::string name = std::string(ops::join_algorithm_name(algorithm)) + "-kill";
  const ops::JoinSpec spec = make_spec(name, algorithm, 1);
  if (node.rank() == 0) ops::create_join(node, spec);
  // Rank 2 has far more to push than the others, so it is still pushing when it dies.
  Data d = make_data(node, 1, node.rank() == 2 ? 20'000'000 : 200'000, 100'000);
  node.barrier(name + "/start");
  kill_rank_2_after(node, std::chrono::milliseconds(300));
  expect_peer_failed(node, "join", [&] { ops::run_join(node, spec, d.build_fragments, d.probe_fragments); });
}

void run_prepared_kill(cluster::Node& node, ops::JoinAlgorithm algorithm) {
  const ops::JoinSpec spec =
      make_spec("prepared-kill-" + std::string(ops::join_algorithm_name(algorithm)), algorithm, 1);
  if (node.rank() == 0) ops::create_join(node, spec);
  // Small enough that what a survivor pushes towards rank 2 fits in its rings: the survivors
  // learn of the death from the join's flows (the cluster's liveness watch), not from UCX's
  // keepalive on a full ring, whose timing depends on the machine's load.
  Data d = make_data(node, 1, 2'000, 4'000);
  ops::Join join(node, spec);
  node.barrier(spec.name + "/start");
  if (node.rank() == 2) ::raise(SIGKILL);  // open, connected, never run
  expect_peer_failed(node, "join", [&] { join.run(d.build_fragments, d.probe_fragments); });
}

void run_kill(cluster::Node& node) {
  const ops::JoinSpec spec = make_spec("kill", ops::JoinAlgorithm::radix, 1);
  if (node.rank() == 0) ops::create_join(node, spec);
  Data d = make_data(node, 1, 20000, 3'000'000);
  ops::JoinRunOptions options;
  // Rank 2 dies at its 20th probe batch: mid-probe, once every connection is up. (A death while
  // another rank's worker is still in UCX's connection handshake with it can make UCX 1.13 abort
  // that rank when it destroys the worker: the assertion of ucp_request_send_state_ff that
  // openucx/ucx#8175 removed; see ../shared/UCX-NOTES.md.)
  std::atomic<int> batches{0};
  options.sink = [&](int, std::span<const ops::Match>) {
    if (node.rank() == 2 && ++batches == 20) ::raise(SIGKILL);
  };
  expect_peer_failed(node, "join", [&] { ops::run_join(node, spec, d.build_fragments, d.probe_fragments, options); });
}

void run_errors(cluster::Node& node) {
  ops::JoinSpec spec = make_spec("errors", ops::JoinAlgorithm::radix, 1);
  spec.probe.schema = flow::Schema({{"key", flow::Type::int32, 1}, {"payload", flow::Type::uint64, 1}});
  expect_error("key types", Errc::invalid_argument, "key columns differ: build 'key' is uint64, probe 'key' is int32",
               [&] { spec.validate(node.size()); });
  spec = make_spec("errors", ops::JoinAlgorithm::radix, 1);
  spec.probe.key = "nope";
  expect_error("unknown key", Errc::invalid_argument, "probe key 'nope' is not a column", [&] { spec.validate(node.size()); });
  spec = make_spec("errors", ops::JoinAlgorithm::radix, 1);
  spec.bloom = true;
  expect_error("bloom", Errc::invalid_argument, "the Bloom filter needs the grace algorithm",
               [&] { spec.validate(node.size()); });
  spec.algorithm = ops::JoinAlgorithm::grace;
  spec.bloom_bits_per_key = 0.5;
  expect_error("bloom bits", Errc::invalid_argument, "bloom_bits_per_key must be in [1, 64]",
               [&] { spec.validate(node.size()); });
  spec.bloom_bits_per_key = 16;
  spec.grace_partitions = -1;
  expect_error("partitions", Errc::invalid_argument, "grace_partitions must be in [0, 1048576] (got -1)",
               [&] { spec.validate(node.size()); });
  spec = make_spec("errors.x", ops::JoinAlgorithm::radix, 1);
  expect_error("name", Errc::invalid_argument, "no '/' or '.'", [&] { spec.validate(node.size()); });
  spec = make_spec("errors", ops::JoinAlgorithm::radix, 2);
  Data d = make_data(node, 1, 10, 10);
  expect_error("fragments", Errc::invalid_argument, "join 'errors': 1 build and 1 probe fragments for 2 threads",
               [&] { ops::run_join(node, spec, d.build_fragments, d.probe_fragments); });
  spec.threads = 1;
  spec.ranks = 2;
  if (node.rank() >= 2) {
    expect_error("rank", Errc::invalid_argument, "does not take part",
                 [&] { ops::run_join(node, spec, d.build_fragments, d.probe_fragments); });
  }
  spec.ranks = 0;
  spec.name = "never-created";
  ops::JoinRunOptions quick;
  quick.open_timeout = std::chrono::milliseconds(300);
  expect_error("not created", Errc::not_found, "never-created.build' does not exist", [&] {
    ops::run_join(node, spec, d.build_fragments, d.probe_fragments, quick);
  });
  expect_error("algorithm", Errc::invalid_argument, "expected radix, fragment-replicate, grace or rrj",
               [] { ops::parse_join_algorithm("nested-loop"); });
  if (node.rank() == 0 && failures == 0) std::printf("join errors: all clear\n");
}

ops::AggregationSpec make_agg_spec(const std::string& name, ops::AggregateAlgorithm algorithm, int threads) {
  ops::AggregationSpec spec;
  spec.name = name;
  spec.algorithm = algorithm;
  spec.schema = kSchema;
  spec.key = "key";
  spec.aggregates = flow::parse_aggregates("sum(payload),count(*)");
  spec.threads = threads;
  spec.cache_groups = 1024;
  return spec;
}

void run_agg_kill(cluster::Node& node, ops::AggregateAlgorithm algorithm) {
  const ops::AggregationSpec spec = make_agg_spec("agg-kill", algorithm, 1);
  if (node.rank() == 0) ops::create_aggregation(node, spec);
  // Rank 2 has far more to do than the others, so it is still pushing when it dies.
  const std::size_t count = node.rank() == 2 ? 40'000'000 : 200'000;
  std::vector<Tuple> input(count);
  for (std::size_t i = 0; i < count; ++i) input[i] = {i % 100'000, i};
  const ops::Fragment fragment{input.data(), input.size()};
  kill_rank_2_after(node, std::chrono::milliseconds(200));
  expect_peer_failed(node, "aggregation", [&] {
    const ops::AggregationResult mine = ops::run_aggregation(node, spec, {&fragment, 1});
    ops::gather_aggregation_results(node, spec, mine);
  });
}

// Every thread of every rank aggregates {i % 1000, i} for i < 10000: 1000 groups, each with
// count 10 x slices and sum slices x (10 key + 45000).
void run_agg_prepared(cluster::Node& node, ops::AggregateAlgorithm algorithm) {
  constexpr int kThreads = 2;
  const std::string name = "agg-prepared-" + std::string(ops::aggregate_algorithm_name(algorithm));
  const ops::AggregationSpec spec = make_agg_spec(name, algorithm, kThreads);
  if (node.rank() == 0) ops::create_aggregation(node, spec);
  std::vector<Tuple> input(10'000);
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = {i % 1000, i};
  const std::vector<ops::Fragment> fragments(kThreads, ops::Fragment{input.data(), input.size()});
  ops::Aggregation aggregation(node, spec);
  if (!(aggregation.open_seconds() > 0)) fail("open_seconds is " + std::to_string(aggregation.open_seconds()));
  node.barrier(name + "/start");
  expect_error("fragment count", Errc::invalid_argument, "1 fragments for 2 threads",
               [&] { aggregation.run({fragments.data(), 1}); });
  const ops::AggregationResult mine = aggregation.run(fragments);
  if (mine.open_seconds != aggregation.open_seconds()) fail("the result's open_seconds is not the open's");
  expect_error("second run", Errc::invalid_argument, "run() called twice", [&] { aggregation.run(fragments); });
  const ops::AggregationResult all = ops::gather_aggregation_results(node, spec, mine);
  const std::uint64_t slices = static_cast<std::uint64_t>(node.size()) * kThreads;
  std::uint64_t checksum = 0;
  for (std::uint64_t key = 0; key < 1000; ++key) {
    const std::uint64_t row[3] = {key, slices * (10 * key + 45'000), slices * 10};  // key, sum, count
    checksum += kernels::fold_tuple(reinterpret_cast<const std::byte*>(row), sizeof row);
  }
  if (all.groups != 1000 || all.checksum != checksum || all.input_tuples != slices * input.size()) {
    fail(name + ": " + std::to_string(all.groups) + " groups of " + std::to_string(all.input_tuples) +
         " tuples, checksum " + std::to_string(all.checksum) + "; expected 1000 of " +
         std::to_string(slices * input.size()) + ", " + std::to_string(checksum));
  }
  if (node.rank() == 0 && failures == 0) std::printf("%s: 1000 groups, as expected\n", name.c_str());
}

// Every rank opens the aggregation and passes a barrier; rank 2 dies before its run().
void run_agg_prepared_kill(cluster::Node& node, ops::AggregateAlgorithm algorithm) {
  const ops::AggregationSpec spec =
      make_agg_spec("agg-prepared-kill-" + std::string(ops::aggregate_algorithm_name(algorithm)), algorithm, 1);
  if (node.rank() == 0) ops::create_aggregation(node, spec);
  std::vector<Tuple> input(2'000);
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = {i, i};
  const ops::Fragment fragment{input.data(), input.size()};
  ops::Aggregation aggregation(node, spec);
  node.barrier(spec.name + "/start");
  if (node.rank() == 2) ::raise(SIGKILL);  // open, connected, never run
  expect_peer_failed(node, "aggregation", [&] {
    const ops::AggregationResult mine = aggregation.run({&fragment, 1});
    ops::gather_aggregation_results(node, spec, mine);
  });
}

}  // namespace

int main(int argc, char** argv) {
  try {
    cluster::Node node;
    const std::string mode = argc > 1 ? argv[1] : "";
    if ((mode == "sink" || mode == "prepared") && (argc == 4 || (argc == 5 && std::string(argv[4]) == "bloom"))) {
      run_sink(node, ops::parse_join_algorithm(argv[2]), std::stoi(argv[3]), argc == 5, mode == "prepared");
    } else if (mode == "prepared-kill" && argc == 3) {
      run_prepared_kill(node, ops::parse_join_algorithm(argv[2]));
    } else if (mode == "kill") {
      run_kill(node);
    } else if (mode == "grace-kill") {
      run_partitioning_kill(node, ops::JoinAlgorithm::grace);
    } else if (mode == "rrj-kill") {
      run_partitioning_kill(node, ops::JoinAlgorithm::rrj);
    } else if (mode == "errors") {
      run_errors(node);
    } else if (mode == "agg-kill" && argc == 3) {
      run_agg_kill(node, ops::parse_aggregate_algorithm(argv[2]));
    } else if (mode == "agg-prepared" && argc == 3) {
      run_agg_prepared(node, ops::parse_aggregate_algorithm(argv[2]));
    } else if (mode == "agg-prepared-kill" && argc == 3) {
      run_agg_prepared_kill(node, ops::parse_aggregate_algorithm(argv[2]));
    } else {
      std::fprintf(stderr, "usage: ops_node sink|prepared ALGORITHM THREADS [bloom] | prepared-kill ALGORITHM | kill | grace-kill | rrj-kill | errors | agg-kill|agg-prepared|agg-prepared-kill ALGORITHM\n");
      return 2;
    }
    node.finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
