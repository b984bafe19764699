#include "mpi_baseline.hpp"

#include <filesystem>
#include <sstream>

#include "dfi/common/error.hpp"
#include "paths.hpp"
#include "process.hpp"

namespace dfi::tools::bench {
namespace {

namespace fs = std::filesystem;

constexpr auto kCompileBound = std::chrono::minutes(3);

constexpr const char* kInstallHint =
    "install the Debian packages openmpi-bin and libopenmpi-dev (scripts/dev bench installs them)";

fs::file_time_type newest_source(const fs::path& dir, const std::string& program) {
  fs::file_time_type newest = fs::last_write_time(dir / (program + ".cpp"));
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".hpp") newest = std::max(newest, e.last_write_time());
  }
  // The DFI headers the baselines include (see build_mpi_program).
  const fs::path tree = dir.parent_path().parent_path();
  for (const fs::path& shared : {tree / "src/tools/join_data.hpp", tree / "include/dfi/kernels/hash.hpp"}) {
    std::error_code ec;
    const fs::file_time_type t = fs::last_write_time(shared, ec);
    if (!ec) newest = std::max(newest, t);
  }
  return newest;
}

}  // namespace

std::string mpi_unavailable() {
  for (const char* program : {"mpirun", "mpicxx"}) {
    if (!launch::find_program(program))
      return std::string(program) + " not found in PATH: " + kInstallHint;
  }
  return {};
}

std::string mpi_baseline_unavailable() {
  const std::string why = mpi_unavailable();
  return why.empty() ? why : "the OpenMPI baseline cannot run: " + why;
}

std::string mpi_version() {
  std::optional<std::string> mpirun = launch::find_program("mpirun");
  if (!mpirun) return "unknown";
  launch::ChildResult r =
      launch::run_child({{*mpirun, "--version"}, {}}, std::chrono::seconds(10));
  std::istringstream lines(r.output);
  std::string first;
  std::getline(lines, first);
  return first.empty() ? "unknown" : first;
}

std::string build_mpi_program(const std::string& program) {
  if (std::string why = mpi_unavailable(); !why.empty())
    throw Error(Errc::not_found, "bench: " + why);
  const fs::path source_dir = fs::path(bench_source_dir()) / "mpi";
  const fs::path source = source_dir / (program + ".cpp");
  if (!fs::exists(source)) {
    throw Error(Errc::not_found, "bench: no MPI baseline program " + source.string());
  }
  const fs::path out_dir = fs::path(bench_build_dir()) / "mpi";
  const fs::path binary = out_dir / program;
  std::error_code ec;
  if (fs::exists(binary, ec) &&
      fs::last_write_time(binary, ec) >= newest_source(source_dir, program)) {
    return binary.string();
  }
  fs::create_directories(out_dir, ec);
  if (ec) throw Error(Errc::io, "bench: cannot create " + out_dir.string() + ": " + ec.message());
  const fs::path partial = out_dir / (program + ".partial");
  // -O3 as CMake's Release build of DFI; DFI's include/ for the header-only kernels and
  // src/tools/join_data.hpp that a baseline shares with DFI (the same data, the same hash).
  const fs::path include_dir = fs::path(bench_source_dir()).parent_path() / "include";
  std::vector<std::string> argv = {*launch::find_program("mpicxx"),
                                   "-O3",
                                   "-I" + include_dir.string(),
                                   "-std=c++20",
                                   "-DOMPI_SKIP_MPICXX",
                                   "-Wall",
                                   "-Wextra",
                                   "-o",
                                   partial.string(),
                                   source.string(),
                                   "-lpthread"};
  launch::ChildResult r = launch::run_child({argv, {}}, kCompileBound);
  if (r.exit_code != 0 || r.timed_out) {
    throw Error(Errc::io, "bench: compiling the MPI baseline failed: " + shell_join(argv) + "\n" +
                              tail_lines(r.output, 20));
  }
  fs::rename(partial, binary, ec);
  if (ec)
    throw Error(Errc::io,
                "bench: cannot move " + partial.string() + " into place: " + ec.message());
  return binary.string();
}

std::vector<std::string> mpirun_argv(const MpiRun& run, const std::string& binary) {
  std::vector<std::string> argv = {"mpirun",
                                   "--allow-run-as-root",
                                   "--oversubscribe",
                                   "--bind-to",
                                   "none",
                                   "-np",
                                   std::to_string(run.ranks),
                                   "--mca",
                                   "pml",
                                   "ucx",
                                   "--mca",
                                   "pml_ucx_tls",
                                   "any",
                                   "--mca",
                                   "pml_ucx_devices",
                                   "any"};
  if (run.transport == "shm") {
    argv.insert(argv.end(), {"-x", "UCX_TLS=sm,self"});
  } else if (run.transport == "tcp") {
    // One-sided MPI (MPI_Put into a window) goes through OpenMPI's osc framework, not the pml:
    // by default its rdma component runs over the vader BTL, shared memory between the processes
    // of one machine, whatever UCX_TLS says. Only the self and tcp BTLs keep every byte on TCP.
    argv.insert(argv.end(), {"--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo", "-x",
                             "UCX_TLS=tcp,self", "-x", "UCX_NET_DEVICES=lo"});
  } else {
    throw Error(Errc::invalid_argument,
                "bench: MPI transport must be shm or tcp, not '" + run.transport + "'");
  }
  argv.push_back(binary);
  argv.insert(argv.end(), run.args.begin(), run.args.end());
  return argv;
}

MpiResult run_mpi(const MpiRun& run) {
  const std::string binary = run.executable.empty() ? build_mpi_program(run.program) : run.executable;
  MpiResult result;
  std::vector<std::string> argv = mpirun_argv(run, binary);
  result.command = shell_join(argv);
  launch::ChildResult r = launch::run_child({argv, {}}, run.timeout);
  result.seconds = r.seconds;
  if (r.timed_out) {
    throw Error(Errc::timeout, "bench: " + result.command + " killed after " +
                                   std::to_string(run.timeout.count()) + " ms:\n" +
                                   tail_lines(r.output, 10));
  }
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("{\"program\"", 0) != 0) continue;
    try {
      result.data = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      continue;
    }
  }
  if (r.exit_code != 0 || result.data.is_null()) {
    throw Error(Errc::io,
                "bench: " + result.command +
                    (r.exit_code != 0 ? " exited with status " + std::to_string(r.exit_code)
                                      : std::string(" printed no JSON result")) +
                    ":\n" + tail_lines(r.output, 12));
  }
  return result;
}

}  // namespace dfi::tools::bench
