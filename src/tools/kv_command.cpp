#include "kv_command.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <mutex>
#include <ostream>
#include <string_view>
#include <thread>
#include <vector>

#include "dfi/apps/kv/client.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/common/error.hpp"
#include "dfi/common/unique_fd.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/registry/client.hpp"
#include "stop_signals.hpp"

namespace dfi::tools {

int run_kv_bench(const apps::kv::BenchOptions& options, std::ostream& out, std::ostream& err) {
  cluster::Node node;
  const int status = apps::kv::run_bench(node, options, out, err);
  // Only a run whose ranks all reported waits for the others; a failed rank leaves at once.
  if (status == 0) node.finish();
  return status;
}

namespace {

// How often a gateway and a rank's stop watcher look for the stop.
constexpr std::chrono::milliseconds kStopPoll{50};

Error io_error(const std::string& what) { return Error(Errc::io, what + ": " + std::strerror(errno)); }

sockaddr_un unix_address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    throw Error(Errc::invalid_argument, "kv: socket path '" + path + "' must have 1 .. " +
                                            std::to_string(sizeof address.sun_path - 1) + " characters");
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

using Fd = UniqueFd;

// Writes all of `text`; false when the peer went away.
bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Reads what arrived into `buffer`; false at the end of the stream or an error.
bool read_some(int fd, std::string& buffer) {
  char chunk[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buffer.append(chunk, static_cast<std::size_t>(n));
    return true;
  }
}

bool parse_key(std::string_view text, std::uint64_t& key) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), key);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

// Runs one request line of the gateway protocol (kv_command.hpp) on `client`; the answer line.
std::string execute(apps::kv::Client& client, std::string_view line, std::string& value) {
  const std::size_t op_end = line.find(' ');
  const std::string_view op = line.substr(0, op_end);
  std::string_view rest = op_end == std::string_view::npos ? std::string_view() : line.substr(op_end + 1);
  const std::size_t key_end = op == "put" ? rest.find(' ') : std::string_view::npos;
  std::uint64_t key = 0;
  if (!parse_key(rest.substr(0, key_end), key) || (op == "put" && key_end == std::string_view::npos)) {
    return "error malformed request '" + std::string(line) + "' (put <key> <value>, get <key>, delete <key>)\n";
  }
  bool found = false;
  Status status;
  if (op == "put") {
    status = client.put(key, rest.substr(key_end + 1));
    found = true;
  } else if (op == "get") {
    status = client.get(key, value, found);
  } else if (op == "delete") {
    status = client.del(key, found);
  } else {
    return "error unknown operation '" + std::string(op) + "' (put, get or delete)\n";
  }
  if (!status) return "error " + status.message() + "\n";
  if (!found) return "not_found\n";
  if (op != "get") return "ok\n";
  std::string_view v = value;
  while (!v.empty() && v.back() == '\0') v.remove_suffix(1);
  std::string answer = "ok ";
  answer += v;
  answer += '\n';
  return answer;
}

// What the threads of one serving rank share.
struct ServeState {
  ServeState(cluster::Node& n, const KvServeOptions& o, std::ostream& o_out, std::ostream& o_err)
      : node(n), options(o), out(o_out), err(o_err), stop_record("kv/" + o.service.name + "/stop") {}

  cluster::Node& node;
  const KvServeOptions& options;
  std::ostream& out;
  std::ostream& err;
  std::string stop_record;  // published by the rank that stops the service
  std::atomic<bool> stop{false};
  std::mutex lock;  // out, err, failed
  bool failed = false;

  void say(const std::string& line) {
    const std::lock_guard<std::mutex> guard(lock);
    out << line << '\n' << std::flush;
  }
  // A failure of this rank: reported, and the service stopped (a gateway that failed would
  // leave the replicas waiting for its client).
  void fail(const std::string& what) {
    {
      const std::lock_guard<std::mutex> guard(lock);
      err << "kv serve (rank " << node.rank() << "): " << what << '\n' << std::flush;
      failed = true;
    }
    request_stop();
  }
  void request_stop() {
    if (stop.exchange(true)) return;
    try {
      node.registry().publish(stop_record, std::to_string(node.rank()), /*replace=*/true);
    } catch (const Error& e) {
      const std::lock_guard<std::mutex> guard(lock);
      err << "kv serve (rank " << node.rank() << "): could not publish the stop: " << e.what() << '\n';
    }
  }
};

// One gateway: client `thread` of this rank, serving the requests sent to its socket until the
// stop, then closing the client (the replicas end once every client closed).
void run_gateway(ServeState& state, int thread) {
  cluster::Node& node = state.node;
  const std::string path = state.options.socket_dir + "/kv-" + std::to_string(node.rank()) + "-" +
                           std::to_string(thread) + ".sock";
  try {
    fabric::Worker worker(state.node.fabric(), "kv-gateway-" + std::to_string(thread));
    apps::kv::Client client(state.node, worker, state.options.service, thread);
    const sockaddr_un address = unix_address(path);
    ::unlink(path.c_str());
    Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (listener.get() < 0) throw io_error("socket");
    if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      throw io_error("cannot listen at '" + path + "'");
    }
    if (::listen(listener.get(), 16) != 0) throw io_error("listen at '" + path + "'");
    state.say("kv serve: rank " + std::to_string(node.rank()) + " thread " + std::to_string(thread) + " serves at " +
              path);
    Fd connection;
    std::string buffer, value;
    std::uint64_t served = 0;
    while (!state.stop.load()) {
      // One connection at a time: while one is open, the next waits in the listen queue.
      const bool serving = connection.get() >= 0;
      pollfd p{serving ? connection.get() : listener.get(), POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(kStopPoll.count()));
      if (ready < 0 && errno != EINTR) throw io_error("poll");
      if (ready <= 0 || p.revents == 0) continue;
      if (!serving) {
        connection.reset(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        buffer.clear();
        continue;
      }
      bool open = read_some(connection.get(), buffer);
      for (std::size_t end; open && (end = buffer.find('\n')) != std::string::npos;) {
        const std::string_view line = std::string_view(buffer).substr(0, end);
        std::string answer;
        if (line == "stop") {
          state.say("kv serve: rank " + std::to_string(node.rank()) + " thread " + std::to_string(thread) +
                    " was asked to stop the service");
          state.request_stop();
          answer = "ok\n";
        } else {
          answer = execute(client, line, value);
          ++served;
        }
        buffer.erase(0, end + 1);
        open = write_all(connection.get(), answer);
      }
      if (!open) connection.reset();
    }
    connection.reset();
    listener.reset();
    ::unlink(path.c_str());
    client.close().throw_if_error();
    state.say("kv serve: rank " + std::to_string(node.rank()) + " thread " + std::to_string(thread) + " stopped after " +
              std::to_string(served) + " request(s)");
  } catch (const Error& e) {
    ::unlink(path.c_str());
    state.fail(std::string("gateway ") + std::to_string(thread) + ": " + e.what());
  }
}

}  // namespace

int run_kv_serve(const KvServeOptions& options, std::ostream& out, std::ostream& err) {
  // Before any thread starts (the Node's too): SIGINT and SIGTERM wait for the watcher below.
  StopSignals signals;
  try {
    cluster::Node node;
    apps::kv::check_options(options.service, node.size());
    ServeState state(node, options, out, err);
    // The stop: a signal to this rank, or the record another rank published.
    std::atomic<bool> finished{false};
    std::thread watcher([&] {
      while (!finished.load()) {
        if (const int signal_number = signals.wait(kStopPoll); signal_number != 0) {
          state.say("kv serve: rank " + std::to_string(node.rank()) + " received " +
                    (signal_number == SIGINT ? "SIGINT" : "SIGTERM") + ": stopping the service");
          state.request_stop();
        } else if (!state.stop.load()) {
          try {
            if (node.registry().try_lookup(state.stop_record)) state.stop.store(true);
          } catch (const Error& e) {
            state.fail(std::string("watching for the stop: ") + e.what());
          }
        }
      }
    });
    if (node.rank() < options.service.replicas) {
      try {
        if (node.rank() == 0) apps::kv::create_service(node, options.service);
        const apps::kv::ReplicaStats stats = apps::kv::run_replica(node, options.service);
        state.say("kv serve: rank " + std::to_string(node.rank()) + " (replica) stopped in view " +
                  std::to_string(stats.view) + ": " + std::to_string(stats.writes) + " write(s) applied, " +
                  std::to_string(stats.keys) + " key(s)");
      } catch (const Error& e) {
        state.fail(std::string("replica: ") + e.what());
      }
    } else {
      std::vector<std::thread> gateways;
      for (int t = 0; t < options.service.client_threads; ++t) gateways.emplace_back(run_gateway, std::ref(state), t);
      for (std::thread& g : gateways) g.join();
    }
    finished.store(true);
    watcher.join();
    if (state.failed) return 1;
    node.finish();
    return 0;
  } catch (const Error& e) {
    err << "kv serve: " << e.what() << '\n';
    return 1;
  }
}

int run_kv_request(const KvRequestOptions& options, std::ostream& out, std::ostream& err) {
  try {
    if (options.op != "put" && options.op != "get" && options.op != "delete" && options.op != "stop") {
      throw Error(Errc::invalid_argument, "unknown operation '" + options.op + "' (put, get, delete or stop)");
    }
    if (options.value.find_first_of(std::string_view("\n\0", 2)) != std::string::npos) {
      throw Error(Errc::invalid_argument, "a value holds text only: no newline or NUL byte");
    }
    std::string line = options.op;  // appends, not "literal" + string: GCC 12's false -Wrestrict
    if (options.op != "stop") {
      line += ' ';
      line += std::to_string(options.key);
    }
    if (options.op == "put") {
      line += ' ';
      line += options.value;
    }
    line += '\n';
    const sockaddr_un address = unix_address(options.socket);
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) throw io_error("socket");
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      throw io_error("no gateway of `dfi kv serve` at '" + options.socket + "'");
    }
    if (!write_all(fd.get(), line)) throw io_error("sending to the gateway at '" + options.socket + "'");
    std::string buffer;
    const Deadline deadline(std::chrono::milliseconds(static_cast<long long>(options.timeout_seconds * 1000)));
    while (buffer.find('\n') == std::string::npos) {
      if (deadline.expired()) {
        throw Error(Errc::timeout, "no answer from the gateway at '" + options.socket + "' within " +
                                       std::to_string(options.timeout_seconds) + " s");
      }
      pollfd p{fd.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) > 0 && !read_some(fd.get(), buffer)) {
        throw Error(Errc::io, "the gateway at '" + options.socket + "' closed the connection without an answer");
      }
    }
    const std::string answer = buffer.substr(0, buffer.find('\n'));
    if (answer == "ok") return 0;
    if (answer.rfind("ok ", 0) == 0) {
      out << answer.substr(3) << '\n';
      return 0;
    }
    if (answer == "not_found") {
      err << "dfi kv " << options.op << ": key " << options.key << " not found\n";
      return 2;
    }
    err << "dfi kv " << options.op << ": " << (answer.rfind("error ", 0) == 0 ? answer.substr(6) : answer) << '\n';
    return 1;
  } catch (const Error& e) {
    err << "dfi kv " << options.op << ": " << e.what() << '\n';
    return 1;
  }
}

}  // namespace dfi::tools
