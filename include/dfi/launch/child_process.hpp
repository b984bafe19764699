// One child program with captured output, a bound on its run time and a group kill: how tools
// run helper programs (ucx_perftest, mpirun, python, compilers).
//
//   dfi::launch::ChildSpec spec{{"ucx_perftest", "-p", "13337"}, {{"UCX_TLS", "sm"}}};
//   dfi::launch::ChildProcess server = dfi::launch::ChildProcess::start(spec);
//   ...
//   dfi::launch::ChildResult r = server.wait(std::chrono::seconds(5));  // killed if it overstays
//
// The child is started by the launch layer's one spawner (the same as `dfi cluster run`'s
// ranks): its own process group (a timeout kills the whole group, e.g. mpirun and its ranks),
// SIGKILL from the kernel if the thread that started it dies, stdin from /dev/null, no inherited
// descriptors. stdout and stderr go to one unlinked temporary file, so a chatty child can never
// block on a full pipe and the output can be read at any time.
// Not thread-safe: one thread starts and waits for its own children (different threads may own
// different children).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dfi::launch {

struct ChildSpec {
  std::vector<std::string> argv;                         // argv[0] is searched in PATH
  std::vector<std::pair<std::string, std::string>> env;  // set on top of ours (last one wins)
};

struct ChildResult {
  int exit_code = -1;      // exit status, or 128 + signal number when killed
  bool timed_out = false;  // we killed it because the bound passed
  std::string output;      // stdout and stderr, interleaved as written
  double seconds = 0;      // wall time from start to end
};

class ChildProcess {
 public:
  // Starts spec.argv. Throws dfi::Error(Errc::io) naming the command when the program is not
  // found in PATH or cannot be executed (the message says why), or when the output file, the
  // pipe or fork fails; dfi::Error(Errc::invalid_argument) for an empty argv.
  static ChildProcess start(const ChildSpec& spec);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills the process group (SIGKILL) if the child still runs, and reaps it.
  ~ChildProcess();

  pid_t pid() const noexcept { return pid_; }
  // True until the child has exited (reaps it when it has, and kills what it left in its group).
  bool running();
  // Waits until `timeout` after the start for the child to exit (0: just collects an exited
  // child); past it, SIGTERM to the group, then SIGKILL a second later. Returns exit code,
  // output, whether it timed out and the wall time.
  ChildResult wait(std::chrono::milliseconds timeout);
  // The output written so far.
  std::string output() const;

 private:
  ChildProcess() = default;
  void kill_group(int signal) noexcept;
  void reap() noexcept;
  void close() noexcept;

  pid_t pid_ = -1;
  int output_fd_ = -1;
  int pidfd_ = -1;  // readable once the child has exited; -1 where the kernel has no pidfd
  int status_ = 0;
  bool reaped_ = false;
  std::chrono::steady_clock::time_point started_;
};

// Starts `spec` and waits until `timeout` (see ChildProcess::start and wait).
ChildResult run_child(const ChildSpec& spec, std::chrono::milliseconds timeout);

// Resolves a program name as execvp() would: a name containing '/' is returned unchanged if it
// exists; otherwise the directories of $PATH (default "/bin:/usr/bin"; an empty entry is the
// current directory) are searched for an executable regular file. std::nullopt if none is found.
// Reads the environment.
std::optional<std::string> find_program(std::string_view name);

// A TCP port on 127.0.0.1 that is free right now (bind to port 0, read it back, close), for a
// child or rank that will listen on it. Another process may take it first; the listener then
// fails to bind and says so. Throws dfi::Error(Errc::io) if no socket can be bound.
int pick_free_port();

}  // namespace dfi::launch
