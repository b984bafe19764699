// The embedded registry server: named binary records, node membership and barriers.
//
// Rank 0 of a cluster runs one Server; every rank (rank 0 included) talks to it through a
// dfi::registry::Client. A typical start-up:
//
//   registry::Server server({.bind_host = "127.0.0.1", .port = 7420});   // rank 0 only
//   registry::Client client(server.address(), token, std::chrono::seconds(30));
//   client.join(rank, hostname);
//   client.publish("flow/join/worker/" + std::to_string(rank), worker_address);
//   client.barrier("flow/join/ready", size, std::chrono::seconds(30));
//   std::string peer = client.lookup("flow/join/worker/3");
//
// The server serves every connection from one background thread (a poll loop), so no request can
// block another: wait and barrier requests are parked until their record appears, their barrier
// fills or their timeout passes. The server survives anything a client sends (garbage bytes,
// oversized or truncated frames, invalid JSON, unknown operations, missing or mistyped fields):
// it answers every malformed request with a `protocol` error frame naming what was wrong, then
// closes only that connection. The wire format, every request, reply and error frame, is
// documented in src/registry/protocol.hpp. Records live in memory only and disappear with the
// server.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dfi/registry/limits.hpp"

namespace dfi::registry {

struct ServerOptions {
  // Address to listen on. Loopback ("127.0.0.1", "::1", "localhost") keeps the registry private
  // to this host; any other address exposes it and then requires a token.
  std::string bind_host = "127.0.0.1";
  // TCP port; 0 picks any free port (read it back with Server::port()).
  std::uint16_t port = 0;
  // Shared secret every client must present in its hello; empty means none (loopback only).
  std::string token{};
  // Connections beyond this many are answered with a `retry` error and closed.
  std::size_t max_connections = kDefaultMaxConnections;
  // A connection that sends no hello this long after it opened, or leaves a frame incomplete
  // this long after its first byte, is answered with a `protocol` error and closed.
  std::chrono::milliseconds hello_timeout{10'000};
  std::chrono::milliseconds frame_timeout{10'000};
  // A connection whose peer stops answering — TCP keepalive probes (from 1 s of silence, one a
  // second) or data unacknowledged this long — is closed by the kernel after about this long, so
  // that a member cut off from the network (a partition) leaves the membership as a dead one does;
  // a member that dies is noticed at once (its connection closes). 0: the kernel's defaults.
  std::chrono::milliseconds dead_after{3'000};
};

// Options for a server listening at `host_port` ("host:port" or "[v6-host]:port", as DFI_REGISTRY)
// with `token`; dead_after from the setting registry_dead_after_ms, the other fields keep their
// defaults. Throws dfi::Error(invalid_argument) naming
// the text when it is not host:port.
ServerOptions server_options_at(std::string_view host_port, std::string token);

class Server {
 public:
  // Binds, listens and starts serving before returning, so clients may connect at once.
  // Errors (dfi::Error):
  //   invalid_argument: bind_host is empty; max_connections is 0; hello_timeout or
  //                     frame_timeout is not positive; bind_host is not a loopback address and
  //                     token is empty (an exposed registry needs a token).
  //   io: bind_host cannot be resolved; the socket cannot be created, bound (message names
  //       host:port and the system error) or listened on; the serving thread cannot start.
  explicit Server(ServerOptions options);
  // Stops the server (see stop()).
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  Server(Server&&) = delete;
  Server& operator=(Server&&) = delete;

  // The port actually bound. Thread-safe; never fails.
  std::uint16_t port() const noexcept;
  // "host:port" (IPv6 hosts in brackets), suitable for Client. Thread-safe; never fails.
  const std::string& address() const noexcept;

  // Stops serving and returns promptly, even while clients are blocked in wait or barrier: those
  // receive a peer_failed error frame when possible, then every connection is closed and the
  // serving thread is joined. Idempotent and thread-safe; never throws.
  void stop() noexcept;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dfi::registry
