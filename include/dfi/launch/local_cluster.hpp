// A local cluster: N copies of one program on this machine, each told its rank, with their output
// gathered and their failures handled like a real launcher (mpirun, srun) would. This is what
// `dfi cluster run` uses for demos, tests and benchmarks.
//
//   dfi::launch::ClusterOptions options;
//   options.nodes = 4;
//   options.argv = {"dfi-bench", "--flow", "shuffle"};
//   int code = dfi::launch::run_cluster(options, std::cout, std::cerr);
//
// Each rank sees DFI_RANK, DFI_SIZE, DFI_TRANSPORT, DFI_REGISTRY and DFI_REGISTRY_TOKEN (so
// dfi::launch::discover_launch() works in it) and writes to pipes; every line it prints appears
// on `out` or `err` as "[rank N] line". When one rank fails, the others get `grace` to finish,
// then SIGTERM, then SIGKILL. With `netns`, every rank runs in its own network namespace (see
// netns.hpp) and the ranks talk TCP across a bridge, as separate hosts would.
#pragma once

#include <chrono>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace dfi::launch {

struct ClusterOptions {
  int nodes = 2;                      // number of ranks, >= 1 (<= kNetnsMaxRanks with netns)
  std::string transport = "shm";      // "shm" or "tcp"; passed to the ranks as DFI_TRANSPORT
  bool netns = false;                 // one network namespace per rank; requires transport "tcp"
  std::string qdisc;                  // netns only: tc qdisc on every rank's link ("netem delay 1ms")
  std::vector<std::string> argv;      // the program and its arguments; argv[0] searched in PATH
  std::chrono::milliseconds timeout{0};      // from the start of the ranks; 0 = no limit
  std::chrono::milliseconds grace{3000};     // after a rank fails, before the others get SIGTERM
  std::vector<std::pair<std::string, std::string>> extra_env;  // set in every rank, last word
};

// Exit codes of run_cluster() besides 0 (every rank exited with status 0).
inline constexpr int kExitRankFailed = 1;       // a rank exited non-zero or was killed
inline constexpr int kExitTimeout = 124;        // options.timeout ran out (as timeout(1))
inline constexpr int kExitCannotExecute = 127;  // the program could not be started (as the shell)
inline constexpr int kExitSignalBase = 128;     // 128 + n: the launcher received signal n

// How long a rank has between SIGTERM and SIGKILL when the launcher stops it.
inline constexpr std::chrono::milliseconds kKillDelay{1000};

// Runs options.nodes copies of options.argv and returns when all of them have ended.
//
// Environment of rank k: the caller's environment, plus DFI_RANK=k, DFI_SIZE=nodes,
// DFI_TRANSPORT=transport, DFI_REGISTRY=<host>:<port> (host 127.0.0.1, or rank 0's namespace
// address netns_rank_address(0) with netns; port a free TCP port picked by the launcher),
// DFI_REGISTRY_TOKEN=<32 random hex digits, fresh per run>, plus options.extra_env, which
// overrides any of the above. Stdin is /dev/null.
//
// Output: each rank's stdout and stderr are read through pipes; complete lines are written to
// `out` and `err` respectively as "[rank k] <line>\n" as they arrive, and a last line without a
// newline is written (with one) when the stream ends; a line longer than 64 KiB is forwarded in
// pieces. The launcher's own messages go to `err` and start with "dfi cluster: ".
//
// Ending:
//   - a rank that exits non-zero or is killed is reported ("dfi cluster: rank 2 exited with
//     status 3", "dfi cluster: rank 1 (pid 1234) was killed by signal 9 (Killed)"); the others
//     get options.grace to finish on their own, then SIGTERM, then SIGKILL after kKillDelay.
//     Returns kExitRankFailed.
//   - options.timeout running out: the ranks still running are named and stopped (SIGTERM, then
//     SIGKILL after kKillDelay). Returns kExitTimeout.
//   - the program cannot be started (not found in PATH, not executable, ...): a message naming
//     the program and the reason, ranks already started are stopped. Returns kExitCannotExecute.
//   - SIGINT, SIGTERM or SIGHUP to the launcher: the ranks are stopped the same way (a second
//     signal sends SIGKILL at once), everything is cleaned up, and 128 + the signal number is
//     returned; the signal is not re-raised. The previous handlers are restored on return.
// The first of these causes decides the result. Each rank runs in its own process group, which
// is killed when the rank ends, so nothing the ranks started outlives the run. A rank is killed
// by the kernel (PR_SET_PDEATHSIG) if the calling thread dies. Namespaces are removed on every
// path that returns or throws; only a SIGKILL of the launcher itself leaves them behind.
//
// Errors: throws dfi::Error(Errc::invalid_argument) for bad options (nodes < 1, empty argv,
// transport other than shm/tcp, netns without transport "tcp", too many ranks for netns,
// negative timeout or grace, an extra_env name that is empty or contains '='); dfi::Error
// (Errc::io) when the launcher cannot set up (netns not permitted or failing, out of pipes, fork
// failure) — after stopping anything already started and removing namespaces.
//
// Thread-safety: installs process-wide signal handlers for its duration, so at most one
// run_cluster() runs per process at a time; a concurrent call throws
// dfi::Error(Errc::already_exists). `out` and `err` are written only from the calling thread.
// The ranks get a copy of the environment at the time of the call (do not setenv concurrently).
int run_cluster(const ClusterOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dfi::launch
