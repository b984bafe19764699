// What bench adds to the launch layer's child processes (dfi/launch/child_process.hpp) for its
// baselines: a server started on a free port and known to listen before its client starts, and
// the text of commands and output for results and messages.
//
//   bench::ListeningServer server = bench::start_listening_server(
//       [&](int port) { return launch::ChildSpec{{"ucx_perftest", "-p", std::to_string(port)}}; },
//       "ucx_perftest", std::chrono::seconds(10));
//   launch::ChildResult c = launch::run_child({{"ucx_perftest", "127.0.0.1", ...}}, bound);
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dfi/launch/child_process.hpp"

namespace dfi::tools::bench {

// A server process listening on a TCP port of this machine, for clients on 127.0.0.1.
struct ListeningServer {
  launch::ChildProcess process;
  int port = 0;
};

// Starts `make_spec(port)` on a port that was free a moment ago and waits until some socket
// listens on it (is_listening) while the server runs, for at most `bound`; a client started
// after it returns can connect at once. A server that exits saying "Address already in use" lost
// its port to another process: it is started again on another port, up to `attempts` times.
// Throws dfi::Error(io) when the server exits, does not listen in time or never gets a port; the
// message names `what`, the server's command line and quotes its last lines of output.
ListeningServer start_listening_server(const std::function<launch::ChildSpec(int port)>& make_spec,
                                       const std::string& what, std::chrono::milliseconds bound,
                                       int attempts = 4);

// True if some socket listens on TCP `port` (any address, IPv4 or IPv6), per /proc/net/tcp{,6}.
bool is_listening(int port);

// `argv` as one shell-safe command line, for "the exact command" in results and messages. An
// argument of the form $NAME (upper case) is left unquoted: a placeholder the reader sets.
std::string shell_join(const std::vector<std::string>& argv);

// The last `lines` lines of `text` (for error messages that quote a child's output).
std::string tail_lines(std::string_view text, int lines);

}  // namespace dfi::tools::bench
