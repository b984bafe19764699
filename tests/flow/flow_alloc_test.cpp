// The flow data paths allocate nothing per call once warmed up, over shm and over TCP: push,
// push_bulk, push_to and push_batch (1:1 runs, and the scatter over two targets) of a
// ShuffleSource, try_consume (including retry), consume_into and consume of a ShuffleTarget, push of a ReplicateSource, try_consume and consume of a ReplicateTarget, and
// push of a CombinerSource re-filling its emptied table. flow_alloc_node counts allocations with
// a replaced operator new and malloc (tests/counting_allocator.hpp) in each loop and prints the
// counts; this test judges them.
//
// What is asserted: the loop's own thread makes no allocation at all, neither through operator
// new (DFI and the standard library) nor through malloc (UCX is C and would show up there), on
// either transport. What is only reported: allocations of the process's other threads during the
// loop, printed so a change there is visible. Measured (release build, UCX 1.13.1), on both
// transports: about 50 operator new per rank each time the loop spans one 100 ms poll of the
// liveness watcher (cluster::Node::watch polling registry::Client::members, which parses JSON),
// plus, in rank 0, the registry server answering those polls; no malloc besides those behind
// operator new in any thread, so UCX allocated nothing per message, also not on its TCP progress
// path that applies the emulated puts. DFI_ALLOC_TRACE=N DFI_ALLOC_TRACE_ANY_THREAD=1 shows where
// allocations come from (flow_alloc_node.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <regex>
#include <set>
#include <string>

#include "cluster_run.hpp"
#include "counting_allocator.hpp"

namespace dfi {
namespace {

using testing::contains;
using testing::run_cluster;

class FlowAlloc : public ::testing::TestWithParam<std::string> {};

TEST_P(FlowAlloc, SteadyStateLoopsAllocateNothing) {
  if (const char* why = testing::counting_unavailable()) GTEST_SKIP() << why;
  constexpr std::uint64_t kTuples = 1000000;  // per loop
  auto run = run_cluster(2, GetParam(), {FLOW_ALLOC_NODE, std::to_string(kTuples)});
  ASSERT_EQ(run.code, 0) << run.all();
  const std::regex line(
      R"(alloc: (\w+ \w+ \w+): (\d+) tuples(?:, (\d+) retries)?, thread new=(\d+) malloc=(\d+), )"
      R"(process new=(\d+) malloc=(\d+) in (\d+) ms)");
  std::set<std::string> loops;
  for (auto it = std::sregex_iterator(run.out.begin(), run.out.end(), line);
       it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const std::string what = m[1];
    loops.insert(what);
    std::cout << GetParam() << ": " << m[0] << '\n';
    // A try_consume loop stops at the first batch past its share, so the consume loop after it
    // gets a little less.
    EXPECT_GE(std::stoull(m[2]), kTuples * 9 / 10) << what;
    EXPECT_EQ(m[4], "0") << what << ": operator new in the loop\n" << run.all();
    EXPECT_EQ(m[5], "0") << what << ": malloc in the loop\n" << run.all();
    if (what.ends_with("try_consume")) {
      EXPECT_NE(m[3], "0") << what << " never saw retry";
    }
  }
  const std::set<std::string> expected{
      "shuffle source push",          "shuffle source push_bulk", "shuffle source push_to",
      "shuffle source push_batch",    "shuffle scatter push_batch",
      "shuffle target try_consume",   "shuffle target consume_into",
      "shuffle target consume",       "replicate source push",
      "replicate target try_consume", "replicate target consume", "combiner source push"};
  EXPECT_EQ(loops, expected) << run.all();
  EXPECT_FALSE(contains(run.err, "FAILED")) << run.all();
}

INSTANTIATE_TEST_SUITE_P(Transports, FlowAlloc, ::testing::Values("shm", "tcp"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace dfi
