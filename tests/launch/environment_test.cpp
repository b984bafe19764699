#include "dfi/launch/environment.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "dfi/common/error.hpp"

namespace dfi::launch {
namespace {

using Env = std::map<std::string, std::string>;

LaunchInfo discover(const Env& env) {
  return discover_launch([&env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

// Expects invalid_argument whose message contains `needle`.
void expect_invalid(const Env& env, const std::string& needle) {
  try {
    const LaunchInfo info = discover(env);
    ADD_FAILURE() << "expected an error containing '" << needle << "', got rank " << info.rank
                  << " of " << info.size << " from " << info.source;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not mention '" << needle << "'";
  }
}

TEST(DiscoverLaunch, DfiVariables) {
  const LaunchInfo info = discover({{"DFI_RANK", "2"}, {"DFI_SIZE", "4"}});
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.size, 4);
  EXPECT_EQ(info.source, "dfi");
}

TEST(DiscoverLaunch, OpenMpiVariables) {
  const LaunchInfo info =
      discover({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}});
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.size, 1);
  EXPECT_EQ(info.source, "openmpi");
}

TEST(DiscoverLaunch, PmixTakesTheSizeFromWhatIsAvailable) {
  LaunchInfo info = discover({{"PMIX_RANK", "3"}, {"PMIX_SIZE", "8"}});
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.size, 8);
  EXPECT_EQ(info.source, "pmix");

  info = discover({{"PMIX_RANK", "1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.size, 2);
  EXPECT_EQ(info.source, "pmix");

  expect_invalid({{"PMIX_RANK", "1"}}, "PMIX_SIZE");
}

TEST(DiscoverLaunch, SlurmVariables) {
  const LaunchInfo info = discover({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}});
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.size, 6);
  EXPECT_EQ(info.source, "slurm");
}

TEST(DiscoverLaunch, OrderOfPrecedence) {
  Env env{{"DFI_RANK", "1"},         {"DFI_SIZE", "2"},
          {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
          {"PMIX_RANK", "5"},        {"PMIX_SIZE", "6"},
          {"SLURM_PROCID", "7"},     {"SLURM_NTASKS", "8"}};
  EXPECT_EQ(discover(env).source, "dfi");
  env.erase("DFI_RANK");
  env.erase("DFI_SIZE");
  EXPECT_EQ(discover(env).source, "openmpi");
  env.erase("OMPI_COMM_WORLD_RANK");
  env.erase("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(discover(env).source, "pmix");
  env.erase("PMIX_RANK");
  const LaunchInfo info = discover(env);
  EXPECT_EQ(info.source, "slurm");
  EXPECT_EQ(info.rank, 7);
  EXPECT_EQ(info.size, 8);
}

TEST(DiscoverLaunch, MalformedValuesNameTheVariable) {
  expect_invalid({{"DFI_RANK", "x"}, {"DFI_SIZE", "2"}}, "DFI_RANK='x'");
  expect_invalid({{"DFI_RANK", "1"}, {"DFI_SIZE", "2 "}}, "DFI_SIZE");
  expect_invalid({{"DFI_RANK", "-1"}, {"DFI_SIZE", "2"}}, "DFI_RANK");
  expect_invalid({{"DFI_RANK", "+1"}, {"DFI_SIZE", "2"}}, "DFI_RANK");
  expect_invalid({{"DFI_RANK", "99999999999"}, {"DFI_SIZE", "2"}}, "DFI_RANK");
  expect_invalid({{"DFI_RANK", "2"}, {"DFI_SIZE", "2"}}, "DFI_RANK=2 is not less than DFI_SIZE=2");
  expect_invalid({{"DFI_RANK", "0"}, {"DFI_SIZE", "0"}}, "DFI_SIZE=0");
  expect_invalid({{"DFI_RANK", "0"}}, "DFI_SIZE");
  expect_invalid({{"DFI_SIZE", "4"}}, "DFI_RANK");
  expect_invalid({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
                 "OMPI_COMM_WORLD_RANK=4");
  expect_invalid({{"OMPI_COMM_WORLD_RANK", "0"}}, "OMPI_COMM_WORLD_SIZE");
  expect_invalid({{"PMIX_RANK", "abc"}, {"PMIX_SIZE", "2"}}, "PMIX_RANK");
  expect_invalid({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "one"}}, "SLURM_NTASKS='one'");
  expect_invalid({{"SLURM_PROCID", "1"}}, "SLURM_NTASKS");
}

TEST(DiscoverLaunch, NothingSetExplainsWhatToDo) {
  expect_invalid({}, "cannot determine rank: set DFI_RANK and DFI_SIZE");
  // A size alone (e.g. inside an sbatch script) is not a launch.
  expect_invalid({{"SLURM_NTASKS", "4"}}, "cannot determine rank");
  // Empty values count as unset.
  expect_invalid({{"DFI_RANK", ""}, {"DFI_SIZE", ""}}, "cannot determine rank");
}

TEST(DiscoverLaunch, ReadsTheProcessEnvironment) {
  ::setenv("DFI_RANK", "1", 1);
  ::setenv("DFI_SIZE", "3", 1);
  const LaunchInfo info = discover_launch();
  ::unsetenv("DFI_RANK");
  ::unsetenv("DFI_SIZE");
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.size, 3);
  EXPECT_EQ(info.source, "dfi");
}

}  // namespace
}  // namespace dfi::launch
