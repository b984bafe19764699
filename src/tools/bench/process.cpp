#include "process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "dfi/common/error.hpp"

extern char** environ;

namespace dfi::tools::bench {
namespace {

std::string errno_text() { return std::strerror(errno); }

// The environment of the child: ours, with `overrides` replacing or adding variables.
std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    bool replaced = false;
    for (const auto& [name, value] : overrides) {
      if (entry.size() > name.size() && entry.substr(0, name.size()) == name &&
          entry[name.size()] == '=') {
        replaced = true;
        break;
      }
    }
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : overrides) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  result.reserve(strings.size() + 1);
  for (std::string& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

Process Process::start(const ProcessSpec& spec) {
  if (spec.argv.empty()) throw Error(Errc::invalid_argument, "bench: empty command");
  char path[] = "/tmp/dfi-bench-XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0)
    throw Error(Errc::io, std::string("bench: cannot create an output file: ") + errno_text());
  ::unlink(path);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);

  std::vector<std::string> argv = spec.argv;
  std::vector<std::string> env = child_environment(spec.env);
  std::vector<char*> argv_ptrs = pointers(argv);
  std::vector<char*> env_ptrs = pointers(env);
  const pid_t parent = ::getpid();

  Process process;
  process.started_ = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    throw Error(Errc::io, "bench: fork for '" + spec.argv[0] + "' failed: " + errno_text());
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::execvpe(argv_ptrs[0], argv_ptrs.data(), env_ptrs.data());
    const char* reason = std::strerror(errno);
    const char prefix[] = "bench: cannot execute ";
    (void)!::write(STDERR_FILENO, prefix, sizeof prefix - 1);
    (void)!::write(STDERR_FILENO, argv_ptrs[0], std::strlen(argv_ptrs[0]));
    (void)!::write(STDERR_FILENO, ": ", 2);
    (void)!::write(STDERR_FILENO, reason, std::strlen(reason));
    (void)!::write(STDERR_FILENO, "\n", 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so kill_group works at once
  process.pid_ = pid;
  process.output_fd_ = fd;
  return process;
}

Process::Process(Process&& other) noexcept { *this = std::move(other); }

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    close();
    pid_ = std::exchange(other.pid_, -1);
    output_fd_ = std::exchange(other.output_fd_, -1);
    status_ = other.status_;
    reaped_ = std::exchange(other.reaped_, false);
    started_ = other.started_;
  }
  return *this;
}

Process::~Process() { close(); }

void Process::close() noexcept {
  if (pid_ > 0 && !reaped_) {
    kill_group(SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
  if (output_fd_ >= 0) ::close(output_fd_);
  output_fd_ = -1;
  pid_ = -1;
}

void Process::kill_group(int signal) noexcept {
  if (pid_ <= 0 || reaped_) return;
  if (::kill(-pid_, signal) != 0) ::kill(pid_, signal);
}

bool Process::running() {
  if (pid_ <= 0 || reaped_) return false;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    status_ = status;
    reaped_ = true;
    ::kill(-pid_, SIGKILL);  // anything the child left running in its group
    return false;
  }
  return true;
}

std::string Process::output() const {
  std::string text;
  if (output_fd_ < 0) return text;
  char buffer[65536];
  off_t offset = 0;
  for (;;) {
    ssize_t n = ::pread(output_fd_, buffer, sizeof buffer, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    offset += n;
  }
  return text;
}

ProcessResult Process::wait(std::chrono::milliseconds timeout) {
  ProcessResult result;
  const auto deadline = started_ + timeout;
  auto pause = std::chrono::microseconds(200);
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      result.timed_out = true;
      kill_group(SIGTERM);
      const auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (running() && std::chrono::steady_clock::now() < hard) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (running()) {
        kill_group(SIGKILL);
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        status_ = status;
        reaped_ = true;
      }
      break;
    }
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(10)) pause *= 2;
  }
  result.exit_code = exit_code_of(status_);
  result.output = output();
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  return result;
}

ProcessResult run_process(const ProcessSpec& spec, std::chrono::milliseconds timeout) {
  Process process = Process::start(spec);
  return process.wait(timeout);
}

ListeningServer start_listening_server(const std::function<ProcessSpec(int port)>& make_spec,
                                       const std::string& what, std::chrono::milliseconds bound,
                                       int attempts) {
  std::string last_failure;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    const int port = pick_free_port();
    const ProcessSpec spec = make_spec(port);
    ListeningServer server{Process::start(spec), port};
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (std::chrono::steady_clock::now() < deadline && server.process.running()) {
      if (is_listening(port) && server.process.running()) return server;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ProcessResult s = server.process.wait(std::chrono::milliseconds(0));
    last_failure = "server (" + shell_join(spec.argv) + ") " +
                   (s.timed_out ? "did not listen within " + std::to_string(bound.count()) + " ms"
                                : "exited with status " + std::to_string(s.exit_code)) +
                   ":\n" + tail_lines(s.output, 5);
    if (s.output.find("Address already in use") == std::string::npos)
      throw Error(Errc::io, "bench: " + what + " " + last_failure);
  }
  throw Error(Errc::io, "bench: " + what + " could not get a port after " +
                            std::to_string(attempts) + " attempts; last: " + last_failure);
}

std::optional<std::string> find_in_path(std::string_view program) {
  if (program.empty()) return std::nullopt;
  if (program.find('/') != std::string_view::npos) {
    std::string path(program);
    if (::access(path.c_str(), X_OK) == 0) return path;
    return std::nullopt;
  }
  const char* path_env = std::getenv("PATH");
  std::string path_list = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  std::stringstream stream(path_list);
  std::string dir;
  while (std::getline(stream, dir, ':')) {
    std::string candidate = dir.empty() ? std::string(".") : dir;
    candidate.push_back('/');
    candidate.append(program);
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

int pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(Errc::io, "bench: socket() for a free port failed: " + errno_text());
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    std::string reason = errno_text();
    ::close(fd);
    throw Error(Errc::io, "bench: cannot find a free TCP port: " + reason);
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

bool is_listening(int port) {
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      // "  sl  local_address rem_address   st ..." with local_address = HEXADDR:HEXPORT
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      if (!(fields >> slot >> local >> remote >> state)) continue;
      const std::size_t colon = local.rfind(':');
      if (colon == std::string::npos || state != "0A") continue;  // 0A = LISTEN
      if (std::strtol(local.c_str() + colon + 1, nullptr, 16) == port) return true;
    }
  }
  return false;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) {
    if (!line.empty()) line += ' ';
    const bool plain = !arg.empty() && arg.find_first_not_of(
                                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789-_./=:,+@%") == std::string::npos;
    // "$NAME" stays a variable reference (placeholders such as $PORT in recorded commands).
    const bool variable =
        arg.size() > 1 && arg[0] == '$' &&
        arg.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ_", 1) == std::string::npos;
    if (plain || variable) {
      line += arg;
      continue;
    }
    line += '\'';
    for (char c : arg) {
      if (c == '\'') {
        line += "'\\''";
      } else {
        line += c;
      }
    }
    line += '\'';
  }
  return line;
}

std::string tail_lines(std::string_view text, int lines) {
  std::size_t end = text.size();
  while (end > 0 && text[end - 1] == '\n') --end;
  std::size_t start = end;
  int seen = 0;
  while (start > 0) {
    if (text[start - 1] == '\n' && ++seen == lines) break;
    --start;
  }
  return std::string(text.substr(start, end - start));
}

}  // namespace dfi::tools::bench
