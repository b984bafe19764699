// Scenario shuffle-nm: an N:M key-hash shuffle across every rank of a 4-rank cluster against the
// same shuffle written by hand over plain TCP sockets (issue 9's "4-rank N:M over TCP" target).
//
// DFI side: one bandwidth-mode shuffle flow per tuple size with one source (thread 0) and one
// target (id 0) on every rank, key-hash routing (ShuffleSource::push, tuple at a time). Every
// source pushes `tuples_per_source` tuples cycling through the 64 KiB block of tuple_block.hpp
// and closes; every target consumes zero-copy and sums the key of every tuple.
//
// Baseline, the same data movement by hand: every rank listens on a TCP socket and connects to
// every rank (itself included: ranks x ranks connections, as the flow has ranks x ranks rings).
// A writer thread routes each tuple with the flow's own key hash (dfi::kernels::route), copies it
// into a 64 KiB buffer per destination and writes a buffer when it is full (one write system
// call per 64 KiB); a reader thread polls its connections, reads 64 KiB at a time and sums the
// key of every tuple (a tuple cut by a read boundary is carried over).
//
// Both sides are timed the same way: every rank passes a cluster barrier once everything is
// connected and open; aggregate GB/s = all tuple bytes delivered / (the last end of stream at
// any target - the first rank's release from the barrier), with steady_clock, which all ranks of
// one machine share. The flow and the baseline move the same tuples over the same number of
// connections, so the ratio of their aggregates is also their ratio per link. The driver checks
// that tuple counts and key sums received equal what was sent, on both sides.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cluster_job.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/kernels/hash.hpp"
#include "dfi/registry/client.hpp"
#include "rank_threads.hpp"
#include "scenarios.hpp"
#include "tuple_block.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kName = "shuffle-nm";

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

struct Point {
  std::size_t tuple_bytes = 0;
  std::uint64_t tuples_per_source = 0;
};

// What one rank did for one point; the driver adds the ranks up.
json rank_point(std::uint64_t sent, std::uint64_t sent_sum, std::uint64_t received,
                std::uint64_t received_sum, std::int64_t start_ns, std::int64_t end_ns) {
  return {{"sent_tuples", sent},      {"sent_key_sum", sent_sum},
          {"received_tuples", received}, {"received_key_sum", received_sum},
          {"start_ns", start_ns},     {"end_ns", end_ns}};
}

// ---------------------------------------------------------------------------------------------
// Plain sockets

[[noreturn]] void socket_fail(const std::string& what) {
  throw Error(Errc::io, std::string("bench ") + kName + " sockets: " + what + ": " +
                            std::strerror(errno));
}

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// This rank's address as the other ranks reach it: the local address of a UDP socket connected
// to the registry's host (connect on UDP only picks the route; nothing is sent). 127.0.0.1 for
// a cluster on loopback, the rank's bridge address inside a network namespace.
in_addr own_address() {
  const char* registry = std::getenv("DFI_REGISTRY");
  std::string host = registry != nullptr ? registry : "127.0.0.1";
  host = host.substr(0, host.rfind(':'));
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(9);
  if (::inet_pton(AF_INET, host.c_str(), &peer.sin_addr) != 1)
    throw Error(Errc::invalid_argument,
                std::string("bench ") + kName + ": the registry host '" + host + "' is not IPv4");
  Socket probe(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (probe.get() < 0) socket_fail("socket");
  if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&peer), sizeof peer) != 0)
    socket_fail("no route to the registry host " + host);
  sockaddr_in local{};
  socklen_t length = sizeof local;
  if (::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0)
    socket_fail("getsockname");
  return local.sin_addr;
}

void write_all(int fd, const std::byte* p, std::size_t bytes) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      socket_fail("write");
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

// The writer: routes every tuple by key hash into a 64 KiB buffer per destination.
std::uint64_t socket_writer(const std::vector<Socket>& out, const Point& point) {
  const std::size_t tb = point.tuple_bytes;
  const std::size_t block = block_tuples(tb);
  std::vector<std::byte> tuples(block * tb);
  fill_tuple_block(tuples, tb);
  const std::size_t n = out.size();
  const std::size_t capacity = kTupleBlockBytes / tb * tb;
  std::vector<std::vector<std::byte>> buffers(n, std::vector<std::byte>(capacity));
  std::vector<std::size_t> fill(n, 0);
  const std::byte* p = tuples.data();
  const std::byte* const end = tuples.data() + tuples.size();
  for (std::uint64_t i = 0; i < point.tuples_per_source; ++i) {
    std::uint64_t key;
    std::memcpy(&key, p, sizeof key);
    const std::size_t d = n > 1 ? kernels::route(key, n) : 0;
    std::memcpy(buffers[d].data() + fill[d], p, tb);
    if ((fill[d] += tb) == capacity) {
      write_all(out[d].get(), buffers[d].data(), capacity);
      fill[d] = 0;
    }
    p += tb;
    if (p == end) p = tuples.data();
  }
  for (std::size_t d = 0; d < n; ++d) {
    if (fill[d] > 0) write_all(out[d].get(), buffers[d].data(), fill[d]);
    if (::shutdown(out[d].get(), SHUT_WR) != 0) socket_fail("shutdown");
  }
  return expected_key_sum(point.tuples_per_source, block);
}

struct Received {
  std::uint64_t tuples = 0;
  std::uint64_t key_sum = 0;
  std::int64_t end_ns = 0;
};

// The reader: polls every connection until each has ended, summing every tuple's key.
Received socket_reader(const std::vector<Socket>& in, std::size_t tb,
                       std::chrono::milliseconds timeout) {
  struct Connection {
    std::vector<std::byte> buffer;
    std::size_t fill = 0;
  };
  std::vector<Connection> connections(in.size());
  std::vector<pollfd> polls;
  for (std::size_t c = 0; c < in.size(); ++c) {
    connections[c].buffer.resize(kTupleBlockBytes + tb);
    polls.push_back({in[c].get(), POLLIN, 0});
  }
  Received r;
  std::size_t open = in.size();
  while (open > 0) {
    const int ready = ::poll(polls.data(), polls.size(), static_cast<int>(timeout.count()));
    if (ready == 0) {
      errno = ETIMEDOUT;
      socket_fail("no data on " + std::to_string(open) + " open connection(s)");
    }
    if (ready < 0) {
      if (errno == EINTR) continue;
      socket_fail("poll");
    }
    for (std::size_t c = 0; c < polls.size(); ++c) {
      if (polls[c].fd < 0 || polls[c].revents == 0) continue;
      Connection& k = connections[c];
      const ssize_t n = ::read(polls[c].fd, k.buffer.data() + k.fill, k.buffer.size() - k.fill);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        socket_fail("read");
      }
      if (n == 0) {
        if (k.fill != 0) {
          errno = EPROTO;
          socket_fail("a stream ended inside a tuple");
        }
        polls[c].fd = -1;  // poll ignores it from now on
        --open;
        continue;
      }
      k.fill += static_cast<std::size_t>(n);
      const std::size_t whole = k.fill / tb;
      r.key_sum += sum_tuple_keys(k.buffer.data(), whole, tb);
      r.tuples += whole;
      const std::size_t rest = k.fill - whole * tb;
      if (rest > 0) std::memmove(k.buffer.data(), k.buffer.data() + whole * tb, rest);
      k.fill = rest;
    }
  }
  r.end_ns = now_ns();
  return r;
}

json run_sockets(cluster::Node& node, const Point& point, std::size_t index,
                 std::chrono::milliseconds timeout) {
  const int ranks = node.size();
  const std::string prefix = std::string("bench/") + kName + "/" + std::to_string(index) + "/";
  Socket listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.get() < 0) socket_fail("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr = own_address();
  address.sin_port = 0;
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0)
    socket_fail("bind");
  if (::listen(listener.get(), ranks) != 0) socket_fail("listen");
  socklen_t length = sizeof address;
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0)
    socket_fail("getsockname");
  char host[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &address.sin_addr, host, sizeof host);
  node.registry().publish(prefix + std::to_string(node.rank()),
                          std::string(host) + ":" + std::to_string(ntohs(address.sin_port)));

  // Connect to every rank (the kernel completes each handshake into the listener's backlog),
  // then accept every rank's connection to us.
  std::vector<Socket> out;
  for (int r = 0; r < ranks; ++r) {
    const std::string peer = node.wait_for(prefix + std::to_string(r), timeout);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(std::stoi(peer.substr(peer.rfind(':') + 1))));
    ::inet_pton(AF_INET, peer.substr(0, peer.rfind(':')).c_str(), &to.sin_addr);
    Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (s.get() < 0) socket_fail("socket");
    if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0)
      socket_fail("cannot connect to rank " + std::to_string(r) + " at " + peer);
    out.push_back(std::move(s));
  }
  std::vector<Socket> in;
  for (int r = 0; r < ranks; ++r) {
    pollfd entry{listener.get(), POLLIN, 0};
    const int ready = ::poll(&entry, 1, static_cast<int>(timeout.count()));
    if (ready <= 0) {
      if (ready == 0) errno = ETIMEDOUT;
      socket_fail("only " + std::to_string(r) + " of " + std::to_string(ranks) + " ranks connected");
    }
    Socket s(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (s.get() < 0) socket_fail("accept");
    in.push_back(std::move(s));
  }

  RankThreads threads(std::string("bench ") + kName + " sockets: rank " + std::to_string(node.rank()));
  Received received;
  std::uint64_t sent_sum = 0;
  threads.start("reader", [&](RankThreads::Gate& gate) {
    gate.ready_and_wait();
    received = socket_reader(in, point.tuple_bytes, timeout);
  });
  threads.start("writer", [&](RankThreads::Gate& gate) {
    gate.ready_and_wait();
    try {
      sent_sum = socket_writer(out, point);
    } catch (...) {
      for (Socket& s : out) ::shutdown(s.get(), SHUT_RDWR);  // the readers see the streams end
      throw;
    }
  });
  const RankThreads::Clock::time_point start = threads.release([&] { node.barrier(prefix + "start"); });
  threads.join();
  return rank_point(point.tuples_per_source, sent_sum, received.tuples, received.key_sum,
                    std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count(),
                    received.end_ns);
}

// ---------------------------------------------------------------------------------------------
// DFI

json run_flow(cluster::Node& node, const json& params, const Point& point, std::size_t index,
              std::chrono::milliseconds timeout) {
  const int ranks = node.size();
  const std::size_t tb = point.tuple_bytes;
  flow::FlowSpec spec;
  spec.name = std::string("bench-") + kName + "-" + std::to_string(index);
  for (int r = 0; r < ranks; ++r) {
    spec.sources.push_back({r, 0});
    spec.targets.push_back({r, 0});
  }
  spec.schema = tuple_block_schema(tb);
  spec.key_column = "key";
  spec.options.segments = params.at("segments").get<std::uint32_t>();
  spec.options.segment_bytes = params.at("segment_bytes").get<std::uint32_t>();
  if (node.rank() == 0) flow::create_flow(node, spec);

  RankThreads threads(std::string("bench ") + kName + ": rank " + std::to_string(node.rank()));
  Received received;
  std::uint64_t sent = 0;
  threads.start("target", [&](RankThreads::Gate& gate) {
    flow::ShuffleTarget target(node, spec.name, 0);
    gate.ready();  // open: the sources may connect; consuming starts at once
    flow::TupleBatch batch;
    for (;;) {
      if (Status s = target.consume(batch, timeout); !s) throw Error(s.code(), s.message());
      if (batch.empty()) break;
      received.key_sum += sum_tuple_keys(batch.data, batch.count, tb);
      received.tuples += batch.count;
    }
    received.end_ns = now_ns();
  });
  threads.start("source", [&](RankThreads::Gate& gate) {
    fabric::Worker worker(node.fabric(), std::string(kName) + " source");
    flow::ShuffleSource source(node, worker, spec.name, 0);
    std::vector<std::byte> tuples(block_tuples(tb) * tb);
    fill_tuple_block(tuples, tb);
    gate.ready_and_wait();
    const std::byte* p = tuples.data();
    const std::byte* const end = tuples.data() + tuples.size();
    for (std::uint64_t i = 0; i < point.tuples_per_source; ++i) {
      if (Status s = source.push(p, tb); !s) [[unlikely]]
        throw Error(s.code(), s.message());
      p += tb;
      if (p == end) p = tuples.data();
    }
    if (Status s = source.close(); !s) throw Error(s.code(), s.message());
    sent = source.counters().tuples;
  });
  const RankThreads::Clock::time_point start = threads.release(
      [&] { node.barrier("bench/" + std::string(kName) + "/" + std::to_string(index) + "/start"); });
  threads.join();
  return rank_point(sent, expected_key_sum(sent, block_tuples(tb)), received.tuples, received.key_sum,
                    std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count(),
                    received.end_ns);
}

int run_rank_program(const json& params, std::ostream& out, std::ostream& err) {
  cluster::Node node;
  const auto timeout = std::chrono::milliseconds(params.at("timeout_ms").get<long>());
  const bool sockets = params.at("side").get<std::string>() == "sockets";
  json points = json::array();
  std::size_t index = 0;
  for (const json& p : params.at("points")) {
    const Point point{p.at("tuple_bytes").get<std::size_t>(),
                      p.at("tuples_per_source").get<std::uint64_t>()};
    points.push_back(sockets ? run_sockets(node, point, index, timeout)
                             : run_flow(node, params, point, index, timeout));
    node.barrier("bench/" + std::string(kName) + "/" + std::to_string(index) + "/done");
    ++index;
  }
  err << "bench " << kName << ": rank " << node.rank() << " done (" << params.at("side").get<std::string>()
      << ")\n";
  report_rank_result(out, {{"rank", node.rank()}, {"points", points}});
  node.finish();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Driver

class ShuffleNm final : public Scenario {
 public:
  std::string name() const override { return kName; }
  std::string title() const override {
    return "N:M key-hash shuffle across 4 ranks vs the same shuffle over plain TCP sockets";
  }
  std::string description() const override {
    return "Every rank runs one source and one target of one bandwidth-mode shuffle flow "
           "(ranks:ranks, key-hash routing, tuple at a time); every target sums the key of "
           "every tuple. Baseline, interleaved: the same tuples routed with the same key hash "
           "by hand over plain TCP sockets, every rank connected to every rank (a writer thread "
           "with a 64 KiB buffer per destination, one write per full buffer; a reader thread "
           "polling its connections, 64 KiB reads, every key summed). Aggregate GB/s = all "
           "tuple bytes delivered / (last end of stream - first release from the start "
           "barrier); both move the same tuples over ranks x ranks connections, so the ratio "
           "is also the ratio per link. Counts and key sums are checked on both sides.";
  }
  std::vector<Parameter> parameters() const override {
    return {
        {"ranks", 4, 4, "ranks (each one source and one target)"},
        {"tuple_sizes", json::array({64, 1024}), json::array({16, 64, 256, 1024}),
         "tuple sizes in bytes (>= 16, multiples of 8)"},
        {"bytes_per_source", {{"shm", 64u << 20}, {"tcp", 24u << 20}},
         {{"shm", 256u << 20}, {"tcp", 128u << 20}}, "tuple bytes each source pushes"},
        {"max_tuples_per_source", {{"shm", 2000000}, {"tcp", 500000}},
         {{"shm", 8000000}, {"tcp", 4000000}}, "upper bound of tuples per source"},
        {"segments", {{"shm", 32}, {"tcp", 8}}, {{"shm", 32}, {"tcp", 8}},
         "segments per ring (the flow defaults)"},
        {"segment_bytes", {{"shm", 8208}, {"tcp", 32784}}, {{"shm", 8208}, {"tcp", 32784}},
         "segment size including the 16 B footer (the flow defaults)"},
        {"timeout_s", 120, 600, "bound of each cluster run and of every wait inside it"},
    };
  }
  std::vector<BaselineInfo> baselines() const override {
    return {{"TCP socket all-to-all",
             "the same tuples, routed with the flow's key hash, over plain TCP sockets between "
             "the same ranks (every rank connected to every rank, itself included); 64 KiB "
             "writes per destination, 64 KiB reads, every key summed at the receiver; timed "
             "from the same kind of start barrier to the last end of stream"}};
  }

  void run(RunContext& context, Result& result) override {
    const int ranks = context.param("ranks");
    const std::vector<std::size_t> sizes = context.param("tuple_sizes");
    const std::size_t bytes = context.param("bytes_per_source");
    const std::uint64_t max_tuples = context.param("max_tuples_per_source");
    const auto timeout = std::chrono::seconds(context.param("timeout_s").get<long>());
    if (ranks < 2) throw Error(Errc::invalid_argument, "bench shuffle-nm: needs at least 2 ranks");
    std::vector<Point> points;
    for (std::size_t s : sizes) {
      if (s < 16 || s % 8 != 0)
        throw Error(Errc::invalid_argument, "bench shuffle-nm: tuple size " + std::to_string(s) +
                                                " must be a multiple of 8 and at least 16");
      points.push_back({s, std::clamp<std::uint64_t>(bytes / s, 1000, max_tuples)});
    }
    json planned = json::array();
    for (const Point& p : points)
      planned.push_back({{"tuple_bytes", p.tuple_bytes}, {"tuples_per_source", p.tuples_per_source}});
    json parameters = context.resolved_parameters();
    parameters["points"] = planned;
    result.set_parameters(parameters);
    result.add_baseline(baselines()[0].name, baselines()[0].description);
    const bool tcp = context.transport == "tcp" || context.netns;
    result.add_note(std::to_string(ranks) + " ranks x 2 busy threads share the machine's cores: "
                    "both sides are bounded by CPU time, the kernel's TCP path and (DFI) the "
                    "polling of UCX workers, not by a link.");
    if (!tcp) {
      result.add_note("shm: the socket baseline still runs over loopback TCP, so it is a "
                      "reference for the shape of an all-to-all, not shm's limit (shuffle-bw has "
                      "the hand-written shared-memory ring).");
    }
    if (context.netns) {
      result.add_note("netns: DFI and the socket baseline both cross the bridge between the "
                      "ranks' network namespaces.");
    }
    const std::string links = std::to_string(ranks) + ":" + std::to_string(ranks);
    Panel& panel = result.panel("aggregate", links + " shuffle, " + std::to_string(ranks) +
                                                 " ranks, aggregate over all links",
                                {"tuple size", "B", "log2"}, {"aggregate tuple bandwidth", "GB/s"},
                                Better::higher);
    panel.series("dfi", Role::dfi, "DFI shuffle flow " + links + ", key hash");
    panel.series("sockets", Role::baseline, "TCP socket all-to-all " + links + ", key hash");
    panel.compare("dfi", "sockets", tcp ? std::optional<double>(0.5) : std::nullopt);

    RankJob job;
    job.nodes = ranks;
    job.scenario = name();
    job.params = {{"points", planned},
                  {"segments", context.param("segments")},
                  {"segment_bytes", context.param("segment_bytes")},
                  {"timeout_ms", std::chrono::milliseconds(timeout).count()}};
    job.timeout = timeout * 2;

    auto measure = [&](const std::string& side, int rep) {
      RankJob j = job;
      j.params["side"] = side;
      context.say("repetition " + std::to_string(rep) + "/" + std::to_string(context.repeat) +
                  ": " + side + ", " + std::to_string(ranks) + " ranks over " +
                  (context.netns ? "netns tcp" : context.transport));
      const std::map<int, json> reports = run_rank_job(j, context);
      const std::string command = rank_job_command(j, context);
      for (std::size_t i = 0; i < points.size(); ++i) {
        std::uint64_t sent = 0, sent_sum = 0, received = 0, received_sum = 0;
        std::int64_t start = INT64_MAX, end = INT64_MIN;
        for (int r = 0; r < ranks; ++r) {
          if (!reports.count(r))
            throw Error(Errc::protocol, "bench shuffle-nm: rank " + std::to_string(r) + " reported no result");
          const json& p = reports.at(r).at("points").at(i);
          sent += p.at("sent_tuples").get<std::uint64_t>();
          sent_sum += p.at("sent_key_sum").get<std::uint64_t>();
          received += p.at("received_tuples").get<std::uint64_t>();
          received_sum += p.at("received_key_sum").get<std::uint64_t>();
          start = std::min(start, p.at("start_ns").get<std::int64_t>());
          end = std::max(end, p.at("end_ns").get<std::int64_t>());
        }
        const std::uint64_t expected = points[i].tuples_per_source * static_cast<std::uint64_t>(ranks);
        if (sent != expected || received != sent || received_sum != sent_sum) {
          throw Error(Errc::protocol,
                      "bench shuffle-nm: " + side + ", " + std::to_string(points[i].tuple_bytes) +
                          " B: sent " + std::to_string(sent) + " tuples (key sum " +
                          std::to_string(sent_sum) + "), received " + std::to_string(received) +
                          " (key sum " + std::to_string(received_sum) + "), expected " +
                          std::to_string(expected) + " tuples");
        }
        const double seconds = static_cast<double>(end - start) / 1e9;
        const double gbps = seconds > 0 ? static_cast<double>(received * points[i].tuple_bytes) / seconds / 1e9 : 0;
        context.say("  " + std::to_string(points[i].tuple_bytes) + " B: " + std::to_string(gbps) +
                    " GB/s aggregate");
        const std::string id = side == "sockets" ? "sockets" : "dfi";
        panel.add(id, points[i].tuple_bytes, gbps);
        panel.add_command(id, command);
      }
    };
    for (int rep = 1; rep <= context.repeat; ++rep) {
      run_alternating(rep, [&] { measure("flow", rep); }, [&] { measure("sockets", rep); });
    }
  }

  int run_rank(const json& params, std::ostream& out, std::ostream& err) override {
    return run_rank_program(params, out, err);
  }
};

}  // namespace

std::unique_ptr<Scenario> make_shuffle_nm_scenario() { return std::make_unique<ShuffleNm>(); }

}  // namespace dfi::tools::bench
