#include "subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <set>
#include <system_error>

#include "dfi/common/error.hpp"
#include "dfi/launch/child_process.hpp"

namespace dfi::launch::detail {
namespace {

// Where a child failed between fork and a successful execve().
enum ChildStage : int {
  kStageSignals = 1,
  kStageProcessGroup,
  kStageStdio,
  kStageEnterNetns,
  kStageMountNamespace,
  kStageMountSysfs,
  kStageExec,
};

struct ChildFailure {
  int stage;
  int error;
};

// Everything the child needs, prepared by the parent before fork().
struct ChildPlan {
  const char* path;
  char* const* argv;
  char* const* envp;
  int stdin_fd;
  int stdout_fd;
  int stderr_fd;
  int netns_fd;
  int report_fd;
  pid_t parent;
};

// The child's side. Only async-signal-safe calls from here on: no allocation, no locks, no
// exceptions.
[[noreturn]] void fail_child(int report_fd, int stage) noexcept {
  const ChildFailure failure{stage, errno};
  ssize_t written = ::write(report_fd, &failure, sizeof failure);
  static_cast<void>(written);
  ::_exit(127);
}

// A close-on-exec duplicate of fd that is not one of 0..2, so that dup2() onto 0..2 cannot
// clobber it.
int lift_above_stdio(int fd, int report_fd) noexcept {
  if (fd > 2) return fd;
  const int lifted = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (lifted < 0) fail_child(report_fd, kStageStdio);
  return lifted;
}

// Enters the network namespace and gives the process a /sys that describes it, as
// `ip netns exec` does (libraries such as UCX list interfaces through /sys/class/net).
void enter_netns(int netns_fd, int report_fd) noexcept {
  if (::setns(netns_fd, CLONE_NEWNET) != 0) fail_child(report_fd, kStageEnterNetns);
  if (::unshare(CLONE_NEWNS) != 0) fail_child(report_fd, kStageMountNamespace);
  // Keep our mounts from propagating back to the parent's mount namespace.
  if (::mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0) {
    fail_child(report_fd, kStageMountNamespace);
  }
  // The old /sys may not be a mount point (or may be busy): then the new one is mounted on top.
  static_cast<void>(::umount2("/sys", MNT_DETACH));
  if (::mount("sysfs", "/sys", "sysfs", 0, nullptr) != 0 &&
      ::mount("sysfs", "/sys", "sysfs", MS_RDONLY, nullptr) != 0) {
    fail_child(report_fd, kStageMountSysfs);
  }
}

[[noreturn]] void run_child(const ChildPlan& plan) noexcept {
  const int report_fd = lift_above_stdio(plan.report_fd, plan.report_fd);
  // The launcher's signal handlers must not run in the child; signals the launcher's caller
  // chose to ignore stay ignored. The program starts with an empty signal mask.
  for (const int signal_number : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
    struct sigaction current {};
    if (::sigaction(signal_number, nullptr, &current) != 0) fail_child(report_fd, kStageSignals);
    if (current.sa_handler != SIG_IGN) {
      struct sigaction default_action {};
      default_action.sa_handler = SIG_DFL;
      if (::sigaction(signal_number, &default_action, nullptr) != 0) {
        fail_child(report_fd, kStageSignals);
      }
    }
  }
  sigset_t empty;
  ::sigemptyset(&empty);
  if (::sigprocmask(SIG_SETMASK, &empty, nullptr) != 0) fail_child(report_fd, kStageSignals);

  if (::setpgid(0, 0) != 0) fail_child(report_fd, kStageProcessGroup);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail_child(report_fd, kStageProcessGroup);
  if (::getppid() != plan.parent) ::_exit(127);  // the launcher died before prctl()

  const int in = lift_above_stdio(plan.stdin_fd, report_fd);
  const int out = lift_above_stdio(plan.stdout_fd, report_fd);
  const int err = lift_above_stdio(plan.stderr_fd, report_fd);
  if (::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) {
    fail_child(report_fd, kStageStdio);
  }
  if (plan.netns_fd >= 0) enter_netns(lift_above_stdio(plan.netns_fd, report_fd), report_fd);

  // Descriptors the caller's program opened without O_CLOEXEC must not leak into the child.
  // (Failure only means an old kernel; the descriptors we opened ourselves are close-on-exec.)
  static_cast<void>(::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC));

  ::execve(plan.path, plan.argv, plan.envp);
  fail_child(report_fd, kStageExec);
}

std::string stage_message(int stage, const SpawnRequest& request) {
  switch (stage) {
    case kStageSignals: return "cannot reset signal handling";
    case kStageProcessGroup: return "cannot set up the process group";
    case kStageStdio: return "cannot redirect stdin/stdout/stderr";
    case kStageEnterNetns: return "cannot enter the network namespace";
    case kStageMountNamespace: return "cannot create a private mount namespace";
    case kStageMountSysfs: return "cannot mount /sys for the network namespace";
    case kStageExec: return "cannot execute '" + request.path + "'";
    default: return "failed before exec (stage " + std::to_string(stage) + ")";
  }
}

// Pointers into `strings`, null-terminated, as execve() wants them.
std::vector<char*> c_array(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

Pipe make_pipe(bool nonblocking_read) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(Errc::io, "cannot create a pipe: " + errno_message(errno));
  }
  Pipe pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
  if (nonblocking_read) {
    const int flags = ::fcntl(pipe.read.get(), F_GETFL);
    if (flags < 0 || ::fcntl(pipe.read.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
      throw Error(Errc::io, "cannot make a pipe non-blocking: " + errno_message(errno));
    }
  }
  return pipe;
}

std::string errno_message(int error) { return std::system_category().message(error); }

std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& settings) {
  std::set<std::string> overridden;
  for (const auto& entry : settings) overridden.insert(entry.first);
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text = *entry;
    if (overridden.count(text.substr(0, text.find('='))) == 0) env.push_back(text);
  }
  // Last setting of a name wins.
  for (auto it = settings.begin(); it != settings.end(); ++it) {
    const bool later = std::any_of(std::next(it), settings.end(),
                                   [&](const auto& other) { return other.first == it->first; });
    if (!later) env.push_back(it->first + "=" + it->second);
  }
  return env;
}

std::string signal_name(int signal_number) {
  const char* abbrev = ::sigabbrev_np(signal_number);
  if (abbrev == nullptr) return "signal " + std::to_string(signal_number);
  return std::string("SIG") + abbrev;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signal_number = WTERMSIG(status);
    const char* description = ::sigdescr_np(signal_number);
    std::string text = "was killed by signal " + std::to_string(signal_number) + " (" +
                       (description != nullptr ? description : "unknown signal") + ")";
    if (WCOREDUMP(status)) text += ", core dumped";
    return text;
  }
  return "ended with wait status " + std::to_string(status);
}

pid_t spawn(const SpawnRequest& request, std::string& failure) {
  if (request.argv.empty()) throw Error(Errc::invalid_argument, "spawn: argv is empty");
  std::vector<std::string> argv_strings = request.argv;
  std::vector<char*> argv = c_array(argv_strings);
  std::vector<std::string> env_strings;
  std::vector<char*> env;
  char* const* envp = environ;
  if (request.env) {
    env_strings = *request.env;
    env = c_array(env_strings);
    envp = env.data();
  }

  UniqueFd dev_null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!dev_null.valid()) throw Error(Errc::io, "cannot open /dev/null: " + errno_message(errno));
  Pipe report = make_pipe(false);

  const ChildPlan plan{request.path.c_str(),
                       argv.data(),
                       envp,
                       dev_null.get(),
                       request.stdout_fd >= 0 ? request.stdout_fd : dev_null.get(),
                       request.stderr_fd >= 0 ? request.stderr_fd : dev_null.get(),
                       request.netns_fd,
                       report.write.get(),
                       ::getpid()};

  // No signal handler may run in the child before it has reset the dispositions.
  sigset_t all;
  sigset_t previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  const pid_t pid = ::fork();
  if (pid == 0) run_child(plan);
  const int fork_error = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) {
    throw Error(Errc::io, "cannot start '" + request.path + "': fork failed: " +
                              errno_message(fork_error));
  }

  // The report pipe's write end closes on a successful execve(); a failure arrives as a record.
  report.write.reset();
  ChildFailure child_failure{};
  ssize_t got = 0;
  do {
    got = ::read(report.read.get(), &child_failure, sizeof child_failure);
  } while (got < 0 && errno == EINTR);
  if (got == 0) return pid;
  static_cast<void>(wait_for_exit(pid));
  if (got != static_cast<ssize_t>(sizeof child_failure)) {
    failure = "the child for '" + request.path + "' failed before exec";
  } else {
    failure = stage_message(child_failure.stage, request) + ": " +
              errno_message(child_failure.error);
  }
  return -1;
}

int wait_for_exit(pid_t pid) noexcept {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 0;
  }
  return status;
}

std::string join_command(const std::vector<std::string>& argv) {
  std::string text;
  for (const std::string& arg : argv) {
    if (!text.empty()) text += ' ';
    text += arg;
  }
  return text;
}

CommandResult run_command(const std::vector<std::string>& argv, const Deadline& deadline) {
  if (argv.empty()) throw Error(Errc::invalid_argument, "run_command: argv is empty");
  const std::optional<std::string> path = find_program(argv[0]);
  if (!path) {
    throw Error(Errc::io, "cannot run `" + join_command(argv) + "`: '" + argv[0] +
                              "' was not found in PATH");
  }
  Pipe output = make_pipe(true);
  SpawnRequest request;
  request.path = *path;
  request.argv = argv;
  request.stdout_fd = output.write.get();
  request.stderr_fd = output.write.get();
  std::string failure;
  const pid_t pid = spawn(request, failure);
  if (pid < 0) throw Error(Errc::io, "cannot run `" + join_command(argv) + "`: " + failure);
  output.write.reset();

  CommandResult result;
  char buffer[4096];
  for (;;) {
    pollfd entry{output.read.get(), POLLIN, 0};
    const auto wait_ms = static_cast<int>(std::min<long long>(deadline.remaining_ms(), 1000));
    const int ready = ::poll(&entry, 1, wait_ms);
    if (ready < 0 && errno != EINTR) break;
    if (ready == 0 && deadline.expired()) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      static_cast<void>(wait_for_exit(pid));
      std::string message = join_command(argv);
      message.insert(0, 1, '`');
      message += "` did not finish in time; output: ";
      message += result.output;
      throw Error(Errc::timeout, message);
    }
    if (ready <= 0) continue;
    const ssize_t n = ::read(output.read.get(), buffer, sizeof buffer);
    if (n > 0) {
      result.output.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      break;
    }
  }
  result.status = wait_for_exit(pid);
  return result;
}

}  // namespace dfi::launch::detail
