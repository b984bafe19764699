#include "net.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>

#include "dfi/common/error.hpp"

namespace dfi::registry::net {

std::string errno_text(int err) {
  char buffer[256] = {};
  // GNU strerror_r returns the message (maybe a static string, maybe the buffer).
  const char* text = ::strerror_r(err, buffer, sizeof(buffer));
  return text != nullptr ? std::string(text) : "errno " + std::to_string(err);
}

HostPort split_host_port(std::string_view text) {
  auto bad = [&](const char* why) {
    return Error(Errc::invalid_argument,
                 "registry address '" + std::string(text) + "' is not host:port (" + why + ")");
  };
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) throw bad("missing ']'");
    host = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':') throw bad("missing ':' after ']'");
    port = text.substr(close + 2);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) throw bad("missing ':port'");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) throw bad("IPv6 hosts need brackets");
  }
  if (host.empty()) throw bad("empty host");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 ||
      value > 65535) {
    throw bad("port must be 1..65535");
  }
  return HostPort{std::string(host), static_cast<std::uint16_t>(value)};
}

std::string join_host_port(std::string_view host, std::uint16_t port) {
  std::string out;
  if (host.find(':') != std::string_view::npos) {
    out.append("[").append(host).append("]");
  } else {
    out.append(host);
  }
  return out + ":" + std::to_string(port);
}

bool is_loopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    sockaddr_in v4{};
    std::memcpy(&v4, address, sizeof(v4));
    return (ntohl(v4.sin_addr.s_addr) >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    sockaddr_in6 v6{};
    std::memcpy(&v6, address, sizeof(v6));
    const unsigned char* b = v6.sin6_addr.s6_addr;
    static constexpr unsigned char kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static constexpr unsigned char kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(b, kLoopback, 16) == 0) return true;
    return std::memcmp(b, kMappedPrefix, 12) == 0 && b[12] == 127;
  }
  return false;
}

void set_dead_after(int fd, std::chrono::milliseconds dead_after) noexcept {
  if (dead_after.count() <= 0) return;
  const int one = 1;
  const int probes = static_cast<int>(std::max<std::int64_t>(1, dead_after.count() / 1000 - 1));
  const unsigned timeout = static_cast<unsigned>(dead_after.count());
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof(one));   // seconds of silence
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &one, sizeof(one));  // seconds between probes
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof(timeout));
}

void set_no_delay(int fd) noexcept {
  int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace dfi::registry::net
