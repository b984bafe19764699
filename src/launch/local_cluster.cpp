#include "dfi/launch/local_cluster.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <optional>
#include <string_view>

#include "dfi/common/error.hpp"
#include "dfi/launch/child_process.hpp"
#include "dfi/launch/netns.hpp"
#include "signal_watch.hpp"
#include "subprocess.hpp"

namespace dfi::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often the launcher checks for ranks that have exited when no output arrives.
constexpr milliseconds kReapInterval{20};
// A line longer than this is forwarded in pieces rather than buffered without bound.
constexpr std::size_t kMaxLineBytes = 64 * 1024;
constexpr std::size_t kReadChunk = 16 * 1024;
// Reads per stream per wake-up, so that one chatty rank cannot starve the others.
constexpr int kReadsPerWakeup = 16;
// Reads per stream when draining after a rank ended (bounded in case something keeps writing).
constexpr int kReadsWhenDraining = 256;
constexpr std::size_t kTokenBytes = 16;

void validate(const ClusterOptions& options) {
  const auto bad = [](const std::string& what) {
    throw Error(Errc::invalid_argument, "dfi cluster: " + what);
  };
  if (options.nodes < 1) bad("nodes must be at least 1, not " + std::to_string(options.nodes));
  if (options.argv.empty() || options.argv[0].empty()) bad("no program to run (argv is empty)");
  if (options.transport != "shm" && options.transport != "tcp") {
    bad("transport must be \"shm\" or \"tcp\", not \"" + options.transport + "\"");
  }
  if (options.netns && options.transport != "tcp") {
    bad("netns mode runs every rank as a separate host and needs transport \"tcp\", not \"" +
        options.transport + "\"");
  }
  if (options.netns && options.nodes > kNetnsMaxRanks) {
    bad("netns mode supports at most " + std::to_string(kNetnsMaxRanks) + " nodes, not " +
        std::to_string(options.nodes));
  }
  if (!options.netns && !options.qdisc.empty()) bad("a qdisc needs netns mode (it shapes the namespaces' links)");
  if (options.timeout.count() < 0) bad("timeout must not be negative");
  if (options.grace.count() < 0) bad("grace must not be negative");
  for (const auto& [name, value] : options.extra_env) {
    if (name.empty() || name.find('=') != std::string::npos) {
      bad("environment variable name '" + name + "' is empty or contains '='");
    }
  }
}

std::string random_token() {
  std::array<unsigned char, kTokenBytes> bytes{};
  std::size_t filled = 0;
  while (filled < bytes.size()) {
    const ssize_t got = ::getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(Errc::io, "dfi cluster: cannot read random bytes for the registry token: " +
                                detail::errno_message(errno));
    }
    filled += static_cast<std::size_t>(got);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (const unsigned char byte : bytes) {
    token += kHex[byte >> 4];
    token += kHex[byte & 0xf];
  }
  return token;
}

// Variables every rank gets, in order; later entries override earlier ones with the same name.
using Settings = std::vector<std::pair<std::string, std::string>>;

// "rank 3" or "ranks 0, 1, 2".
std::string ranks_phrase(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (const int rank : ranks) {
    if (!text.empty()) text += ", ";
    text += std::to_string(rank);
  }
  return text;
}

struct OutputStream {
  detail::UniqueFd fd;
  std::string pending;  // bytes after the last newline forwarded
};

struct Rank {
  int index = 0;
  pid_t pid = -1;
  bool running = false;
  int stop_signal = 0;  // the last signal the launcher sent to stop it, 0 if none
  OutputStream out;
  OutputStream err;
};

// One supervised run: starts the ranks, forwards their output, reaps them and decides the result.
// Owned by the thread that called run_cluster().
class ClusterRun {
 public:
  ClusterRun(const ClusterOptions& options, std::ostream& out, std::ostream& err,
             detail::SignalWatch& signals, const NetnsTopology* topology, std::string program)
      : options_(options),
        out_(out),
        err_(err),
        signals_(signals),
        topology_(topology),
        program_(std::move(program)) {}

  // Anything still running (only on an exception path) is killed and reaped.
  ~ClusterRun() {
    for (Rank& rank : ranks_) {
      if (!rank.running) continue;
      ::kill(-rank.pid, SIGKILL);
      ::kill(rank.pid, SIGKILL);
      static_cast<void>(detail::wait_for_exit(rank.pid));
    }
  }
  ClusterRun(const ClusterRun&) = delete;
  ClusterRun& operator=(const ClusterRun&) = delete;

  int execute() {
    start_ranks();
    supervise();
    finish_output();
    return result_.value_or(0);
  }

 private:
  void start_ranks() {
    Settings settings{
        {"DFI_SIZE", std::to_string(options_.nodes)},
        {"DFI_LOCAL_RANKS", std::to_string(options_.nodes)},  // every rank runs on this machine
        {"DFI_TRANSPORT", options_.transport},
        {"DFI_REGISTRY", (options_.netns ? netns_rank_address(0) : std::string("127.0.0.1")) +
                             ":" + std::to_string(pick_free_port())},
        {"DFI_REGISTRY_TOKEN", random_token()},
        {"DFI_NET_DEVICES", options_.netns ? netns_rank_device() : std::string()},
        {"DFI_RANK", ""},
    };
    const std::size_t rank_slot = settings.size() - 1;
    settings.insert(settings.end(), options_.extra_env.begin(), options_.extra_env.end());

    ranks_.resize(static_cast<std::size_t>(options_.nodes));
    for (int index = 0; index < options_.nodes; ++index) {
      ranks_[static_cast<std::size_t>(index)].index = index;
    }
    for (int index = 0; index < options_.nodes; ++index) {
      if (const int signal_number = signals_.take(); signal_number != 0) {
        handle_signal(signal_number);
        return;
      }
      Rank& rank = ranks_[static_cast<std::size_t>(index)];
      settings[rank_slot].second = std::to_string(index);

      detail::Pipe out = detail::make_pipe(true);
      detail::Pipe err = detail::make_pipe(true);
      detail::UniqueFd netns_fd;
      if (topology_ != nullptr) {
        const std::string path = "/var/run/netns/" + topology_->rank_namespace(index);
        netns_fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!netns_fd.valid()) {
          throw Error(Errc::io, "dfi cluster: cannot open network namespace " + path + ": " +
                                    detail::errno_message(errno));
        }
      }
      detail::SpawnRequest request;
      request.path = program_;
      request.argv = options_.argv;
      request.env = detail::environment_with(settings);
      request.stdout_fd = out.write.get();
      request.stderr_fd = err.write.get();
      request.netns_fd = netns_fd.get();
      std::string failure;
      rank.pid = detail::spawn(request, failure);
      if (rank.pid < 0) {
        err_ << "dfi cluster: rank " << index << ": " << failure << '\n';
        set_result(kExitCannotExecute);
        terminate_all();
        return;
      }
      rank.running = true;
      rank.out.fd = std::move(out.read);
      rank.err.fd = std::move(err.read);
    }
    if (options_.timeout.count() > 0) timeout_at_ = Clock::now() + options_.timeout;
  }

  void supervise() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, bool>> sources;  // (rank, is_stdout) for fds[1..]
    while (any_running()) {
      check_deadlines();

      fds.assign(1, pollfd{signals_.fd(), POLLIN, 0});
      sources.clear();
      for (Rank& rank : ranks_) {
        if (rank.out.fd.valid()) {
          fds.push_back(pollfd{rank.out.fd.get(), POLLIN, 0});
          sources.emplace_back(&rank, true);
        }
        if (rank.err.fd.valid()) {
          fds.push_back(pollfd{rank.err.fd.get(), POLLIN, 0});
          sources.emplace_back(&rank, false);
        }
      }
      const int ready = ::poll(fds.data(), fds.size(), wait_ms());
      if (ready < 0 && errno != EINTR) {
        throw Error(Errc::io, "dfi cluster: poll failed: " + detail::errno_message(errno));
      }
      if (const int signal_number = signals_.take(); signal_number != 0) {
        handle_signal(signal_number);
      }
      for (std::size_t i = 1; ready > 0 && i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        auto [rank, is_stdout] = sources[i - 1];
        pump(*rank, is_stdout, kReadsPerWakeup);
      }
      reap();
      out_.flush();
      err_.flush();
    }
  }

  // Timeout, end of the grace period, and SIGKILL after SIGTERM.
  void check_deadlines() {
    const Clock::time_point now = Clock::now();
    if (timeout_at_ && now >= *timeout_at_ && !term_sent_) {
      err_ << "dfi cluster: timeout of " << options_.timeout.count()
           << " ms reached; ranks still running: " << join_ranks(running_ranks())
           << "; stopping them\n";
      set_result(kExitTimeout);
      terminate_all();
    }
    if (grace_until_ && now >= *grace_until_ && !term_sent_) {
      err_ << "dfi cluster: " << ranks_phrase(running_ranks())
           << " still running after the grace period of " << options_.grace.count()
           << " ms; sending SIGTERM\n";
      terminate_all();
    }
    if (kill_at_ && now >= *kill_at_ && !kill_sent_) {
      err_ << "dfi cluster: " << ranks_phrase(running_ranks()) << " still running "
           << kKillDelay.count() << " ms after SIGTERM; sending SIGKILL\n";
      signal_all(SIGKILL);
      kill_sent_ = true;
    }
  }

  // Until the next deadline, at most kReapInterval.
  int wait_ms() const {
    Clock::time_point wake = Clock::now() + kReapInterval;
    for (const auto& deadline : {timeout_at_, grace_until_, kill_at_}) {
      if (deadline) wake = std::min(wake, *deadline);
    }
    const auto left = std::chrono::duration_cast<milliseconds>(wake - Clock::now()).count();
    return static_cast<int>(std::max<long long>(left, 0));
  }

  void handle_signal(int signal_number) {
    if (!term_sent_) {
      err_ << "dfi cluster: received " << detail::signal_name(signal_number) << "; stopping "
           << ranks_phrase(running_ranks()) << '\n';
      set_result(kExitSignalBase + signal_number);
      terminate_all();
    } else if (!kill_sent_) {
      err_ << "dfi cluster: received " << detail::signal_name(signal_number)
           << " again; sending SIGKILL to " << ranks_phrase(running_ranks()) << '\n';
      signal_all(SIGKILL);
      kill_sent_ = true;
    }
  }

  // SIGTERM now, SIGKILL after kKillDelay.
  void terminate_all() {
    term_sent_ = true;
    if (!any_running()) return;
    signal_all(SIGTERM);
    kill_at_ = Clock::now() + kKillDelay;
  }

  // Signals every running rank's process group, and the rank itself in case it left the group.
  void signal_all(int signal_number) {
    for (Rank& rank : ranks_) {
      if (!rank.running) continue;
      rank.stop_signal = signal_number;
      if (::kill(-rank.pid, signal_number) != 0 || ::getpgid(rank.pid) != rank.pid) {
        ::kill(rank.pid, signal_number);
      }
    }
  }

  void reap() {
    for (Rank& rank : ranks_) {
      if (!rank.running) continue;
      int status = 0;
      const pid_t got = ::waitpid(rank.pid, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      rank.running = false;
      // Whatever the rank started and left behind in its process group ends with it. (Done right
      // away: while the group has members its id cannot be reused by another process.)
      ::kill(-rank.pid, SIGKILL);
      pump(rank, true, kReadsWhenDraining);
      pump(rank, false, kReadsWhenDraining);
      if (got < 0) {
        err_ << "dfi cluster: rank " << rank.index << " (pid " << rank.pid
             << ") cannot be waited for: " << detail::errno_message(errno) << '\n';
        record_failure();
        continue;
      }
      on_exit(rank, status);
    }
  }

  // "rank 2 exited with status 3", "rank 1 (pid 1234) was killed by signal 9 (Killed)".
  void on_exit(const Rank& rank, int status) {
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    err_ << "dfi cluster: rank " << rank.index;
    if (WIFSIGNALED(status)) err_ << " (pid " << rank.pid << ")";
    if (rank.stop_signal != 0 && WIFSIGNALED(status) && WTERMSIG(status) == rank.stop_signal) {
      err_ << " stopped by the launcher with " << detail::signal_name(rank.stop_signal) << '\n';
      return;
    }
    err_ << ' ' << detail::describe_wait_status(status);
    if (rank.stop_signal != 0) {
      err_ << " (after the launcher sent " << detail::signal_name(rank.stop_signal) << ")\n";
      return;
    }
    err_ << '\n';
    record_failure();
  }

  // A rank failed on its own: the others get the grace period, then SIGTERM.
  void record_failure() {
    set_result(kExitRankFailed);
    if (term_sent_ || grace_until_ || !any_running()) return;
    if (options_.grace.count() > 0) {
      err_ << "dfi cluster: giving " << ranks_phrase(running_ranks()) << " up to "
           << options_.grace.count() << " ms to finish\n";
    }
    grace_until_ = Clock::now() + options_.grace;
  }

  // Forwards what can be read from one of the rank's streams; closes it at end of file.
  void pump(Rank& rank, bool is_stdout, int max_reads) {
    OutputStream& stream = is_stdout ? rank.out : rank.err;
    std::ostream& sink = is_stdout ? out_ : err_;
    std::array<char, kReadChunk> buffer;
    for (int i = 0; i < max_reads && stream.fd.valid(); ++i) {
      const ssize_t n = ::read(stream.fd.get(), buffer.data(), buffer.size());
      if (n > 0) {
        stream.pending.append(buffer.data(), static_cast<std::size_t>(n));
        forward_lines(rank.index, stream, sink);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      stream.fd.reset();  // end of file, or an error that ends the stream
      flush_partial(rank.index, stream, sink);
    }
  }

  static void forward_lines(int index, OutputStream& stream, std::ostream& sink) {
    std::size_t begin = 0;
    for (;;) {
      const std::size_t newline = stream.pending.find('\n', begin);
      if (newline == std::string::npos) break;
      write_line(index, std::string_view(stream.pending).substr(begin, newline - begin), sink);
      begin = newline + 1;
    }
    stream.pending.erase(0, begin);
    if (stream.pending.size() >= kMaxLineBytes) flush_partial(index, stream, sink);
  }

  static void flush_partial(int index, OutputStream& stream, std::ostream& sink) {
    if (stream.pending.empty()) return;
    write_line(index, stream.pending, sink);
    stream.pending.clear();
  }

  static void write_line(int index, std::string_view line, std::ostream& sink) {
    sink << "[rank " << index << "] " << line << '\n';
  }

  // After the last rank ended: forward what is left and the last partial lines.
  void finish_output() {
    for (Rank& rank : ranks_) {
      pump(rank, true, kReadsWhenDraining);
      pump(rank, false, kReadsWhenDraining);
      flush_partial(rank.index, rank.out, out_);
      flush_partial(rank.index, rank.err, err_);
      rank.out.fd.reset();
      rank.err.fd.reset();
    }
    out_.flush();
    err_.flush();
  }

  bool any_running() const {
    return std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
  }

  std::vector<int> running_ranks() const {
    std::vector<int> running;
    for (const Rank& rank : ranks_) {
      if (rank.running) running.push_back(rank.index);
    }
    return running;
  }

  void set_result(int code) {
    if (!result_) result_ = code;
  }

  const ClusterOptions& options_;
  std::ostream& out_;
  std::ostream& err_;
  detail::SignalWatch& signals_;
  const NetnsTopology* topology_;
  const std::string program_;

  std::vector<Rank> ranks_;
  std::optional<int> result_;  // the first cause decides
  std::optional<Clock::time_point> timeout_at_;
  std::optional<Clock::time_point> grace_until_;
  std::optional<Clock::time_point> kill_at_;
  bool term_sent_ = false;
  bool kill_sent_ = false;
};

}  // namespace

int run_cluster(const ClusterOptions& options, std::ostream& out, std::ostream& err) {
  validate(options);
  detail::SignalWatch signals;

  const std::optional<std::string> program = find_program(options.argv[0]);
  if (!program) {
    err << "dfi cluster: cannot execute '" << options.argv[0] << "': "
        << (options.argv[0].find('/') != std::string::npos ? "no such file"
                                                            : "not found in PATH")
        << '\n';
    err.flush();
    return kExitCannotExecute;
  }

  std::optional<NetnsTopology> topology;
  if (options.netns) {
    if (const std::string why = netns_unavailable_reason(); !why.empty()) {
      throw Error(Errc::io, "dfi cluster: netns mode is not available: " + why);
    }
    topology.emplace(options.nodes, options.qdisc);
  }

  int result = 0;
  if (const int signal_number = signals.take(); signal_number != 0) {
    err << "dfi cluster: received " << detail::signal_name(signal_number)
        << " while setting up; no rank was started\n";
    result = kExitSignalBase + signal_number;
  } else {
    ClusterRun run(options, out, err, signals, topology ? &*topology : nullptr, *program);
    result = run.execute();
  }

  if (topology) {
    for (const std::string& problem : topology->remove()) {
      err << "dfi cluster: warning: " << problem << '\n';
    }
  }
  err.flush();
  return result;
}

}  // namespace dfi::launch
