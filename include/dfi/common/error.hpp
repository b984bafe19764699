// One error vocabulary for every DFI layer.
//
// Setup calls and errors that end a flow throw dfi::Error. Data-path calls return dfi::Status,
// one word that allocates only when it carries a message (an error other than a bare code). Every
// message names the flow or object, the peer and what was expected, and is composed where the error
// is decided.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dfi {

// What kind of failure, ordered by how much of the system it takes down.
enum class Errc {
  ok = 0,
  retry,             // transient: the same call may succeed later (ring full, not yet published)
  gap,               // ordered replication: numbers that will never arrive (call again to go on)
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

// Result of a data-path call: one word, so returning it costs what returning a pointer costs.
//
//   ok                      null; never allocates
//   a code without message  a tagged word, (code << 1) | 1; never allocates. Status(Errc) and
//                           Status(code, "") make one. The data path returns Errc::retry this
//                           way (the one exception: the gap event of ReplicateTarget's
//                           consume(TupleBatch&), whose message names the missing numbers)
//   a code with a message   a pointer to a heap block {code, message}: real errors, which are
//                           rare. Copying clones the block; moving steals it and leaves the
//                           moved-from status with the same code and no message
//
// message() is "" when ok, the code's errc_name ("retry", "timeout") for a code without a message,
// else the message.
class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  explicit Status(Errc code) noexcept : bits_(bare(code)) {}
  // Errc::ok makes an ok status (the message is dropped); an empty message makes a bare code.
  Status(Errc code, std::string message);
  static Status ok() noexcept { return {}; }

  Status(const Status& other) : bits_(other.has_block() ? other.clone() : other.bits_) {}
  Status(Status&& other) noexcept : bits_(other.bits_) {
    if (has_block()) other.bits_ = bare(block()->code);
  }
  Status& operator=(const Status& other) {
    if (this != &other) *this = Status(other);
    return *this;
  }
  Status& operator=(Status&& other) noexcept {
    if (this != &other) {
      release();
      bits_ = other.bits_;
      if (has_block()) other.bits_ = bare(block()->code);
    }
    return *this;
  }
  ~Status() { release(); }

  bool is_ok() const noexcept { return bits_ == 0; }
  explicit operator bool() const noexcept { return is_ok(); }
  Errc code() const noexcept {
    if ((bits_ & kBareBit) != 0) return static_cast<Errc>(bits_ >> 1);
    return bits_ == 0 ? Errc::ok : block()->code;
  }
  const std::string& message() const noexcept;

  // Throws dfi::Error if this status is not ok.
  void throw_if_error() const {
    if (!is_ok()) throw_error();
  }

 private:
  struct Block {
    Errc code;
    std::string message;
  };
  // Set in a bare code's word; a Block is aligned, so its address has bit 0 clear.
  static constexpr std::uintptr_t kBareBit = 1;

  static std::uintptr_t bare(Errc code) noexcept {
    return code == Errc::ok ? 0 : (static_cast<std::uintptr_t>(code) << 1) | kBareBit;
  }
  bool has_block() const noexcept { return bits_ != 0 && (bits_ & kBareBit) == 0; }
  Block* block() const noexcept { return reinterpret_cast<Block*>(bits_); }
  std::uintptr_t clone() const;
  // The check inline (an ok status costs nothing to destroy), the delete out of line.
  void release() noexcept {
    if (has_block()) [[unlikely]] delete_block();
  }
  void delete_block() noexcept;
  [[noreturn]] void throw_error() const;

  std::uintptr_t bits_ = 0;
};

static_assert(sizeof(Status) == sizeof(void*), "Status is one word");

}  // namespace dfi
