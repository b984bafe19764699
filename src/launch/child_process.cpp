#include "dfi/launch/child_process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>
#include <utility>

#include "dfi/common/error.hpp"
#include "subprocess.hpp"

namespace dfi::launch {
namespace {

using Clock = std::chrono::steady_clock;

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

bool is_executable_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

// An unlinked, close-on-exec temporary file for the child's output.
detail::UniqueFd output_file(const std::string& command) {
  char path[] = "/tmp/dfi-child-XXXXXX";
  detail::UniqueFd fd(::mkostemp(path, O_CLOEXEC));
  if (!fd.valid()) {
    throw Error(Errc::io, "cannot run `" + command + "`: cannot create an output file in /tmp: " +
                              detail::errno_message(errno));
  }
  ::unlink(path);
  return fd;
}

}  // namespace

ChildProcess ChildProcess::start(const ChildSpec& spec) {
  if (spec.argv.empty()) throw Error(Errc::invalid_argument, "ChildProcess: argv is empty");
  const std::string command = detail::join_command(spec.argv);
  const std::optional<std::string> path = find_program(spec.argv[0]);
  if (!path) {
    throw Error(Errc::io,
                "cannot run `" + command + "`: '" + spec.argv[0] + "' was not found in PATH");
  }
  detail::UniqueFd output = output_file(command);
  detail::SpawnRequest request;
  request.path = *path;
  request.argv = spec.argv;
  request.env = detail::environment_with(spec.env);
  request.stdout_fd = output.get();
  request.stderr_fd = output.get();

  ChildProcess child;
  child.started_ = Clock::now();
  std::string failure;
  child.pid_ = detail::spawn(request, failure);
  if (child.pid_ < 0) throw Error(Errc::io, "cannot run `" + command + "`: " + failure);
  child.output_fd_ = output.release();
  // Wait on the pidfd where the kernel has one; else poll waitpid (see wait()).
  // (The system call directly: glibc 2.36's <sys/pidfd.h> cannot be used from C++.)
  child.pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, child.pid_, 0));
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept { *this = std::move(other); }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    close();
    pid_ = std::exchange(other.pid_, -1);
    output_fd_ = std::exchange(other.output_fd_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    status_ = other.status_;
    reaped_ = std::exchange(other.reaped_, false);
    started_ = other.started_;
  }
  return *this;
}

ChildProcess::~ChildProcess() { close(); }

void ChildProcess::close() noexcept {
  if (pid_ > 0 && !reaped_) {
    kill_group(SIGKILL);
    reap();
  }
  if (output_fd_ >= 0) ::close(output_fd_);
  if (pidfd_ >= 0) ::close(pidfd_);
  output_fd_ = pidfd_ = -1;
  pid_ = -1;
}

void ChildProcess::kill_group(int signal) noexcept {
  if (pid_ <= 0 || reaped_) return;
  if (::kill(-pid_, signal) != 0) ::kill(pid_, signal);
}

void ChildProcess::reap() noexcept {
  status_ = detail::wait_for_exit(pid_);
  reaped_ = true;
}

bool ChildProcess::running() {
  if (pid_ <= 0 || reaped_) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
  status_ = status;
  reaped_ = true;
  ::kill(-pid_, SIGKILL);  // anything the child left running in its group
  return false;
}

std::string ChildProcess::output() const {
  std::string text;
  if (output_fd_ < 0) return text;
  char buffer[65536];
  off_t offset = 0;
  for (;;) {
    const ssize_t n = ::pread(output_fd_, buffer, sizeof buffer, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    offset += n;
  }
  return text;
}

ChildResult ChildProcess::wait(std::chrono::milliseconds timeout) {
  // Until `until`: blocks on the pidfd (readable when the child exits), else naps 10 ms.
  auto wait_until = [this](Clock::time_point until) {
    while (running()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) return false;
      if (pidfd_ >= 0) {
        pollfd entry{pidfd_, POLLIN, 0};
        static_cast<void>(::poll(&entry, 1, static_cast<int>(std::min<long long>(left, 1000))));
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min<long long>(left, 10)));
      }
    }
    return true;
  };
  ChildResult result;
  if (!wait_until(started_ + timeout)) {
    result.timed_out = true;
    kill_group(SIGTERM);
    if (!wait_until(Clock::now() + std::chrono::seconds(1))) {
      kill_group(SIGKILL);
      reap();
    }
  }
  result.exit_code = exit_code_of(status_);
  result.output = output();
  result.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  return result;
}

ChildResult run_child(const ChildSpec& spec, std::chrono::milliseconds timeout) {
  return ChildProcess::start(spec).wait(timeout);
}

std::optional<std::string> find_program(std::string_view name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string_view::npos) {
    struct stat info {};
    const std::string path(name);
    if (::stat(path.c_str(), &info) == 0) return path;
    return std::nullopt;
  }
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env != nullptr ? path_env : "/bin:/usr/bin";
  std::size_t begin = 0;
  while (begin <= path.size()) {
    std::size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    // POSIX: an empty PATH entry is the current directory.
    std::string candidate = end > begin ? path.substr(begin, end - begin) : std::string(".");
    candidate += '/';
    candidate += name;
    if (is_executable_file(candidate)) return candidate;
    begin = end + 1;
  }
  return std::nullopt;
}

int pick_free_port() {
  const detail::UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    throw Error(Errc::io, "cannot create a socket to pick a free TCP port: " +
                              detail::errno_message(errno));
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw Error(Errc::io, "cannot pick a free TCP port on 127.0.0.1: " +
                              detail::errno_message(errno));
  }
  return ntohs(address.sin_port);
}

}  // namespace dfi::launch
