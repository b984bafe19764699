// Which rank am I, and how many are we? Read from the environment the launcher left behind.
//
// A DFI process learns its place in the job once, at setup, from whichever launcher started it:
//
//   dfi::launch::LaunchInfo me = dfi::launch::discover_launch();
//   // me.rank in [0, me.size), me.source names the launcher whose variables were used
//
// The launchers are tried in a fixed order and the first one whose rank variable is set wins;
// see discover_launch() for the exact variables.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace dfi::launch {

// The result of discover_launch(): this process's rank, the number of ranks, and which launcher's
// variables they came from.
struct LaunchInfo {
  int rank = 0;        // 0 <= rank < size
  int size = 1;        // >= 1
  std::string source;  // "dfi", "openmpi", "pmix" or "slurm"
};

// Looks up one environment variable; std::nullopt when it is not set. A variable set to the empty
// string is treated as not set (as dfi::config does).
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// Determines rank and size from the process environment. Tried in this order; the first launcher
// whose rank variable is set decides, and its variables must then be complete and consistent:
//
//   1. "dfi":     DFI_RANK + DFI_SIZE (set by `dfi cluster run`, or by hand). Setting only one of
//                 the two is an error.
//   2. "openmpi": OMPI_COMM_WORLD_RANK + OMPI_COMM_WORLD_SIZE (mpirun / prterun of Open MPI).
//   3. "pmix":    PMIX_RANK, with the size from the first of PMIX_SIZE, OMPI_COMM_WORLD_SIZE,
//                 SLURM_NTASKS that is set (PMIx itself exports no size variable; the PMIx server
//                 of Open MPI or Slurm provides one of the others).
//   4. "slurm":   SLURM_PROCID + SLURM_NTASKS (srun).
//
// Errors: throws dfi::Error(Errc::invalid_argument) naming the variable when a value is not a
// non-negative decimal integer, a size is 0, the rank is not below the size, or the size variable
// that belongs to a set rank variable is missing; and, when none of the rank variables is set,
// with "cannot determine rank: set DFI_RANK and DFI_SIZE, or start under `dfi cluster run`,
// mpirun or srun".
//
// Thread-safety: reads the environment with getenv(); safe to call from several threads, but not
// concurrently with setenv()/unsetenv() elsewhere in the process.
LaunchInfo discover_launch();

// As discover_launch(), but reads variables through `lookup` instead of the process environment
// (the test seam; also useful to interpret another process's environment). Thread-safe if
// `lookup` is.
LaunchInfo discover_launch(const EnvLookup& lookup);

}  // namespace dfi::launch
