// Private to the launch layer: file descriptors and fork/exec of child processes (the one
// spawner: `dfi cluster run`'s ranks, launch::ChildProcess, run_command). PATH lookup is the
// public launch::find_program (dfi/launch/child_process.hpp).
//
// Every child started here
//   - runs in its own process group (pgid == pid), so that a signal to -pid reaches the program
//     and everything it started, and a Ctrl-C at the terminal reaches only the launcher;
//   - gets PR_SET_PDEATHSIG(SIGKILL), so it dies when the launcher's thread that forked it dies;
//   - starts with an empty signal mask and inherits no descriptor except stdin/stdout/stderr;
//   - reports a failure between fork and exec (including exec itself) back to the parent through
//     a close-on-exec pipe, so the parent knows at once whether the program is running.
// Between fork and exec the child only makes async-signal-safe system calls; everything it needs
// is prepared in the parent, which makes spawning safe in multi-threaded programs.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dfi/common/deadline.hpp"
#include "dfi/common/unique_fd.hpp"

namespace dfi::launch::detail {

using dfi::UniqueFd;

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

// A pipe whose both ends are close-on-exec; with nonblocking_read the read end is O_NONBLOCK.
// Throws dfi::Error(Errc::io) when the system is out of descriptors.
Pipe make_pipe(bool nonblocking_read);

// The text for an errno value ("No such file or directory"). Thread-safe.
std::string errno_message(int error);

// Our environment with `settings` ("NAME", "value") replacing or adding variables; where a
// name is set twice, the last setting wins. For SpawnRequest::env. Reads the environment.
std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& settings);

// "exited with status 3", "was killed by signal 9 (Killed)" for a waitpid() status.
std::string describe_wait_status(int status);

// A description of the name of a signal, e.g. "SIGTERM" (or "signal 42").
std::string signal_name(int signal_number);

struct SpawnRequest {
  std::string path;                             // what to execve(), already resolved
  std::vector<std::string> argv;                // argv as the program sees it; not empty
  std::optional<std::vector<std::string>> env;  // "NAME=value" entries; nullopt: inherit ours
  int stdout_fd = -1;                           // -1: /dev/null (stdin always is /dev/null)
  int stderr_fd = -1;                           // -1: /dev/null
  int netns_fd = -1;  // >= 0: enter this network namespace, with a /sys that shows its devices
};

// Starts a child as described above and returns its pid once the child has successfully called
// execve(). If the child fails before or in execve(), it is reaped, `failure` receives a message
// such as "cannot execute '/bin/x': Permission denied", and -1 is returned. Throws
// dfi::Error(Errc::io) when the parent cannot create the child (fork or pipe failure).
// Thread-safe.
pid_t spawn(const SpawnRequest& request, std::string& failure);

// waitpid(pid, 0) retried on EINTR; returns the wait status (or 0 if pid is not our child).
int wait_for_exit(pid_t pid) noexcept;

struct CommandResult {
  int status = 0;      // waitpid() status
  std::string output;  // stdout and stderr, interleaved
};

// Runs argv (argv[0] searched in PATH) to completion with stdin from /dev/null and returns its
// exit status and output. Throws dfi::Error(Errc::io) if the program is not found or cannot be
// started, and dfi::Error(Errc::timeout) (after killing it) if it has not finished by `deadline`.
// Thread-safe.
CommandResult run_command(const std::vector<std::string>& argv, const Deadline& deadline);

// argv joined with spaces, for messages.
std::string join_command(const std::vector<std::string>& argv);

}  // namespace dfi::launch::detail
