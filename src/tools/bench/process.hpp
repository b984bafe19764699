// Child processes for baselines (ucx_perftest, mpirun, python): start with extra environment,
// capture stdout+stderr, bound the run time, and never leave anything behind.
//
//   bench::ProcessSpec spec{{"ucx_perftest", "-p", "13337"}, {{"UCX_TLS", "sm"}}};
//   bench::Process server = bench::Process::start(spec);
//   ...
//   bench::ProcessResult r = server.wait(std::chrono::seconds(5));   // kills it if it overstays
//
// Each child runs in its own process group (a timeout kills the whole group, e.g. mpirun and its
// ranks) and gets SIGKILL from the kernel if the thread that started it dies. Output goes to an
// unlinked temporary file, so a chatty child can never block on a full pipe.
// Not thread-safe: one thread starts and waits for its own children.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dfi::tools::bench {

struct ProcessSpec {
  std::vector<std::string> argv;                         // argv[0] is searched in PATH
  std::vector<std::pair<std::string, std::string>> env;  // set on top of ours
};

struct ProcessResult {
  int exit_code = -1;      // exit status, or 128 + signal number when killed
  bool timed_out = false;  // we killed it because the bound passed
  std::string output;      // stdout and stderr, interleaved as written
  double seconds = 0;      // wall time from start to end
};

class Process {
 public:
  // Forks and execs spec.argv. Throws dfi::Error(io) if fork or the output file fails. A
  // program that cannot be executed exits with 127 and says why in its output.
  static Process start(const ProcessSpec& spec);

  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  // Kills the process group (SIGKILL) if it is still running and reaps it.
  ~Process();

  int pid() const noexcept { return pid_; }
  // True until the child has exited (reaps it when it has).
  bool running();
  // Waits up to `timeout` for the child to exit; past it, SIGTERM to the group, then SIGKILL a
  // second later. Returns exit code, output and whether it timed out.
  ProcessResult wait(std::chrono::milliseconds timeout);
  // The output written so far.
  std::string output() const;

 private:
  Process() = default;
  void kill_group(int signal) noexcept;
  void close() noexcept;

  int pid_ = -1;
  int output_fd_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  std::chrono::steady_clock::time_point started_;
};

// Starts `spec` and waits up to `timeout` (see Process::wait).
ProcessResult run_process(const ProcessSpec& spec, std::chrono::milliseconds timeout);

// A server process listening on a TCP port of this machine, for clients on 127.0.0.1.
struct ListeningServer {
  Process process;
  int port = 0;
};

// Starts `make_spec(port)` on a port that was free a moment ago and waits until some socket
// listens on it (is_listening) while the server runs, for at most `bound`; a client started
// after it returns can connect at once. A server that exits saying "Address already in use" lost
// its port to another process: it is started again on another port, up to `attempts` times.
// Throws dfi::Error(io) when the server exits, does not listen in time or never gets a port; the
// message names `what`, the server's command line and quotes its last lines of output.
ListeningServer start_listening_server(const std::function<ProcessSpec(int port)>& make_spec,
                                       const std::string& what, std::chrono::milliseconds bound,
                                       int attempts = 4);

// The full path of `program` found in PATH (or `program` itself if it contains a '/' and is
// executable), else nullopt.
std::optional<std::string> find_in_path(std::string_view program);

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it back, close).
int pick_free_port();

// True if some socket listens on TCP `port` (any address, IPv4 or IPv6), per /proc/net/tcp{,6}.
bool is_listening(int port);

// `argv` as one shell-safe command line, for "the exact command" in results and messages. An
// argument of the form $NAME (upper case) is left unquoted: a placeholder the reader sets.
std::string shell_join(const std::vector<std::string>& argv);

// The last `lines` lines of `text` (for error messages that quote a child's output).
std::string tail_lines(std::string_view text, int lines);

}  // namespace dfi::tools::bench
