// One error vocabulary for every DFI layer.
//
// Setup calls and errors that end a flow throw dfi::Error. Data-path calls return dfi::Status,
// which is a single enum in the common case (no allocation) and carries a message only when
// something went wrong. Every message names the flow or object, the peer and what was expected,
// and is composed where the error is decided.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace dfi {

// What kind of failure, ordered by how much of the system it takes down.
enum class Errc {
  ok = 0,
  retry,             // transient: the same call may succeed later (ring full, not yet published)
  timeout,           // a bounded wait ran out
  invalid_argument,  // the caller passed something malformed; nothing was changed
  not_found,         // a named object (record, flow, peer) does not exist
  already_exists,    // a name that must be unique was taken
  protocol,          // a peer or the registry sent something malformed
  io,                // an operating-system call failed (socket, fork, pipe)
  peer_failed,       // a remote process died or became unreachable
  flow_failed,       // the flow cannot continue (a member failed, or it was aborted)
  fatal,             // internal error; the process should stop
};

// A short lowercase name for an Errc ("peer_failed"), for messages and logs.
std::string_view errc_name(Errc code) noexcept;

// The exception thrown by setup calls and by errors that end a flow.
class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

// Result of a data-path call. Cheap to copy when ok; carries a message otherwise.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Errc code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool is_ok() const noexcept { return code_ == Errc::ok; }
  explicit operator bool() const noexcept { return is_ok(); }
  Errc code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

  // Throws dfi::Error if this status is not ok.
  void throw_if_error() const {
    if (!is_ok()) throw Error(code_, message_);
  }

 private:
  Errc code_ = Errc::ok;
  std::string message_;
};

}  // namespace dfi
