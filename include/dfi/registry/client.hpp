// A connection to the registry (see server.hpp): publish and look up named binary records, join
// the membership list, meet at barriers.
//
// Threading: every call is thread-safe. A Client holds one connection and sends one request at
// a time (a mutex serialises callers), so a blocking wait_for() or barrier() holds the connection
// and other calls on the same Client wait behind it. Threads that must block independently use a
// Client each.
//
// Errors: every call throws dfi::Error. Besides the per-call codes listed below, any call can
// throw
//   peer_failed: the registry closed or reset the connection (e.g. it stopped or died); the
//                message names the registry address and the request.
//   timeout:     the registry did not answer within the request's bound (10 s for simple
//                requests, the call's own timeout plus 2 s for wait_for() and barrier()).
//   protocol:    the registry sent a malformed reply ("registry at H:P sent a malformed reply
//                to ..."), or it found our request malformed and said so in an error frame (the
//                registry's own message, "registry: unknown op 'x'"; a newer client talking to
//                an older server).
//   io:          a local socket call failed.
// After any of these four the connection is unusable and every later call fails with
// peer_failed naming the first failure; membership of this client ends with it. Errors the
// registry decides (not_found, already_exists, timeout of a wait, invalid_argument) leave the
// connection usable. An error the registry sends arrives as dfi::Error with the registry's code
// and message unchanged (src/registry/protocol.hpp lists them).
//
// Names are non-empty UTF-8 text of at most kMaxNameBytes; values are arbitrary bytes of at most
// kMaxValueBytes. A call that breaks these bounds throws invalid_argument and sends nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dfi/registry/limits.hpp"

namespace dfi::registry {

class Client {
 public:
  // Connects to `host_port` ("127.0.0.1:7420", "[::1]:7420", "node0:7420") and presents `token`.
  // Connection attempts are retried (the server may still be starting) until connect_timeout.
  // Errors:
  //   invalid_argument: host_port is not "host:port"; the registry rejected the token
  //                     ("... rejected the connection: registry: bad token").
  //   timeout: no connection within connect_timeout ("registry at 127.0.0.1:7420 unreachable
  //            after 3000 ms: Connection refused").
  //   io:      the host name cannot be resolved, or a socket call failed.
  //   retry:   the registry has too many connections.
  //   protocol / peer_failed: the registry answered the hello with garbage or hung up, or
  //                     rejected it ("... rejected the connection: registry: client speaks
  //                     protocol version 2, this server speaks 1").
  //   invalid_argument: also when the token is not UTF-8 or longer than a hello may be
  //                     (kMaxHelloBytes).
  Client(std::string host_port, std::string token, std::chrono::milliseconds connect_timeout);
  // Closes the connection; the registry then drops this client's memberships and barrier
  // arrivals.
  ~Client();

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  Client(Client&&) = delete;
  Client& operator=(Client&&) = delete;

  // The registry address given at construction. Thread-safe; never fails.
  const std::string& address() const noexcept;

  // Stores `value` under `name`, waking every wait_for(name). When the record exists, replaces it
  // if `replace`, else throws already_exists ("registry: record 'X' already exists").
  void publish(const std::string& name, std::string_view value, bool replace = false);

  // The value of `name`; throws not_found ("registry: no record 'X'") if there is none.
  std::string lookup(const std::string& name);

  // The value of `name`, or nullopt if there is none.
  std::optional<std::string> try_lookup(const std::string& name);

  // The value of `name`, waiting up to `timeout` (clamped to kMaxWaitTimeout) for it to be
  // published. Throws timeout ("registry: record 'X' not published within N ms"); a negative
  // timeout is invalid_argument. Holds the connection while waiting.
  std::string wait_for(const std::string& name, std::chrono::milliseconds timeout);

  // The values of every record in `names`, in that order, waiting up to `timeout` (clamped to
  // kMaxWaitTimeout) until all are published: one request, however many names. `publishers` is
  // empty or holds one rank per name, the member expected to publish it (-1: none): a name whose
  // publisher is no member (it left or died) while the name is unpublished ends the wait with
  // peer_failed ("registry: rank 3 is no member (it left or died) and never published 'x'"), or,
  // with `skip_dead`, gives nullopt for that name. Holds the connection while waiting.
  // Errors: timeout ("registry: 2 of 64 records not published within N ms (the first: 'x')");
  // invalid_argument (a bad name, publishers of another length, a negative timeout).
  std::vector<std::optional<std::string>> wait_all(const std::vector<std::string>& names,
                                                   const std::vector<int>& publishers,
                                                   std::chrono::milliseconds timeout, bool skip_dead = false);
  // Deletes `name`; throws not_found if there is none.
  void remove(const std::string& name);

  // Registers this client as member `rank` (>= 0) with `info` (arbitrary bytes, at most
  // kMaxInfoBytes) until this client's connection closes. Throws already_exists when a live
  // connection already joined that rank, invalid_argument when the registry holds kMaxMembers.
  void join(int rank, std::string_view info);

  // The current members: rank -> info.
  std::map<int, std::string> members();
  // Watches the membership: returns the members once they differ from `version` (0: at once),
  // or unchanged after `timeout`; sets `version` to that of the answer. Holds the connection
  // while waiting (use a Client of its own). Errors: as members(); peer_failed after interrupt().
  std::map<int, std::string> members_after(std::uint64_t& version, std::chrono::milliseconds timeout);
  // False once a failure made the connection unusable (every later call fails with
  // peer_failed). Thread-safe.
  bool usable() const;
  // What this client exchanged with the registry so far: requests (each answered by one reply;
  // the hello not included), connections (hellos answered: 1) and bytes of frames sent and
  // received (the hello's included). Thread-safe.
  struct Stats {
    std::uint64_t requests = 0;
    std::uint64_t connections = 0;
    std::uint64_t bytes_sent = 0;
    std::uint64_t bytes_received = 0;
  };
  Stats stats() const noexcept;
  // Ends a call blocked in another thread (it fails with peer_failed) and breaks the connection.
  // Thread-safe; for stopping a watcher.
  void interrupt() noexcept;

  // Returns once `count` clients (this one included) have called barrier(name, count) in the
  // current round; the next `count` arrivals form the next round. Holds the connection while
  // waiting. If a waiting participant disconnects, its arrival is withdrawn (on etcd only its own
  // timeout withdraws it).
  // Errors: timeout ("registry: barrier 'X' timed out after N ms with 2 of 4 arrived"; this
  // client's arrival is withdrawn); invalid_argument if count < 1, count exceeds the server's
  // connection limit, count differs from the count of participants already waiting, or timeout
  // is negative. `timeout` is clamped to kMaxWaitTimeout.
  void barrier(const std::string& name, int count, std::chrono::milliseconds timeout);

  // The kind of registry behind a client (internal: src/registry/client_impl.hpp).
  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dfi::registry
