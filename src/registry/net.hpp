// Internal: small POSIX socket helpers shared by the registry server and client.
#pragma once

#include <chrono>

#include <cstdint>
#include <string>
#include <string_view>

#include "dfi/common/unique_fd.hpp"

struct sockaddr;

namespace dfi::registry::net {

using Fd = dfi::UniqueFd;

// strerror(err) without the thread-safety problems of strerror.
std::string errno_text(int err);

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};

// Parses "host:port" or "[v6-host]:port". Throws dfi::Error(invalid_argument) naming the text.
HostPort split_host_port(std::string_view text);

// "host:port", with the host in brackets when it contains ':'.
std::string join_host_port(std::string_view host, std::uint16_t port);

// True for 127.0.0.0/8, ::1 and IPv4-mapped 127.0.0.0/8.
bool is_loopback(const sockaddr* address);

// Best-effort socket options; failures are ignored (they only cost latency).
void set_no_delay(int fd) noexcept;
// Makes the kernel close `fd` when its peer stops answering for about `dead_after` (keepalive
// probes from 1 s of silence, one a second; TCP_USER_TIMEOUT for unacknowledged data). Nothing
// for 0.
void set_dead_after(int fd, std::chrono::milliseconds dead_after) noexcept;

}  // namespace dfi::registry::net
