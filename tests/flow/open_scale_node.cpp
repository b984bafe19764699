// Rank program of the flow-open scale test (open_scale_test.cpp), started by launch::run_cluster
// on many ranks: every flow type opened N:N (one source thread and one target on every rank, or
// every rank a member), a few tuples through it, closed; each rank checks what it received and
// that its registry requests per open stay bounded.
//
//   open_scale_node all TUPLES   shuffle (bandwidth and latency), replicate (naive and ordered),
//                                combiner and barrier, one after the other
//
// Exit status 0 means everything held; every failure prints why.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/common/config.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/barrier.hpp"
#include "dfi/flow/combiner.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/shuffle.hpp"
#include "node_checks.hpp"

namespace {

using namespace dfi;
using namespace dfi::flow;
using testing::fail;
using testing::failures;

struct Tuple {
  std::uint64_t key;
  std::uint64_t value;
};

FlowSpec n_to_n(const std::string& name, int ranks) {
  FlowSpec spec;
  spec.name = name;
  for (int r = 0; r < ranks; ++r) {
    spec.sources.push_back({r, 0});
    spec.targets.push_back({r, 0});
  }
  spec.schema = Schema({{"key", Type::uint64}, {"value", Type::uint64}});
  spec.key_column = "key";
  spec.options.segments = 2;  // short rings: N rings per target
  spec.options.segment_bytes = 1024;
  return spec;
}

// The registry requests of `waits` waits and `others` other requests: on etcd a wait the first
// read does not answer costs a watch as well.
std::uint64_t budget(std::uint64_t waits, std::uint64_t others) {
  const bool etcd = config::get_string("registry").rfind("etcd://", 0) == 0;
  return waits * (etcd ? 2 : 1) + others;
}

// A wait is held one second per request (Node::wait_all looks at its own failure detector in
// between): `waits` waits that took `seconds` in all may cost that many more.
std::uint64_t slices(std::uint64_t waits, double seconds) {
  return waits * static_cast<std::uint64_t>(seconds);
}

// Fails unless the registry requests this rank made since `before` are at most `allowed`: a
// bound that does not grow with the cluster (an open once cost requests per target).
void check_requests(cluster::Node& node, const std::string& what, const cluster::RegistryStats& before,
                    std::uint64_t allowed, std::chrono::steady_clock::time_point since) {
  allowed += slices(3, std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count());
  const std::uint64_t requests = node.registry_stats().requests - before.requests;
  if (requests > allowed) {
    fail(what + ": rank " + std::to_string(node.rank()) + " made " + std::to_string(requests) +
         " registry requests to open and close its endpoints on " + std::to_string(node.size()) +
         " ranks (expected at most " + std::to_string(allowed) + ")");
  }
}

// Runs `source` and `target` on two threads of this rank and checks the registry requests the
// rank's opens made (the barrier around them excluded): at most `allowed`.
void run_pair(cluster::Node& node, const std::string& what, std::uint64_t allowed,
              const std::function<void(fabric::Worker&)>& source, const std::function<void()>& target) {
  node.barrier("open-scale/" + what + "/begin");
  const cluster::RegistryStats before = node.registry_stats();
  const auto since = std::chrono::steady_clock::now();
  std::string source_error, target_error;
  std::thread t([&] {
    try {
      target();
    } catch (const std::exception& e) {
      target_error = e.what();
    }
  });
  try {
    fabric::Worker worker(node.fabric(), what + " source");
    source(worker);
  } catch (const std::exception& e) {
    source_error = e.what();
  }
  t.join();
  if (!source_error.empty()) fail(what + ": source: " + source_error);
  if (!target_error.empty()) fail(what + ": target: " + target_error);
  check_requests(node, what, before, allowed, since);
  node.barrier("open-scale/" + what + "/end");
}

void shuffle(cluster::Node& node, Mode mode, std::uint64_t tuples) {
  const std::string name = std::string("shuffle-") + (mode == Mode::bandwidth ? "bw" : "lat");
  FlowSpec spec = n_to_n(name, node.size());
  spec.routing = Routing::explicit_target;
  spec.options.mode = mode;
  if (node.rank() == 0) create_flow(node, spec);
  const std::size_t targets = spec.targets.size();
  // The spec (one wait for both endpoints), the target's rank's record, the source's one wait
  // for every target rank's.
  run_pair(
      node, name, budget(2, 1),
      [&](fabric::Worker& worker) {
        ShuffleSource source(node, worker, name, 0);
        for (std::uint64_t i = 0; i < tuples; ++i) {
          for (std::size_t t = 0; t < targets; ++t) {
            const Tuple tuple{(std::uint64_t(node.rank()) << 32) | i, t};
            source.push_to(t, &tuple, sizeof tuple).throw_if_error();
          }
        }
        source.close().throw_if_error();
      },
      [&] {
        ShuffleTarget target(node, name, 0);
        TupleBatch batch;
        std::vector<std::uint64_t> next(targets, 0);  // per source rank: the next index (order)
        std::uint64_t got = 0;
        for (;;) {
          target.consume(batch).throw_if_error();
          if (batch.empty()) break;
          for (const Tuple& tuple : batch.as<Tuple>()) {
            const std::uint64_t from = tuple.key >> 32, i = tuple.key & 0xffffffffu;
            if (tuple.value != std::uint64_t(node.rank()) || from >= targets || i != next[from]) {
              fail(name + ": rank " + std::to_string(node.rank()) + " got tuple " + std::to_string(i) + " of rank " +
                   std::to_string(from) + " out of place");
            }
            if (from < targets) next[from] = i + 1;
            ++got;
          }
        }
        if (got != tuples * targets) {
          fail(name + ": rank " + std::to_string(node.rank()) + " received " + std::to_string(got) + " tuples of " +
               std::to_string(tuples * targets));
        }
      });
}

// A shuffle of `threads` sources and `threads` targets on every rank, all opening at once: the
// rank's openers share one fetch of the spec and of the target ranks' records, and its targets
// publish one record, so the registry requests of the rank's open do not grow with the threads.
void shuffle_threads(cluster::Node& node, int threads, std::uint64_t tuples) {
  const std::string name = "shuffle-threads";
  FlowSpec spec = n_to_n(name, 0);
  for (int r = 0; r < node.size(); ++r) {
    for (int t = 0; t < threads; ++t) {
      spec.sources.push_back({r, t});
      spec.targets.push_back({r, t});
    }
  }
  spec.routing = Routing::explicit_target;
  if (node.rank() == 0) create_flow(node, spec);
  const std::size_t targets = spec.targets.size(), sources = spec.sources.size();
  node.barrier("open-scale/" + name + "/begin");
  const cluster::RegistryStats before = node.registry_stats();
  const auto since = std::chrono::steady_clock::now();
  std::vector<std::string> errors(2 * threads);
  std::vector<std::thread> group;
  for (int t = 0; t < threads; ++t) {
    group.emplace_back([&, t] {
      try {
        fabric::Worker worker(node.fabric(), name + " source");
        ShuffleSource source(node, worker, name, t);
        const std::uint64_t me = std::uint64_t(node.rank()) * threads + t;
        for (std::uint64_t i = 0; i < tuples; ++i) {
          for (std::size_t target = 0; target < targets; ++target) {
            const Tuple tuple{(me << 32) | i, target};
            source.push_to(target, &tuple, sizeof tuple).throw_if_error();
          }
        }
        source.close().throw_if_error();
      } catch (const std::exception& e) {
        errors[t] = std::string("source ") + std::to_string(t) + ": " + e.what();
      }
    });
    group.emplace_back([&, t] {
      try {
        ShuffleTarget target(node, name, t);
        const std::uint64_t me = std::uint64_t(node.rank()) * threads + t;
        std::vector<std::uint64_t> next(sources, 0);  // per source: the next index (order)
        std::uint64_t got = 0;
        TupleBatch batch;
        for (;;) {
          target.consume(batch).throw_if_error();
          if (batch.empty()) break;
          for (const Tuple& tuple : batch.as<Tuple>()) {
            const std::uint64_t from = tuple.key >> 32, i = tuple.key & 0xffffffffu;
            if (tuple.value != me || from >= sources || i != next[from]) {
              throw std::runtime_error("tuple " + std::to_string(i) + " of source " + std::to_string(from) +
                                       " out of place");
            }
            next[from] = i + 1;
            ++got;
          }
        }
        if (got != tuples * sources) {
          throw std::runtime_error("received " + std::to_string(got) + " tuples of " + std::to_string(tuples * sources));
        }
      } catch (const std::exception& e) {
        errors[threads + t] = std::string("target ") + std::to_string(t) + ": " + e.what();
      }
    });
  }
  for (std::thread& thread : group) thread.join();
  for (const std::string& error : errors) {
    if (!error.empty()) fail(name + ": rank " + std::to_string(node.rank()) + ": " + error);
  }
  // The spec (one wait for all openers), the targets' ranks' records (one), this rank's record.
  check_requests(node, name + " with " + std::to_string(threads) + " threads", before, budget(2, 1), since);
  node.barrier("open-scale/" + name + "/end");
}

void replicate(cluster::Node& node, bool ordered, std::uint64_t tuples) {
  const std::string name = std::string("replicate-") + (ordered ? "ordered" : "naive");
  FlowSpec spec = n_to_n(name, node.size());
  spec.type = FlowType::replicate;
  spec.type_options = ReplicateOptions{.ordered = ordered};
  if (node.rank() == 0) create_flow(node, spec);
  // As a shuffle; ordered: the source attaches to the sequencer (its record, and rank 0's
  // address the first time), and so does every target but target 0 when it departs.
  run_pair(
      node, name, ordered ? budget(6, 2) : budget(3, 1),
      [&](fabric::Worker& worker) {
        ReplicateSource source(node, worker, name, 0);
        for (std::uint64_t i = 0; i < tuples; ++i) {
          source.push(Tuple{(std::uint64_t(node.rank()) << 32) | i, i}).throw_if_error();
        }
        source.close().throw_if_error();
      },
      [&] {
        ReplicateTarget target(node, name, 0);
        ReplicateBatch batch;
        std::uint64_t got = 0;
        for (;;) {
          target.consume(batch).throw_if_error();
          if (batch.end) break;
          if (batch.gap()) fail(name + ": a gap of " + std::to_string(batch.gap_count));
          got += batch.count;
        }
        const std::uint64_t expected = tuples * std::uint64_t(node.size());
        if (got != expected) {
          fail(name + ": rank " + std::to_string(node.rank()) + " received " + std::to_string(got) + " tuples of " +
               std::to_string(expected));
        }
      });
}

void combiner(cluster::Node& node, std::uint64_t tuples) {
  const std::string name = "combiner";
  FlowSpec spec = n_to_n(name, node.size());
  spec.targets = {{0, 0}};  // a combiner aggregates into one target
  spec.type = FlowType::combiner;
  spec.type_options.get<CombinerOptions>().aggregates = parse_aggregates("sum(value),count(*)");
  if (node.rank() == 0) create_flow(node, spec);
  node.barrier("open-scale/combiner/created");
  const cluster::RegistryStats before = node.registry_stats();
  const auto since = std::chrono::steady_clock::now();
  std::string error;
  std::thread target;
  if (node.rank() == 0) {
    target = std::thread([&] {
      try {
        CombinerTarget in(node, name);
        TupleBatch batch;
        std::uint64_t rows = 0;
        for (;;) {
          in.consume(batch).throw_if_error();
          if (batch.empty()) break;
          rows += batch.count;
        }
        if (rows != tuples) fail("combiner: " + std::to_string(rows) + " groups, expected " + std::to_string(tuples));
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
  }
  try {
    fabric::Worker worker(node.fabric(), "combiner source");
    CombinerSource out(node, worker, name, 0);
    for (std::uint64_t i = 0; i < tuples; ++i) out.push(Tuple{i, 1}).throw_if_error();
    out.close().throw_if_error();
  } catch (const std::exception& e) {
    fail(std::string("combiner: source: ") + e.what());
  }
  if (target.joinable()) target.join();
  if (!error.empty()) fail("combiner: target: " + error);
  check_requests(node, "combiner", before, budget(3, 1), since);
  node.barrier("open-scale/combiner/end");
}

void barrier(cluster::Node& node) {
  std::vector<SourceRef> members;
  for (int r = 0; r < node.size(); ++r) members.push_back({r, 0});
  if (node.rank() == 0) create_barrier(node, "open-scale-barrier", members);
  node.barrier("open-scale/barrier/created");
  const cluster::RegistryStats before = node.registry_stats();
  const auto since = std::chrono::steady_clock::now();
  {
    fabric::Worker worker(node.fabric(), "barrier member");
    Barrier b(node, worker, "open-scale-barrier", 0);
    for (int round = 0; round < 3; ++round) {
      if (Status s = b.wait(); !s) fail("barrier: round " + std::to_string(round) + ": " + s.message());
    }
  }
  // Its record, the counter's record and rank 0's address (the first time).
  check_requests(node, "barrier", before, budget(3, 1), since);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc >= 2 ? argv[1] : "";
  if (!((mode == "all" && argc == 3) || (mode == "threads" && argc == 4))) {
    std::fprintf(stderr, "usage: open_scale_node all TUPLES | threads TUPLES THREADS\n");
    return 2;
  }
  const std::uint64_t tuples = std::stoull(argv[2]);
  try {
    cluster::Node node;
    if (mode == "threads") {
      shuffle_threads(node, std::stoi(argv[3]), tuples);
      node.finish();
      return failures.load() == 0 ? 0 : 1;
    }
    shuffle(node, Mode::bandwidth, tuples);
    shuffle(node, Mode::latency, tuples);
    replicate(node, false, tuples);
    replicate(node, true, tuples);
    combiner(node, tuples);
    barrier(node);
    node.finish();
  } catch (const std::exception& e) {
    fail(std::string("open_scale_node: ") + e.what());
  }
  return failures.load() == 0 ? 0 : 1;
}
