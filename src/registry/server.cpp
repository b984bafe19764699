// The registry server: one poll loop thread owns every connection and all registry state, so
// requests need no locks and a parked wait or barrier blocks nobody. Only stop() crosses threads,
// through a self-pipe.
//
// A connection moves through phases: open (requests are read and answered one at a time),
// closing (a final reply is being flushed), draining (our side is shut down; the peer's leftover
// input is discarded until it closes or kLingerTimeout passes, so it receives the final reply
// instead of a reset), dead (reaped at the end of the loop pass). Every wait in the loop has a
// deadline: hello, an incomplete frame, a reply the peer does not read, a parked request.
//
// A malformed request (protocol.hpp lists every kind and its message) is answered with a
// `protocol` error frame and ends the connection (fail()); no client input is trusted to size a
// buffer before it arrives, so a hostile length costs nothing but the check.
#include "dfi/registry/server.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dfi/common/config.hpp"
#include "dfi/common/error.hpp"
#include "net.hpp"
#include "protocol.hpp"

namespace dfi::registry {
namespace {

using Clock = std::chrono::steady_clock;
using protocol::Json;

constexpr auto kWriteTimeout = std::chrono::seconds(10);         // reply queued -> reply sent
constexpr auto kLingerTimeout = std::chrono::seconds(1);         // final reply sent -> close
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);  // after EMFILE and friends
constexpr std::size_t kReadChunk = 64 * 1024;
// An emptied input buffer that grew beyond this is released, so an idle connection that once
// sent a large frame does not keep its memory.
constexpr std::size_t kKeptInputCapacity = 2 * kReadChunk;
constexpr std::size_t kRejectSlack = 64;  // rejected connections lingering beyond the limit
constexpr int kListenBacklog = 128;

enum class Phase { open, closing, draining, dead };
enum class Pending { none, wait, wait_all, barrier, members };

// A parked wait_all: the names awaited, in request order, and which of them are settled
// (published, or skipped because their publisher left).
struct AwaitAll {
  std::vector<std::string> names;
  std::vector<int> publishers;  // empty, or one per name: the rank expected to publish it, -1 none
  bool skip_dead = false;
  std::vector<char> settled;    // per name
  std::vector<char> skipped;    // per name: settled as null (its publisher left unpublished)
  std::size_t unsettled = 0;
};

struct Connection {
  std::uint64_t id = 0;
  net::Fd fd;
  Phase phase = Phase::open;
  bool authenticated = false;
  bool eof = false;  // the peer shut down its sending side
  Clock::time_point opened;

  std::string in;                                // received, not yet parsed
  std::optional<Clock::time_point> frame_since;  // when the incomplete frame in `in` began
  std::string out;                               // queued reply bytes
  std::size_t out_sent = 0;
  std::optional<Clock::time_point> out_since;  // when `out` first could not be sent
  Clock::time_point linger_until;

  Pending pending = Pending::none;  // a parked wait, wait_all, barrier or members watch
  std::string pending_name;
  AwaitAll await;  // the parked wait_all (pending == Pending::wait_all)
  std::int64_t pending_timeout_ms = 0;
  Clock::time_point pending_deadline;

  std::set<int> ranks;  // memberships held by this connection

  bool has_output() const { return out_sent < out.size(); }
};

struct Member {
  std::uint64_t connection = 0;
  std::string info;
};

struct BarrierRound {
  int count = 0;
  std::vector<std::uint64_t> arrived;
};

bool tokens_equal(const std::string& a, const std::string& b) {
  // Compare every byte regardless of where they differ, so timing does not leak the token.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

int ms_until(Clock::time_point now, Clock::time_point at) {
  if (at <= now) return 0;
  // Round up so the loop does not wake just before a deadline and spin.
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(at - now).count();
  return static_cast<int>(std::min<long long>(ms, INT_MAX));
}

std::string ms_text(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

// Thrown inside request handling for a malformed request; ends the connection.
struct ProtocolViolation {
  std::string message;
};

// "(12 of 36 body bytes)": how far the incomplete frame at the front of `in` got.
std::string frame_progress(const std::string& in) {
  if (in.size() < protocol::kHeaderBytes) {
    return "(" + std::to_string(in.size()) + " of " + std::to_string(protocol::kHeaderBytes) +
           " header bytes)";
  }
  return "(" + std::to_string(in.size() - protocol::kHeaderBytes) + " of " +
         std::to_string(protocol::get_length(in.data())) + " body bytes)";
}

// All registry state and connections; used only by the loop thread (run()) after construction.
class Loop {
 public:
  Loop(net::Fd listen_fd, int wake_fd, std::string address, ServerOptions options)
      : listen_fd_(std::move(listen_fd)),
        wake_fd_(wake_fd),
        address_(std::move(address)),
        options_(std::move(options)),
        read_buffer_(kReadChunk) {}

  void run();

 private:
  void build_poll_set(Clock::time_point now);
  int poll_timeout(Clock::time_point now) const;
  void accept_all(Clock::time_point now);
  void on_events(Connection& c, short revents, Clock::time_point now);
  void read_some(Connection& c, Clock::time_point now);
  void drain_some(Connection& c);
  void process_input(Connection& c, Clock::time_point now);
  void expire(Connection& c, Clock::time_point now);
  void shutdown_all();

  void handle(Connection& c, const Json& request, Clock::time_point now);
  void handle_hello(Connection& c, const Json& request);
  void handle_publish(Connection& c, const Json& request);
  void handle_lookup(Connection& c, const Json& request);
  void handle_wait(Connection& c, const Json& request, Clock::time_point now);
  void handle_wait_all(Connection& c, const Json& request, Clock::time_point now);
  // Settles what it can of c's wait_all (published names; names whose publisher is no member)
  // and answers it when everything is settled or a publisher left; true when answered.
  bool settle(Connection& c);
  // Answers c's wait_all with `message` and forgets it in awaited_.
  void finish_await(Connection& c, const Json& message);
  void forget_await(Connection& c);
  void handle_remove(Connection& c, const Json& request);
  void handle_join(Connection& c, const Json& request);
  void handle_members(Connection& c, const Json& request, Clock::time_point now);
  // The members reply: {"ok":true,"version":V,"members":[...]}.
  Json members_reply() const;
  // Counts a membership change and answers every parked members watch.
  void members_changed();
  void handle_barrier(Connection& c, const Json& request, Clock::time_point now);

  void reply(Connection& c, const Json& message);
  void reply_error(Connection& c, Errc code, const std::string& message);
  // Finishes c's parked request with `message`.
  void complete_pending(Connection& c, const Json& message);
  // Replies with a protocol error, then closes the connection.
  void fail(Connection& c, const std::string& message);
  // Ends c's registry presence (memberships, barrier arrival, parked request).
  void release_state(Connection& c);
  void begin_close(Connection& c);
  void drop(Connection& c);
  void flush(Connection& c);
  void start_draining(Connection& c);
  void withdraw_arrival(Connection& c);
  std::size_t open_connections() const;

  net::Fd listen_fd_;
  int wake_fd_;
  std::string address_;
  ServerOptions options_;
  std::vector<char> read_buffer_;
  std::vector<pollfd> poll_set_;
  std::vector<std::uint64_t> poll_ids_;  // connection id of poll_set_[i + 2]
  Clock::time_point accept_paused_until_{};

  std::map<std::uint64_t, Connection> connections_;
  std::uint64_t next_id_ = 1;
  std::map<std::string, std::string> records_;
  std::map<int, Member> members_;
  std::uint64_t members_version_ = 1;  // counts membership changes
  std::map<std::string, BarrierRound> barriers_;
  // Record name -> the connections whose parked wait_all awaits it, with the name's place in
  // their request (an index, so that a publish touches only its waiters, and of each only that
  // name: a gather of N waiters by N names costs N^2, not N^3).
  std::unordered_map<std::string, std::vector<std::pair<std::uint64_t, std::size_t>>> awaited_;
};

// ---- loop -------------------------------------------------------------------------------------

void Loop::run() {
  for (;;) {
    Clock::time_point now = Clock::now();
    build_poll_set(now);
    const int ready = ::poll(poll_set_.data(), poll_set_.size(), poll_timeout(now));
    if (ready < 0) {
      if (errno != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (poll_set_[0].revents != 0) break;  // stop() was called
    now = Clock::now();
    if ((poll_set_[1].revents & POLLIN) != 0) accept_all(now);

    // Phase 1: socket I/O for every ready connection, so hang-ups seen in this pass are applied
    // (memberships dropped, arrivals withdrawn) before any request of this pass is answered.
    for (std::size_t i = 0; i < poll_ids_.size(); ++i) {
      const short revents = poll_set_[i + 2].revents;
      if (revents == 0) continue;
      auto it = connections_.find(poll_ids_[i]);
      if (it != connections_.end()) on_events(it->second, revents, now);
    }
    // Phase 2: requests, then deadlines.
    for (auto& [id, c] : connections_) process_input(c, now);
    now = Clock::now();
    for (auto& [id, c] : connections_) expire(c, now);
    std::erase_if(connections_,
                  [](const auto& entry) { return entry.second.phase == Phase::dead; });
  }
  shutdown_all();
}

void Loop::build_poll_set(Clock::time_point now) {
  poll_set_.clear();
  poll_ids_.clear();
  poll_set_.push_back({wake_fd_, POLLIN, 0});
  const bool accepting = now >= accept_paused_until_;
  poll_set_.push_back({accepting ? listen_fd_.get() : -1, POLLIN, 0});
  for (const auto& [id, c] : connections_) {
    short events = 0;
    switch (c.phase) {
      case Phase::open:
        if (c.has_output()) {
          events = POLLOUT;
        } else if (c.pending != Pending::none) {
          events = POLLRDHUP;  // only watch for the peer going away
        } else {
          events = POLLIN | POLLRDHUP;
        }
        break;
      case Phase::closing: events = POLLOUT; break;
      case Phase::draining: events = POLLIN; break;
      case Phase::dead: continue;
    }
    poll_set_.push_back({c.fd.get(), events, 0});
    poll_ids_.push_back(id);
  }
}

int Loop::poll_timeout(Clock::time_point now) const {
  std::optional<Clock::time_point> next;
  auto consider = [&](Clock::time_point at) {
    if (!next || at < *next) next = at;
  };
  if (now < accept_paused_until_) consider(accept_paused_until_);
  for (const auto& [id, c] : connections_) {
    if (c.phase == Phase::draining) consider(c.linger_until);
    if (c.out_since) consider(*c.out_since + kWriteTimeout);
    if (c.phase != Phase::open) continue;
    if (!c.authenticated) consider(c.opened + options_.hello_timeout);
    if (c.pending != Pending::none) consider(c.pending_deadline);
    if (c.frame_since && c.pending == Pending::none) {
      consider(*c.frame_since + options_.frame_timeout);
    }
  }
  return next ? ms_until(now, *next) : -1;
}

std::size_t Loop::open_connections() const {
  return static_cast<std::size_t>(
      std::count_if(connections_.begin(), connections_.end(),
                    [](const auto& entry) { return entry.second.phase == Phase::open; }));
}

void Loop::accept_all(Clock::time_point now) {
  for (;;) {
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // Out of descriptors or memory: stop accepting for a moment instead of spinning on a
        // listen socket that stays readable.
        accept_paused_until_ = now + kAcceptBackoff;
      }
      return;
    }
    net::Fd owned(fd);
    if (connections_.size() >= options_.max_connections + kRejectSlack) continue;  // closes it
    net::set_no_delay(fd);
    net::set_dead_after(fd, options_.dead_after);
    const std::uint64_t id = next_id_++;
    Connection& c = connections_[id];
    c.id = id;
    c.fd = std::move(owned);
    c.opened = now;
    if (open_connections() > options_.max_connections) {
      reply_error(c, Errc::retry,
                  "registry at " + address_ + ": too many connections (limit " +
                      std::to_string(options_.max_connections) + ")");
      begin_close(c);
    }
  }
}

void Loop::on_events(Connection& c, short revents, Clock::time_point now) {
  if (c.phase == Phase::dead) return;
  if ((revents & POLLNVAL) != 0) {
    drop(c);
    return;
  }
  if (c.phase == Phase::draining) {
    drain_some(c);
    return;
  }
  if ((revents & POLLERR) != 0) {
    drop(c);
    return;
  }
  if ((revents & POLLOUT) != 0) flush(c);
  if (c.phase != Phase::open) return;
  if ((revents & (POLLIN | POLLHUP | POLLRDHUP)) != 0) {
    if (c.pending != Pending::none || c.has_output()) {
      // The peer hung up while its request is parked (or while we still owe it a reply).
      if ((revents & (POLLHUP | POLLRDHUP)) != 0) drop(c);
      return;
    }
    read_some(c, now);
  }
}

void Loop::read_some(Connection& c, Clock::time_point now) {
  for (;;) {
    const ssize_t n = ::recv(c.fd.get(), read_buffer_.data(), read_buffer_.size(), MSG_DONTWAIT);
    if (n > 0) {
      if (c.in.empty()) c.frame_since = now;
      c.in.append(read_buffer_.data(), static_cast<std::size_t>(n));
      return;  // one chunk per pass bounds `in`; poll is level-triggered
    }
    if (n == 0) {
      c.eof = true;
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    drop(c);
    return;
  }
}

void Loop::drain_some(Connection& c) {
  for (;;) {
    const ssize_t n = ::recv(c.fd.get(), read_buffer_.data(), read_buffer_.size(), MSG_DONTWAIT);
    if (n > 0) return;  // discarded; come back on the next pass
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.phase = Phase::dead;  // EOF or error: the peer has our reply or is gone
    return;
  }
}

void Loop::process_input(Connection& c, Clock::time_point now) {
  while (c.phase == Phase::open && c.pending == Pending::none && !c.has_output() &&
         c.in.size() >= protocol::kHeaderBytes) {
    // The length is checked before anything is sized by it; `in` only grows by what arrived.
    const std::uint32_t length = protocol::get_length(c.in.data());
    const std::size_t limit = c.authenticated ? kMaxRequestBytes : kMaxHelloBytes;
    if (length > limit) {
      fail(c, "registry: frame of " + std::to_string(length) + " bytes exceeds the limit of " +
                  std::to_string(limit) + " bytes");
      return;
    }
    if (c.in.size() < protocol::kHeaderBytes + length) break;
    std::string why;
    std::optional<Json> request =
        protocol::parse_object(std::string_view(c.in).substr(protocol::kHeaderBytes, length), &why);
    c.in.erase(0, protocol::kHeaderBytes + length);
    c.frame_since = c.in.empty() ? std::nullopt : std::optional(now);
    if (c.in.empty() && c.in.capacity() > kKeptInputCapacity) std::string().swap(c.in);
    if (!request) {
      fail(c, "registry: frame body " + why + "; expected one JSON object");
      return;
    }
    try {
      handle(c, *request, now);
    } catch (const ProtocolViolation& violation) {
      fail(c, violation.message);
      return;
    } catch (const std::exception& e) {
      // Defensive: a bug or allocation failure in one request must not take the server down.
      fail(c, std::string("registry: internal error: ") + e.what());
      return;
    }
  }
  if (c.phase != Phase::open || !c.eof) return;
  // Nothing more will arrive. Complete frames are answered first (a reply still being sent
  // holds the rest until it is out); then the connection closes, with an error frame if it
  // ended inside a frame. A parked request is withdrawn: its peer hung up.
  if (c.pending != Pending::none) {
    begin_close(c);
  } else if (c.has_output()) {
    return;
  } else if (!c.in.empty()) {
    fail(c, "registry: connection closed inside a frame " + frame_progress(c.in));
  } else {
    begin_close(c);
  }
}

void Loop::expire(Connection& c, Clock::time_point now) {
  if (c.phase == Phase::dead) return;
  if (c.out_since && now >= *c.out_since + kWriteTimeout) {
    drop(c);  // the peer does not read its replies
    return;
  }
  if (c.phase == Phase::draining) {
    if (now >= c.linger_until) c.phase = Phase::dead;
    return;
  }
  if (c.phase != Phase::open) return;
  if (!c.authenticated && now >= c.opened + options_.hello_timeout) {
    fail(c, "registry: no hello within " + ms_text(options_.hello_timeout));
    return;
  }
  if (c.pending == Pending::none && c.frame_since &&
      now >= *c.frame_since + options_.frame_timeout) {
    fail(c, "registry: frame incomplete after " + ms_text(options_.frame_timeout) + " " +
                frame_progress(c.in));
    return;
  }
  if (c.pending == Pending::wait && now >= c.pending_deadline) {
    complete_pending(
        c, protocol::error_reply(Errc::timeout, "registry: record " +
                                                    protocol::quote_name(c.pending_name) +
                                                    " not published within " +
                                                    std::to_string(c.pending_timeout_ms) + " ms"));
  } else if (c.pending == Pending::wait_all && now >= c.pending_deadline) {
    std::size_t first = 0;
    while (first + 1 < c.await.names.size() && c.await.settled[first]) ++first;
    const std::string message =
        c.await.names.size() == 1
            ? "registry: record " + protocol::quote_name(c.await.names[0]) + " not published within " +
                  std::to_string(c.pending_timeout_ms) + " ms"
            : "registry: " + std::to_string(c.await.unsettled) + " of " + std::to_string(c.await.names.size()) +
                  " records not published within " + std::to_string(c.pending_timeout_ms) + " ms (the first: " +
                  protocol::quote_name(c.await.names[first]) + ")";
    finish_await(c, protocol::error_reply(Errc::timeout, message));
  } else if (c.pending == Pending::barrier && now >= c.pending_deadline) {
    const BarrierRound& round = barriers_.at(c.pending_name);
    const std::string message = "registry: barrier " + protocol::quote_name(c.pending_name) +
                                " timed out after " + std::to_string(c.pending_timeout_ms) +
                                " ms with " + std::to_string(round.arrived.size()) + " of " +
                                std::to_string(round.count) + " arrived";
    withdraw_arrival(c);
    complete_pending(c, protocol::error_reply(Errc::timeout, message));
  } else if (c.pending == Pending::members && now >= c.pending_deadline) {
    complete_pending(c, members_reply());  // unchanged: the same version
  }
}

void Loop::shutdown_all() {
  const Json stopping =
      protocol::error_reply(Errc::peer_failed, "registry at " + address_ + " is shutting down");
  for (auto& [id, c] : connections_) {
    if (c.phase == Phase::open && c.pending != Pending::none) {
      // Best effort, never blocking: the reply is small and the socket buffer usually has room.
      const std::string frame = protocol::encode_reply(stopping);
      (void)::send(c.fd.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    ::shutdown(c.fd.get(), SHUT_RDWR);
  }
  connections_.clear();
}

// ---- connection state -------------------------------------------------------------------------

void Loop::reply(Connection& c, const Json& message) {
  if (c.phase != Phase::open) return;
  c.out += protocol::encode_reply(message);
  flush(c);
}

void Loop::reply_error(Connection& c, Errc code, const std::string& message) {
  reply(c, protocol::error_reply(code, message));
}

void Loop::complete_pending(Connection& c, const Json& message) {
  c.pending = Pending::none;
  c.pending_name.clear();
  if (!c.in.empty()) c.frame_since = Clock::now();  // pipelined input waited with the request
  reply(c, message);
}

void Loop::fail(Connection& c, const std::string& message) {
  reply_error(c, Errc::protocol, message);
  begin_close(c);
}

void Loop::release_state(Connection& c) {
  if (c.pending == Pending::barrier) withdraw_arrival(c);
  if (c.pending == Pending::wait_all) forget_await(c);
  c.pending = Pending::none;
  bool left = false;
  for (int rank : c.ranks) {
    auto it = members_.find(rank);
    if (it != members_.end() && it->second.connection == c.id) {
      members_.erase(it);
      left = true;
    }
  }
  c.ranks.clear();
  if (left) members_changed();
}

void Loop::begin_close(Connection& c) {
  if (c.phase != Phase::open) return;
  release_state(c);
  c.phase = Phase::closing;
  c.in.clear();
  c.frame_since.reset();
  flush(c);
}

void Loop::drop(Connection& c) {
  release_state(c);
  c.phase = Phase::dead;
}

void Loop::flush(Connection& c) {
  while (c.has_output()) {
    const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!c.out_since) c.out_since = Clock::now();
      return;
    }
    drop(c);
    return;
  }
  c.out.clear();
  c.out_sent = 0;
  c.out_since.reset();
  if (c.phase == Phase::closing) start_draining(c);
}

void Loop::start_draining(Connection& c) {
  ::shutdown(c.fd.get(), SHUT_WR);
  c.phase = Phase::draining;
  c.linger_until = Clock::now() + kLingerTimeout;
}

void Loop::withdraw_arrival(Connection& c) {
  auto it = barriers_.find(c.pending_name);
  if (it == barriers_.end()) return;
  std::erase(it->second.arrived, c.id);
  if (it->second.arrived.empty()) barriers_.erase(it);
}

// ---- requests ---------------------------------------------------------------------------------

// The violation for field `key` of request `op`: missing, or present with the wrong type.
ProtocolViolation bad_field(const Json& request, const char* op, const char* key,
                            const char* expected) {
  auto it = request.find(key);
  if (it == request.end()) {
    return {std::string("registry: request '") + op + "' has no field '" + key + "'"};
  }
  return {std::string("registry: field '") + key + "' of request '" + op + "' is " +
          std::string(protocol::kind_of(*it)) + ", expected " + expected};
}

const std::string& need_string(const Json& request, const char* op, const char* key) {
  const std::string* value = protocol::find_string(request, key);
  if (value == nullptr) throw bad_field(request, op, key, "a string");
  return *value;
}

std::int64_t need_int(const Json& request, const char* op, const char* key) {
  std::optional<std::int64_t> value = protocol::find_int(request, key);
  if (!value) throw bad_field(request, op, key, "an integer");
  return *value;
}

// The optional boolean `key`, or `absent` when the request does not carry it.
bool optional_bool(const Json& request, const char* op, const char* key, bool absent) {
  if (!request.contains(key)) return absent;
  std::optional<bool> value = protocol::find_bool(request, key);
  if (!value) throw bad_field(request, op, key, "a boolean");
  return *value;
}

std::string need_base64(const Json& request, const char* op, const char* key) {
  std::optional<std::string> value = protocol::base64_decode(need_string(request, op, key));
  if (!value) {
    throw ProtocolViolation{std::string("registry: field '") + key + "' of request '" + op +
                            "' is not canonical padded base64"};
  }
  return std::move(*value);
}

// False, with the reason in `why`, when `name` cannot name a record or barrier.
bool check_name(const std::string& name, std::string& why) {
  if (name.empty()) {
    why = "registry: name is empty";
    return false;
  }
  if (name.size() > kMaxNameBytes) {
    why = "registry: name of " + std::to_string(name.size()) + " bytes exceeds the limit of " +
          std::to_string(kMaxNameBytes);
    return false;
  }
  return true;
}

void Loop::handle(Connection& c, const Json& request, Clock::time_point now) {
  const std::string* op = protocol::find_string(request, "op");
  if (op == nullptr) {
    auto it = request.find("op");
    if (it == request.end()) throw ProtocolViolation{"registry: request has no field 'op'"};
    throw ProtocolViolation{"registry: field 'op' of the request is " +
                            std::string(protocol::kind_of(*it)) + ", expected a string"};
  }
  if (!c.authenticated) {
    if (*op != "hello") {
      throw ProtocolViolation{"registry: expected 'hello' as the first request, got '" +
                              protocol::clip(*op) + "'"};
    }
    handle_hello(c, request);
    return;
  }
  if (*op == "publish") {
    handle_publish(c, request);
  } else if (*op == "lookup") {
    handle_lookup(c, request);
  } else if (*op == "wait") {
    handle_wait(c, request, now);
  } else if (*op == "wait_all") {
    handle_wait_all(c, request, now);
  } else if (*op == "remove") {
    handle_remove(c, request);
  } else if (*op == "join") {
    handle_join(c, request);
  } else if (*op == "members") {
    handle_members(c, request, now);
  } else if (*op == "barrier") {
    handle_barrier(c, request, now);
  } else if (*op == "hello") {
    throw ProtocolViolation{"registry: second 'hello' on one connection"};
  } else {
    throw ProtocolViolation{"registry: unknown op '" + protocol::clip(*op) + "'"};
  }
}

void Loop::handle_hello(Connection& c, const Json& request) {
  const std::int64_t version = need_int(request, "hello", "version");
  if (version != protocol::kVersion) {
    throw ProtocolViolation{"registry: client speaks protocol version " + std::to_string(version) +
                            ", this server speaks " + std::to_string(protocol::kVersion)};
  }
  const std::string& token = need_string(request, "hello", "token");
  if (!tokens_equal(token, options_.token)) {
    reply_error(c, Errc::invalid_argument, "registry: bad token");
    begin_close(c);
    return;
  }
  c.authenticated = true;
  reply(c, Json{{"ok", true}, {"version", protocol::kVersion}});
}

void Loop::handle_publish(Connection& c, const Json& request) {
  const std::string& name = need_string(request, "publish", "name");
  std::string value = need_base64(request, "publish", "value");
  const bool replace = optional_bool(request, "publish", "replace", false);
  std::string why;
  if (!check_name(name, why)) return reply_error(c, Errc::invalid_argument, why);
  if (value.size() > kMaxValueBytes) {
    return reply_error(c, Errc::invalid_argument,
                       "registry: value of record " + protocol::quote_name(name) + " is " +
                           std::to_string(value.size()) + " bytes, over the limit of " +
                           std::to_string(kMaxValueBytes));
  }
  auto [it, inserted] = records_.try_emplace(name);
  if (!inserted && !replace) {
    return reply_error(c, Errc::already_exists,
                       "registry: record " + protocol::quote_name(name) + " already exists");
  }
  it->second = std::move(value);
  reply(c, protocol::ok_reply());

  Json woken;  // built once, shared by every waiter
  for (auto& [id, other] : connections_) {
    if (other.phase != Phase::open || other.pending != Pending::wait ||
        other.pending_name != name) {
      continue;
    }
    if (woken.is_null()) woken = Json{{"ok", true}, {"value", protocol::base64_encode(it->second)}};
    complete_pending(other, woken);
  }
  auto awaited = awaited_.find(name);
  if (awaited == awaited_.end()) return;
  const std::vector<std::pair<std::uint64_t, std::size_t>> waiting = std::move(awaited->second);
  awaited_.erase(awaited);
  for (const auto& [id, index] : waiting) {
    auto other = connections_.find(id);
    if (other == connections_.end() || other->second.phase != Phase::open ||
        other->second.pending != Pending::wait_all) {
      continue;
    }
    AwaitAll& await = other->second.await;
    if (index < await.settled.size() && !await.settled[index]) {
      await.settled[index] = 1;
      --await.unsettled;
    }
    if (await.unsettled == 0) settle(other->second);  // the last one: check all once, answer
  }
}

void Loop::handle_lookup(Connection& c, const Json& request) {
  const std::string& name = need_string(request, "lookup", "name");
  auto it = records_.find(name);
  if (it == records_.end()) {
    return reply_error(c, Errc::not_found, "registry: no record " + protocol::quote_name(name));
  }
  reply(c, Json{{"ok", true}, {"value", protocol::base64_encode(it->second)}});
}

std::int64_t need_timeout(const Json& request, const char* op) {
  const std::int64_t timeout_ms = need_int(request, op, "timeout_ms");
  return std::min<std::int64_t>(timeout_ms, kMaxWaitTimeout.count());
}

void Loop::handle_wait(Connection& c, const Json& request, Clock::time_point now) {
  const std::string& name = need_string(request, "wait", "name");
  const std::int64_t timeout_ms = need_timeout(request, "wait");
  std::string why;
  if (!check_name(name, why)) return reply_error(c, Errc::invalid_argument, why);
  if (timeout_ms < 0) {
    return reply_error(
        c, Errc::invalid_argument,
        "registry: wait for " + protocol::quote_name(name) + " with negative timeout");
  }
  auto it = records_.find(name);
  if (it != records_.end()) {
    return reply(c, Json{{"ok", true}, {"value", protocol::base64_encode(it->second)}});
  }
  if (timeout_ms == 0) {
    return reply_error(
        c, Errc::timeout,
        "registry: record " + protocol::quote_name(name) + " not published within 0 ms");
  }
  c.pending = Pending::wait;
  c.pending_name = name;
  c.pending_timeout_ms = timeout_ms;
  c.pending_deadline = now + std::chrono::milliseconds(timeout_ms);
}

// {"op":"wait_all","names":[...],"publishers":[...],"skip_dead":BOOL,"timeout_ms":INT}: see
// protocol.hpp.
void Loop::handle_wait_all(Connection& c, const Json& request, Clock::time_point now) {
  auto names = request.find("names");
  if (names == request.end() || !names->is_array()) throw bad_field(request, "wait_all", "names", "an array");
  AwaitAll await;
  await.names.reserve(names->size());
  for (const Json& name : *names) {
    if (!name.is_string()) {
      throw ProtocolViolation{"registry: an entry of field 'names' of request 'wait_all' is " +
                              std::string(protocol::kind_of(name)) + ", expected a string"};
    }
    await.names.push_back(name.get<std::string>());
  }
  if (auto publishers = request.find("publishers"); publishers != request.end()) {
    if (!publishers->is_array()) throw bad_field(request, "wait_all", "publishers", "an array");
    for (const Json& rank : *publishers) {
      if (!rank.is_number_integer() || rank.get<std::int64_t>() < -1 || rank.get<std::int64_t>() > INT_MAX) {
        throw ProtocolViolation{"registry: an entry of field 'publishers' of request 'wait_all' is " +
                                std::string(protocol::kind_of(rank)) + ", expected a rank (an integer >= -1)"};
      }
      await.publishers.push_back(static_cast<int>(rank.get<std::int64_t>()));
    }
  }
  await.skip_dead = optional_bool(request, "wait_all", "skip_dead", false);
  const std::int64_t timeout_ms = need_timeout(request, "wait_all");
  std::string why;
  for (const std::string& name : await.names) {
    if (!check_name(name, why)) return reply_error(c, Errc::invalid_argument, why);
  }
  if (!await.publishers.empty() && await.publishers.size() != await.names.size()) {
    return reply_error(c, Errc::invalid_argument,
                       "registry: wait_all names " + std::to_string(await.names.size()) + " records but " +
                           std::to_string(await.publishers.size()) + " publishers");
  }
  if (timeout_ms < 0) return reply_error(c, Errc::invalid_argument, "registry: wait_all with negative timeout");
  await.settled.assign(await.names.size(), 0);
  await.skipped.assign(await.names.size(), 0);
  await.unsettled = await.names.size();
  c.await = std::move(await);
  c.pending = Pending::wait_all;
  c.pending_timeout_ms = timeout_ms;
  c.pending_deadline = now + std::chrono::milliseconds(timeout_ms);
  if (settle(c)) return;
  if (timeout_ms == 0) {
    c.pending_deadline = now;
    return expire(c, now);
  }
  for (std::size_t i = 0; i < c.await.names.size(); ++i) {
    if (!c.await.settled[i]) awaited_[c.await.names[i]].emplace_back(c.id, i);
  }
}

bool Loop::settle(Connection& c) {
  AwaitAll& await = c.await;
  for (std::size_t i = 0; i < await.names.size() && await.unsettled > 0; ++i) {
    if (await.settled[i]) continue;
    if (records_.contains(await.names[i])) {
      await.settled[i] = 1;
      --await.unsettled;
      continue;
    }
    const int publisher = await.publishers.empty() ? -1 : await.publishers[i];
    if (publisher < 0 || members_.contains(publisher)) continue;
    if (!await.skip_dead) {
      finish_await(c, protocol::error_reply(Errc::peer_failed, "registry: rank " + std::to_string(publisher) +
                                                                   " is no member (it left or died) and never published " +
                                                                   protocol::quote_name(await.names[i])));
      return true;
    }
    await.settled[i] = 1;
    await.skipped[i] = 1;
    --await.unsettled;
  }
  if (await.unsettled > 0) return false;
  // A settled record removed since (remove) is awaited again, not answered.
  for (std::size_t i = 0; i < await.names.size(); ++i) {
    if (!await.settled[i] || await.skipped[i] || records_.contains(await.names[i])) continue;
    await.settled[i] = 0;
    ++await.unsettled;
    awaited_[await.names[i]].emplace_back(c.id, i);
  }
  if (await.unsettled > 0) return false;
  Json values = Json::array();
  for (std::size_t i = 0; i < await.names.size(); ++i) {
    values.push_back(await.skipped[i] ? Json() : Json(protocol::base64_encode(records_.at(await.names[i]))));
  }
  finish_await(c, Json{{"ok", true}, {"values", std::move(values)}});
  return true;
}

void Loop::forget_await(Connection& c) {
  // Every name, settled or not: a name skipped for a dead publisher is still registered.
  for (std::size_t i = 0; i < c.await.names.size(); ++i) {
    auto it = awaited_.find(c.await.names[i]);
    if (it == awaited_.end()) continue;
    std::erase_if(it->second, [&c](const auto& waiter) { return waiter.first == c.id; });
    if (it->second.empty()) awaited_.erase(it);
  }
  c.await = {};
}

void Loop::finish_await(Connection& c, const Json& message) {
  forget_await(c);
  complete_pending(c, message);
}

void Loop::handle_remove(Connection& c, const Json& request) {
  const std::string& name = need_string(request, "remove", "name");
  if (records_.erase(name) == 0) {
    return reply_error(c, Errc::not_found, "registry: no record " + protocol::quote_name(name));
  }
  reply(c, protocol::ok_reply());
}

void Loop::handle_join(Connection& c, const Json& request) {
  const std::int64_t rank = need_int(request, "join", "rank");
  std::string info = need_base64(request, "join", "info");
  if (rank < 0 || rank > INT_MAX) {
    return reply_error(c, Errc::invalid_argument,
                       "registry: rank " + std::to_string(rank) + " is out of range");
  }
  if (info.size() > kMaxInfoBytes) {
    return reply_error(c, Errc::invalid_argument,
                       "registry: info of rank " + std::to_string(rank) + " is " +
                           std::to_string(info.size()) + " bytes, over the limit of " +
                           std::to_string(kMaxInfoBytes));
  }
  const int r = static_cast<int>(rank);
  if (members_.contains(r)) {
    return reply_error(c, Errc::already_exists,
                       "registry: rank " + std::to_string(r) + " is already a member");
  }
  if (members_.size() >= kMaxMembers) {
    return reply_error(
        c, Errc::invalid_argument,
        "registry: membership is full (" + std::to_string(kMaxMembers) + " members)");
  }
  members_.emplace(r, Member{c.id, std::move(info)});
  c.ranks.insert(r);
  reply(c, protocol::ok_reply());
  members_changed();
}

Json Loop::members_reply() const {
  Json list = Json::array();
  for (const auto& [rank, member] : members_) {
    list.push_back(Json{{"rank", rank}, {"info", protocol::base64_encode(member.info)}});
  }
  return Json{{"ok", true}, {"version", members_version_}, {"members", std::move(list)}};
}

void Loop::members_changed() {
  ++members_version_;
  for (auto& [id, other] : connections_) {
    if (other.phase == Phase::open && other.pending == Pending::wait_all && !other.await.publishers.empty()) {
      settle(other);
    }
  }
  Json changed;  // built once, shared by every watch
  for (auto& [id, other] : connections_) {
    if (other.phase != Phase::open || other.pending != Pending::members) continue;
    if (changed.is_null()) changed = members_reply();
    complete_pending(other, changed);
  }
}

// {"op":"members"} answers at once. With "since" (a version from an earlier reply) and
// "timeout_ms" it is a watch: held until the membership differs from that version or the
// timeout passes (then answered unchanged).
void Loop::handle_members(Connection& c, const Json& request, Clock::time_point now) {
  if (!request.contains("since")) return reply(c, members_reply());
  const std::int64_t since = need_int(request, "members", "since");
  const std::int64_t timeout_ms = need_timeout(request, "members");
  if (timeout_ms < 0) {
    return reply_error(c, Errc::invalid_argument, "registry: members watch with negative timeout");
  }
  if (since != static_cast<std::int64_t>(members_version_) || timeout_ms == 0) return reply(c, members_reply());
  c.pending = Pending::members;
  c.pending_name.clear();
  c.pending_timeout_ms = timeout_ms;
  c.pending_deadline = now + std::chrono::milliseconds(timeout_ms);
}

void Loop::handle_barrier(Connection& c, const Json& request, Clock::time_point now) {
  const std::string& name = need_string(request, "barrier", "name");
  const std::int64_t count = need_int(request, "barrier", "count");
  const std::int64_t timeout_ms = need_timeout(request, "barrier");
  std::string why;
  if (!check_name(name, why)) return reply_error(c, Errc::invalid_argument, why);
  if (count < 1 || static_cast<std::uint64_t>(count) > options_.max_connections) {
    return reply_error(c, Errc::invalid_argument,
                       "registry: barrier " + protocol::quote_name(name) + " count " +
                           std::to_string(count) + " must be 1.." +
                           std::to_string(options_.max_connections));
  }
  if (timeout_ms < 0) {
    return reply_error(
        c, Errc::invalid_argument,
        "registry: barrier " + protocol::quote_name(name) + " with negative timeout");
  }
  BarrierRound& round = barriers_[name];
  if (round.arrived.empty()) round.count = static_cast<int>(count);
  if (round.count != count) {
    return reply_error(c, Errc::invalid_argument,
                       "registry: barrier " + protocol::quote_name(name) + " called with count " +
                           std::to_string(count) + " while " + std::to_string(round.count) +
                           " participants are expected by those already waiting");
  }
  c.pending = Pending::barrier;
  c.pending_name = name;
  c.pending_timeout_ms = timeout_ms;
  c.pending_deadline = now + std::chrono::milliseconds(timeout_ms);
  round.arrived.push_back(c.id);
  if (round.arrived.size() < static_cast<std::size_t>(round.count)) return;

  // Round complete: release everyone and forget the round, so the next arrivals start afresh.
  const std::vector<std::uint64_t> released = std::move(round.arrived);
  barriers_.erase(name);
  const Json ok = protocol::ok_reply();
  for (std::uint64_t id : released) {
    auto it = connections_.find(id);
    if (it != connections_.end() && it->second.pending == Pending::barrier) {
      complete_pending(it->second, ok);
    }
  }
}

}  // namespace

// ---- Server -----------------------------------------------------------------------------------

class Server::Impl {
 public:
  explicit Impl(ServerOptions options);
  ~Impl() { stop(); }
  void stop() noexcept;

  std::uint16_t port_ = 0;
  std::string address_;

 private:
  net::Fd wake_read_;
  net::Fd wake_write_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
  std::mutex stop_mutex_;
  bool stopped_ = false;
};

Server::Impl::Impl(ServerOptions options) {
  if (options.bind_host.empty()) {
    throw Error(Errc::invalid_argument, "registry: bind_host is empty");
  }
  if (options.max_connections == 0) {
    throw Error(Errc::invalid_argument, "registry: max_connections must be at least 1");
  }
  if (options.hello_timeout.count() <= 0 || options.frame_timeout.count() <= 0) {
    throw Error(Errc::invalid_argument,
                "registry: hello_timeout and frame_timeout must be positive (got " +
                    ms_text(options.hello_timeout) + " and " + ms_text(options.frame_timeout) +
                    ")");
  }
  const std::string requested = net::join_host_port(options.bind_host, options.port);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(options.port);
  const int rc = ::getaddrinfo(options.bind_host.c_str(), port_text.c_str(), &hints, &found);
  if (rc != 0) {
    throw Error(Errc::io, "registry: cannot resolve bind host '" + options.bind_host +
                              "': " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  const addrinfo* ai = list.get();

  if (!net::is_loopback(ai->ai_addr) && options.token.empty()) {
    throw Error(Errc::invalid_argument,
                "registry: binding " + requested +
                    " exposes the registry beyond this host; a token is required "
                    "(set DFI_REGISTRY_TOKEN) or bind a loopback address such as 127.0.0.1");
  }

  net::Fd listen_fd(
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
  if (!listen_fd.valid()) {
    throw Error(Errc::io, "registry: cannot create a socket for " + requested + ": " +
                              net::errno_text(errno));
  }
  int one = 1;
  (void)::setsockopt(listen_fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    throw Error(Errc::io, "registry: cannot bind " + requested + ": " + net::errno_text(errno));
  }
  if (::listen(listen_fd.get(), kListenBacklog) != 0) {
    throw Error(Errc::io,
                "registry: cannot listen on " + requested + ": " + net::errno_text(errno));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  if (::getsockname(listen_fd.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    throw Error(Errc::io, "registry: getsockname on " + requested + ": " + net::errno_text(errno));
  }
  if (bound.ss_family == AF_INET6) {
    port_ = ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port);
  } else {
    port_ = ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  }
  address_ = net::join_host_port(options.bind_host, port_);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    throw Error(Errc::io, "registry at " + address_ + ": pipe2: " + net::errno_text(errno));
  }
  wake_read_.reset(pipe_fds[0]);
  wake_write_.reset(pipe_fds[1]);

  loop_ =
      std::make_unique<Loop>(std::move(listen_fd), wake_read_.get(), address_, std::move(options));
  try {
    thread_ = std::thread([loop = loop_.get()] { loop->run(); });
  } catch (const std::system_error& e) {
    throw Error(Errc::io,
                "registry at " + address_ + ": cannot start the server thread: " + e.what());
  }
}

void Server::Impl::stop() noexcept {
  std::lock_guard lock(stop_mutex_);
  if (stopped_) return;
  stopped_ = true;
  const char byte = 1;
  while (::write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  loop_.reset();  // closes the listening socket now rather than at destruction
}

ServerOptions server_options_at(std::string_view host_port, std::string token) {
  net::HostPort at = net::split_host_port(host_port);
  ServerOptions options;
  options.bind_host = std::move(at.host);
  options.port = at.port;
  options.token = std::move(token);
  options.dead_after = std::chrono::milliseconds(config::get_int("registry_dead_after_ms"));
  return options;
}

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Server::~Server() = default;
std::uint16_t Server::port() const noexcept { return impl_->port_; }
const std::string& Server::address() const noexcept { return impl_->address_; }
void Server::stop() noexcept { impl_->stop(); }

}  // namespace dfi::registry
