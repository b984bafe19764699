#include "process.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "dfi/common/error.hpp"

namespace dfi::tools::bench {

ListeningServer start_listening_server(const std::function<launch::ChildSpec(int port)>& make_spec,
                                       const std::string& what, std::chrono::milliseconds bound,
                                       int attempts) {
  std::string last_failure;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    const int port = launch::pick_free_port();
    const launch::ChildSpec spec = make_spec(port);
    ListeningServer server{launch::ChildProcess::start(spec), port};
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (std::chrono::steady_clock::now() < deadline && server.process.running()) {
      if (is_listening(port) && server.process.running()) return server;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    launch::ChildResult s = server.process.wait(std::chrono::milliseconds(0));
    last_failure = "server (" + shell_join(spec.argv) + ") " +
                   (s.timed_out ? "did not listen within " + std::to_string(bound.count()) + " ms"
                                : "exited with status " + std::to_string(s.exit_code)) +
                   ":\n" + tail_lines(s.output, 5);
    if (s.output.find("Address already in use") == std::string::npos)
      throw Error(Errc::io, "bench: " + what + " " + last_failure);
  }
  throw Error(Errc::io, "bench: " + what + " could not get a port after " +
                            std::to_string(attempts) + " attempts; last: " + last_failure);
}

bool is_listening(int port) {
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      // "  sl  local_address rem_address   st ..." with local_address = HEXADDR:HEXPORT
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      if (!(fields >> slot >> local >> remote >> state)) continue;
      const std::size_t colon = local.rfind(':');
      if (colon == std::string::npos || state != "0A") continue;  // 0A = LISTEN
      if (std::strtol(local.c_str() + colon + 1, nullptr, 16) == port) return true;
    }
  }
  return false;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) {
    if (!line.empty()) line += ' ';
    const bool plain = !arg.empty() && arg.find_first_not_of(
                                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789-_./=:,+@%") == std::string::npos;
    // "$NAME" stays a variable reference (placeholders such as $PORT in recorded commands).
    const bool variable =
        arg.size() > 1 && arg[0] == '$' &&
        arg.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ_", 1) == std::string::npos;
    if (plain || variable) {
      line += arg;
      continue;
    }
    line += '\'';
    for (char c : arg) {
      if (c == '\'') {
        line += "'\\''";
      } else {
        line += c;
      }
    }
    line += '\'';
  }
  return line;
}

std::string tail_lines(std::string_view text, int lines) {
  std::size_t end = text.size();
  while (end > 0 && text[end - 1] == '\n') --end;
  std::size_t start = end;
  int seen = 0;
  while (start > 0) {
    if (text[start - 1] == '\n' && ++seen == lines) break;
    --start;
  }
  return std::string(text.substr(start, end - start));
}

}  // namespace dfi::tools::bench
