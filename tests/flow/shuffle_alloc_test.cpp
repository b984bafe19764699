// The shuffle data path allocates nothing per call once warmed up: push, push_bulk and push_to
// of a ShuffleSource, try_consume (including retry) and consume of a ShuffleTarget, over shm and
// over TCP. shuffle_alloc_node counts allocations with a replaced operator new and malloc
// (tests/counting_allocator.hpp) in each loop and prints the counts; this test judges them.
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
// allocations come from (shuffle_alloc_node.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <regex>
#include <string>

#include "cluster_run.hpp"

namespace dfi {
namespace {

using testing::contains;
using testing::run_cluster;

class ShuffleAlloc : public ::testing::TestWithParam<std::string> {};

TEST_P(ShuffleAlloc, SteadyStateLoopsAllocateNothing) {
  constexpr std::uint64_t kTuples = 1000000;  // per loop
  auto run = run_cluster(2, GetParam(), {SHUFFLE_ALLOC_NODE, std::to_string(kTuples)});
  ASSERT_EQ(run.code, 0) << run.all();
  const std::regex line(
      R"(alloc: (\w+ \w+): (\d+) tuples(?:, (\d+) retries)?, thread new=(\d+) malloc=(\d+), )"
      R"(process new=(\d+) malloc=(\d+) in (\d+) ms)");
  int loops = 0;
  for (auto it = std::sregex_iterator(run.out.begin(), run.out.end(), line);
       it != std::sregex_iterator(); ++it, ++loops) {
    const std::smatch& m = *it;
    const std::string what = m[1];
    std::cout << GetParam() << ": " << m[0] << '\n';
    EXPECT_GE(std::stoull(m[2]), kTuples) << what;
    EXPECT_EQ(m[4], "0") << what << ": operator new in the loop\n" << run.all();
    EXPECT_EQ(m[5], "0") << what << ": malloc in the loop\n" << run.all();
    if (what == "target try_consume") {
      EXPECT_NE(m[3], "0") << "the loop never saw retry";
    }
  }
  EXPECT_EQ(loops, 5) << run.all();  // push, push_bulk, push_to, try_consume, consume
  EXPECT_FALSE(contains(run.err, "FAILED")) << run.all();
}

INSTANTIATE_TEST_SUITE_P(Transports, ShuffleAlloc, ::testing::Values("shm", "tcp"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace dfi
