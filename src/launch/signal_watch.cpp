#include "signal_watch.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <ctime>

#include "dfi/common/error.hpp"
#include "subprocess.hpp"

namespace dfi::launch::detail {
namespace {

constexpr std::array kWatchedSignals{SIGINT, SIGTERM, SIGHUP};

// The pipe lives for the whole process: a handler that is still running on another thread while
// a watch ends must never write into a descriptor number that has been closed and reused.
std::atomic<int> g_write_fd{-1};
std::atomic<int> g_read_fd{-1};
std::atomic<int> g_last_signal{0};
std::atomic<bool> g_watch_alive{false};

static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need lock-free atomics");

struct SavedState {
  std::array<struct sigaction, kWatchedSignals.size()> actions{};
  std::array<bool, kWatchedSignals.size()> installed{};
  sigset_t thread_mask{};
  bool sigpipe_was_pending = false;
};
SavedState g_saved;  // only touched by the thread owning the (single) live watch

extern "C" void on_signal(int signal_number) {
  const int saved_errno = errno;
  g_last_signal.store(signal_number);
  const int fd = g_write_fd.load();
  if (fd >= 0) {
    const char byte = 1;
    ssize_t written = ::write(fd, &byte, 1);  // a full pipe already wakes the reader
    static_cast<void>(written);
  }
  errno = saved_errno;
}

void create_pipe_once() {
  if (g_read_fd.load() >= 0) return;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw Error(Errc::io, "cannot create the launcher's signal pipe: " + errno_message(errno));
  }
  g_read_fd.store(fds[0]);
  g_write_fd.store(fds[1]);
}

bool sigpipe_pending() {
  sigset_t pending;
  ::sigemptyset(&pending);
  ::sigpending(&pending);
  return ::sigismember(&pending, SIGPIPE) == 1;
}

}  // namespace

SignalWatch::SignalWatch() {
  if (g_watch_alive.exchange(true)) {
    throw Error(Errc::already_exists, "only one cluster launcher may run per process at a time");
  }
  try {
    create_pipe_once();
  } catch (...) {
    g_watch_alive.store(false);
    throw;
  }
  static_cast<void>(take());

  for (std::size_t i = 0; i < kWatchedSignals.size(); ++i) {
    struct sigaction action {};
    action.sa_handler = on_signal;
    ::sigfillset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    struct sigaction previous {};
    ::sigaction(kWatchedSignals[i], nullptr, &previous);
    g_saved.installed[i] = previous.sa_handler != SIG_IGN;
    if (g_saved.installed[i]) ::sigaction(kWatchedSignals[i], &action, &g_saved.actions[i]);
  }

  g_saved.sigpipe_was_pending = sigpipe_pending();
  sigset_t block;
  ::sigemptyset(&block);
  ::sigaddset(&block, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &block, &g_saved.thread_mask);
}

SignalWatch::~SignalWatch() {
  if (!g_saved.sigpipe_was_pending && sigpipe_pending()) {
    sigset_t only_sigpipe;
    ::sigemptyset(&only_sigpipe);
    ::sigaddset(&only_sigpipe, SIGPIPE);
    const timespec no_wait{0, 0};
    static_cast<void>(::sigtimedwait(&only_sigpipe, nullptr, &no_wait));
  }
  ::pthread_sigmask(SIG_SETMASK, &g_saved.thread_mask, nullptr);
  for (std::size_t i = 0; i < kWatchedSignals.size(); ++i) {
    if (g_saved.installed[i]) ::sigaction(kWatchedSignals[i], &g_saved.actions[i], nullptr);
  }
  g_watch_alive.store(false);
}

int SignalWatch::fd() const noexcept { return g_read_fd.load(); }

int SignalWatch::take() noexcept {
  char buffer[64];
  while (::read(g_read_fd.load(), buffer, sizeof buffer) > 0) {
  }
  return g_last_signal.exchange(0);
}

}  // namespace dfi::launch::detail
