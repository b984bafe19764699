// Rank program for the allocation test of the shuffle data path, started by launch::run_cluster
// with 2 ranks: rank 0 runs one source, rank 1 one target of a 1:1 shuffle flow of 16 B tuples.
//
//   shuffle_alloc_node [TUPLES]   TUPLES per counted loop (default 1000000)
//
// Both sides warm up first (several laps of the ring, so every slot, staging buffer, credit read
// and UCX memory pool has been used), meet at a barrier, then count the heap allocations of each
// loop: source push, push_bulk and push_to; target try_consume (the source holds back for 20 ms
// first, so that it also returns retry) and consume. Each loop prints one line
//
//   alloc: <side> <call>: <n> tuples[, <r> retries], thread new=<a> malloc=<b>, process new=<c>
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
#include <string>
#include <thread>
#include <vector>

#include "counting_allocator.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/barrier.hpp"
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

void run_source(cluster::Node& node, std::uint64_t count, int trace) {
  fabric::Worker worker(node.fabric(), "alloc source");
  ShuffleSource source(node, worker, "alloc", 0);
  Barrier gate(node, worker, "alloc-gate", 0);
  std::vector<Tuple> bulk(kBulk);
  std::uint64_t key = 0;
  auto push = [&](std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i, ++key) {
      if (Status s = source.push(Tuple{key, key * 3}); !s) die("push", s);
    }
  };
  auto push_bulk = [&](std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; i += kBulk) {
      const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(kBulk, n - i));
      for (std::size_t j = 0; j < chunk; ++j, ++key) bulk[j] = Tuple{key, key * 3};
      if (Status s = source.push_bulk(bulk.data(), chunk); !s) die("push_bulk", s);
    }
  };
  auto push_to = [&](std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i, ++key) {
      const Tuple t{key, key * 3};
      if (Status s = source.push_to(0, &t, sizeof t); !s) die("push_to", s);
    }
  };
  push(kWarmUp);
  push_bulk(kWarmUp);
  push_to(kWarmUp);
  if (Status s = source.flush(); !s) die("flush", s);
  if (Status s = gate.wait(); !s) die("gate", s);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the target polls meanwhile
  {
    Window window(trace);
    push(count);
    window.report("source push", count);
  }
  {
    Window window(trace);
    push_bulk(count);
    window.report("source push_bulk", count);
  }
  {
    Window window(trace);
    push_to(count);
    window.report("source push_to", count);
  }
  if (Status s = source.close(); !s) die("close", s);
}

void run_target(cluster::Node& node, std::uint64_t count, int trace) {
  fabric::Worker worker(node.fabric(), "alloc target");
  ShuffleTarget target(node, "alloc", 0);
  Barrier gate(node, worker, "alloc-gate", 0);
  TupleBatch batch;
  std::uint64_t received = 0;
  std::uint64_t sum = 0;
  auto take = [&] {
    for (const Tuple& t : batch.as<Tuple>()) sum += t.value - t.key * 3;  // 0 unless corrupted
    received += batch.count;
  };
  const std::uint64_t warm = 3 * kWarmUp;
  while (received < warm) {
    if (Status s = target.consume(batch); !s) die("consume", s);
    take();
  }
  if (Status s = gate.wait(); !s) die("gate", s);
  std::uint64_t start = received;
  {
    Window window(trace);
    long retries = 0;
    while (received < start + count) {
      Status s = target.try_consume(batch);
      if (s.code() == Errc::retry) {
        ++retries;
        continue;
      }
      if (!s) die("try_consume", s);
      take();
    }
    window.report("target try_consume", received - start, retries);
  }
  start = received;
  const std::uint64_t total = warm + 3 * count;
  {
    Window window(trace);
    while (received < total) {
      if (Status s = target.consume(batch); !s) die("consume", s);
      take();
    }
    window.report("target consume", received - start);
  }
  if (Status s = target.consume(batch); !s || !batch.empty() || !target.end()) {
    die("the end of the stream after " + std::to_string(received) + " tuples", s);
  }
  if (sum != 0 || received != total) {
    std::fprintf(stderr, "FAILED: received %llu of %llu tuples, checksum %llu\n",
                 static_cast<unsigned long long>(received), static_cast<unsigned long long>(total),
                 static_cast<unsigned long long>(sum));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t count = argc > 1 ? std::stoull(argv[1]) : 1000000;
  try {
    cluster::Node node;
    if (node.size() != 2) {
      std::fprintf(stderr, "FAILED: shuffle_alloc_node runs on 2 ranks, not %d\n", node.size());
      return 2;
    }
    if (std::string problem = testing::counting_problem(); !problem.empty()) {
      std::fprintf(stderr, "FAILED: cannot count allocations: %s\n", problem.c_str());
      return 1;
    }
    std::printf("alloc: counting %s\n",
                testing::counts_malloc() ? "operator new and malloc" : "operator new only");
    if (node.rank() == 0) {
      FlowSpec spec;
      spec.name = "alloc";
      spec.sources = {{0, 0}};
      spec.targets = {{1, 0}};
      spec.schema = Schema({{"key", Type::uint64}, {"value", Type::uint64}});
      spec.key_column = "key";
      create_flow(node, spec);
      create_barrier(node, "alloc-gate", {{0, 0}, {1, 0}});
    }
    const int trace = trace_count();
    if (node.rank() == 0) {
      run_source(node, count, trace);
    } else {
      run_target(node, count, trace);
    }
    if (trace > 0) testing::print_traced_allocations();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: %s\n", e.what());
    return 1;
  }
}
