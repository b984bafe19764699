// Rank program for batch_kill_test: a peer killed while a push_batch is under way. Three ranks.
//
//   batch_kill_node kill-source        rank 1, a source, is killed inside a push_batch (the
//                                      target on rank 0 consumes slowly, so the call waits for
//                                      room); ranks 1 and 2 push by key hash into two targets on
//                                      rank 0. The survivor's consume fails with peer_failed
//                                      naming rank 1; what arrived before is, per source and
//                                      target, the source's keys in order, each once, each at the
//                                      target its key routes to.
//   batch_kill_node kill-target        rank 0's source pushes by key hash into targets on ranks 1
//                                      and 2 in large batches; rank 1 dies: push_batch fails with
//                                      peer_failed naming rank 1; rank 2 received its keys in
//                                      order, each once.
//   batch_kill_node kill-target-drop   as kill-target with drop_for_dead_targets: every
//                                      push_batch succeeds, rank 2 receives exactly the keys that
//                                      route to it, each once and in order, and the source counts
//                                      the tuples it dropped for rank 1.
//
// Tuples: {key, source rank}; each source pushes keys 0, 1, 2, ... Exit status 0 means the
// scenario held; every failure prints why.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/kernels/hash.hpp"
#include "node_checks.hpp"

namespace {

using namespace dfi;
using namespace dfi::flow;

using testing::fail;
using testing::failures;

struct Pair {
  std::uint64_t key, value;
};

constexpr std::size_t kBatchTuples = 1 << 16;  // 1 MiB per push_batch

FlowSpec pair_spec(const std::string& name, std::vector<SourceRef> sources, std::vector<TargetRef> targets) {
  FlowSpec spec;
  spec.name = name;
  spec.sources = std::move(sources);
  spec.targets = std::move(targets);
  spec.schema = Schema({{"key", Type::uint64}, {"value", Type::uint64}});
  spec.key_column = "key";
  spec.options.segments = 8;
  spec.options.segment_bytes = 16 + 16 * 256;  // 4 KiB of tuples: a batch fills 256 segments
  return spec;
}

// Keys first, first + 1, ... of source rank `rank` into `batch`.
void fill(std::vector<Pair>& batch, std::uint64_t first, int rank) {
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i] = {first + i, static_cast<std::uint64_t>(rank)};
}

// What one target saw, per source rank: the last key (+ 1) and the count, checking on the way
// that every key comes after the previous one of its source and routes to this target.
struct Seen {
  std::vector<std::uint64_t> next;   // per source rank: smallest key allowed next
  std::vector<std::uint64_t> count;  // per source rank
  std::size_t target = 0;
  std::size_t targets = 1;
  bool bad = false;

  Seen(std::size_t ranks, std::size_t t, std::size_t n) : next(ranks, 0), count(ranks, 0), target(t), targets(n) {}

  void add(const TupleBatch& batch) {
    for (const Pair& p : batch.as<Pair>()) {
      if (p.value >= next.size()) {
        if (!bad) fail("a tuple from no source: value " + std::to_string(p.value));
        bad = true;
        continue;
      }
      if (p.key < next[p.value]) {
        if (!bad) {
          fail("target " + std::to_string(target) + ": key " + std::to_string(p.key) + " of rank " +
               std::to_string(p.value) + " after key " + std::to_string(next[p.value] - 1) +
               " (duplicated or out of order)");
        }
        bad = true;
      }
      if (kernels::route(p.key, targets) != target) {
        if (!bad) fail("key " + std::to_string(p.key) + " at target " + std::to_string(target) + ", not its own");
        bad = true;
      }
      next[p.value] = p.key + 1;
      ++count[p.value];
    }
  }
};

// The number of keys 0 .. keys-1 that route to `target` of `targets`.
std::uint64_t routed(std::uint64_t keys, std::size_t target, std::size_t targets) {
  std::uint64_t n = 0;
  for (std::uint64_t k = 0; k < keys; ++k) n += kernels::route(k, targets) == target;
  return n;
}

// ---------------------------------------------------------------------------------------------

int kill_source(cluster::Node& node) {
  FlowSpec spec = pair_spec("batch-victim-source", {{1, 0}, {2, 0}}, {{0, 0}, {0, 1}});
  if (node.rank() == 0) create_flow(node, spec);
  if (node.rank() == 1) {
    fabric::Worker worker(node.fabric(), "pusher");
    ShuffleSource source(node, worker, spec.name, 0);
    std::vector<Pair> batch(kBatchTuples);
    std::atomic<int> calls{0};  // push_batch calls entered
    // The killer: once the third call is under way (the slow target keeps each call waiting for
    // room for about a second), the process dies inside it.
    std::thread killer([&] {
      while (calls.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ::raise(SIGKILL);
    });
    killer.detach();
    for (std::uint64_t first = 0;; first += kBatchTuples) {
      fill(batch, first, 1);
      calls.fetch_add(1);
      if (Status s = source.push_batch(batch.data(), batch.size() * sizeof(Pair)); !s) {
        fail("the victim's push_batch failed before its death: " + s.message());
        return 1;
      }
    }
  }
  if (node.rank() == 2) {
    fabric::Worker worker(node.fabric(), "pusher");
    ShuffleSource source(node, worker, spec.name, 0);
    std::vector<Pair> batch(kBatchTuples);
    for (std::uint64_t first = 0; first < 4 * kBatchTuples; first += kBatchTuples) {
      fill(batch, first, 2);
      if (Status s = source.push_batch(batch.data(), batch.size() * sizeof(Pair)); !s) {
        // The target may see the death and stop before this source is done; the flow then fails
        // here too. Only a failure naming another rank is wrong.
        if (s.message().find("rank 1") == std::string::npos && s.message().find("rank 0") == std::string::npos) {
          fail("the healthy source's push_batch: " + s.message());
        }
        return failures == 0 ? 0 : 1;
      }
    }
    (void)source.close();
    return failures == 0 ? 0 : 1;
  }
  // Rank 0: two targets, each consumed slowly on a thread of its own.
  std::vector<std::thread> threads;
  std::vector<Status> ends(2);
  std::vector<Seen> seen;
  for (std::size_t t = 0; t < 2; ++t) seen.emplace_back(3, t, 2);
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      ShuffleTarget target(node, spec.name, t);
      TupleBatch batch;
      Status s;
      while ((s = target.consume(batch, std::chrono::seconds(20))) && !batch.empty()) {
        seen[static_cast<std::size_t>(t)].add(batch);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      ends[static_cast<std::size_t>(t)] = s;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (std::size_t t = 0; t < 2; ++t) {
    const Status& s = ends[t];
    std::printf("target %zu saw: %s: %s\n", t, std::string(errc_name(s.code())).c_str(), s.message().c_str());
    std::printf("target %zu received %llu tuples of rank 1, %llu of rank 2\n", t,
                static_cast<unsigned long long>(seen[t].count[1]), static_cast<unsigned long long>(seen[t].count[2]));
    if (s.code() != Errc::peer_failed || s.message().find("rank 1") == std::string::npos ||
        s.message().find(spec.name) == std::string::npos) {
      fail("target " + std::to_string(t) + " must fail with peer_failed naming the flow and rank 1");
    }
  }
  // The victim died in its third call: its first two batches went whole into segments, some of
  // which the targets may still have read before they saw the death; at least its first segment
  // per target arrived (the calls published full segments while they waited for room).
  if (seen[0].count[1] + seen[1].count[1] == 0) fail("no tuple of the victim arrived before its death");
  if (!seen[0].bad && !seen[1].bad) std::printf("kill-source: nothing duplicated, every source in order\n");
  return failures == 0 ? 0 : 1;
}

// Rank 0 pushes keys 0 .. kTuples-1 by key hash into targets on ranks 1 and 2; rank 1 dies after
// a few segments. `drop`: the source drops the dead target's tuples and goes on.
int kill_target(cluster::Node& node, bool drop) {
  constexpr std::uint64_t kTuples = 64 * kBatchTuples;
  FlowSpec spec = pair_spec(drop ? "batch-victim-target-drop" : "batch-victim-target", {{0, 0}}, {{1, 0}, {2, 0}});
  if (node.rank() == 0) create_flow(node, spec);
  if (node.rank() == 1) {
    ShuffleTarget target(node, spec.name, 0);
    TupleBatch batch;
    for (int i = 0; i < 20; ++i) (void)target.consume(batch);
    ::raise(SIGKILL);
  }
  if (node.rank() == 2) {
    ShuffleTarget target(node, spec.name, 0);  // target 1 of the flow: (rank 2, id 0)
    Seen seen(1, 1, 2);
    TupleBatch batch;
    Status s;
    while ((s = target.consume(batch, std::chrono::seconds(30))) && !batch.empty()) seen.add(batch);
    const std::string end = s ? std::string("end of stream") : std::string(errc_name(s.code())) + ": " + s.message();
    std::printf("live target: %llu tuples, then %s\n", static_cast<unsigned long long>(seen.count[0]), end.c_str());
    if (drop) {
      // Every key that routes here, once and in order: all arrived, none twice.
      const std::uint64_t expected = routed(kTuples, 1, 2);
      if (!s) fail("the live target's stream must end normally: " + s.message());
      if (seen.count[0] != expected) {
        fail("the live target received " + std::to_string(seen.count[0]) + " tuples, not " + std::to_string(expected));
      }
    }
    if (!seen.bad) std::printf("live target: nothing duplicated, in order\n");
    return failures == 0 ? 0 : 1;
  }
  fabric::Worker worker(node.fabric(), "pusher");
  ShuffleSource source(node, worker, spec.name, 0);
  if (drop) source.drop_for_dead_targets();
  std::vector<Pair> batch(kBatchTuples);
  Status s;
  std::uint64_t first = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (; first < kTuples && std::chrono::steady_clock::now() < give_up; first += kBatchTuples) {
    fill(batch, first, 0);
    if (s = source.push_batch(batch.data(), batch.size() * sizeof(Pair)); !s) break;
  }
  if (drop) {
    if (!s) fail("push_batch with drop_for_dead_targets failed: " + s.message());
    if (first < kTuples) fail("the source gave up before pushing every batch");
    if (Status c = source.close(); !c) fail("close: " + c.message());
    std::printf("source: every batch pushed, %llu tuples dropped for %zu dead target\n",
                static_cast<unsigned long long>(source.dropped()), source.dead_targets());
    if (source.dead_targets() != 1 || source.dropped() == 0) fail("the source must have dropped tuples for rank 1");
    if (source.dropped() > routed(kTuples, 0, 2)) fail("more tuples dropped than routed to the dead target");
    return failures == 0 ? 0 : 1;
  }
  if (s) return fail("push_batch never failed after the target died"), 1;
  std::printf("source saw: %s: %s\n", std::string(errc_name(s.code())).c_str(), s.message().c_str());
  if (s.code() != Errc::peer_failed) fail("push_batch must fail with peer_failed");
  if (s.message().find("rank 1") == std::string::npos || s.message().find(spec.name) == std::string::npos) {
    fail("the error does not name the flow and rank 1");
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: batch_kill_node kill-source | kill-target | kill-target-drop\n");
    return 2;
  }
  try {
    cluster::Node node;
    const std::string scenario = argv[1];
    if (scenario == "kill-source") return kill_source(node);
    if (scenario == "kill-target") return kill_target(node, false);
    if (scenario == "kill-target-drop") return kill_target(node, true);
    fail("unknown scenario " + scenario);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  return 1;
}
