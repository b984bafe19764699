#include "dfi/registry/client.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "dfi/common/deadline.hpp"
#include "dfi/common/error.hpp"
#include "client_impl.hpp"
#include "net.hpp"
#include "protocol.hpp"

namespace dfi::registry {
namespace {

using protocol::Json;
using std::chrono::milliseconds;

// Bound on a simple request (and on the hello) once connected.
constexpr milliseconds kRequestTimeout{10'000};
// Added to a wait or barrier timeout: the server answers at its timeout; this covers scheduling.
constexpr milliseconds kReplySlack{2'000};
// Pause between connection attempts while the server is not up yet, doubling up to the cap.
constexpr milliseconds kFirstRetryPause{10};
constexpr milliseconds kMaxRetryPause{200};

int poll_ms(const Deadline& deadline) {
  return static_cast<int>(std::min<long long>(deadline.remaining_ms(), INT_MAX));
}

void check_name(const std::string& name) {
  if (name.empty()) throw Error(Errc::invalid_argument, "registry: record name is empty");
  if (name.size() > kMaxNameBytes) {
    throw Error(Errc::invalid_argument, "registry: name " + protocol::quote_name(name) + " of " +
                                            std::to_string(name.size()) +
                                            " bytes exceeds the limit of " +
                                            std::to_string(kMaxNameBytes));
  }
}

std::int64_t timeout_ms(milliseconds timeout, const char* what, const std::string& name) {
  if (timeout.count() < 0) {
    throw Error(Errc::invalid_argument, std::string("registry: ") + what + " " +
                                            protocol::quote_name(name) + " with negative timeout");
  }
  return std::min(timeout, kMaxWaitTimeout).count();
}

// One connection attempt to `ai` bounded by `deadline`; returns the socket or sets `error`.
net::Fd try_connect(const addrinfo* ai, const Deadline& deadline, std::string& error) {
  net::Fd fd(
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
  if (!fd.valid()) {
    error = "socket: " + net::errno_text(errno);
    return {};
  }
  int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
  if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
    error = net::errno_text(errno);
    return {};
  }
  if (rc != 0) {
    for (;;) {
      pollfd p{fd.get(), POLLOUT, 0};
      rc = ::poll(&p, 1, poll_ms(deadline));
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) {
        error = "poll: " + net::errno_text(errno);
        return {};
      }
      if (rc == 0) {
        if (!deadline.expired()) continue;
        error = "connection attempt timed out";
        return {};
      }
      break;
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
    if (so_error != 0) {
      error = net::errno_text(so_error);
      return {};
    }
  }
  net::set_no_delay(fd.get());
  return fd;
}

}  // namespace

// The client of DFI's own registry (server.cpp, protocol.hpp).
class ProtocolClient final : public Client::Impl {
 public:
  ProtocolClient(std::string host_port, std::string token, milliseconds connect_timeout);

  void publish(const std::string& name, std::string_view value, bool replace) override;
  std::optional<std::string> try_lookup(const std::string& name) override;
  std::string wait_for(const std::string& name, milliseconds timeout) override;
  std::vector<std::optional<std::string>> wait_all(const std::vector<std::string>& names,
                                                   const std::vector<int>& publishers, milliseconds timeout,
                                                   bool skip_dead) override;
  void remove(const std::string& name) override;
  void join(int rank, std::string_view info) override;
  std::map<int, std::string> members() override;
  std::map<int, std::string> members_after(std::uint64_t& version, milliseconds timeout) override;
  void barrier(const std::string& name, int count, milliseconds timeout) override;
  void interrupt() noexcept override;
  bool usable() override {
    std::lock_guard lock(mutex_);
    return broken_.empty();
  }

  // Sends `request` and returns the reply object (ok or not). Transport failures throw and leave
  // the connection broken. `what` describes the request for messages ("lookup of 'x'").
  // `peer_failed_answers`: the request's own answer may be peer_failed (wait_all), which then
  // leaves the connection usable.
  Json call(const Json& request, const std::string& what, milliseconds reply_timeout,
            bool peer_failed_answers = false);
  // Throws the registry's error carried by a not-ok reply.
  [[noreturn]] void throw_reply_error(const Json& reply, const std::string& what) const;
  std::string reply_value(const Json& reply, const std::string& what) const;
  // The members of a members reply (rank -> info); throws protocol for a malformed one.
  std::map<int, std::string> reply_members(const Json& reply) const;

 private:
  void connect(milliseconds connect_timeout);
  void hello(const std::string& token);
  Json exchange(const std::string& frame, const std::string& what, milliseconds reply_timeout);
  void send_all(std::string_view bytes, const Deadline& deadline, const std::string& what);
  void recv_exact(char* out, std::size_t size, const Deadline& deadline, const std::string& what,
                  milliseconds reply_timeout);
  Error protocol_error(const std::string& what, const std::string& detail) const;

  net::HostPort target_;
  std::mutex mutex_;    // one request at a time
  net::Fd fd_;          // guarded by mutex_; changed only under fd_mutex_ too
  std::mutex fd_mutex_; // lets interrupt() use fd_ while a call holds mutex_
  std::string broken_;  // guarded by mutex_; the failure that made fd_ unusable
};

ProtocolClient::ProtocolClient(std::string host_port, std::string token, milliseconds connect_timeout)
    : Impl(std::move(host_port)), target_(net::split_host_port(address_)) {
  connect(connect_timeout);
  hello(token);
}

void ProtocolClient::connect(milliseconds connect_timeout) {
  const Deadline deadline(std::max(connect_timeout, milliseconds(0)));
  const std::string port_text = std::to_string(target_.port);
  std::string last_error = "no attempt made";
  milliseconds pause = kFirstRetryPause;
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(target_.host.c_str(), port_text.c_str(), &hints, &found);
    if (rc == 0) {
      std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
      for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
        net::Fd fd = try_connect(ai, deadline, last_error);
        if (fd.valid()) {
          std::lock_guard fd_lock(fd_mutex_);
          fd_ = std::move(fd);
          return;
        }
      }
    } else if (rc == EAI_AGAIN) {
      last_error = std::string("cannot resolve host: ") + ::gai_strerror(rc);
    } else {
      throw Error(Errc::io,
                  "registry at " + address_ + ": cannot resolve host '" + target_.host +
                      "': " + (rc == EAI_SYSTEM ? net::errno_text(errno) : ::gai_strerror(rc)));
    }
    if (deadline.expired()) {
      throw Error(Errc::timeout, "registry at " + address_ + " unreachable after " +
                                     std::to_string(connect_timeout.count()) +
                                     " ms: " + last_error);
    }
    std::this_thread::sleep_for(std::min(pause, milliseconds(deadline.remaining_ms())));
    pause = std::min(pause * 2, kMaxRetryPause);
  }
}

void ProtocolClient::hello(const std::string& token) {
  const Json request{{"op", "hello"}, {"token", token}, {"version", protocol::kVersion}};
  const std::string what = "hello";
  std::string frame;
  try {
    frame = protocol::encode_frame(request, kMaxHelloBytes);
  } catch (const Error&) {
    throw Error(Errc::invalid_argument, "registry at " + address_ + ": token of " +
                                            std::to_string(token.size()) +
                                            " bytes is not valid UTF-8 or makes the hello exceed " +
                                            std::to_string(kMaxHelloBytes) + " bytes");
  }
  const Json reply = exchange(frame, what, kRequestTimeout);
  connections_.fetch_add(1, std::memory_order_relaxed);
  if (!reply.at("ok").get<bool>()) {
    // The server closes the connection after any hello error; the message is the server's,
    // prefixed with who rejected us.
    const std::optional<Errc> named =
        protocol::errc_from_name(*protocol::find_string(reply, "code"));
    const Errc code = named && *named != Errc::ok ? *named : Errc::protocol;
    throw Error(code, "registry at " + address_ +
                          " rejected the connection: " + *protocol::find_string(reply, "error"));
  }
}

Json ProtocolClient::call(const Json& request, const std::string& what, milliseconds reply_timeout,
                        bool peer_failed_answers) {
  const std::string frame = protocol::encode_frame(request, kMaxRequestBytes);
  std::lock_guard lock(mutex_);
  if (!broken_.empty()) {
    throw Error(Errc::peer_failed, "registry at " + address_ + ": cannot send " + what +
                                       ", the connection failed earlier: " + broken_);
  }
  Json reply;
  requests_.fetch_add(1, std::memory_order_relaxed);
  try {
    reply = exchange(frame, what, reply_timeout);
  } catch (const Error& e) {
    broken_ = e.what();
    std::lock_guard fd_lock(fd_mutex_);
    fd_.reset();  // the server drops our memberships and arrivals
    throw;
  }
  if (!reply.at("ok").get<bool>()) {
    // After a protocol or peer_failed error frame the server closes the connection (protocol.hpp,
    // "Connection errors"); remember why, so later calls name the cause instead of an EOF.
    const std::string& code = *protocol::find_string(reply, "code");
    if (code == errc_name(Errc::protocol) || (code == errc_name(Errc::peer_failed) && !peer_failed_answers)) {
      broken_ = *protocol::find_string(reply, "error");
      std::lock_guard fd_lock(fd_mutex_);
      fd_.reset();
    }
  }
  return reply;
}

Json ProtocolClient::exchange(const std::string& frame, const std::string& what,
                            milliseconds reply_timeout) {
  const Deadline deadline(reply_timeout);
  bytes_sent_.fetch_add(frame.size(), std::memory_order_relaxed);
  send_all(frame, deadline, what);
  char header[protocol::kHeaderBytes];
  recv_exact(header, sizeof(header), deadline, what, reply_timeout);
  const std::uint32_t length = protocol::get_length(header);
  if (length > kMaxReplyBytes) {
    throw protocol_error(what, "reply of " + std::to_string(length) + " bytes exceeds the limit");
  }
  std::string body(length, '\0');
  recv_exact(body.data(), body.size(), deadline, what, reply_timeout);
  bytes_received_.fetch_add(protocol::kHeaderBytes + body.size(), std::memory_order_relaxed);
  std::string why;
  std::optional<Json> reply = protocol::parse_object(body, &why);
  if (!reply) throw protocol_error(what, "reply body " + why + "; expected one JSON object");
  const std::optional<bool> ok = protocol::find_bool(*reply, "ok");
  if (!ok) throw protocol_error(what, "reply has no boolean 'ok'");
  if (!*ok && (protocol::find_string(*reply, "code") == nullptr ||
               protocol::find_string(*reply, "error") == nullptr)) {
    throw protocol_error(what, "error reply lacks 'code' or 'error'");
  }
  return std::move(*reply);
}

void ProtocolClient::send_all(std::string_view bytes, const Deadline& deadline,
                            const std::string& what) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_.get(), POLLOUT, 0};
      const int rc = ::poll(&p, 1, poll_ms(deadline));
      if (rc < 0 && errno != EINTR) {
        throw Error(Errc::io, "registry at " + address_ + ": poll during " + what +
                                  " failed: " + net::errno_text(errno));
      }
      if (rc == 0 && deadline.expired()) {
        throw Error(Errc::timeout,
                    "registry at " + address_ + " did not accept " + what + " in time");
      }
      continue;
    }
    const int err = errno;
    if (err == EPIPE || err == ECONNRESET || err == ENOTCONN) {
      throw Error(Errc::peer_failed, "registry at " + address_ + " closed the connection (" +
                                         net::errno_text(err) + ") before " + what);
    }
    throw Error(Errc::io, "registry at " + address_ + ": send of " + what +
                              " failed: " + net::errno_text(err));
  }
}

void ProtocolClient::recv_exact(char* out, std::size_t size, const Deadline& deadline,
                              const std::string& what, milliseconds reply_timeout) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd_.get(), out + got, size - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) {
      throw Error(Errc::peer_failed,
                  "registry at " + address_ + " closed the connection during " + what);
    }
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      pollfd p{fd_.get(), POLLIN, 0};
      const int rc = ::poll(&p, 1, poll_ms(deadline));
      if (rc < 0 && errno != EINTR) {
        throw Error(Errc::io, "registry at " + address_ + ": poll during " + what +
                                  " failed: " + net::errno_text(errno));
      }
      if (rc == 0 && deadline.expired()) {
        throw Error(Errc::timeout, "registry at " + address_ + " did not answer " + what +
                                       " within " + std::to_string(reply_timeout.count()) + " ms");
      }
      continue;
    }
    if (err == ECONNRESET || err == EPIPE || err == ENOTCONN) {
      throw Error(Errc::peer_failed, "registry at " + address_ + " reset the connection during " +
                                         what + ": " + net::errno_text(err));
    }
    throw Error(Errc::io, "registry at " + address_ + ": recv during " + what +
                              " failed: " + net::errno_text(err));
  }
}

Error ProtocolClient::protocol_error(const std::string& what, const std::string& detail) const {
  return Error(Errc::protocol,
               "registry at " + address_ + " sent a malformed reply to " + what + ": " + detail);
}

void ProtocolClient::throw_reply_error(const Json& reply, const std::string& what) const {
  const std::string& code_name = *protocol::find_string(reply, "code");
  const std::string& message = *protocol::find_string(reply, "error");
  const std::optional<Errc> code = protocol::errc_from_name(code_name);
  if (!code || *code == Errc::ok) {
    throw protocol_error(what,
                         "unknown error code '" + protocol::clip(code_name) + "': " + message);
  }
  throw Error(*code, message);
}

std::string ProtocolClient::reply_value(const Json& reply, const std::string& what) const {
  const std::string* text = protocol::find_string(reply, "value");
  if (text == nullptr) throw protocol_error(what, "reply has no string 'value'");
  std::optional<std::string> value = protocol::base64_decode(*text);
  if (!value) throw protocol_error(what, "'value' is not base64");
  return std::move(*value);
}

void ProtocolClient::publish(const std::string& name, std::string_view value, bool replace) {
  const std::string what = "publish of " + protocol::quote_name(name);
  const Json reply = call(Json{{"op", "publish"},
                               {"name", name},
                               {"value", protocol::base64_encode(value)},
                               {"replace", replace}},
                          what, kRequestTimeout);
  if (!reply.at("ok").get<bool>()) throw_reply_error(reply, what);
}

std::map<int, std::string> ProtocolClient::members() {
  const std::string what = "members";
  const Json reply = call(Json{{"op", "members"}}, what, kRequestTimeout);
  if (!reply.at("ok").get<bool>()) throw_reply_error(reply, what);
  return reply_members(reply);
}

std::optional<std::string> ProtocolClient::try_lookup(const std::string& name) {
  const std::string what = "lookup of " + protocol::quote_name(name);
  const Json reply = call(Json{{"op", "lookup"}, {"name", name}}, what, kRequestTimeout);
  if (!reply.at("ok").get<bool>()) {
    if (*protocol::find_string(reply, "code") == errc_name(Errc::not_found)) return std::nullopt;
    throw_reply_error(reply, what);
  }
  return reply_value(reply, what);
}

std::string ProtocolClient::wait_for(const std::string& name, milliseconds timeout) {
  const std::int64_t ms = timeout_ms(timeout, "wait for", name);
  const std::string what = "wait for " + protocol::quote_name(name);
  const Json reply = call(Json{{"op", "wait"}, {"name", name}, {"timeout_ms", ms}}, what,
                                 milliseconds(ms) + kReplySlack);
  if (!reply.at("ok").get<bool>()) throw_reply_error(reply, what);
  return reply_value(reply, what);
}

std::vector<std::optional<std::string>> ProtocolClient::wait_all(const std::vector<std::string>& names,
                                                         const std::vector<int>& publishers, milliseconds timeout,
                                                         bool skip_dead) {
  const std::string what = names.size() == 1 ? "wait for " + protocol::quote_name(names[0])
                                             : "wait for " + std::to_string(names.size()) + " records";
  const std::int64_t ms = timeout_ms(timeout, "wait_all for", names.empty() ? std::string("-") : names[0]);
  Json request{{"op", "wait_all"}, {"names", names}, {"timeout_ms", ms}};
  if (!publishers.empty()) request["publishers"] = publishers;
  if (skip_dead) request["skip_dead"] = true;
  const Json reply = call(request, what, milliseconds(ms) + kReplySlack, /*peer_failed_answers=*/true);
  if (!reply.at("ok").get<bool>()) throw_reply_error(reply, what);
  auto values = reply.find("values");
  if (values == reply.end() || !values->is_array() || values->size() != names.size()) {
    throw Error(Errc::protocol, "registry at " + address_ + " sent a malformed reply to " + what +
                                    ": no 'values' array of " + std::to_string(names.size()));
  }
  std::vector<std::optional<std::string>> out;
  out.reserve(names.size());
  for (const Json& value : *values) {
    if (value.is_null() && skip_dead) {
      out.emplace_back();
      continue;
    }
    std::optional<std::string> decoded = value.is_string() ? protocol::base64_decode(value.get<std::string>()) : std::nullopt;
    if (!decoded) {
      throw Error(Errc::protocol, "registry at " + address_ + " sent a malformed reply to " + what + ": a bad value");
    }
    out.push_back(std::move(decoded));
  }
  return out;
}


void ProtocolClient::remove(const std::string& name) {
  const std::string what = "remove of " + protocol::quote_name(name);
  const Json reply = call(Json{{"op", "remove"}, {"name", name}}, what, kRequestTimeout);
  if (!reply.at("ok").get<bool>()) throw_reply_error(reply, what);
}

void ProtocolClient::join(int rank, std::string_view info) {
  const std::string what = "join of rank " + std::to_string(rank);
  const Json reply =
      call(Json{{"op", "join"}, {"rank", rank}, {"info", protocol::base64_encode(info)}},
                  what, kRequestTimeout);
  if (!reply.at("ok").get<bool>()) throw_reply_error(reply, what);
}

void ProtocolClient::interrupt() noexcept {
  std::lock_guard fd_lock(fd_mutex_);
  if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
}


std::map<int, std::string> ProtocolClient::members_after(std::uint64_t& version, milliseconds timeout) {
  const std::string what = "members watch";
  const std::int64_t ms = timeout_ms(timeout, "members watch", "members");
  const Json reply = call(Json{{"op", "members"}, {"since", version}, {"timeout_ms", ms}}, what,
                                 milliseconds(ms) + kReplySlack);
  if (!reply.at("ok").get<bool>()) throw_reply_error(reply, what);
  const std::optional<std::int64_t> v = protocol::find_int(reply, "version");
  if (!v || *v < 0) {
    throw Error(Errc::protocol, "registry at " + address_ + " sent a malformed reply to members: no 'version'");
  }
  version = static_cast<std::uint64_t>(*v);
  return reply_members(reply);
}

std::map<int, std::string> ProtocolClient::reply_members(const Json& reply) const {
  auto list = reply.find("members");
  if (list == reply.end() || !list->is_array()) {
    throw Error(Errc::protocol, "registry at " + address_ +
                                    " sent a malformed reply to members: no 'members' array");
  }
  std::map<int, std::string> out;
  for (const Json& entry : *list) {
    const std::optional<std::int64_t> rank =
        entry.is_object() ? protocol::find_int(entry, "rank") : std::nullopt;
    const std::string* info = entry.is_object() ? protocol::find_string(entry, "info") : nullptr;
    std::optional<std::string> decoded =
        info != nullptr ? protocol::base64_decode(*info) : std::nullopt;
    if (!rank || *rank < 0 || *rank > INT_MAX || !decoded) {
      throw Error(Errc::protocol,
                  "registry at " + address_ + " sent a malformed reply to members: bad entry");
    }
    out.emplace(static_cast<int>(*rank), std::move(*decoded));
  }
  return out;
}

void ProtocolClient::barrier(const std::string& name, int count, milliseconds timeout) {
  const std::int64_t ms = timeout_ms(timeout, "barrier", name);
  const std::string what = "barrier " + protocol::quote_name(name);
  const Json reply =
      call(Json{{"op", "barrier"}, {"name", name}, {"count", count}, {"timeout_ms", ms}},
                  what, milliseconds(ms) + kReplySlack);
  if (!reply.at("ok").get<bool>()) throw_reply_error(reply, what);
}

// ---- Client -----------------------------------------------------------------------------------

namespace {

std::unique_ptr<Client::Impl> make_client(std::string address, std::string token, milliseconds connect_timeout) {
  if (address.rfind("etcd://", 0) == 0) {
    return make_etcd_client(std::move(address), std::move(token), connect_timeout);
  }
  if (const std::size_t scheme = address.find("://"); scheme != std::string::npos) {
    throw Error(Errc::invalid_argument, "registry address '" + address + "': unknown scheme '" +
                                            address.substr(0, scheme) +
                                            "' (expected host:port, or etcd://host:port[,host:port...])");
  }
  return std::make_unique<ProtocolClient>(std::move(address), std::move(token), connect_timeout);
}

// Runs a call of the backend: a reply it could not read (JSON of an unexpected shape) is a
// protocol error naming the registry, never an exception of another kind.
template <class F>
auto guarded(const Client::Impl& impl, F&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const Error&) {
    throw;
  } catch (const Json::exception& e) {
    throw Error(Errc::protocol, "registry at " + impl.address_ + " sent a reply this client cannot read: " + e.what());
  } catch (const std::logic_error& e) {
    throw Error(Errc::protocol, "registry at " + impl.address_ + " sent a reply this client cannot read: " + e.what());
  }
}

}  // namespace

Client::Client(std::string host_port, std::string token, milliseconds connect_timeout)
    : impl_(make_client(std::move(host_port), std::move(token), connect_timeout)) {}

Client::~Client() = default;

const std::string& Client::address() const noexcept { return impl_->address_; }

void Client::publish(const std::string& name, std::string_view value, bool replace) {
  check_name(name);
  if (value.size() > kMaxValueBytes) {
    throw Error(Errc::invalid_argument, "registry: value of record " + protocol::quote_name(name) +
                                            " is " + std::to_string(value.size()) +
                                            " bytes, over the limit of " +
                                            std::to_string(kMaxValueBytes));
  }
  guarded(*impl_, [&] { impl_->publish(name, value, replace); });
}

std::string Client::lookup(const std::string& name) {
  std::optional<std::string> value = try_lookup(name);
  if (!value) throw Error(Errc::not_found, "registry: no record " + protocol::quote_name(name));
  return std::move(*value);
}

std::optional<std::string> Client::try_lookup(const std::string& name) {
  check_name(name);
  return guarded(*impl_, [&] { return impl_->try_lookup(name); });
}

std::string Client::wait_for(const std::string& name, milliseconds timeout) {
  check_name(name);
  (void)timeout_ms(timeout, "wait for", name);
  return guarded(*impl_, [&] { return impl_->wait_for(name, std::min(timeout, kMaxWaitTimeout)); });
}

std::vector<std::optional<std::string>> Client::wait_all(const std::vector<std::string>& names,
                                                         const std::vector<int>& publishers, milliseconds timeout,
                                                         bool skip_dead) {
  for (const std::string& name : names) check_name(name);
  if (!publishers.empty() && publishers.size() != names.size()) {
    throw Error(Errc::invalid_argument, "registry: wait_all of " + std::to_string(names.size()) + " records with " +
                                            std::to_string(publishers.size()) + " publishers");
  }
  (void)timeout_ms(timeout, "wait_all for", names.empty() ? std::string("-") : names[0]);
  return guarded(*impl_, [&] { return impl_->wait_all(names, publishers, std::min(timeout, kMaxWaitTimeout), skip_dead); });
}

void Client::remove(const std::string& name) {
  check_name(name);
  guarded(*impl_, [&] { impl_->remove(name); });
}

void Client::join(int rank, std::string_view info) {
  if (rank < 0) {
    throw Error(Errc::invalid_argument,
                "registry: cannot join as rank " + std::to_string(rank) + ": ranks are >= 0");
  }
  if (info.size() > kMaxInfoBytes) {
    throw Error(Errc::invalid_argument, "registry: info of rank " + std::to_string(rank) + " is " +
                                            std::to_string(info.size()) +
                                            " bytes, over the limit of " +
                                            std::to_string(kMaxInfoBytes));
  }
  guarded(*impl_, [&] { impl_->join(rank, info); });
}

std::map<int, std::string> Client::members() {
  return guarded(*impl_, [&] { return impl_->members(); });
}

std::map<int, std::string> Client::members_after(std::uint64_t& version, milliseconds timeout) {
  (void)timeout_ms(timeout, "members watch", "members");
  return guarded(*impl_, [&] { return impl_->members_after(version, std::min(timeout, kMaxWaitTimeout)); });
}

void Client::interrupt() noexcept { impl_->interrupt(); }

void Client::barrier(const std::string& name, int count, milliseconds timeout) {
  check_name(name);
  if (count < 1) {
    throw Error(Errc::invalid_argument, "registry: barrier " + protocol::quote_name(name) +
                                            " count " + std::to_string(count) +
                                            " must be at least 1");
  }
  (void)timeout_ms(timeout, "barrier", name);
  guarded(*impl_, [&] { impl_->barrier(name, count, std::min(timeout, kMaxWaitTimeout)); });
}

bool Client::usable() const { return impl_->usable(); }

Client::Stats Client::stats() const noexcept {
  return {impl_->requests_.load(std::memory_order_relaxed), impl_->connections_.load(std::memory_order_relaxed),
          impl_->bytes_sent_.load(std::memory_order_relaxed), impl_->bytes_received_.load(std::memory_order_relaxed)};
}

}  // namespace dfi::registry
