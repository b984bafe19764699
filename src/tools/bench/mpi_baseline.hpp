// The OpenMPI baseline: programs in bench/mpi/, compiled with mpicxx on first use and started
// with mpirun. OpenMPI is never a dependency of the DFI library or its tests: without it the
// MPI scenarios report why they cannot run.
//
//   bench::MpiRun run;
//   run.program = "mpi_p2p"; run.ranks = 2; run.transport = "shm";
//   run.args = {"--mode", "single", "--tuple-bytes", "16", "--table-bytes", "67108864"};
//   bench::MpiResult r = bench::run_mpi(run);     // r.data["seconds"], r.data["gbps"], ...
//
// mpirun settings that work on a machine without InfiniBand (OpenMPI 4.1 from Debian 12):
//   --allow-run-as-root --oversubscribe --bind-to none
//   --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any   (pml ucx refuses to run on
//       anything but mlx5 devices unless told "any")
//   -x UCX_TLS=sm,self (shm)  or  -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=lo (tcp), and for tcp
//   also --mca btl self,tcp --mca btl_tcp_if_include lo: one-sided MPI (osc rdma) runs over the
//   BTLs, and the default set includes vader (shared memory) between processes of one machine
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dfi::tools::bench {

struct MpiRun {
  std::string program;            // a source bench/mpi/<program>.cpp: "mpi_p2p", "mpi_alltoall"
  // Runs this program instead of compiling `program` (an interpreter, e.g. the venv's python for
  // an mpi4py rank script; its script and arguments go in `args`).
  std::string executable;
  int ranks = 2;                  // mpirun -np
  std::vector<std::string> args;  // the program's own arguments
  std::string transport = "shm";  // "shm" or "tcp": the UCX transport under pml ucx
  std::chrono::milliseconds timeout{300000};
};

struct MpiResult {
  nlohmann::json data;  // the program's JSON line
  std::string command;  // the exact mpirun command
  double seconds = 0;   // wall time of mpirun
};

// Why the MPI baseline cannot run here ("mpirun not found: install openmpi-bin libopenmpi-dev"),
// or an empty string when it can.
std::string mpi_unavailable();
// For a scenario's unavailable(): "the OpenMPI baseline cannot run: <why>", or empty.
std::string mpi_baseline_unavailable();

// The OpenMPI version from `mpirun --version`, or "unknown".
std::string mpi_version();

// Compiles bench/mpi/<program>.cpp with mpicxx into the MPI build directory unless the binary is
// newer than its sources; returns the binary's path. Throws dfi::Error: not_found (no mpicxx or
// no such source), io (compilation failed; the message quotes the compiler).
std::string build_mpi_program(const std::string& program);

// The mpirun command line for `run` with `binary`.
std::vector<std::string> mpirun_argv(const MpiRun& run, const std::string& binary);

// Builds if needed (unless run.executable is set), runs, and parses the last line of output that is a JSON object. Throws
// dfi::Error: not_found (no OpenMPI), timeout (killed after run.timeout), io (non-zero exit or no
// JSON line; the message quotes the output), invalid_argument (bad transport).
MpiResult run_mpi(const MpiRun& run);

}  // namespace dfi::tools::bench
