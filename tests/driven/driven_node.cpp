// Rank program for the multi-process driven-flow tests, started by launch::run_cluster on 3
// ranks: ranks 0 and 1 are processing units, rank 2 runs the mover.
//
//   driven_node shuffle SEGMENTS SEGMENT_BYTES TUPLES   a 3:2 key-hash flow (rank 0: producers 0
//       and 1, consumer 0; rank 1: producer 0, consumer 0); every tuple arrives exactly once, at
//       the consumer its key routes to, and each producer's tuples in the order pushed
//   driven_node shuffle ... external-mover              the same, rank 2 running `dfi mover`
//   driven_node balance SEGMENTS SEGMENT_BYTES TUPLES   a 2:2 load-balancing flow, one consumer
//       slow: every tuple exactly once, per-producer order at each consumer, the slow one gets fewer
//   driven_node replicate SEGMENTS SEGMENT_BYTES TUPLES a 2:3 ordered replication flow: every
//       consumer gets every tuple exactly once, all consumers in the same order
//   driven_node elastic TUPLES                          a 2:3 load-balancing flow whose consumers
//       join and leave while it runs: every tuple exactly once, every consumer got some
//   driven_node explicit TUPLES                         a 1:1 flow with explicit routing
//   driven_node qos TUPLES                              three 1:1 flows (rank 0 -> rank 1) through one
//       mover with shares 1:2:1, changed to 3:1:1 mid-run with set_share, plus an idle flow with
//       share 1000 that sends only at the end: every tuple exactly once and in order; while all
//       three are backlogged the mover's bytes per flow follow the shares; every pass moves data
//   driven_node rate TUPLES                             a 1:1 flow whose mover is capped
//       (Mover::limit_rate) to move the flow's bytes in 0.3 s: it takes at least that long, every
//       tuple in order; a negative rate is a named error
//   driven_node errors                                  user errors give clear errors
//   driven_node kill-mover                              the mover dies mid-flow and is not
//       restarted: the producer (rank 0) and the consumer (rank 1) wait their stall timeout (2 s),
//       then get a timeout naming the dead mover
//   driven_node two-movers TUPLES                       on 4 ranks: two flows, each with a mover
//       of its own (ranks 2 and 3) at the same time; a second mover of a flow is refused
//   driven_node property SEED RUNS                      RUNS flows of random shapes (pattern, N:M,
//       tuples, ring shape, batch cap, polling interval, consumer pauses) drawn from SEED, each
//       checked for its pattern's promise
//   driven_node kill-pu PATTERN                         shuffle, balance or replicate: rank 1's
//       producer and consumer die mid-flow; rank 0's PUs of that flow get errors naming rank 1, the
//       mover gives the flow up and serves another flow (rank 0 to rank 0) to its end
//   driven_node retry PATTERN TUPLES FAILS              shuffle, balance or replicate as above
//       (rings of 4 x 256 B) while the mover's transfers fail FAILS times (Mover::fail_at), each
//       retried: the same checks
//   driven_node doorbell PATTERN TUPLES [mute]          shuffle, balance or replicate as above
//       (rings of 4 x 256 B) in doorbell mode: the same checks, the mover heard bells and every PU
//       rang at most once per segment; with `mute` every PU's bells are lost (the test seam) and
//       the mover's safety poll (2 ms) carries the flows: it heard no bell
//   driven_node chaos PATTERN TUPLES KILLS DFI SEED     shuffle, balance or replicate as above
//       (TUPLES per producer, rings of 4 x 256 B, consumers pausing 1 ms per batch) while rank 2 runs
//       `DFI mover` and kills it KILLS times mid-flow (run_chaos_mover), each restart resuming
//       the flow: the same checks (exactly once, producer order, one order at every replica)
//
// Exit status 0 means the scenario held; every failure prints why.
#include <signal.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/driven/consumer.hpp"
#include "dfi/driven/flow.hpp"
#include "dfi/driven/mover.hpp"
#include "dfi/driven/producer.hpp"
#include "dfi/kernels/hash.hpp"
#include "dfi/launch/child_process.hpp"
#include "dfi/launch/environment.hpp"
#include "dfi/registry/client.hpp"
#include "node_checks.hpp"

namespace {

using namespace dfi;
using namespace std::chrono_literals;

using testing::fail;
using testing::failures;

// chaos mode: rank 2 runs `dfi mover` processes that are killed and restarted (run_chaos_mover),
// and every consumer sleeps this long after each batch, so that the flow outlasts the kills.
bool g_external_mover = false;
std::chrono::microseconds g_pause{0};

// doorbell mode: the flows of run_shuffle, run_balance and run_replicate ring the mover
// (DrivenOptions::doorbell); with g_mute every PU's bells are lost (mute_doorbell).
bool g_doorbell = false;
bool g_mute = false;

driven::DrivenOptions pattern_options(driven::Pattern pattern) {
  driven::DrivenOptions options{.pattern = pattern};
  options.doorbell = g_doorbell;
  if (g_mute) options.safety_poll = 2ms;
  return options;
}

// Doorbell mode: a PU rings at most once per segment it published or gave back.
template <class Pu>
void check_doorbells(const char* who, const Pu& pu, std::uint64_t segments) {
  if (!g_doorbell) return;
  if (pu.doorbells() > segments + 1) {  // + 1: a producer's end-of-stream segment
    fail(std::string(who) + " rang " + std::to_string(pu.doorbells()) + " times for " + std::to_string(segments) +
         " segments");
  }
}

struct Tuple {
  std::uint64_t key;
  std::uint64_t producer;  // index in the spec's sources
  std::uint64_t seq;       // 0, 1, 2, ... per producer
};

std::uint64_t key_of(std::uint64_t producer, std::uint64_t seq) {
  return kernels::mix64(producer * 1000003 + seq);
}

// What one consumer saw, published for rank 0 to check.
struct Seen {
  std::uint64_t count = 0;
  std::uint64_t key_sum = 0;
  std::uint64_t misrouted = 0;
  std::uint64_t out_of_order = 0;  // a tuple not after the last one of its producer seen here
  std::uint64_t order = 0;         // fingerprint of the sequence of (producer, seq) seen

  void publish(cluster::Node& node, const std::string& flow, std::size_t consumer) const {
    std::ostringstream text;
    text << count << ' ' << key_sum << ' ' << misrouted << ' ' << out_of_order << ' ' << order;
    node.registry().publish("test/" + flow + "/seen/" + std::to_string(consumer), text.str());
  }
  static Seen wait_for(cluster::Node& node, const std::string& flow, std::size_t consumer) {
    std::istringstream text(node.wait_for("test/" + flow + "/seen/" + std::to_string(consumer), 60s));
    Seen s;
    text >> s.count >> s.key_sum >> s.misrouted >> s.out_of_order >> s.order;
    return s;
  }
};

// Called after each batch with the number of batches consumed so far.
using AfterBatch = std::function<void(std::uint64_t batches, driven::Consumer& in)>;

// Consumes until end of stream; `pause` after each batch makes a slow consumer.
Seen consume_all(cluster::Node& node, const std::string& name, int id, std::size_t consumer_index,
                 std::size_t consumers, std::size_t producers, bool key_routed,
                 std::chrono::microseconds pause = 0us, const AfterBatch& after = {}) {
  Seen seen;
  pause += g_pause;
  driven::Consumer in(node, name, id);
  if (g_mute) in.mute_doorbell();
  std::vector<std::uint64_t> next(producers, 0);
  std::uint64_t batches = 0;
  flow::TupleBatch batch;
  for (;;) {
    if (Status s = in.consume(batch, 30s); !s) {
      fail("consumer " + std::to_string(consumer_index) + ": " + s.message());
      break;
    }
    if (batch.empty()) break;
    for (const Tuple& t : batch.as<Tuple>()) {
      ++seen.count;
      seen.key_sum += t.key;
      seen.order = kernels::mix64(seen.order ^ (t.producer << 40 | t.seq));
      if (key_routed && kernels::route(t.key, consumers) != consumer_index) ++seen.misrouted;
      if (t.producer >= producers || t.seq < next[t.producer]) {
        ++seen.out_of_order;
      } else {
        next[t.producer] = t.seq + 1;
      }
    }
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
    if (after) after(++batches, in);
  }
  if (!in.end()) fail("consumer " + std::to_string(consumer_index) + " ended without end of stream");
  check_doorbells("consumer", in, in.counters().segments);
  return seen;
}

// The sum of the keys that `producers` producers of `tuples` each push.
std::uint64_t expected_key_sum(std::uint64_t producers, std::uint64_t tuples) {
  std::uint64_t sum = 0;
  for (std::uint64_t p = 0; p < producers; ++p) {
    for (std::uint64_t i = 0; i < tuples; ++i) sum += key_of(p, i);
  }
  return sum;
}

// retry mode: the mover's transfers fail this many times (Mover::fail_at, alternately at the link
// word and at the publication), each retried by the mover. Each publication failure is at the
// first transfer after the link failure's retry: that transfer may publish another producer's
// segment where the failed one was announced (the sequence that lost a segment before the restart
// forgot announced transfers).
std::uint64_t g_fails = 0;

// Rank 2: the mover of flow `name` until it ended.
void run_mover(cluster::Node& node, const std::string& name) {
  driven::Mover mover(node);
  mover.add_flow(name, 30s);
  if (g_fails > 0) {
    std::uint64_t armed = 0;
    auto arm = [&] {
      if (armed % 2 == 0) {
        mover.fail_at(driven::CrashPoint::link, 5 + 7 * armed);
      } else {
        mover.fail_at(driven::CrashPoint::publish, 1);
      }
      ++armed;
    };
    arm();
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    std::uint64_t retries = 0;
    while (!mover.done() && std::chrono::steady_clock::now() < deadline) {
      std::uint64_t moved = 0;
      if (Status s = mover.step(moved); !s) {
        fail("mover: " + s.message());
        break;
      }
      if (mover.counters().retries > retries) {
        // What the retry's recovery found: the announced transfer of a link failure, the
        // half-done one of a publication failure, never two.
        retries = mover.counters().retries;
        const driven::MoverRecovery& r = mover.recovery(name);
        const std::string which = "retry " + std::to_string(retries) + ": ";
        if (r.completed > 1) fail(which + "completed " + std::to_string(r.completed) + " half-done transfers");
        if (retries % 2 == 1 && r.forgotten < 1) fail(which + "the announced transfer was not forgotten");
        if (retries % 2 == 0 && r.completed < 1) fail(which + "the half-done transfer was not completed");
      }
      if (mover.counters().retries == armed && armed < g_fails) arm();
      if (moved == 0) std::this_thread::sleep_for(20us);
    }
    if (mover.counters().retries != g_fails) {
      fail("mover: " + std::to_string(mover.counters().retries) + " retries, " + std::to_string(g_fails) + " failures injected");
    } else {
      std::printf("mover: %llu transfers failed and were retried\n", static_cast<unsigned long long>(g_fails));
    }
  } else if (Status s = mover.run(120s); !s) {
    fail("mover: " + s.message());
  }
  std::printf("mover: %llu segments, %llu bytes moved\n", static_cast<unsigned long long>(mover.counters().segments),
              static_cast<unsigned long long>(mover.counters().bytes));
  if (g_doorbell) {
    const driven::MoverCounters& c = mover.counters();
    std::printf("mover: doorbell: %llu bells heard, %llu PUs armed, %llu safety polls (%llu found work)\n",
                static_cast<unsigned long long>(c.bells), static_cast<unsigned long long>(c.arms),
                static_cast<unsigned long long>(c.safety_polls), static_cast<unsigned long long>(c.safety_finds));
    if (c.safety_finds > c.safety_polls) fail("mover: more safety polls found work than were made");
    if (g_mute && c.bells != 0) fail("mover: heard " + std::to_string(c.bells) + " bells of muted PUs");
    if (!g_mute && c.bells == 0) fail("mover: heard no bell in doorbell mode");
    if (c.arms == 0) fail("mover: armed no PU in doorbell mode");
  }
}

void produce_all(cluster::Node& node, const std::string& name, int thread, std::uint64_t producer,
                 std::uint64_t tuples, bool explicit_routing) {
  driven::Producer out(node, name, thread);
  if (g_mute) out.mute_doorbell();
  for (std::uint64_t i = 0; i < tuples; ++i) {
    const Tuple t{key_of(producer, i), producer, i};
    Status s = explicit_routing ? out.push_to(0, &t, sizeof t) : out.push(&t, sizeof t);
    if (!s) {
      fail("producer " + std::to_string(producer) + ": " + s.message());
      return;
    }
    if (i % 997 == 0) {
      if (Status f = out.flush(); !f) fail("producer flush: " + f.message());  // partial segments too
    }
    if (g_doorbell && i == tuples / 2) {
      // A pause in mid-flow: the mover drains the flow, arms the PUs and sleeps, so the rest
      // of the flow starts with a bell. Without it a mover slower than the producers (tcp, a
      // loaded machine) may never find the flow idle, and never arm or hear a bell.
      if (Status f = out.flush(); !f) fail("producer flush: " + f.message());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  if (Status s = out.close(); !s) fail("producer " + std::to_string(producer) + " close: " + s.message());
  check_doorbells("producer", out, out.counters().segments);
}

flow::Schema tuple_schema() {
  return flow::Schema({{"key", flow::Type::uint64}, {"producer", flow::Type::uint64}, {"seq", flow::Type::uint64}});
}

// A driven flow of Tuples from producer (rank 0, thread 0) to consumer (rank 1, id 0), routed
// explicitly.
flow::FlowSpec one_to_one(const std::string& name) {
  flow::FlowSpec spec;
  spec.name = name;
  spec.type = driven::kDriven;
  spec.sources = {{0, 0}};
  spec.targets = {{1, 0}};
  spec.schema = tuple_schema();
  spec.routing = flow::Routing::explicit_target;
  return spec;
}

int run_shuffle(cluster::Node& node, std::uint32_t segments, std::uint32_t segment_bytes, std::uint64_t tuples,
                bool external_mover = false) {
  const std::string name = "driven-shuffle";
  flow::FlowSpec spec;
  spec.name = name;
  spec.type = driven::kDriven;
  spec.sources = {{0, 0}, {0, 1}, {1, 0}};
  spec.targets = {{0, 0}, {1, 0}};
  spec.schema = tuple_schema();
  spec.key_column = "key";
  spec.options.segments = segments;
  spec.options.segment_bytes = segment_bytes;
  spec.type_options = pattern_options(driven::Pattern::shuffle);
  if (node.rank() == 0) flow::create_flow(node, spec);

  if (node.rank() == 2 && external_mover) {
    return 0;  // `dfi mover driven-shuffle` runs on rank 2 instead of this program
  } else if (node.rank() == 2) {
    run_mover(node, name);
  } else {
    const std::size_t consumer = static_cast<std::size_t>(node.rank());
    Seen seen;
    std::thread consumer_thread([&] { seen = consume_all(node, name, 0, consumer, 2, 3, true); });
    std::vector<std::thread> producers;
    if (node.rank() == 0) {
      producers.emplace_back([&] { produce_all(node, name, 0, 0, tuples, false); });
      producers.emplace_back([&] { produce_all(node, name, 1, 1, tuples, false); });
    } else {
      producers.emplace_back([&] { produce_all(node, name, 0, 2, tuples, false); });
    }
    for (auto& t : producers) t.join();
    consumer_thread.join();
    seen.publish(node, name, consumer);
  }
  if (node.rank() == 0) {
    std::uint64_t count = 0, key_sum = 0, misrouted = 0, out_of_order = 0;
    for (std::size_t c = 0; c < 2; ++c) {
      const Seen s = Seen::wait_for(node, name, c);
      count += s.count;
      key_sum += s.key_sum;
      misrouted += s.misrouted;
      out_of_order += s.out_of_order;
    }
    const std::uint64_t expected_sum = expected_key_sum(3, tuples);
    if (count != 3 * tuples || key_sum != expected_sum) {
      fail("received " + std::to_string(count) + " tuples (key sum " + std::to_string(key_sum) + "), expected " +
           std::to_string(3 * tuples) + " (key sum " + std::to_string(expected_sum) + ")");
    }
    if (misrouted != 0) fail(std::to_string(misrouted) + " tuples at the wrong consumer");
    if (out_of_order != 0) fail(std::to_string(out_of_order) + " tuples out of their producer's order");
    if (failures == 0) {
      std::printf("driven shuffle: %llu of %llu tuples, all exactly once, routed by key, in producer order\n",
                  static_cast<unsigned long long>(count), static_cast<unsigned long long>(3 * tuples));
    }
  }
  return 0;
}

int run_explicit(cluster::Node& node, std::uint64_t tuples) {
  const std::string name = "driven-explicit";
  flow::FlowSpec spec = one_to_one(name);
  spec.type_options = driven::DrivenOptions{.poll_interval = 50us, .batch_bytes = 64 * 1024};
  if (node.rank() == 0) flow::create_flow(node, spec);
  if (node.rank() == 0) {
    produce_all(node, name, 0, 0, tuples, true);
  } else if (node.rank() == 1) {
    const Seen seen = consume_all(node, name, 0, 0, 1, 1, false);
    if (seen.count != tuples || seen.out_of_order != 0) {
      fail("explicit: received " + std::to_string(seen.count) + " of " + std::to_string(tuples) + ", " +
           std::to_string(seen.out_of_order) + " out of order");
    } else {
      std::printf("driven explicit: %llu tuples in order\n", static_cast<unsigned long long>(seen.count));
    }
  } else {
    run_mover(node, name);
  }
  return 0;
}

// A driven flow of Tuples with `pattern` from producers (rank 0, thread 0) and (rank 1, thread 0)
// to `targets`, rings of SEGMENTS x SEGMENT_BYTES.
flow::FlowSpec two_producers(const std::string& name, driven::Pattern pattern, std::vector<flow::TargetRef> targets,
                             std::uint32_t segments, std::uint32_t segment_bytes) {
  flow::FlowSpec spec;
  spec.name = name;
  spec.type = driven::kDriven;
  spec.sources = {{0, 0}, {1, 0}};
  spec.targets = std::move(targets);
  spec.schema = tuple_schema();
  spec.options.segments = segments;
  spec.options.segment_bytes = segment_bytes;
  spec.type_options = pattern_options(pattern);
  return spec;
}

// Load balancing: producers on ranks 0 and 1, a fast consumer (rank 0) and a slow one (rank 1,
// sleeping 20 ms after each batch: slower than the mover on a loaded machine too). Every tuple reaches exactly one consumer, each consumer sees
// each producer's tuples in order, and the slow consumer gets fewer.
int run_balance(cluster::Node& node, std::uint32_t segments, std::uint32_t segment_bytes, std::uint64_t tuples) {
  const std::string name = "driven-balance";
  if (node.rank() == 0) {
    flow::create_flow(node, two_producers(name, driven::Pattern::balance, {{0, 0}, {1, 0}}, segments, segment_bytes));
  }
  if (node.rank() == 2) {
    if (!g_external_mover) run_mover(node, name);
  } else {
    const std::size_t consumer = static_cast<std::size_t>(node.rank());
    const std::chrono::microseconds pause = consumer == 1 ? 20000us : 0us;
    Seen seen;
    std::thread consumer_thread([&] { seen = consume_all(node, name, 0, consumer, 2, 2, false, pause); });
    produce_all(node, name, 0, consumer, tuples, false);
    consumer_thread.join();
    seen.publish(node, name, consumer);
  }
  if (node.rank() == 0) {
    const Seen fast = Seen::wait_for(node, name, 0);
    const Seen slow = Seen::wait_for(node, name, 1);
    const std::uint64_t count = fast.count + slow.count;
    const std::uint64_t key_sum = fast.key_sum + slow.key_sum;
    const std::uint64_t expected_sum = expected_key_sum(2, tuples);
    if (count != 2 * tuples || key_sum != expected_sum) {
      fail("received " + std::to_string(count) + " tuples (key sum " + std::to_string(key_sum) + "), expected " +
           std::to_string(2 * tuples) + " (key sum " + std::to_string(expected_sum) + ")");
    }
    if (fast.out_of_order + slow.out_of_order != 0) {
      fail(std::to_string(fast.out_of_order + slow.out_of_order) + " tuples out of their producer's order");
    }
    if (slow.count >= fast.count) {
      fail("the slow consumer got " + std::to_string(slow.count) + " tuples, the fast one " +
           std::to_string(fast.count) + ": not balanced by pace");
    }
    if (failures == 0) {
      std::printf("driven balance: %llu of %llu tuples, all exactly once, in producer order per consumer; "
                  "fast consumer %llu, slow consumer %llu\n",
                  static_cast<unsigned long long>(count), static_cast<unsigned long long>(2 * tuples),
                  static_cast<unsigned long long>(fast.count), static_cast<unsigned long long>(slow.count));
    }
  }
  return 0;
}

// Ordered replication: producers on ranks 0 and 1, consumers (rank 0, id 0), (rank 1, id 0) and
// (rank 1, id 1). Every consumer gets every tuple exactly once, and all in the same order.
int run_replicate(cluster::Node& node, std::uint32_t segments, std::uint32_t segment_bytes, std::uint64_t tuples) {
  const std::string name = "driven-replicate";
  constexpr std::size_t kConsumers = 3;
  if (node.rank() == 0) {
    flow::create_flow(node, two_producers(name, driven::Pattern::replicate, {{0, 0}, {1, 0}, {1, 1}}, segments,
                                          segment_bytes));
  }
  if (node.rank() == 2) {
    if (!g_external_mover) run_mover(node, name);
  } else {
    // consumer index = rank + id: (0, 0) -> 0, (1, 0) -> 1, (1, 1) -> 2
    const int ids = node.rank() == 0 ? 1 : 2;
    std::vector<Seen> seen(static_cast<std::size_t>(ids));
    std::vector<std::thread> consumers;
    for (int id = 0; id < ids; ++id) {
      const std::size_t index = static_cast<std::size_t>(node.rank() + id);
      // one consumer sleeps now and then: the others wait for it (the mover moves a segment only
      // when every consumer has room)
      const std::chrono::microseconds pause = index == 2 ? 200us : 0us;
      consumers.emplace_back([&, id, index, pause] {
        seen[static_cast<std::size_t>(id)] = consume_all(node, name, id, index, kConsumers, 2, false, pause);
      });
    }
    produce_all(node, name, 0, static_cast<std::uint64_t>(node.rank()), tuples, false);
    for (auto& t : consumers) t.join();
    for (int id = 0; id < ids; ++id) {
      seen[static_cast<std::size_t>(id)].publish(node, name, static_cast<std::size_t>(node.rank() + id));
    }
  }
  if (node.rank() == 0) {
    const std::uint64_t expected_sum = expected_key_sum(2, tuples);
    std::vector<Seen> all;
    for (std::size_t c = 0; c < kConsumers; ++c) all.push_back(Seen::wait_for(node, name, c));
    for (std::size_t c = 0; c < kConsumers; ++c) {
      const Seen& s = all[c];
      if (s.count != 2 * tuples || s.key_sum != expected_sum || s.out_of_order != 0) {
        fail("consumer " + std::to_string(c) + " received " + std::to_string(s.count) + " tuples (key sum " +
             std::to_string(s.key_sum) + ", " + std::to_string(s.out_of_order) + " out of order), expected " +
             std::to_string(2 * tuples) + " (key sum " + std::to_string(expected_sum) + ")");
      }
      if (s.order != all[0].order) fail("consumer " + std::to_string(c) + " saw another order than consumer 0");
    }
    if (failures == 0) {
      std::printf("driven replicate: %zu consumers, each %llu of %llu tuples exactly once, all in one order\n",
                  kConsumers, static_cast<unsigned long long>(all[0].count),
                  static_cast<unsigned long long>(2 * tuples));
    }
  }
  return 0;
}

// Elastic load balancing: producers on ranks 0 and 1 push all the time; consumer 0 (rank 0) is
// there from the start, consumer 1 (rank 1, id 0) joins after consumer 0 took 50 batches,
// consumer 2 (rank 1, id 1) joins after consumer 1 took 20 and leaves after 30 of its own,
// draining what it was given. Consumers sleep 1 ms per batch so the flow outlasts the joins.
// Every tuple reaches exactly one consumer, and every consumer got some.
int run_elastic(cluster::Node& node, std::uint64_t tuples) {
  const std::string name = "driven-elastic";
  constexpr std::size_t kConsumers = 3;
  if (node.rank() == 0) {
    flow::create_flow(node, two_producers(name, driven::Pattern::balance, {{0, 0}, {1, 0}, {1, 1}}, 4, 1024));
  }
  auto signal = [&](const std::string& what) { node.registry().publish("test/" + name + "/" + what, ""); };
  auto await = [&](const std::string& what) { (void)node.wait_for("test/" + name + "/" + what, 60s); };
  if (node.rank() == 2) {
    run_mover(node, name);
  } else {
    std::vector<std::thread> consumers;
    std::vector<Seen> seen(kConsumers);
    if (node.rank() == 0) {
      consumers.emplace_back([&] {
        seen[0] = consume_all(node, name, 0, 0, kConsumers, 2, false, 1000us, [&](std::uint64_t b, driven::Consumer&) {
          if (b == 50) signal("joined-0");
        });
      });
    } else {
      consumers.emplace_back([&] {
        await("joined-0");
        seen[1] = consume_all(node, name, 0, 1, kConsumers, 2, false, 1000us, [&](std::uint64_t b, driven::Consumer&) {
          if (b == 20) signal("joined-1");
        });
      });
      consumers.emplace_back([&] {
        await("joined-1");
        seen[2] = consume_all(node, name, 1, 2, kConsumers, 2, false, 1000us, [&](std::uint64_t b, driven::Consumer& in) {
          if (b == 30) {
            if (Status s = in.leave(); !s) fail("leave: " + s.message());
            signal("left-2");
          }
        });
      });
    }
    produce_all(node, name, 0, static_cast<std::uint64_t>(node.rank()), tuples, false);
    for (auto& t : consumers) t.join();
    for (std::size_t c = 0; c < kConsumers; ++c) {
      if ((node.rank() == 0) == (c == 0)) seen[c].publish(node, name, c);
    }
  }
  if (node.rank() == 0) {
    std::uint64_t count = 0, key_sum = 0, out_of_order = 0;
    std::string counts;
    for (std::size_t c = 0; c < kConsumers; ++c) {
      const Seen s = Seen::wait_for(node, name, c);
      count += s.count;
      key_sum += s.key_sum;
      out_of_order += s.out_of_order;
      counts += (c == 0 ? "" : ", ") + std::to_string(s.count);
      if (s.count == 0) fail("consumer " + std::to_string(c) + " got nothing");
    }
    const std::uint64_t expected_sum = expected_key_sum(2, tuples);
    if (count != 2 * tuples || key_sum != expected_sum) {
      fail("received " + std::to_string(count) + " tuples (key sum " + std::to_string(key_sum) + "), expected " +
           std::to_string(2 * tuples) + " (key sum " + std::to_string(expected_sum) + ")");
    }
    if (out_of_order != 0) fail(std::to_string(out_of_order) + " tuples out of their producer's order");
    // Staying, consumer 2 would get about a third of what was left when it joined; having left,
    // only what it took before the mover saw the leave and what was in its ring.
    if (Seen::wait_for(node, name, 2).count * 8 > 2 * tuples) fail("consumer 2 kept getting tuples after it left");
    if (failures == 0) {
      std::printf("driven elastic: %llu of %llu tuples, all exactly once, consumers joined and left (got %s)\n",
                  static_cast<unsigned long long>(count), static_cast<unsigned long long>(2 * tuples),
                  counts.c_str());
    }
  }
  return 0;
}

// QoS: flows qos-0..2 from producers (rank 0, thread f) to consumers (rank 1, id f), shares
// 1:2:1, and qos-idle (thread/id 3, share 1000) whose producer sends only after the measured
// phases: its big share must not slow the others (work-conserving). Each producer of qos-0..2
// fills its ring (which holds all its tuples) before the mover starts, so all three stay
// backlogged: the mover's copy work is the bottleneck, as on shm. The mover (rank 2) steps
// itself: phase 1 moves a third of the data and checks the byte split against 1:2:1; then
// set_share makes it 3:1:1 (the PUs do not know) and, after the mover's next look at the
// registry, phase 2 moves 0.8 of a flow's data and checks 3:1:1. Bytes, not time, are compared,
// so a loaded machine does not change the split; the tolerance covers the segment granularity.
int run_qos(cluster::Node& node, std::uint64_t tuples) {
  constexpr std::size_t kFlows = 3;
  constexpr std::uint64_t kIdleTuples = 1000;
  const std::array<std::int64_t, kFlows> shares{1, 2, 1};
  auto name = [](std::size_t f) { return f == kFlows ? std::string("qos-idle") : "qos-" + std::to_string(f); };
  if (node.rank() == 0) {
    for (std::size_t f = 0; f <= kFlows; ++f) {
      flow::FlowSpec spec = one_to_one(name(f));
      spec.sources = {{0, static_cast<int>(f)}};
      spec.targets = {{1, static_cast<int>(f)}};
      spec.options.segments = 256;  // 1 MiB rings: a producer's ring holds all its tuples
      spec.options.segment_bytes = 4096;
      spec.options.stall_timeout = 60s;
      spec.type_options = driven::DrivenOptions{.batch_bytes = 32 * 1024, .share = f == kFlows ? 1000 : shares[f]};
      flow::create_flow(node, spec);
    }
  }
  const std::string signals = "test/qos/";
  if (node.rank() == 0) {
    std::vector<std::thread> producers;
    for (std::size_t f = 0; f <= kFlows; ++f) {
      producers.emplace_back([&, f] {
        driven::Producer out(node, name(f), static_cast<int>(f));
        if (f == kFlows) (void)node.wait_for(signals + "go-idle", 120s);
        const std::uint64_t n = f == kFlows ? kIdleTuples : tuples;
        for (std::uint64_t i = 0; i < n; ++i) {
          const Tuple t{key_of(0, i), 0, i};
          if (Status s = out.push_to(0, &t, sizeof t); !s) return fail(name(f) + " producer: " + s.message());
        }
        if (Status s = out.flush(); !s) return fail(name(f) + " flush: " + s.message());
        if (f < kFlows) node.registry().publish(signals + "filled-" + std::to_string(f), "");
        if (Status s = out.close(); !s) fail(name(f) + " close: " + s.message());
      });
    }
    for (auto& t : producers) t.join();
    for (std::size_t f = 0; f <= kFlows; ++f) {
      const Seen seen = Seen::wait_for(node, name(f), 0);
      const std::uint64_t n = f == kFlows ? kIdleTuples : tuples;
      if (seen.count != n || seen.key_sum != expected_key_sum(1, n) || seen.out_of_order != 0) {
        fail(name(f) + ": received " + std::to_string(seen.count) + " of " + std::to_string(n) + " tuples (" +
             std::to_string(seen.out_of_order) + " out of order, key sum " + (seen.key_sum == expected_key_sum(1, n) ? "right" : "wrong") + ")");
      }
    }
    if (failures == 0) std::printf("driven qos: every flow's tuples exactly once, in order\n");
  } else if (node.rank() == 1) {
    std::vector<std::thread> consumers;
    std::vector<Seen> seen(kFlows + 1);
    for (std::size_t f = 0; f <= kFlows; ++f) {
      consumers.emplace_back([&, f] { seen[f] = consume_all(node, name(f), static_cast<int>(f), 0, 1, 1, false); });
    }
    for (auto& t : consumers) t.join();
    for (std::size_t f = 0; f <= kFlows; ++f) seen[f].publish(node, name(f), 0);
  } else {
    driven::Mover mover(node);
    for (std::size_t f = 0; f <= kFlows; ++f) mover.add_flow(name(f), 30s);
    for (std::size_t f = 0; f < kFlows; ++f) (void)node.wait_for(signals + "filled-" + std::to_string(f), 120s);
    auto bytes = [&] {
      std::array<double, kFlows> b{};
      for (std::size_t f = 0; f < kFlows; ++f) b[f] = static_cast<double>(mover.counters(name(f)).bytes);
      return b;
    };
    // Steps until `window` bytes moved; checks that every pass moved something and that the
    // split follows `set`.
    auto phase = [&](const std::string& label, const std::array<std::int64_t, kFlows>& set, double window) {
      const std::array<double, kFlows> start = bytes();
      double total = 0;
      std::uint64_t passes = 0, empty = 0;
      while (total < window) {
        std::uint64_t moved = 0;
        if (Status s = mover.step(moved); !s) return fail("mover: " + s.message());
        ++passes;
        empty += moved == 0 ? 1 : 0;
        total += static_cast<double>(moved);
      }
      for (std::size_t f = 0; f < kFlows; ++f) {
        if (mover.share(name(f)) != set[f]) fail(label + ": the mover applies share " + std::to_string(mover.share(name(f))) + " to " + name(f));
      }
      const std::array<double, kFlows> end = bytes();
      const double sum = (end[0] - start[0]) + (end[1] - start[1]) + (end[2] - start[2]);
      const double set_sum = static_cast<double>(set[0] + set[1] + set[2]);
      std::string achieved;
      for (std::size_t f = 0; f < kFlows; ++f) {
        const double got = (end[f] - start[f]) / sum, want = static_cast<double>(set[f]) / set_sum;
        char text[32];
        std::snprintf(text, sizeof text, "%s%.3f", f == 0 ? "" : ":", got);
        achieved += text;
        if (std::fabs(got - want) > 0.05) fail(label + ": " + name(f) + " got " + std::to_string(got) + " of the bytes, its share is " + std::to_string(want));
      }
      if (empty > 0) fail(label + ": " + std::to_string(empty) + " of " + std::to_string(passes) + " passes moved nothing while three flows were backlogged");
      std::printf("driven qos: %s: set %lld:%lld:%lld, achieved byte split %s over %llu passes\n", label.c_str(),
                  static_cast<long long>(set[0]), static_cast<long long>(set[1]), static_cast<long long>(set[2]),
                  achieved.c_str(), static_cast<unsigned long long>(passes));
    };
    const double per_flow = static_cast<double>(tuples * sizeof(Tuple));
    phase("phase 1", shares, per_flow);
    driven::set_share(node, name(0), 3);
    driven::set_share(node, name(1), 1);
    std::this_thread::sleep_for(driven::kShareRefresh + 10ms);  // the mover's next pass looks
    phase("phase 2", {3, 1, 1}, 0.8 * per_flow);
    node.registry().publish(signals + "go-idle", "");
    if (Status s = mover.run(120s); !s) fail("mover: " + s.message());
    if (failures == 0) std::printf("driven qos: the mover held the shares\n");
  }
  return 0;
}

template <class F>
void expect_error(const std::string& what, Errc code, const std::string& part, F&& f);

int run_rate(cluster::Node& node, std::uint64_t tuples) {
  const std::string name = "driven-rate";
  if (node.rank() == 0) flow::create_flow(node, one_to_one(name));
  if (node.rank() == 0) {
    produce_all(node, name, 0, 0, tuples, true);
  } else if (node.rank() == 1) {
    const Seen seen = consume_all(node, name, 0, 0, 1, 1, false);
    if (seen.count != tuples || seen.out_of_order != 0 || seen.key_sum != expected_key_sum(1, tuples)) {
      fail("rate: received " + std::to_string(seen.count) + " of " + std::to_string(tuples) + ", " +
           std::to_string(seen.out_of_order) + " out of order");
    }
  } else {
    constexpr double kSeconds = 0.3;
    driven::Mover mover(node);
    expect_error("negative rate", Errc::invalid_argument, "rate limit -1", [&] { mover.limit_rate(-1); });
    mover.limit_rate(static_cast<double>(tuples * sizeof(Tuple)) / kSeconds);
    mover.add_flow(name, 30s);
    const auto start = std::chrono::steady_clock::now();
    if (Status s = mover.run(120s); !s) fail("mover: " + s.message());
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Paced: never faster than the rate, but for the 5 ms a late mover may catch up.
    if (took < kSeconds - 0.01) fail("rate: the capped mover moved the flow in " + std::to_string(took) + " s");
    if (failures == 0) std::printf("driven rate: capped mover took %.2f s (>= %.2f s), every tuple in order\n", took, kSeconds);
  }
  return 0;
}

template <class F>
void expect_error(const std::string& what, Errc code, const std::string& part, F&& f) {
  try {
    f();
    fail(what + ": no error");
  } catch (const Error& e) {
    if (e.code() != code || std::string(e.what()).find(part) == std::string::npos) {
      fail(what + ": got '" + e.what() + "'");
    }
  }
}

int run_errors(cluster::Node& node) {
  if (node.rank() != 0) return 0;
  flow::FlowSpec spec;
  spec.name = "driven-bad";
  spec.type = driven::kDriven;
  spec.sources = {{0, 0}};
  spec.targets = {{1, 0}};
  spec.schema = tuple_schema();
  spec.routing = flow::Routing::function;
  expect_error("function routing", Errc::invalid_argument, "routes by key hash or explicitly",
               [&] { flow::create_flow(node, spec); });
  spec.routing = flow::Routing::key_hash;
  spec.key_column = "nope";
  expect_error("missing key column", Errc::invalid_argument, "nope", [&] { flow::create_flow(node, spec); });
  spec.key_column = "key";
  spec.type_options = driven::DrivenOptions{.poll_interval = -1us};
  expect_error("negative poll interval", Errc::invalid_argument, "poll interval", [&] { flow::create_flow(node, spec); });
  spec.type_options = driven::DrivenOptions{.doorbell = true, .safety_poll = 0us};
  expect_error("no safety poll", Errc::invalid_argument, "safety poll", [&] { flow::create_flow(node, spec); });

  flow::FlowSpec shuffle;
  shuffle.name = "not-driven";
  shuffle.sources = {{0, 0}};
  shuffle.targets = {{0, 0}};
  shuffle.schema = tuple_schema();
  shuffle.key_column = "key";
  flow::create_flow(node, shuffle);
  expect_error("a shuffle flow opened as driven", Errc::invalid_argument, "not a driven flow",
               [&] { driven::Producer p(node, "not-driven", 0, 2s); });
  expect_error("no such flow", Errc::not_found, "does not exist",
               [&] { driven::Consumer c(node, "no-such-flow", 0, 500ms); });

  flow::FlowSpec ok;
  ok.name = "driven-ok";
  ok.type = driven::kDriven;
  ok.sources = {{0, 0}};
  ok.targets = {{0, 0}};
  ok.schema = tuple_schema();
  ok.key_column = "key";
  ok.options.stall_timeout = 300ms;  // the producer's close waits this long for a mover (none here)
  flow::create_flow(node, ok);
  expect_error("no such producer", Errc::invalid_argument, "no source", [&] { driven::Producer p(node, "driven-ok", 7, 2s); });
  driven::Producer producer(node, "driven-ok", 0, 2s);
  const Tuple t{1, 0, 0};
  Status wrong = producer.push(&t, 8);
  if (wrong.code() != Errc::invalid_argument || wrong.message().find("does not match") == std::string::npos) {
    fail("wrong width: got '" + wrong.message() + "'");
  }
  expect_error("producer opened twice", Errc::already_exists, "already open",
               [&] { driven::Producer p(node, "driven-ok", 0, 2s); });
  driven::Consumer consumer(node, "driven-ok", 0, 2s);
  flow::TupleBatch batch;
  Status nothing = consumer.try_consume(batch);
  if (nothing.code() != Errc::retry) fail("try_consume on an empty ring: got '" + nothing.message() + "'");
  Status timeout = consumer.consume(batch, 100ms);
  if (timeout.code() != Errc::timeout || timeout.message().find("no mover has taken the flow (dfi mover driven-ok)") == std::string::npos) {
    fail("consume without a mover: got '" + timeout.message() + "'");
  }

  // A balance flow needs no key column and does not route: push_to is refused.
  flow::FlowSpec balance = two_producers("driven-balance-errors", driven::Pattern::balance, {{0, 0}}, 4, 256);
  balance.sources = {{0, 0}};
  balance.options.stall_timeout = 300ms;
  flow::create_flow(node, balance);
  driven::Producer unrouted(node, "driven-balance-errors", 0, 2s);
  Status routed = unrouted.push_to(0, &t, sizeof t);
  if (routed.code() != Errc::invalid_argument || routed.message().find("does not route") == std::string::npos) {
    fail("push_to in a balance flow: got '" + routed.message() + "'");
  }
  if (unrouted.ring_count() != 1) fail("a balance producer has " + std::to_string(unrouted.ring_count()) + " rings");
  Status leave = consumer.leave();
  if (leave.code() != Errc::invalid_argument || leave.message().find("only a consumer of a balance flow") == std::string::npos) {
    fail("leave from a shuffle flow: got '" + leave.message() + "'");
  }
  // Rate shares: at creation and at run time, 0 and negative are named errors.
  for (std::int64_t bad : {std::int64_t{0}, std::int64_t{-2}, driven::kMaxShare + 1}) {
    flow::FlowSpec bad_share = one_to_one("driven-bad-share");
    bad_share.type_options = driven::DrivenOptions{.share = bad};
    const std::string part = "share " + std::to_string(bad) + " is outside 1..1000000";
    expect_error("share " + std::to_string(bad), Errc::invalid_argument, part, [&] { flow::create_flow(node, bad_share); });
    expect_error("set_share " + std::to_string(bad), Errc::invalid_argument, "driven flow 'driven-ok': set_share: " + part,
                 [&] { driven::set_share(node, "driven-ok", bad); });
  }
  expect_error("set_share on a shuffle flow", Errc::invalid_argument, "not a driven flow",
               [&] { driven::set_share(node, "not-driven", 2, 2s); });
  expect_error("set_share on no flow", Errc::not_found, "does not exist", [&] { driven::set_share(node, "no-such-flow", 2, 300ms); });
  driven::set_share(node, "driven-ok", 7);
  if (node.registry().lookup("driven/driven-ok/share") != "7") fail("set_share did not write the share record");
  if (failures == 0) std::printf("driven errors: all clear\n");
  return 0;
}


int run_kill_mover(cluster::Node& node) {
  const std::string name = "driven-kill";
  flow::FlowSpec spec = one_to_one(name);
  spec.options.segments = 4;
  spec.options.segment_bytes = 256;
  spec.options.stall_timeout = 2s;  // how long the PUs wait for a mover to come back
  if (node.rank() == 0) flow::create_flow(node, spec);
  // A dead mover is a pause, not an error (a restarted one would continue): the PUs wait their
  // stall timeout, then get a timeout that says the mover died and nobody resumed the flow.
  auto expect_timeout = [&](const std::string& who, const Status& status) {
    if (status.code() != Errc::timeout || status.message().find("the mover (rank 2) failed") == std::string::npos ||
        status.message().find("no mover has resumed the flow") == std::string::npos) {
      fail(who + ": expected a timeout naming the dead mover, got '" + status.message() + "'");
    } else {
      std::printf("%s: %s\n", who.c_str(), status.message().c_str());
    }
  };
  if (node.rank() == 0) {
    driven::Producer out(node, name, 0);
    Status first;
    for (std::uint64_t i = 0; i < 10'000'000 && first.is_ok(); ++i) {
      const Tuple t{i, 0, i};
      first = out.push_to(0, &t, sizeof t);
    }
    expect_timeout("producer", first);
    node.registry().publish("test/" + name + "/producer-done", "");
    (void)node.wait_for("test/" + name + "/consumer-done", 10s);  // rank 0 hosts the registry
  } else if (node.rank() == 1) {
    driven::Consumer in(node, name, 0);
    flow::TupleBatch batch;
    Status first;
    while (first.is_ok()) {
      first = in.consume(batch);
      if (first.is_ok() && batch.empty()) break;
    }
    expect_timeout("consumer", first);
    node.registry().publish("test/" + name + "/consumer-done", "");
    // Not gone before the producer's timeout: it would see a dead consumer instead.
    (void)node.wait_for("test/" + name + "/producer-done", 10s);
  } else {
    driven::Mover mover(node);
    mover.add_flow(name, 30s);
    while (!mover.done()) {
      std::uint64_t moved = 0;
      if (Status s = mover.step(moved); !s) fail("mover: " + s.message());
      if (mover.counters().segments >= 50) ::raise(SIGKILL);
    }
  }
  std::fflush(stdout);
  std::_Exit(failures == 0 ? 0 : 1);  // the mover's rank is gone: do not wait for it to finish
}

// Several movers in one cluster (4 ranks): flow "driven-a" runs from rank 0 to rank 1 and is
// moved by rank 2, flow "driven-b" from rank 1 to rank 0 moved by rank 3, at the same time; a
// second mover asking for a flow that has one is refused, naming the first. Each flow's tuples
// arrive exactly once and in order.
int run_two_movers(cluster::Node& node, std::uint64_t tuples) {
  const std::array<std::string, 2> names{"driven-a", "driven-b"};
  if (node.rank() == 0) {
    flow::FlowSpec a = one_to_one(names[0]);
    flow::create_flow(node, a);
    flow::FlowSpec b = one_to_one(names[1]);
    b.sources = {{1, 0}};
    b.targets = {{0, 0}};
    flow::create_flow(node, b);
  }
  if (node.rank() >= 2) {
    const std::string& mine = names[static_cast<std::size_t>(node.rank() - 2)];
    const std::string& theirs = names[static_cast<std::size_t>(3 - node.rank())];
    driven::Mover mover(node);
    mover.add_flow(mine, 30s);
    // Once the other mover holds its flow, this rank tries to take it as well.
    node.registry().publish("test/two-movers/claimed/" + std::to_string(node.rank()), "");
    (void)node.wait_for("test/two-movers/claimed/" + std::to_string(5 - node.rank()), 30s);
    try {
      driven::Mover second(node);
      second.add_flow(theirs, 30s);
      fail("mover (rank " + std::to_string(node.rank()) + ") took flow '" + theirs + "' from its mover");
    } catch (const Error& e) {
      if (e.code() != Errc::already_exists) fail(std::string("a second mover: ") + e.what());
    }
    if (Status s = mover.run(120s); !s) fail("mover: " + s.message());
    std::printf("mover (rank %d): moved flow '%s', %llu segments\n", node.rank(), mine.c_str(),
                static_cast<unsigned long long>(mover.counters(mine).segments));
    return 0;
  }
  const std::string& out = names[static_cast<std::size_t>(node.rank())];
  const std::string& in = names[static_cast<std::size_t>(1 - node.rank())];
  Seen seen;
  std::thread consumer([&] { seen = consume_all(node, in, 0, 0, 1, 1, false); });
  produce_all(node, out, 0, 0, tuples, true);
  consumer.join();
  if (seen.count != tuples || seen.key_sum != expected_key_sum(1, tuples) || seen.out_of_order != 0) {
    fail("flow '" + in + "': " + std::to_string(seen.count) + " of " + std::to_string(tuples) + " tuples, " +
         std::to_string(seen.out_of_order) + " out of order");
  } else {
    std::printf("flow '%s': %llu tuples exactly once, in order\n", in.c_str(), static_cast<unsigned long long>(tuples));
  }
  return 0;
}

// Property test: `runs` flows, one after another, each with a shape drawn from `seed` + run
// (every rank draws the same): a pattern, 1-4 producers and 1-3 consumers spread over ranks 0
// and 1 (one thread each), 0-3000 tuples per producer, rings of 2-8 segments of 128 B - 4 KiB,
// a batch cap of one segment to the default, a polling interval of 0-100 us, and consumers that
// pause now and then. Each run checks the pattern's promise: shuffle — every tuple once, at the
// consumer its key routes to, in producer order; balance — every tuple once, in producer order
// at each consumer; replicate — every consumer every tuple once, all in one order.
int run_property(cluster::Node& node, std::uint64_t seed, int runs) {
  for (int run = 0; run < runs; ++run) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(run));
    auto pick = [&](std::initializer_list<std::uint64_t> options) {
      return *(options.begin() + static_cast<std::ptrdiff_t>(rng() % options.size()));
    };
    const auto pattern = static_cast<driven::Pattern>(rng() % 3);  // shuffle, balance, replicate
    const std::size_t producers = 1 + rng() % 4;
    const std::size_t consumers = 1 + rng() % 3;
    std::vector<std::uint64_t> tuples(producers);
    for (auto& t : tuples) t = pick({0, 1, 37, 500, 3000});
    const std::string name = "driven-prop-" + std::to_string(run);
    flow::FlowSpec spec;
    spec.name = name;
    spec.type = driven::kDriven;
    std::array<int, 2> next_thread{0, 0}, next_id{0, 0};
    const int first_rank = static_cast<int>(rng() % 2);
    for (std::size_t p = 0; p < producers; ++p) {
      const int rank = (first_rank + static_cast<int>(p)) % 2;
      spec.sources.push_back({rank, next_thread[static_cast<std::size_t>(rank)]++});
    }
    for (std::size_t c = 0; c < consumers; ++c) {
      const int rank = (first_rank + 1 + static_cast<int>(c)) % 2;
      spec.targets.push_back({rank, next_id[static_cast<std::size_t>(rank)]++});
    }
    spec.schema = tuple_schema();
    if (pattern == driven::Pattern::shuffle) spec.key_column = "key";
    spec.options.segments = static_cast<std::uint32_t>(pick({2, 3, 4, 8}));
    spec.options.segment_bytes = static_cast<std::uint32_t>(pick({128, 256, 1024, 4096}));
    driven::DrivenOptions options{.pattern = pattern};
    options.batch_bytes = pick({spec.options.segment_bytes, 4096, 4u << 20});
    options.poll_interval = std::chrono::microseconds(pick({0, 0, 10, 100}));
    options.doorbell = pick({0, 1}) == 1;
    options.safety_poll = std::chrono::microseconds(pick({1000, 20000}));
    spec.type_options = options;
    const std::chrono::microseconds pause(pick({0, 0, 50, 500}));
    char shape[256];
    std::snprintf(shape, sizeof shape, "run %d: %s, %zu:%zu, %u x %u B, batch %llu B, poll %lld us%s, pause %lld us", run,
                  pattern == driven::Pattern::shuffle ? "shuffle" : pattern == driven::Pattern::balance ? "balance" : "replicate",
                  producers, consumers, spec.options.segments, spec.options.segment_bytes,
                  static_cast<unsigned long long>(options.batch_bytes), static_cast<long long>(options.poll_interval.count()),
                  options.doorbell ? (options.safety_poll.count() == 1000 ? ", doorbell (safety 1 ms)" : ", doorbell (safety 20 ms)") : "",
                  static_cast<long long>(pause.count()));
    if (node.rank() == 0) flow::create_flow(node, spec);
    if (node.rank() == 2) {
      run_mover(node, name);
    } else {
      std::vector<std::thread> pus;
      std::vector<Seen> seen(consumers);
      for (std::size_t c = 0; c < consumers; ++c) {
        if (spec.targets[c].rank != node.rank()) continue;
        pus.emplace_back([&, c] {
          seen[c] = consume_all(node, name, spec.targets[c].id, c, consumers, producers,
                                pattern == driven::Pattern::shuffle, pause);
        });
      }
      for (std::size_t p = 0; p < producers; ++p) {
        if (spec.sources[p].rank != node.rank()) continue;
        pus.emplace_back([&, p] { produce_all(node, name, spec.sources[p].thread, p, tuples[p], false); });
      }
      for (auto& t : pus) t.join();
      for (std::size_t c = 0; c < consumers; ++c) {
        if (spec.targets[c].rank == node.rank()) seen[c].publish(node, name, c);
      }
    }
    if (node.rank() == 0) {
      std::uint64_t total = 0, key_sum = 0;
      for (std::size_t p = 0; p < producers; ++p) {
        total += tuples[p];
        for (std::uint64_t i = 0; i < tuples[p]; ++i) key_sum += key_of(p, i);
      }
      std::vector<Seen> all;
      for (std::size_t c = 0; c < consumers; ++c) all.push_back(Seen::wait_for(node, name, c));
      const int before = failures;
      if (pattern == driven::Pattern::replicate) {
        for (std::size_t c = 0; c < consumers; ++c) {
          if (all[c].count != total || all[c].key_sum != key_sum || all[c].out_of_order != 0 ||
              all[c].order != all[0].order) {
            fail(std::string(shape) + ": consumer " + std::to_string(c) + " got " + std::to_string(all[c].count) +
                 " of " + std::to_string(total) + " tuples (" + std::to_string(all[c].out_of_order) +
                 " out of order, same order as consumer 0: " + (all[c].order == all[0].order ? "yes" : "no") + ")");
          }
        }
      } else {
        std::uint64_t count = 0, sum = 0, misrouted = 0, out_of_order = 0;
        for (const Seen& s : all) {
          count += s.count, sum += s.key_sum, misrouted += s.misrouted, out_of_order += s.out_of_order;
        }
        if (count != total || sum != key_sum || misrouted != 0 || out_of_order != 0) {
          fail(std::string(shape) + ": " + std::to_string(count) + " of " + std::to_string(total) + " tuples, " +
               std::to_string(misrouted) + " misrouted, " + std::to_string(out_of_order) + " out of order" +
               (sum != key_sum ? ", wrong key sum" : ""));
        }
      }
      if (failures == before) std::printf("property %s: %llu tuples held\n", shape, static_cast<unsigned long long>(total));
    }
    node.barrier("test/" + name + "/next");
  }
  if (node.rank() == 0 && failures == 0) std::printf("property: %d runs held\n", runs);
  return 0;
}

// A PU killed mid-flow (issue 10): flow "driven-dead-PATTERN" has a producer and a consumer on
// rank 0 and on rank 1; flow "driven-alive" runs from rank 0 to rank 0 through the same mover.
// Rank 1 kills itself (SIGKILL) after pushing 3000 tuples while its consumer takes batches. The
// PUs of the dead flow on rank 0 — the producer pushing on, the consumer consuming — get
// peer_failed naming rank 1; the mover gives that flow up naming rank 1 and keeps serving the
// other, whose tuples all arrive once and in order.
int run_kill_pu(cluster::Node& node, const std::string& pattern_name) {
  const std::string dead = "driven-dead-" + pattern_name;
  const std::string alive = "driven-alive";
  const driven::Pattern pattern = pattern_name == "shuffle"   ? driven::Pattern::shuffle
                                  : pattern_name == "balance" ? driven::Pattern::balance
                                                              : driven::Pattern::replicate;
  constexpr std::uint64_t kAliveTuples = 200000;
  if (node.rank() == 0) {
    flow::FlowSpec spec = two_producers(dead, pattern, {{0, 0}, {1, 0}}, 4, 1024);
    if (pattern == driven::Pattern::shuffle) spec.key_column = "key";
    spec.options.stall_timeout = 20s;  // the errors below must come from the death, not a timeout
    flow::create_flow(node, spec);
    flow::FlowSpec other = one_to_one(alive);
    other.sources = {{0, 1}};
    other.targets = {{0, 1}};
    flow::create_flow(node, other);
  }
  auto expect_death = [&](const std::string& who, const Status& status) {
    if (status.code() != Errc::peer_failed || status.message().find("(rank 1, ") == std::string::npos) {
      fail(who + ": expected peer_failed naming rank 1, got '" + status.message() + "'");
    } else {
      std::printf("%s: %s\n", who.c_str(), status.message().c_str());
    }
  };
  // One PU pair of the dead flow on this rank: the producer pushes (rank 1: 3000 tuples, then it
  // dies; rank 0: until it fails), the consumer consumes until it fails.
  auto dead_flow = [&](std::uint64_t producer) {
    std::thread consumer([&] {
      driven::Consumer in(node, dead, 0);
      flow::TupleBatch batch;
      Status first;
      while (first.is_ok()) {
        first = in.consume(batch);
        if (first.is_ok() && batch.empty()) {
          fail("dead-flow consumer: end of stream although a producer died");
          return;
        }
      }
      expect_death("dead-flow consumer", first);
    });
    driven::Producer out(node, dead, 0);
    Status first;
    for (std::uint64_t i = 0; first.is_ok(); ++i) {
      if (node.rank() == 1 && i == 3000) {
        std::fflush(stdout);
        ::raise(SIGKILL);
      }
      const Tuple t{key_of(producer, i), producer, i};
      first = out.push(&t, sizeof t);
    }
    expect_death("dead-flow producer", first);
    consumer.join();
  };
  if (node.rank() == 1) {
    dead_flow(1);
  } else if (node.rank() == 0) {
    std::thread other([&] {
      Seen seen;
      std::thread consumer([&] { seen = consume_all(node, alive, 1, 0, 1, 1, false); });
      produce_all(node, alive, 1, 0, kAliveTuples, true);
      consumer.join();
      if (seen.count != kAliveTuples || seen.key_sum != expected_key_sum(1, kAliveTuples) || seen.out_of_order != 0) {
        fail("the other flow: " + std::to_string(seen.count) + " of " + std::to_string(kAliveTuples) +
             " tuples, " + std::to_string(seen.out_of_order) + " out of order");
      } else {
        std::printf("the other flow: %llu of %llu tuples exactly once, in order\n",
                    static_cast<unsigned long long>(seen.count), static_cast<unsigned long long>(kAliveTuples));
      }
    });
    dead_flow(0);
    other.join();
    (void)node.wait_for("test/" + dead + "/mover-done", 30s);  // rank 0 hosts the registry
  } else {
    driven::Mover mover(node);
    mover.add_flow(dead, 30s);
    mover.add_flow(alive, 30s);
    const Status s = mover.run(60s);
    // Named by the failure detector ("producer (rank 1, ...) failed") or, over tcp, by the
    // connection that failed first ("connection to rank 1 ... failed").
    if (s.code() != Errc::peer_failed || s.message().find("driven flow '" + dead + "'") == std::string::npos ||
        s.message().find("rank 1") == std::string::npos) {
      fail("mover: expected peer_failed naming flow '" + dead + "' and rank 1, got '" + s.message() + "'");
    } else if (!mover.failure(alive).is_ok() || mover.counters(alive).bytes != kAliveTuples * sizeof(Tuple)) {
      fail("mover: the other flow failed or moved " + std::to_string(mover.counters(alive).bytes) + " bytes");
    } else {
      std::printf("mover: gave up: %s; served the other flow to its end\n", s.message().c_str());
    }
    node.registry().publish("test/" + dead + "/mover-done", "");
  }
  std::fflush(stdout);
  std::_Exit(failures == 0 ? 0 : 1);  // rank 1 is gone: do not wait for it to finish
}

// Rank 2 of chaos mode, outside the cluster itself: runs `dfi mover FLOW` (DFI) kills + 1 times;
// each of the first `kills` processes is killed — alternately by its own crash_at seam (at a
// random transfer: a half-done transfer at point publish, then at point link) and by SIGKILL
// from here after a random time (over tcp only by the seam, see below) — and the next one rejoins the cluster as rank 2 and resumes the
// flow. The last one runs until the flow ended. The first restart that resumes the flow after a
// publish crash must report the half-done transfer it completed, the first after a link crash the
// announced transfer it forgot; no restart completes two.
int run_chaos_mover(const std::string& flow, int kills, const std::string& dfi, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  // Over tcp UCX 1.13 aborts a PU that serves an emulated get or put of a mover that just died
  // (ucp_request.inl:346, about one run in five here): every kill there is a crash_at seam,
  // which completes the mover's operations first.
  const char* transport = std::getenv("DFI_TRANSPORT");
  const bool timed = transport == nullptr || std::string(transport) != "tcp";
  int killed = 0, resumed = 0, completed = 0;
  bool after_publish_crash = false, after_link_crash = false;
  for (int k = 0; k <= kills; ++k) {
    launch::ChildSpec spec;
    spec.argv = {dfi, "mover", flow, "--timeout", "120"};
    const bool last = k == kills;
    // the first kill is a crash at a transfer: the cluster is up by then (a rank killed before
    // the others met would leave them waiting at the start barrier)
    const bool seam = !last && (k % 2 == 0 || !timed);
    const char* point = (timed ? k / 2 : k) % 2 == 0 ? "publish" : "link";
    if (seam) {
      spec.argv.push_back("--crash-at");
      spec.argv.push_back(std::string(point) + ":" + std::to_string(std::uniform_int_distribution<int>(5, 120)(rng)));
    }
    launch::ChildProcess child = launch::ChildProcess::start(spec);
    if (!last && !seam) {
      const auto until = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(std::uniform_int_distribution<int>(50, 300)(rng));
      while (std::chrono::steady_clock::now() < until && child.running()) std::this_thread::sleep_for(2ms);
      ::kill(child.pid(), SIGKILL);
    }
    const launch::ChildResult r = child.wait(last ? 150s : 60s);
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
      std::printf("mover %d: %s\n", k, line.c_str());
      if (line.find("resumed:") == std::string::npos) continue;
      ++resumed;
      // the count before `phrase` in the line (0 if absent)
      auto count = [&](const char* phrase) {
        const std::size_t at = line.find(phrase);
        if (at == std::string::npos) return 0;
        const std::size_t from = line.rfind(' ', at - 1);
        return std::stoi(line.substr(from + 1, at - from - 1));
      };
      const int done = count(" half-done transfer(s) completed");
      const int forgotten = count(" announced transfer(s) forgotten");
      completed += done;
      // One transfer is in flight when a mover dies: a restart never finds two half done.
      if (done > 1) fail("mover " + std::to_string(k) + " completed " + std::to_string(done) + " half-done transfers");
      if (after_publish_crash && done < 1) fail("mover " + std::to_string(k) + " did not complete the half-done transfer");
      if (after_link_crash && forgotten < 1) fail("mover " + std::to_string(k) + " did not forget the announced transfer");
      after_publish_crash = after_link_crash = false;
    }
    // (a restart killed before it attached the buffers leaves the check to the next one)
    if (after_publish_crash && last) fail("no mover resumed the flow after the crash at publish");
    if (after_link_crash && last) fail("no mover resumed the flow after the crash at link");
    if (!last) {
      if (r.exit_code != 128 + SIGKILL) {
        fail("mover " + std::to_string(k) + " ended with " + std::to_string(r.exit_code) + " before it was killed");
        break;
      }
      ++killed;
      after_publish_crash = after_publish_crash || (seam && std::string(point) == "publish");
      after_link_crash = after_link_crash || (seam && std::string(point) == "link");
    } else if (r.exit_code != 0) {
      fail("the last mover ended with " + std::to_string(r.exit_code));
    }
  }
  std::printf("chaos: mover killed %d times mid-flow and restarted; %d restarts resumed the flow, completing %d "
              "half-done transfers\n",
              killed, resumed, completed);
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}

// chaos and retry modes: the pattern's test with rings of 4 x 256 B (the modes' globals set).
int run_small_rings(const std::string& mode, const std::string& pattern, std::uint64_t tuples) {
  if (pattern != "shuffle" && pattern != "balance" && pattern != "replicate") {
    std::fprintf(stderr, "%s: unknown pattern '%s'\n", mode.c_str(), pattern.c_str());
    return 2;
  }
  cluster::Node node;
  if (pattern == "shuffle") {
    run_shuffle(node, 4, 256, tuples, g_external_mover);
  } else if (pattern == "balance") {
    run_balance(node, 4, 256, tuples);
  } else {
    run_replicate(node, 4, 256, tuples);
  }
  node.finish();
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "chaos" && argc == 7) {
      // chaos PATTERN TUPLES KILLS DFI SEED: the pattern's test with rank 2 as run_chaos_mover
      const std::string pattern = argv[2];
      const std::uint64_t tuples = std::stoull(argv[3]);
      if (launch::discover_launch().rank == 2) {
        return run_chaos_mover("driven-" + pattern, std::stoi(argv[4]), argv[5], std::stoull(argv[6]));
      }
      g_external_mover = true;
      g_pause = 1000us;
      return run_small_rings(mode, pattern, tuples);
    }
    if (mode == "doorbell" && (argc == 4 || (argc == 5 && std::string(argv[4]) == "mute"))) {
      // doorbell PATTERN TUPLES [mute]: the pattern's test (rings of 4 x 256 B) in doorbell mode
      g_doorbell = true;
      g_mute = argc == 5;
      return run_small_rings(mode, argv[2], std::stoull(argv[3]));
    }
    if (mode == "retry" && argc == 5) {
      // retry PATTERN TUPLES FAILS: the pattern's test (rings of 4 x 256 B) while the mover's
      // transfers fail FAILS times and are retried
      const std::string pattern = argv[2];
      const std::uint64_t tuples = std::stoull(argv[3]);
      g_fails = std::stoull(argv[4]);
      return run_small_rings(mode, pattern, tuples);
    }
    cluster::Node node;
    if (mode == "shuffle" && (argc == 5 || (argc == 6 && std::string(argv[5]) == "external-mover"))) {
      run_shuffle(node, static_cast<std::uint32_t>(std::stoul(argv[2])), static_cast<std::uint32_t>(std::stoul(argv[3])),
                  std::stoull(argv[4]), argc == 6);
    } else if ((mode == "balance" || mode == "replicate") && argc == 5) {
      auto run = mode == "balance" ? run_balance : run_replicate;
      run(node, static_cast<std::uint32_t>(std::stoul(argv[2])), static_cast<std::uint32_t>(std::stoul(argv[3])),
          std::stoull(argv[4]));
    } else if (mode == "elastic" && argc == 3) {
      run_elastic(node, std::stoull(argv[2]));
    } else if (mode == "explicit" && argc == 3) {
      run_explicit(node, std::stoull(argv[2]));
    } else if (mode == "rate" && argc == 3) {
      run_rate(node, std::stoull(argv[2]));
    } else if (mode == "qos" && argc == 3) {
      run_qos(node, std::stoull(argv[2]));
    } else if (mode == "errors") {
      run_errors(node);
    } else if (mode == "kill-mover") {
      run_kill_mover(node);
    } else if (mode == "two-movers" && argc == 3) {
      run_two_movers(node, std::stoull(argv[2]));
    } else if (mode == "property" && argc == 4) {
      run_property(node, std::stoull(argv[2]), std::stoi(argv[3]));
    } else if (mode == "kill-pu" && argc == 3) {
      run_kill_pu(node, argv[2]);
    } else {
      std::fprintf(stderr,
                   "usage: driven_node shuffle SEGMENTS SEGMENT_BYTES TUPLES [external-mover] | balance SEGMENTS "
                   "SEGMENT_BYTES TUPLES | replicate SEGMENTS SEGMENT_BYTES TUPLES | elastic TUPLES | explicit TUPLES | qos TUPLES | rate TUPLES | errors | "
                   "kill-mover | kill-pu PATTERN | property SEED RUNS | two-movers TUPLES (4 ranks) | retry PATTERN TUPLES FAILS | doorbell PATTERN TUPLES [mute] | chaos PATTERN TUPLES KILLS DFI SEED\n");
      return 2;
    }
    node.finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
