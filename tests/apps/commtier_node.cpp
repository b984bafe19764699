// Rank program of the commtier tests (commtier_cluster_test.cpp), under a local cluster:
//
//   commtier_node exchange LANES COUNT:BYTES...   2 ranks (SU 0, CU 1). For every buffer
//       configuration (COUNT receive buffers of BYTES at both sides), a tier with LANES lanes; per
//       lane the CU sends 300 requests (sizes 0 B to three buffers and a bit, odd sizes, some
//       post()ed and sharing buffers) from one thread and takes the replies in another; the SU
//       takes every request (alternately whole and message by message), checks every byte, and
//       replies with a transfer of another size. Both sides check opcode, size and content of
//       every transfer, in order, and the end of stream after the last. Prints one line per lane.
//   commtier_node errors    2 ranks: bad tier specs, opening the wrong end, no such lane or tier,
//       a transfer larger than the memory given, send after close; prints "error ok: <message>".
//   commtier_node test consuming|throughput tier|flow LANES BUFFERS
//                           2 ranks: apps::commtier::run_test with small sizes (what `dfi commtier`
//                           runs, without the whole dfi binary: for the sanitizer builds).
//   commtier_node kill      3 ranks (registry 0, CU 1, SU 2): the SU dies (SIGKILL) in the
//       middle of a stream; the CU prints what its receive returned and exits 0 if it was
//       peer_failed naming rank 2.
#include <csignal>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "dfi/apps/commtier/channel.hpp"
#include "dfi/apps/commtier/test.hpp"
#include "dfi/apps/commtier/tier.hpp"
#include "dfi/cluster/node.hpp"
#include "dfi/common/thread_group.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/registry/client.hpp"

using namespace dfi;
using namespace dfi::apps::commtier;

namespace {

constexpr int kTransfers = 300;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Size of transfer i (request or reply) of a lane: 0 B, a few bytes, about one buffer, up to
// three buffers and a bit; rarely a multiple of 8.
std::size_t transfer_size(std::uint64_t seed, int i, std::size_t buffer) {
  const std::uint64_t r = mix(seed * 7919 + static_cast<std::uint64_t>(i));
  switch (r % 5) {
    case 0: return i % 17 == 0 ? 0 : r % 13;
    case 1: return r % 200;
    case 2: return buffer - 24 + (r % 48) - 24;
    default: return r % (3 * buffer + 100);
  }
}

std::vector<std::byte> content(std::uint64_t seed, int i, std::size_t bytes) {
  std::vector<std::byte> data(bytes);
  for (std::size_t j = 0; j < bytes; ++j) {
    data[j] = static_cast<std::byte>(mix(seed ^ (static_cast<std::uint64_t>(i) << 32) ^ (j / 8)) >> (8 * (j % 8)));
  }
  return data;
}

void check(bool ok, const std::string& what) {
  if (!ok) throw Error(Errc::protocol, what);
}

void check_transfer(const std::string& who, int i, const std::vector<std::byte>& got, std::uint32_t opcode,
                    const std::vector<std::byte>& expected) {
  check(opcode == static_cast<std::uint32_t>(i), who + ": transfer " + std::to_string(i) + " came with opcode " +
                                                     std::to_string(opcode));
  check(got.size() == expected.size(), who + ": transfer " + std::to_string(i) + " has " +
                                           std::to_string(got.size()) + " B, expected " +
                                           std::to_string(expected.size()));
  check(got == expected, who + ": transfer " + std::to_string(i) + " differs from what was sent");
}

// The SU's side of one lane: take every request, check it, reply.
void su_lane(cluster::Node& node, const std::string& tier, std::uint32_t lane, std::size_t buffer) {
  const std::string who = tier + " SU lane " + std::to_string(lane);
  fabric::Worker worker(node.fabric(), who);
  Receiver in(node, tier, Side::su, lane);
  Sender out(node, worker, tier, Side::su, lane);
  for (int i = 0; i < kTransfers; ++i) {
    std::vector<std::byte> got;
    std::uint32_t opcode = 0;
    if (i % 2 == 0) {
      Transfer t;
      in.receive_transfer(got, t).throw_if_error();
      check(!t.end_of_stream, who + ": the stream ended before request " + std::to_string(i));
      opcode = t.opcode;
    } else {  // message by message
      Message m;
      do {
        in.receive(m).throw_if_error();
        check(!m.end_of_stream, who + ": the stream ended in request " + std::to_string(i));
        check(m.offset == got.size(), who + ": a message at offset " + std::to_string(m.offset) + " after " +
                                          std::to_string(got.size()) + " B");
        check(m.payload.size() <= buffer, who + ": a message larger than a buffer");
        got.insert(got.end(), m.payload.begin(), m.payload.end());
        opcode = m.opcode;
      } while (!m.last());
    }
    check_transfer(who, i, got, opcode, content(lane + 1, i, transfer_size(lane + 1, i, buffer)));
    const std::vector<std::byte> reply = content(lane + 101, i, transfer_size(lane + 101, i, buffer));
    if (i % 3 == 0) {
      out.post(static_cast<std::uint32_t>(i), reply.data(), reply.size()).throw_if_error();
    } else {
      out.send(static_cast<std::uint32_t>(i), reply.data(), reply.size()).throw_if_error();
    }
  }
  Message m;
  in.receive(m).throw_if_error();
  check(m.end_of_stream && in.end(), who + ": more than " + std::to_string(kTransfers) + " requests");
  out.close().throw_if_error();
  std::cout << "commtier_node: " << who << ": " << kTransfers << " requests checked, " << kTransfers
            << " replies sent in " << out.counters().buffers << " buffers" << std::endl;
}

// The CU's side of one lane: requests from this thread, replies taken by another.
void cu_lane(cluster::Node& node, const std::string& tier, std::uint32_t lane, std::size_t buffer) {
  const std::string who = tier + " CU lane " + std::to_string(lane);
  Receiver in(node, tier, Side::cu, lane);
  std::thread replies([&] {
    try {
      for (int i = 0; i < kTransfers; ++i) {
        std::vector<std::byte> got;
        Transfer t;
        in.receive_transfer(got, t).throw_if_error();
        check(!t.end_of_stream, who + ": the stream ended before reply " + std::to_string(i));
        check_transfer(who, i, got, t.opcode, content(lane + 101, i, transfer_size(lane + 101, i, buffer)));
      }
      Transfer t;
      in.receive_transfer(std::span<std::byte>(), t).throw_if_error();
      check(t.end_of_stream, who + ": more than " + std::to_string(kTransfers) + " replies");
      std::cout << "commtier_node: " << who << ": " << kTransfers << " replies checked" << std::endl;
    } catch (const Error& e) {
      std::cerr << "commtier_node: " << e.what() << std::endl;
      std::_Exit(1);
    }
  });
  fabric::Worker worker(node.fabric(), who);
  Sender out(node, worker, tier, Side::cu, lane);
  for (int i = 0; i < kTransfers; ++i) {
    const std::vector<std::byte> request = content(lane + 1, i, transfer_size(lane + 1, i, buffer));
    if (i % 4 == 1) {
      out.post(static_cast<std::uint32_t>(i), request.data(), request.size()).throw_if_error();
    } else {
      out.send(static_cast<std::uint32_t>(i), request.data(), request.size()).throw_if_error();
    }
  }
  out.close().throw_if_error();
  replies.join();
  std::cout << "commtier_node: " << who << ": " << kTransfers << " requests sent in " << out.counters().buffers
            << " buffers" << std::endl;
}

int exchange(cluster::Node& node, std::uint32_t lanes, const std::vector<std::string>& configs) {
  for (std::size_t c = 0; c < configs.size(); ++c) {
    const std::size_t colon = configs[c].find(':');
    Buffers buffers{static_cast<std::uint32_t>(std::stoul(configs[c].substr(0, colon))),
                    static_cast<std::uint32_t>(std::stoul(configs[c].substr(colon + 1)))};
    std::string tier = "x";  // appended: GCC 12's -Wrestrict misfires on "x" + std::to_string(c)
    tier += std::to_string(c);
    tier += '-';
    tier += configs[c];
    if (node.rank() == 0) {
      TierSpec spec{.name = tier, .cu_rank = 1, .su_rank = 0, .lanes = lanes, .cu = buffers, .su = buffers};
      spec.stall_timeout = std::chrono::seconds(30);
      create_tier(node, spec);
    }
    ThreadGroup threads;
    for (std::uint32_t lane = 0; lane < lanes; ++lane) {
      threads.start([&, lane] {
        if (node.rank() == 0) su_lane(node, tier, lane, buffers.bytes);
        else cu_lane(node, tier, lane, buffers.bytes);
      });
    }
    threads.join();
  }
  return 0;
}

// Runs `body`, expecting dfi::Error with `code` whose message contains `part`.
void expect_error(Errc code, const std::string& part, const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    check(e.code() == code && std::string(e.what()).find(part) != std::string::npos,
          std::string("expected an error containing '") + part + "', got: " + e.what());
    std::cout << "error ok: " << e.what() << std::endl;
    return;
  }
  throw Error(Errc::protocol, "expected an error containing '" + part + "', got none");
}

int errors(cluster::Node& node) {
  TierSpec good{.name = "e", .cu_rank = 1, .su_rank = 0, .lanes = 1, .cu = {2, 256}, .su = {2, 256}};
  auto bad = [&](auto change, const std::string& part) {
    TierSpec spec = good;
    change(spec);
    expect_error(Errc::invalid_argument, part, [&] { spec.validate(node.size()); });
  };
  bad([](TierSpec& s) { s.cu_rank = 0; }, "commtier 'e': the CU and the SU are both rank 0");
  bad([](TierSpec& s) { s.su_rank = 5; }, "commtier 'e': su rank 5 is not in the cluster of 2");
  bad([](TierSpec& s) { s.cu.count = 0; }, "commtier 'e': cu receive buffers: 0 buffers");
  bad([](TierSpec& s) { s.su.bytes = 100; }, "commtier 'e': su receive buffers: a buffer of 100 B");
  bad([](TierSpec& s) { s.lanes = 0; }, "commtier 'e': 0 lanes");
  if (node.rank() == 0) create_tier(node, good);
  fabric::Worker worker(node.fabric(), "errors");
  if (node.rank() == 1) {
    expect_error(Errc::invalid_argument, "commtier 'e': rank 1 cannot open a sender at the su, which is rank 0",
                 [&] { Sender s(node, worker, "e", Side::su, 0); });
    expect_error(Errc::invalid_argument, "commtier 'e' has 1 lane(s); there is no lane 3",
                 [&] { Receiver r(node, "e", Side::cu, 3); });
    expect_error(Errc::not_found, "commtier 'nope' does not exist",
                 [&] { Receiver r(node, "nope", Side::cu, 0, std::chrono::milliseconds(300)); });
    Receiver in(node, "e", Side::cu, 0);
    std::vector<std::byte> small(10);
    Transfer t;
    expect_error(Errc::invalid_argument, "a transfer of 600 B does not fit the 10 B given",
                 [&] { in.receive_transfer(std::span<std::byte>(small), t).throw_if_error(); });
    std::vector<std::byte> all;
    in.receive_transfer(all, t).throw_if_error();  // the transfer stayed there
    check(t.bytes == 600 && all.size() == 600 && t.opcode == 7 && t.messages == 3,
          "the transfer after the refused one: " + std::to_string(t.bytes) + " B, opcode " + std::to_string(t.opcode) +
              ", " + std::to_string(t.messages) + " messages");
    in.receive_transfer(all, t).throw_if_error();
    check(t.end_of_stream, "no end of stream after the one transfer");
  } else {
    Sender out(node, worker, "e", Side::su, 0);
    std::vector<std::byte> data(600, std::byte{1});
    out.send(7, data.data(), data.size()).throw_if_error();
    out.close().throw_if_error();
    expect_error(Errc::invalid_argument, "send after close",
                 [&] { out.send(8, data.data(), data.size()).throw_if_error(); });
  }
  node.finish();
  return 0;
}

int kill(cluster::Node& node) {
  if (node.rank() == 0) {
    TierSpec spec{.name = "k", .cu_rank = 1, .su_rank = 2, .lanes = 1, .cu = {2, 4096}, .su = {2, 4096}};
    spec.stall_timeout = std::chrono::seconds(30);
    create_tier(node, spec);
    node.wait_for("commtier-test/cu-done", std::chrono::seconds(60));  // keep the registry up
    return 0;
  }
  fabric::Worker worker(node.fabric(), "kill");
  if (node.rank() == 2) {
    Sender out(node, worker, "k", Side::su, 0);
    std::vector<std::byte> data(3000, std::byte{2});
    for (int i = 0; i < 50; ++i) out.send(static_cast<std::uint32_t>(i), data.data(), data.size()).throw_if_error();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the CU has taken them
    std::raise(SIGKILL);
  }
  Receiver in(node, "k", Side::cu, 0);
  std::vector<std::byte> got;
  Transfer t;
  int received = 0;
  Status s;
  while ((s = in.receive_transfer(got, t))) ++received;
  std::cout << "commtier_node: CU received " << received << " transfers, then: " << s.message() << std::endl;
  Status again = in.receive_transfer(got, t);
  std::cout << "commtier_node: and then: " << again.message() << std::endl;
  node.registry().publish("commtier-test/cu-done", "1");
  const bool named = s.message().find("rank 2") != std::string::npos;
  return s.code() == Errc::peer_failed && again.code() == Errc::flow_failed && named && received == 50 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string scenario = argc > 1 ? argv[1] : "";
    cluster::Node node;
    if (scenario == "exchange" && argc >= 4) {
      const int code = exchange(node, static_cast<std::uint32_t>(std::stoul(argv[2])),
                                std::vector<std::string>(argv + 3, argv + argc));
      node.finish();
      return code;
    }
    if (scenario == "errors") return errors(node);
    if (scenario == "test" && argc == 6) {
      TestOptions o;
      o.test = parse_test(argv[2]);
      o.via = parse_via(argv[3]);
      o.lanes = static_cast<std::uint32_t>(std::stoul(argv[4]));
      o.buffers = {static_cast<std::uint32_t>(std::stoul(argv[5])), 4096};
      o.sizes = {8, 1000, 4096, 20000};
      o.bytes_per_size = 1 << 20;
      o.max_transfers = 300;
      const TestResult r = run_test(node, o, std::cout);
      if (node.rank() == o.su_rank) std::cout << "commtier_node: test ran " << r.sizes.size() << " sizes" << std::endl;
      node.finish();
      return 0;
    }
    if (scenario == "kill") return kill(node);
    std::cerr << "usage: commtier_node exchange LANES COUNT:BYTES... | errors | kill | test TEST VIA LANES BUFFERS\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << "commtier_node: " << e.what() << std::endl;
    return 1;
  }
}
