// Helpers shared by the registry tests: error capture, and a hand-driven TCP connection that
// speaks (possibly broken) wire protocol, from either end.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "dfi/common/error.hpp"
#include "dfi/registry/client.hpp"
#include "dfi/registry/server.hpp"

namespace dfi::registry::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline constexpr auto kConnectTimeout = 5s;

// Runs `f`, which must throw dfi::Error; returns it (or a fatal-coded error after a failure).
inline Error capture_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected dfi::Error, got std::exception: " << e.what();
    return Error(Errc::fatal, e.what());
  }
  ADD_FAILURE() << "expected dfi::Error, nothing was thrown";
  return Error(Errc::fatal, "nothing thrown");
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline std::unique_ptr<Client> connect_to(const Server& server, const std::string& token = "") {
  return std::make_unique<Client>(server.address(), token, kConnectTimeout);
}

// A wire frame: 4-byte big-endian length, then `body`.
inline std::string frame(std::string_view body) {
  const auto n = static_cast<std::uint32_t>(body.size());
  std::string out{static_cast<char>(n >> 24), static_cast<char>((n >> 16) & 0xff),
                  static_cast<char>((n >> 8) & 0xff), static_cast<char>(n & 0xff)};
  out.append(body);
  return out;
}

inline constexpr std::string_view kHello = R"({"op":"hello","token":"","version":1})";

// A hand-driven TCP connection: the client end (connected to `port` on 127.0.0.1) or, through
// adopt(), the server end of an accepted socket.
class RawConnection {
 public:
  explicit RawConnection(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    EXPECT_GE(fd_, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sockaddr generic{};
    static_assert(sizeof(generic) == sizeof(address));
    std::memcpy(&generic, &address, sizeof(address));
    EXPECT_EQ(::connect(fd_, &generic, sizeof(address)), 0) << std::strerror(errno);
  }
  // Takes ownership of a connected socket.
  static RawConnection adopt(int fd) { return RawConnection(fd, Adopt{}); }

  ~RawConnection() { close(); }
  RawConnection(RawConnection&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  RawConnection& operator=(RawConnection&&) = delete;

  void send_bytes(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return;  // the peer may already have closed us; that is allowed
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  void send_frame(std::string_view body) { send_bytes(frame(body)); }

  // The next frame's body, or nullopt on EOF, error or timeout.
  std::optional<std::string> read_frame(std::chrono::milliseconds timeout = 2000ms) {
    char header[4];
    if (!read_exact(header, 4, timeout)) return std::nullopt;
    const std::uint32_t n = (std::uint32_t{static_cast<unsigned char>(header[0])} << 24) |
                            (std::uint32_t{static_cast<unsigned char>(header[1])} << 16) |
                            (std::uint32_t{static_cast<unsigned char>(header[2])} << 8) |
                            std::uint32_t{static_cast<unsigned char>(header[3])};
    if (n > (1u << 24)) return std::nullopt;
    std::string body(n, '\0');
    if (!read_exact(body.data(), n, timeout)) return std::nullopt;
    return body;
  }

  // True once the peer closed the connection (EOF or reset) within `timeout`; bytes that
  // arrive before are discarded.
  bool closed_by_peer(std::chrono::milliseconds timeout = 2000ms) {
    const auto deadline = Clock::now() + timeout;
    char sink[4096];
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd_, sink, sizeof(sink), 0);
      if (n <= 0) return true;
    }
    return false;
  }

  void shutdown_sending() { ::shutdown(fd_, SHUT_WR); }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  struct Adopt {};
  RawConnection(int fd, Adopt) : fd_(fd) {}

  bool read_exact(char* out, std::size_t size, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    std::size_t got = 0;
    while (got < size) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      const ssize_t n = ::recv(fd_, out + got, size - got, 0);
      if (n <= 0) return false;
      got += static_cast<std::size_t>(n);
    }
    return true;
  }

  int fd_;
};

}  // namespace dfi::registry::testing
