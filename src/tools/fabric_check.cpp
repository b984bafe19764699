#include "fabric_check.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/registry/client.hpp"

namespace dfi::tools {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint16_t kPing = 1;
constexpr std::uint16_t kPong = 2;
constexpr std::size_t kCounterBytes = 64;  // three 8-byte counters at the start of the region
constexpr std::size_t kDataOffset = 4096;

struct PairResult {
  bool ok = true;
  std::string failure;
  double put_rtt_us = 0;    // put + flush, median
  double get_rtt_us = 0;    // median
  double fadd_rtt_us = 0;   // median
  double am_rtt_us = 0;     // ping-pong, median
  double put_gbps = 0;      // streaming put_nbi of bandwidth_message bytes
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

class PairCheck {
 public:
  PairCheck(fabric::Worker& worker, fabric::Endpoint& ep, fabric::RemoteMemory& remote,
            const FabricCheckOptions& options, unsigned& pongs)
      : worker_(worker), ep_(ep), remote_(remote), options_(options), pongs_(pongs) {}

  PairResult run() {
    verify();
    if (result_.ok) time_operations();
    return result_;
  }

 private:
  void expect(const Status& status) {
    if (!status && result_.ok) {
      result_.ok = false;
      result_.failure = status.message();
    }
  }
  void expect(bool condition, const std::string& what) {
    if (!condition && result_.ok) {
      result_.ok = false;
      result_.failure = what + " (" + ep_.peer_name() + ")";
    }
  }

  void verify() {
    const std::size_t bytes = std::min<std::size_t>(remote_.size() - kDataOffset, 1 << 20);
    std::vector<std::uint8_t> pattern(bytes), back(bytes);
    for (std::size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<std::uint8_t>(i * 131 + ep_.peer());
    expect(ep_.put(pattern.data(), bytes, remote_, kDataOffset));
    expect(ep_.flush());
    expect(ep_.get(back.data(), bytes, remote_, kDataOffset));
    expect(pattern == back, "get did not return what put wrote");

    // Counter 0 belongs to this check: swap in a known value, then add, then compare-and-swap.
    std::uint64_t old = 0;
    expect(ep_.swap(remote_, 0, 1000, &old));
    expect(ep_.fetch_add(remote_, 0, 5, &old));
    expect(old == 1000, "fetch-add returned " + std::to_string(old) + ", expected 1000");
    expect(ep_.compare_swap(remote_, 0, 999, 7, &old));
    expect(old == 1005, "failed compare-and-swap returned " + std::to_string(old) + ", expected 1005");
    expect(ep_.compare_swap(remote_, 0, 1005, 7, &old));
    expect(old == 1005, "compare-and-swap returned " + std::to_string(old) + ", expected 1005");
    std::uint64_t now = 0;
    expect(ep_.get(&now, sizeof now, remote_, 0));
    expect(now == 7, "counter is " + std::to_string(now) + " after compare-and-swap, expected 7");

    expect(am_round_trip(), "no pong for a ping within the timeout");
  }

  bool am_round_trip() {
    const unsigned before = pongs_;
    std::uint64_t payload = 42;
    if (!ep_.am_send(kPing, std::as_bytes(std::span(&payload, 1)))) return false;
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (pongs_ == before && Clock::now() < deadline) worker_.progress();
    return pongs_ != before;
  }

  void time_operations() {
    const int reps = options_.quick ? 200 : 5000;
    std::vector<double> put, get, fadd, am;
    std::uint64_t word = 1;
    for (int i = 0; i < reps && result_.ok; ++i) {
      auto t0 = Clock::now();
      expect(ep_.put(&word, sizeof word, remote_, kDataOffset));
      expect(ep_.flush());
      put.push_back(micros_since(t0));
      t0 = Clock::now();
      expect(ep_.get(&word, sizeof word, remote_, kDataOffset));
      get.push_back(micros_since(t0));
      t0 = Clock::now();
      expect(ep_.fetch_add(remote_, 8, 1, &word));
      fadd.push_back(micros_since(t0));
      t0 = Clock::now();
      expect(am_round_trip(), "no pong for a ping within the timeout");
      am.push_back(micros_since(t0));
    }
    result_.put_rtt_us = median(put);
    result_.get_rtt_us = median(get);
    result_.fadd_rtt_us = median(fadd);
    result_.am_rtt_us = median(am);

    const std::size_t message = std::min(options_.bandwidth_message, remote_.size() - kDataOffset);
    const std::size_t slots = (remote_.size() - kDataOffset) / message;
    std::vector<std::uint8_t> source(message, 0x5a);
    const std::size_t total = options_.quick ? (64u << 20) : (1u << 30);
    const std::size_t count = std::max<std::size_t>(1, total / message);
    auto t0 = Clock::now();
    for (std::size_t i = 0; i < count && result_.ok; ++i) {
      expect(ep_.put_nbi(source.data(), message, remote_, kDataOffset + (i % slots) * message));
      if (i % 64 == 63) expect(ep_.flush());
    }
    expect(ep_.flush());
    double seconds = micros_since(t0) / 1e6;
    result_.put_gbps = static_cast<double>(count * message) / seconds / 1e9;
  }

  fabric::Worker& worker_;
  fabric::Endpoint& ep_;
  fabric::RemoteMemory& remote_;
  const FabricCheckOptions& options_;
  unsigned& pongs_;
  PairResult result_;
};

void print(std::ostream& out, const FabricCheckOptions& options, int from, int to,
           const PairResult& r) {
  char line[512];
  if (options.json) {
    std::snprintf(line, sizeof line,
                  "{\"from\":%d,\"to\":%d,\"ok\":%s,\"put_flush_rtt_us\":%.3f,\"get_rtt_us\":%.3f,"
                  "\"fetch_add_rtt_us\":%.3f,\"am_rtt_us\":%.3f,\"put_gbps\":%.3f}",
                  from, to, r.ok ? "true" : "false", r.put_rtt_us, r.get_rtt_us, r.fadd_rtt_us,
                  r.am_rtt_us, r.put_gbps);
  } else {
    std::snprintf(line, sizeof line,
                  "%d -> %d  %-4s put+flush %8.2f us  get %8.2f us  fetch-add %8.2f us  "
                  "am ping-pong %8.2f us  put bw %7.2f GB/s",
                  from, to, r.ok ? "ok" : "FAIL", r.put_rtt_us, r.get_rtt_us, r.fadd_rtt_us,
                  r.am_rtt_us, r.put_gbps);
  }
  out << line << '\n';
  out.flush();
}

}  // namespace

int run_fabric_check(const FabricCheckOptions& options, std::ostream& out, std::ostream& err) {
  cluster::NodeOptions node_options = cluster::node_options_from_environment();
  node_options.setup_service = [](fabric::Worker& service) {
    service.set_am_handler(kPing, [](const fabric::AmMessage& message, fabric::AmReplier& replier) {
      (void)replier.reply(kPong, message.data);
    });
  };
  cluster::Node node(std::move(node_options));
  const int me = node.rank();

  fabric::MemoryRegion region(node.fabric(), kDataOffset + (options.quick ? (4u << 20) : (16u << 20)));
  node.registry().publish("check/region/" + std::to_string(me), region.descriptor().serialize(), true);

  fabric::Worker worker(node.fabric(), "rank " + std::to_string(me) + " check");
  unsigned pongs = 0;
  worker.set_am_handler(kPong, [&pongs](const fabric::AmMessage&, fabric::AmReplier&) { ++pongs; });

  if (me == 0) {
    out << "dfi fabric check: " << node.size() << " ranks, " << node.fabric().describe() << '\n';
  }
  bool all_ok = true;
  for (int initiator = 0; initiator < node.size(); ++initiator) {
    node.barrier("check/turn/" + std::to_string(initiator));
    if (initiator != me) continue;
    for (int peer = 0; peer < node.size(); ++peer) {
      if (peer == me) continue;
      PairResult result;
      try {
        fabric::Endpoint ep = node.connect(worker, peer);
        fabric::RemoteMemory remote = ep.attach(fabric::RegionDescriptor::parse(
            node.wait_for("check/region/" + std::to_string(peer), std::chrono::seconds(30))));
        result = PairCheck(worker, ep, remote, options, pongs).run();
      } catch (const Error& e) {
        result.ok = false;
        result.failure = e.what();
      }
      print(out, options, me, peer, result);
      if (!result.ok) {
        err << "dfi fabric check: rank " << me << " -> rank " << peer << ": " << result.failure << '\n';
        all_ok = false;
      }
    }
  }
  node.finish();
  return all_ok ? 0 : 1;
}

}  // namespace dfi::tools
