// Rank program for the allocation test of the flow data paths, started by launch::run_cluster
// with 2 ranks: rank 0 runs the sources, rank 1 the targets of three 1:1 flows of 16 B tuples,
// one after the other: a shuffle, a replicate and a combiner flow; and, beside the shuffle flow,
// a 1:2 key-hash shuffle flow whose source pushes batches (the scatter path of push_batch).
//
//   flow_alloc_node [TUPLES]   TUPLES per counted loop (default 1000000)
//
// Each side warms up first (several laps of the ring, so every slot, staging buffer, credit read
// and UCX memory pool has been used), the two meet at a barrier, then the heap allocations of
// each loop are counted: shuffle source push, push_bulk, push_to, push_batch (1:1: whole runs) and
// push_batch over two targets (the scatter); shuffle target try_consume (the source holds back
// for 20 ms first, so that it also returns retry), consume_into and consume; replicate
// source push and target try_consume and consume; combiner source push (1000 keys, shipped every
// 10000 tuples, so the loop re-fills an emptied table a hundred times). Each loop prints one line
//
//   alloc: <flow> <call>: <n> tuples[, <r> retries], thread new=<a> malloc=<b>, process new=<c>
//          malloc=<d> in <t> ms
//
// where "thread" counts the calling thread (the loop itself: DFI and whatever UCX does inside the
// calls) and "process" every thread (also the progress thread that applies emulated puts over
// TCP, and the liveness watcher). malloc counts include the mallocs behind operator new; in
// sanitizer builds malloc is not counted (see tests/counting_allocator.hpp).
// DFI_ALLOC_TRACE=N prints the call stacks of the first N allocations of each loop's thread
// (with DFI_ALLOC_TRACE_ANY_THREAD set: of any thread during the loop).
// Exit status 0 means the scenario ran; the test judges the numbers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "counting_allocator.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/barrier.hpp"
#include "dfi/flow/combiner.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/shuffle.hpp"

namespace {

using namespace dfi;
using namespace dfi::flow;
using testing::AllocCounts;

struct Tuple {
  std::uint64_t key;
  std::uint64_t value;
};

constexpr std::size_t kBulk = 64;          // tuples per push_bulk call
constexpr std::size_t kBatch = 1000;       // tuples per push_batch call (several segments)
constexpr std::size_t kInto = 700;         // tuples the consume_into buffer holds
constexpr std::uint64_t kWarmUp = 100000;  // tuples per call kind before counting

int trace_count() {
  const char* text = std::getenv("DFI_ALLOC_TRACE");
  return text != nullptr ? std::atoi(text) : 0;
}
bool trace_any_thread() { return std::getenv("DFI_ALLOC_TRACE_ANY_THREAD") != nullptr; }

// One counted loop: snapshot before, subtract after, print.
class Window {
 public:
  explicit Window(int trace) {
    if (trace > 0) testing::trace_next_allocations(trace, trace_any_thread());
    thread_ = testing::thread_allocations();
    process_ = testing::process_allocations();
    start_ = std::chrono::steady_clock::now();
  }
  void report(const char* what, std::uint64_t tuples, long retries = -1) {
    const AllocCounts thread = testing::thread_allocations() - thread_;
    const AllocCounts process = testing::process_allocations() - process_;
    const auto elapsed = std::chrono::steady_clock::now() - start_;
    testing::trace_next_allocations(0);
    std::string extra = retries >= 0 ? ", " + std::to_string(retries) + " retries" : "";
    std::printf(
        "alloc: %s: %llu tuples%s, thread new=%llu malloc=%llu, process new=%llu malloc=%llu in "
        "%lld ms\n",
        what, static_cast<unsigned long long>(tuples), extra.c_str(),
        static_cast<unsigned long long>(thread.news),
        static_cast<unsigned long long>(thread.mallocs),
        static_cast<unsigned long long>(process.news),
        static_cast<unsigned long long>(process.mallocs),
        static_cast<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()));
    std::fflush(stdout);
  }

 private:
  AllocCounts thread_;
  AllocCounts process_;
  std::chrono::steady_clock::time_point start_;
};

[[noreturn]] void die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "FAILED: %s: %s\n", what.c_str(), s.message().c_str());
  std::exit(1);
}

// What each side of the three flows needs: this rank's worker and the barrier both sides meet at
// before counting.
struct Side {
  fabric::Worker& worker;
  Barrier& gate;
  std::uint64_t count;
  int trace;
};

Tuple make(std::uint64_t key) { return Tuple{key, key * 3}; }

// Pushes `n` tuples from key `key` on: one push per tuple, or push_bulk of kBulk at a time.
template <class Source>
void push_tuples(Source& source, std::uint64_t& key, std::uint64_t n, bool bulk) {
  static std::vector<Tuple> chunk(kBulk);
  for (std::uint64_t i = 0; i < n;) {
    if (!bulk) {
      if (Status s = source.push(make(key)); !s) die("push", s);
      ++i, ++key;
      continue;
    }
    const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(kBulk, n - i));
    for (std::size_t j = 0; j < k; ++j) chunk[j] = make(key++);
    if (Status s = source.push_bulk(chunk.data(), k); !s) die("push_bulk", s);
    i += k;
  }
}

// Consumes batches until `until` tuples arrived in all; try_consume when `poll` (counting the
// retries), else consume. Checks every tuple's value.
template <class Target, class Batch>
long consume_tuples(Target& target, Batch& batch, std::uint64_t& received, std::uint64_t until,
                    bool poll) {
  long retries = 0;
  while (received < until) {
    Status s = poll ? target.try_consume(batch) : target.consume(batch);
    if (s.code() == Errc::retry) {
      ++retries;
      continue;
    }
    if (!s) die(poll ? "try_consume" : "consume", s);
    for (const Tuple& t : batch.template as<Tuple>()) {
      if (t.value != t.key * 3) die("a corrupted tuple", Status(Errc::fatal));
    }
    received += batch.count;
  }
  return retries;
}

// Pushes `n` tuples from key `key` on with push_batch, kBatch at a time.
void push_batches(ShuffleSource& source, std::uint64_t& key, std::uint64_t n) {
  static std::vector<Tuple> chunk(kBatch);
  for (std::uint64_t i = 0; i < n;) {
    const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(kBatch, n - i));
    for (std::size_t j = 0; j < k; ++j) chunk[j] = make(key++);
    if (Status s = source.push_batch(chunk.data(), k * sizeof(Tuple)); !s) die("push_batch", s);
    i += k;
  }
}

void shuffle_source(cluster::Node& node, Side& side) {
  ShuffleSource source(node, side.worker, "alloc-shuffle", 0);
  ShuffleSource scatter(node, side.worker, "alloc-scatter", 0);
  std::uint64_t key = 0, scatter_key = 0;
  auto push_to = [&](std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i, ++key) {
      const Tuple t = make(key);
      if (Status s = source.push_to(0, &t, sizeof t); !s) die("push_to", s);
    }
  };
  push_tuples(source, key, kWarmUp, false);
  push_tuples(source, key, kWarmUp, true);
  push_to(kWarmUp);
  push_batches(source, key, kWarmUp);
  push_batches(scatter, scatter_key, kWarmUp);
  if (Status s = source.flush(); !s) die("flush", s);
  if (Status s = side.gate.wait(); !s) die("gate", s);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the target polls meanwhile
  {
    Window window(side.trace);
    push_tuples(source, key, side.count, false);
    window.report("shuffle source push", side.count);
  }
  {
    Window window(side.trace);
    push_tuples(source, key, side.count, true);
    window.report("shuffle source push_bulk", side.count);
  }
  {
    Window window(side.trace);
    push_to(side.count);
    window.report("shuffle source push_to", side.count);
  }
  {
    Window window(side.trace);
    push_batches(source, key, side.count);
    window.report("shuffle source push_batch", side.count);
  }
  {
    Window window(side.trace);
    push_batches(scatter, scatter_key, side.count);
    window.report("shuffle scatter push_batch", side.count);
  }
  if (Status s = source.close(); !s) die("close", s);
  if (Status s = scatter.close(); !s) die("close", s);
}

// Rank 1's drain of the 1:2 flow, on a thread of its own (not counted): both targets, in turn.
void drain_scatter(cluster::Node& node, std::uint64_t expected) {
  ShuffleTarget first(node, "alloc-scatter", 0);
  ShuffleTarget second(node, "alloc-scatter", 1);
  TupleBatch batch;
  std::uint64_t received = 0;
  while (!first.end() || !second.end()) {
    bool idle = true;
    for (ShuffleTarget* target : {&first, &second}) {
      if (target->end()) continue;
      Status s = target->try_consume(batch);
      if (s.code() == Errc::retry) continue;
      if (!s) die("scatter try_consume", s);
      for (const Tuple& t : batch.as<Tuple>()) {
        if (t.value != t.key * 3) die("a corrupted tuple", Status(Errc::fatal));
      }
      received += batch.count;
      idle = idle && batch.empty();
    }
    if (idle) std::this_thread::yield();
  }
  if (received != expected) die("the scatter flow delivered " + std::to_string(received) + " tuples", Status(Errc::fatal));
}

// A target's side of a flow: consumes the `warm` tuples of the warm-up, meets the source, then
// counts a try_consume loop over side.count tuples and a consume loop up to `total` tuples.
// Returns how many tuples arrived.
// Where the target has consume_into (shuffle), a consume_into loop over side.count tuples runs
// between the two.
template <class Target, class Batch>
std::uint64_t target_loops(Target& target, Batch& batch, Side& side, const std::string& flow,
                           std::uint64_t warm, std::uint64_t total) {
  const std::string polling = flow + " target try_consume";
  const std::string blocking = flow + " target consume";
  std::uint64_t received = 0;
  (void)consume_tuples(target, batch, received, warm, false);
  if (Status s = side.gate.wait(); !s) die("gate", s);
  std::uint64_t start = received;
  {
    Window window(side.trace);
    const long retries = consume_tuples(target, batch, received, start + side.count, true);
    window.report(polling.c_str(), received - start, retries);
  }
  if constexpr (requires(std::size_t n) { target.consume_into(nullptr, 0, n); }) {
    std::vector<Tuple> buffer(kInto);
    const std::string copying = flow + " target consume_into";
    start = received;
    Window window(side.trace);
    while (received < start + side.count) {
      std::size_t bytes = 0;
      if (Status s = target.consume_into(buffer.data(), buffer.size() * sizeof(Tuple), bytes); !s)
        die("consume_into", s);
      if (bytes == 0) die("consume_into: the end of the stream", Status(Errc::fatal));
      for (std::size_t i = 0; i < bytes / sizeof(Tuple); ++i) {
        if (buffer[i].value != buffer[i].key * 3) die("a corrupted tuple", Status(Errc::fatal));
      }
      received += bytes / sizeof(Tuple);
    }
    window.report(copying.c_str(), received - start);
  }
  start = received;
  {
    Window window(side.trace);
    (void)consume_tuples(target, batch, received, total, false);
    window.report(blocking.c_str(), received - start);
  }
  return received;
}

void shuffle_target(cluster::Node& node, Side& side) {
  ShuffleTarget target(node, "alloc-shuffle", 0);
  std::thread scatter([&node, &side] { drain_scatter(node, kWarmUp + side.count); });
  TupleBatch batch;
  const std::uint64_t received =
      target_loops(target, batch, side, "shuffle", 4 * kWarmUp, 4 * (kWarmUp + side.count));
  scatter.join();
  if (Status s = target.consume(batch); !s || !batch.empty() || !target.end()) {
    die("the end of the stream after " + std::to_string(received) + " tuples", s);
  }
}

void replicate_source(cluster::Node& node, Side& side) {
  ReplicateSource source(node, side.worker, "alloc-replicate", 0);
  std::uint64_t key = 0;
  push_tuples(source, key, kWarmUp, false);
  if (Status s = source.flush(); !s) die("flush", s);
  if (Status s = side.gate.wait(); !s) die("gate", s);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Window window(side.trace);
  push_tuples(source, key, 2 * side.count, false);
  window.report("replicate source push", 2 * side.count);
  if (Status s = source.close(); !s) die("close", s);
}

void replicate_target(cluster::Node& node, Side& side) {
  ReplicateTargetOptions options;
  options.worker = &side.worker;
  ReplicateTarget target(node, "alloc-replicate", 0, options);
  ReplicateBatch batch;
  (void)target_loops(target, batch, side, "replicate", kWarmUp, kWarmUp + 2 * side.count);
  if (Status s = target.consume(batch); !s || !batch.end) die("the end of the stream", s);
}

void combiner_source(cluster::Node& node, Side& side) {
  CombinerSourceOptions options;
  options.ship_tuples = 10000;
  CombinerSource source(node, side.worker, "alloc-combiner", 0, options);
  std::uint64_t key = 0;
  auto push = [&](std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i, ++key) {
      if (Status s = source.push(make(key % 1000)); !s) die("push", s);
    }
  };
  if (Status s = side.gate.wait(); !s) die("gate", s);  // the target consumes from here on
  push(kWarmUp);
  Window window(side.trace);
  push(side.count);
  window.report("combiner source push", side.count);
  if (Status s = source.close(); !s) die("close", s);
}

void combiner_target(cluster::Node& node, Side& side) {
  CombinerTarget target(node, "alloc-combiner", 0);
  if (Status s = side.gate.wait(); !s) die("gate", s);
  TupleBatch batch;
  std::uint64_t count = 0;
  do {
    if (Status s = target.consume(batch); !s) die("consume", s);
    for (std::size_t i = 0; i < batch.count; ++i) {
      std::uint64_t n = 0;  // result rows: key, sum_value, count
      std::memcpy(&n, batch.tuple(i) + 16, sizeof n);
      count += n;
    }
  } while (!batch.empty());
  if (count != kWarmUp + side.count) die("the combiner lost tuples", Status(Errc::fatal));
}

void create_flows(cluster::Node& node) {
  FlowSpec spec;
  spec.sources = {{0, 0}};
  spec.targets = {{1, 0}};
  spec.schema = Schema({{"key", Type::uint64}, {"value", Type::uint64}});
  spec.key_column = "key";
  spec.name = "alloc-shuffle";
  create_flow(node, spec);
  FlowSpec scatter = spec;
  scatter.name = "alloc-scatter";
  scatter.targets = {{1, 0}, {1, 1}};
  create_flow(node, scatter);
  spec.name = "alloc-replicate";
  spec.type = FlowType::replicate;
  create_flow(node, spec);
  spec.name = "alloc-combiner";
  spec.type = FlowType::combiner;
  spec.type_options = CombinerOptions{.aggregates = parse_aggregates("sum(value),count(*)")};
  create_flow(node, spec);
  create_barrier(node, "alloc-gate", {{0, 0}, {1, 0}});
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t count = argc > 1 ? std::stoull(argv[1]) : 1000000;
  try {
    cluster::Node node;
    if (node.size() != 2) {
      std::fprintf(stderr, "FAILED: flow_alloc_node runs on 2 ranks, not %d\n", node.size());
      return 2;
    }
    if (std::string problem = testing::counting_problem(); !problem.empty()) {
      std::fprintf(stderr, "FAILED: cannot count allocations: %s\n", problem.c_str());
      return 1;
    }
    std::printf("alloc: counting %s\n",
                testing::counts_malloc() ? "operator new and malloc" : "operator new only");
    if (node.rank() == 0) create_flows(node);
    fabric::Worker worker(node.fabric(), "alloc");
    Barrier gate(node, worker, "alloc-gate", 0);
    const int trace = trace_count();
    Side side{worker, gate, count, trace};
    if (node.rank() == 0) {
      shuffle_source(node, side);
      replicate_source(node, side);
      combiner_source(node, side);
    } else {
      shuffle_target(node, side);
      replicate_target(node, side);
      combiner_target(node, side);
    }
    if (trace > 0) testing::print_traced_allocations();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: %s\n", e.what());
    return 1;
  }
}
