// `dfi bench driven-shuffle --quick`, for real (4 PU ranks + a mover rank, the shuffle flow on 4
// ranks, MPI_Alltoallv when OpenMPI is there), cut down with --set to one small point over shm
// and tcp. Checks the result's shape: bandwidth of all sides, the producer CPU comparison against
// its 0.25 target and the no-flow floor (runs whose rings never fill), the producer CPU of the
// bandwidth runs, the PU process cost with the mover's and the part
// outside the producer and consumer threads; never the values (a loaded machine
// decides them). A lost, duplicated or misrouted tuple makes the scenario fail by itself.
#include <gtest/gtest.h>

#include "bench/result.hpp"
#include "bench_e2e.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::find_by_id;

void check_driven_shuffle(const json& r) {
  ASSERT_TRUE(r.is_object());
  const json* bandwidth = find_by_id(r["panels"], "bandwidth");
  ASSERT_NE(bandwidth, nullptr);
  for (const char* side : {"driven", "flow"}) {
    const json* s = find_by_id((*bandwidth)["series"], side);
    ASSERT_NE(s, nullptr) << side;
    ASSERT_EQ((*s)["points"].size(), 1u) << side;
    EXPECT_GT((*s)["points"][0]["value"].get<double>(), 0) << side;
    EXPECT_FALSE((*s)["commands"].empty()) << side;
  }
  // MPI runs when OpenMPI is installed; otherwise a note says why not
  EXPECT_EQ((*bandwidth)["ratios"].size(), find_by_id((*bandwidth)["series"], "mpi") != nullptr ? 2u : 1u);
  const json* push = find_by_id(r["panels"], "push_cpu");
  ASSERT_NE(push, nullptr);
  ASSERT_EQ((*push)["ratios"].size(), 2u);  // vs the flow (target 0.25), vs the no-flow floor
  EXPECT_DOUBLE_EQ((*push)["ratios"][0]["target"].get<double>(), 0.25);
  for (const json& ratio : (*push)["ratios"]) EXPECT_GT(ratio["dfi_value"].get<double>(), 0);
  const json* producer = find_by_id(r["panels"], "producer_cpu");
  ASSERT_NE(producer, nullptr);
  ASSERT_EQ((*producer)["ratios"].size(), 1u);
  EXPECT_GT((*producer)["ratios"][0]["dfi_value"].get<double>(), 0);
  const json* helpers = find_by_id(r["panels"], "helper_cpu");
  ASSERT_NE(helpers, nullptr);
  EXPECT_EQ((*helpers)["ratios"].size(), 1u);
  const json* process = find_by_id(r["panels"], "process_cpu");
  ASSERT_NE(process, nullptr);
  for (const char* side : {"driven", "driven_mover", "flow"}) {
    const json* s = find_by_id((*process)["series"], side);
    ASSERT_NE(s, nullptr) << side;
    ASSERT_EQ((*s)["points"].size(), 1u) << side;
    EXPECT_GT((*s)["points"][0]["value"].get<double>(), 0) << side;
  }
}

const std::vector<std::string> kCutDown = {"--set", "tuple_sizes=[64]", "--set", "bytes_per_source=2097152",
                                           "--set", "cost_bytes_per_source=1048576"};

TEST(BenchDrivenShuffle, QuickOverShm) { check_driven_shuffle(testing::run_quick("driven-shuffle", "shm", kCutDown, 200s)); }

TEST(BenchDrivenShuffle, QuickOverTcp) { check_driven_shuffle(testing::run_quick("driven-shuffle", "tcp", kCutDown, 200s)); }

}  // namespace
}  // namespace dfi::tools::bench
