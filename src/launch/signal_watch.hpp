// Private to the launch layer: while a launcher runs, SIGINT, SIGTERM and SIGHUP become readable
// bytes on a pipe the launcher polls (the self-pipe trick), so that it can stop its ranks and
// remove its namespaces instead of dying with them still around.
#pragma once

namespace dfi::launch::detail {

class SignalWatch {
 public:
  // Installs handlers for SIGINT, SIGTERM and SIGHUP (a signal the process ignores stays ignored)
  // and blocks SIGPIPE in the calling thread, so that writing to a closed output stream fails
  // with EPIPE instead of killing the launcher. Throws dfi::Error(Errc::already_exists) if
  // another SignalWatch is alive, dfi::Error(Errc::io) if the pipe cannot be created.
  SignalWatch();
  // Restores the previous handlers and the thread's signal mask; a SIGPIPE raised meanwhile is
  // discarded. Must run on the thread that constructed the watch.
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  // Becomes readable (POLLIN) when a signal arrives.
  int fd() const noexcept;
  // The most recent signal received since the last call (and drains fd()), or 0 if none.
  int take() noexcept;
};

}  // namespace dfi::launch::detail
