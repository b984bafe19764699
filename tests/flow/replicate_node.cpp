// Rank program for the multi-process replicate tests, started by launch::run_cluster.
//
//   replicate_node property MODE SEED COUNT  COUNT random flows in MODE (naive, relay, ordered,
//                                            ordered-relay, ordered-stamp): every target gets
//                                            every tuple once,
//                                            per-source order; ordered: identical sequences
//   replicate_node gap-kill REPLICATION      ordered: a source dies holding a sequence number;
//                                            targets report the gap after the timeout
//   replicate_node gap-delay REPLICATION     ordered: a segment is delayed past the timeout;
//                                            targets report the gap and drop it when it comes
//   replicate_node slow-target               ordered: a slow target causes no gaps elsewhere
//   replicate_node injected [SEQUENCER]      ordered, with the test's flow_faults rules: segments
//                                            dropped at rank 2 are gaps there only, a delay at
//                                            rank 0 holds its targets back without a gap (stamp:
//                                            target 0 numbers around the held segment instead)
//   replicate_node stamp-kill-source         stamped: a dead source is named, no gap, identical
//                                            sequences at every target
//   replicate_node kill-source               naive: a dead source fails consume naming it
//   replicate_node kill-relay                a relaying target dies: below it, the failure is named
//   replicate_node errors                    every user error gives a clear error
//   replicate_node bench-bw MODE [MIB]       rank 0 replicates to ranks 1..: GB/s per target
//   replicate_node bench-lat MODE [ROUNDS]   64 B from rank 0 to every other rank and back (acks)
//
// Exit status 0 means the scenario held; every failure prints why.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/common/config.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/registry/client.hpp"

namespace {

using namespace dfi;
using namespace dfi::flow;

std::atomic<int> failures{0};
std::mutex print_mutex;

void fail(const std::string& what) {
  std::lock_guard lock(print_mutex);
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  ++failures;
}

void say(const std::string& what) {
  std::lock_guard lock(print_mutex);
  std::printf("%s\n", what.c_str());
  std::fflush(stdout);
}

bool tcp() { return config::get_string("transport") == "tcp"; }

// Kills this process with nothing of its own in flight. Over TCP, UCX 1.13 aborts the *receiving*
// process (ucs_fatal in ucp_put_handler: "unexpected error: Endpoint timeout") when an emulated
// put from a peer arrives after that peer's endpoint failed; letting our puts complete first keeps
// the tests about DFI's failure handling, not about that UCX bug.
[[noreturn]] void die_quietly(fabric::Worker* worker) {
  std::fflush(stdout);
  for (auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
       std::chrono::steady_clock::now() < until;) {
    if (worker != nullptr) worker->progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::raise(SIGKILL);
  std::abort();
}

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  return x ^ (x >> 33);
}

std::byte payload_byte(std::uint64_t key, std::size_t i) {
  return static_cast<std::byte>(mix(key + i) & 0xff);
}
std::uint64_t key_of(std::size_t source, std::uint64_t seq) {
  return (std::uint64_t{source} << 32) | seq;
}

void fill_tuple(std::vector<std::byte>& tuple, std::uint64_t key) {
  std::memcpy(tuple.data(), &key, 8);
  for (std::size_t i = 8; i < tuple.size(); ++i) tuple[i] = payload_byte(key, i);
}

struct ModeSpec {
  Replication replication = Replication::naive;
  bool ordered = false;
  Sequencer sequencer = Sequencer::counter;
};

ModeSpec parse_mode(const std::string& mode) {
  if (mode == "naive") return {Replication::naive, false};
  if (mode == "relay") return {Replication::relay, false};
  if (mode == "ordered") return {Replication::naive, true};
  if (mode == "ordered-relay") return {Replication::relay, true};
  if (mode == "ordered-stamp") return {Replication::naive, true, Sequencer::stamp};
  throw Error(Errc::invalid_argument, "unknown mode " + mode);
}

// ---------------------------------------------------------------------------------------------
// Property test

struct Config {
  std::string name;
  std::vector<std::uint64_t> tuples;  // per source
  std::size_t width = 8;
  bool bulk = false;
  bool flush_often = false;
  FlowSpec spec;
};

Config make_config(const std::string& mode, std::uint64_t seed, int index, int ranks) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(index));
  auto pick = [&](std::uint64_t lo, std::uint64_t hi) { return lo + rng() % (hi - lo + 1); };
  const ModeSpec m = parse_mode(mode);
  Config c;
  c.name = "rep-" + mode + "-" + std::to_string(seed) + "-" + std::to_string(index);
  FlowSpec& spec = c.spec;
  for (int r = 0; r < ranks; ++r) {
    const int sources = static_cast<int>(pick(0, 2));
    const int targets = static_cast<int>(pick(0, 2));
    for (int t = 0; t < sources; ++t) spec.sources.push_back({r, t});
    for (int t = 0; t < targets; ++t) spec.targets.push_back({r, t});
  }
  if (spec.sources.empty()) spec.sources.push_back({static_cast<int>(pick(0, ranks - 1)), 0});
  if (m.ordered && spec.sources.size() == 1) {  // several concurrent sources
    const int r = (spec.sources[0].rank + 1) % ranks;
    spec.sources.push_back({r, 5});
  }
  if (spec.targets.empty()) spec.targets.push_back({static_cast<int>(pick(0, ranks - 1)), 0});
  if (m.replication == Replication::relay && spec.targets.size() < 3) {  // a tree worth the name
    for (int r = 0; spec.targets.size() < 3; ++r) spec.targets.push_back({r % ranks, 7 + r});
  }
  c.width = 8 * pick(1, 64);  // 8 .. 512 B
  const bool latency = pick(0, 3) == 0;
  const std::uint64_t most = (latency ? 150 : 1500) / (tcp() ? 3 : 1);
  for (std::size_t s = 0; s < spec.sources.size(); ++s)
    c.tuples.push_back(pick(0, 5) == 0 ? 0 : pick(1, most));
  c.bulk = pick(0, 3) == 0;
  c.flush_often = pick(0, 4) == 0;

  std::vector<Column> columns{{"key", Type::uint64}};
  if (c.width > 8)
    columns.push_back({"payload", Type::chars, static_cast<std::uint32_t>(c.width - 8)});
  spec.name = c.name;
  spec.type = FlowType::replicate;
  spec.schema = Schema(columns);
  spec.options.mode = latency ? Mode::latency : Mode::bandwidth;
  spec.options.segments = static_cast<std::uint32_t>(pick(2, 16));
  if (!latency) {
    const std::uint64_t smallest = (c.width + 8 + 16 + 7) / 8;
    spec.options.segment_bytes =
        static_cast<std::uint32_t>(8 * pick(smallest, std::max<std::uint64_t>(smallest, 1024)));
  }
  spec.options.direct_write = pick(0, 3) != 0;
  spec.options.stall_timeout = std::chrono::seconds(60);
  spec.type_options = ReplicateOptions{
      .replication = m.replication,
      .fanout = static_cast<std::uint32_t>(pick(1, 3)),
      .ordered = m.ordered,
      .gap_timeout = std::chrono::seconds(20),  // no gaps here: only a real loss may make one
      .sequencer = m.sequencer};
  return c;
}

struct TargetResult {
  std::vector<std::uint64_t> counts;  // per source
  std::uint64_t checksum = 0;
  std::uint64_t digest = 0;  // order-sensitive over (sequence, key)
  std::uint64_t gaps = 0;
  std::uint64_t forwarded = 0;
};

void run_source(cluster::Node& node, const Config& c, std::size_t index) {
  fabric::Worker worker(node.fabric(), c.name + " source " + std::to_string(index));
  ReplicateSourceOptions options;
  options.expected_schema = c.spec.schema;
  ReplicateSource source(node, worker, c.name, c.spec.sources[index].thread, options);
  std::vector<std::byte> tuple(c.width);
  std::vector<std::byte> bulk;
  for (std::uint64_t seq = 1; seq <= c.tuples[index]; ++seq) {
    fill_tuple(tuple, key_of(index, seq));
    Status s;
    if (c.bulk) {
      bulk.insert(bulk.end(), tuple.begin(), tuple.end());
      if (bulk.size() >= 37 * c.width || seq == c.tuples[index]) {
        s = source.push_bulk(bulk.data(), bulk.size() / c.width);
        bulk.clear();
      }
    } else {
      s = source.push(tuple.data(), tuple.size());
    }
    if (s && c.flush_often && seq % 7 == 0) s = source.flush();
    if (!s) return fail(c.name + ": push: " + s.message());
  }
  if (Status s = source.close(); !s) fail(c.name + ": close: " + s.message());
  if (source.counters().tuples != c.tuples[index])
    fail(c.name + ": source counted the wrong number of tuples");
}

void run_target(cluster::Node& node, const Config& c, std::size_t index, TargetResult& result) {
  fabric::Worker worker(node.fabric(), c.name + " target " + std::to_string(index));
  ReplicateTargetOptions options;
  options.expected_schema = c.spec.schema;
  if (index % 2 == 0) options.worker = &worker;  // the other half makes its own worker
  ReplicateTarget target(node, c.name, c.spec.targets[index].id, options);
  result.counts.assign(c.spec.sources.size(), 0);
  std::vector<std::uint64_t> last(c.spec.sources.size(), 0);
  std::uint64_t expected_sequence = 1;
  ReplicateBatch batch;
  for (;;) {
    Status s = target.consume(batch, std::chrono::seconds(60));
    if (!s) return fail(c.name + ": consume: " + s.message());
    if (batch.end) break;
    if (batch.gap()) {
      ++result.gaps;
      fail(c.name + ": unexpected gap of " + std::to_string(batch.gap_count) + " at " +
           std::to_string(batch.sequence));
      expected_sequence = batch.sequence + batch.gap_count;
      continue;
    }
    if (batch.empty()) return fail(c.name + ": an empty batch that is neither a gap nor the end");
    if (c.spec.type_options.get<ReplicateOptions>().ordered) {
      if (batch.sequence != expected_sequence) {
        return fail(c.name + ": segment " + std::to_string(batch.sequence) + " handed out when " +
                    std::to_string(expected_sequence) + " was due");
      }
      ++expected_sequence;
    } else if (batch.sequence != 0) {
      return fail(c.name + ": unordered flow handed out sequence number " +
                  std::to_string(batch.sequence));
    }
    for (std::size_t t = 0; t < batch.count; ++t) {
      const std::byte* tuple = batch.tuple(t);
      std::uint64_t key;
      std::memcpy(&key, tuple, 8);
      const std::size_t source = key >> 32;
      const std::uint64_t seq = key & 0xffffffff;
      if (source >= c.spec.sources.size() || source != batch.source) {
        return fail(c.name + ": key " + std::to_string(key) +
                    " from an unknown source (batch from " + std::to_string(batch.source) + ")");
      }
      if (seq != last[source] + 1) {
        return fail(c.name + ": source " + std::to_string(source) + " seq " + std::to_string(seq) +
                    " after " + std::to_string(last[source]) + " (lost, duplicated or reordered)");
      }
      last[source] = seq;
      for (std::size_t i = 8; i < c.width; ++i) {
        if (tuple[i] != payload_byte(key, i)) return fail(c.name + ": corrupted payload");
      }
      ++result.counts[source];
      result.checksum += mix(key);
      result.digest = mix(result.digest ^ key ^ (batch.sequence << 40));
    }
  }
  if (!target.end()) fail(c.name + ": the end batch came before end()");
  if (target.counters().gaps != 0 || target.counters().late != 0)
    fail(c.name + ": gaps or late segments counted");
  result.forwarded = target.counters().forwarded;
}

int property(cluster::Node& node, const std::string& mode, std::uint64_t seed, int count) {
  std::uint64_t total_tuples = 0, total_forwarded = 0;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count && failures == 0; ++i) {
    const Config c = make_config(mode, seed, i, node.size());
    if (node.rank() == 0) create_flow(node, c.spec);
    std::vector<TargetResult> results(c.spec.targets.size());
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < c.spec.targets.size(); ++t) {
      if (c.spec.targets[t].rank == node.rank())
        threads.emplace_back([&, t] {
          try {
            run_target(node, c, t, results[t]);
          } catch (const std::exception& e) {
            fail(c.name + ": target: " + e.what());
          }
        });
    }
    for (std::size_t s = 0; s < c.spec.sources.size(); ++s) {
      if (c.spec.sources[s].rank == node.rank())
        threads.emplace_back([&, s] {
          try {
            run_source(node, c, s);
          } catch (const std::exception& e) {
            fail(c.name + ": source: " + e.what());
          }
        });
    }
    for (auto& thread : threads) thread.join();

    // Every rank publishes what each of its targets received; rank 0 checks every target.
    std::ostringstream mine;
    for (std::size_t t = 0; t < c.spec.targets.size(); ++t) {
      if (c.spec.targets[t].rank != node.rank()) continue;
      const TargetResult& r = results[t];
      mine << t << ' ' << r.checksum << ' ' << r.digest << ' ' << r.forwarded;
      for (std::size_t s = 0; s < c.spec.sources.size(); ++s)
        mine << ' ' << (r.counts.empty() ? 0 : r.counts[s]);
      mine << '\n';
    }
    node.registry().publish(c.name + "/result/" + std::to_string(node.rank()), mine.str());
    node.barrier("prop/" + c.name);
    if (node.rank() != 0) continue;
    std::uint64_t want_checksum = 0;
    for (std::size_t s = 0; s < c.spec.sources.size(); ++s) {
      for (std::uint64_t seq = 1; seq <= c.tuples[s]; ++seq) want_checksum += mix(key_of(s, seq));
      total_tuples += c.tuples[s];
    }
    std::map<std::size_t, std::uint64_t> digests;
    for (int r = 0; r < node.size(); ++r) {
      std::istringstream in(node.registry().lookup(c.name + "/result/" + std::to_string(r)));
      std::size_t t;
      std::uint64_t checksum, digest, forwarded;
      while (in >> t >> checksum >> digest >> forwarded) {
        total_forwarded += forwarded;
        digests[t] = digest;
        for (std::size_t s = 0; s < c.spec.sources.size(); ++s) {
          std::uint64_t got = 0;
          in >> got;
          if (got != c.tuples[s]) {
            fail(c.name + ": target " + std::to_string(t) + " received " + std::to_string(got) +
                 " of the " + std::to_string(c.tuples[s]) + " tuples of source " +
                 std::to_string(s) + " {" + c.spec.to_json() + "}");
          }
        }
        if (checksum != want_checksum)
          fail(c.name + ": target " + std::to_string(t) + ": checksum mismatch {" +
               c.spec.to_json() + "}");
      }
    }
    if (digests.size() != c.spec.targets.size()) fail(c.name + ": not every target reported");
    if (c.spec.type_options.get<ReplicateOptions>().ordered) {
      for (const auto& [t, digest] : digests) {
        if (digest != digests.begin()->second) {
          fail(c.name + ": target " + std::to_string(t) +
               " consumed a different sequence than target 0 {" + c.spec.to_json() + "}");
        }
      }
    }
  }
  if (node.rank() == 0) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "property %s: %d configurations, %llu tuples, %llu segments forwarded by relays, %s in "
        "%.1f s\n",
        mode.c_str(), count, static_cast<unsigned long long>(total_tuples),
        static_cast<unsigned long long>(total_forwarded),
        failures == 0
            ? (parse_mode(mode).ordered ? "all exactly once, identical order" : "all exactly once")
            : "FAILURES",
        seconds);
  }
  node.finish();
  return failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// Gaps in ordered flows

struct Pair {
  std::uint64_t key, value;
};

FlowSpec pair_spec(const std::string& name, std::vector<SourceRef> sources,
                   std::vector<TargetRef> targets) {
  FlowSpec spec;
  spec.name = name;
  spec.type = FlowType::replicate;
  spec.sources = std::move(sources);
  spec.targets = std::move(targets);
  spec.schema = Schema({{"key", Type::uint64}, {"value", Type::uint64}});
  return spec;
}

// What an ordered target saw, in order: "s<seq>" per segment, "g<seq>+<n>" per gap.
struct OrderedLog {
  std::uint64_t digest = 0;
  std::uint64_t gaps = 0, missing = 0, late = 0, failures_seen = 0;
  std::uint64_t gap_at = 0;
  double longest_pause_ms = 0;  // between two segments handed out
  std::vector<std::uint64_t> per_source;
  std::string failure_text;
};

// Consumes an ordered flow to its end, accepting peer failures and gaps, checking the order.
OrderedLog consume_ordered(ReplicateTarget& target, std::size_t sources, const std::string& who) {
  OrderedLog log;
  log.per_source.assign(sources, 0);
  std::uint64_t expected = 1;
  ReplicateBatch batch;
  auto last = std::chrono::steady_clock::time_point{};
  for (;;) {
    Status s = target.consume(batch, std::chrono::seconds(20));
    if (!s && s.code() == Errc::peer_failed) {
      ++log.failures_seen;
      log.failure_text = s.message();
      say(who + " saw: " + s.message());
      continue;
    }
    if (!s) {
      fail(who + ": consume: " + s.message());
      break;
    }
    if (batch.end) break;
    if (batch.gap()) {
      if (batch.sequence != expected)
        fail(who + ": gap at " + std::to_string(batch.sequence) + " when " +
             std::to_string(expected) + " was due");
      say(who + " gap event: sequence " + std::to_string(batch.sequence) + " count " +
          std::to_string(batch.gap_count));
      ++log.gaps;
      log.missing += batch.gap_count;
      log.gap_at = batch.sequence;
      expected = batch.sequence + batch.gap_count;
      log.digest = mix(log.digest ^ (batch.sequence << 1) ^ 1);
      continue;
    }
    if (batch.sequence != expected) {
      fail(who + ": segment " + std::to_string(batch.sequence) + " handed out when " +
           std::to_string(expected) + " was due");
      break;
    }
    ++expected;
    const auto now = std::chrono::steady_clock::now();
    if (last != std::chrono::steady_clock::time_point{}) {
      log.longest_pause_ms = std::max(log.longest_pause_ms, std::chrono::duration<double, std::milli>(now - last).count());
    }
    last = now;
    for (const Pair& p : batch.as<Pair>()) {
      const std::size_t source = p.key >> 32;
      if (source >= sources || (p.key & 0xffffffff) != log.per_source[source] + 1) {
        // a gap may swallow tuples of a source: only order matters
        if (source >= sources || (p.key & 0xffffffff) <= log.per_source[source])
          fail(who + ": tuple out of order");
      }
      if (source < sources) log.per_source[source] = p.key & 0xffffffff;
      log.digest = mix(log.digest ^ p.key ^ (batch.sequence << 40));
    }
  }
  log.late = target.counters().late;
  return log;
}

// The three-target ordered flows below: sources on ranks 1 and 2, targets 0 and 1 on rank 0,
// target 2 on rank 2; 8 small segments of `per_segment` pairs each.
FlowSpec three_target_spec(const std::string& name, const ReplicateOptions& options, std::uint64_t per_segment) {
  FlowSpec spec = pair_spec(name, {{1, 0}, {2, 0}}, {{0, 0}, {0, 1}, {2, 1}});
  spec.type_options = options;
  spec.options.segments = 8;
  spec.options.segment_bytes = static_cast<std::uint32_t>(16 + 8 + per_segment * sizeof(Pair));
  spec.options.stall_timeout = std::chrono::seconds(20);
  return spec;
}

// The targets of the three-target ordered flows below (targets 0 and 1 on rank 0, target 2 on
// rank 2): starts this rank's, each consuming the flow into logs[t] on a thread of `threads`.
void start_three_targets(cluster::Node& node, const FlowSpec& spec, std::vector<std::thread>& threads,
                         std::vector<OrderedLog>& logs) {
  auto target_thread = [&](std::size_t t) {
    threads.emplace_back([&node, &spec, &logs, t] {
      try {
        ReplicateTarget target(node, spec.name, spec.targets[t].id);
        logs[t] = consume_ordered(target, 2, "target " + std::to_string(t));
      } catch (const std::exception& e) {
        fail(std::string("target: ") + e.what());
      }
    });
  };
  if (node.rank() == 0) {
    target_thread(0);
    target_thread(1);
  }
  if (node.rank() == 2) target_thread(2);
}

// Source `index` of the ordered scenarios: pushes Pair{key_of(index, seq), seq} for seq = 1..count,
// sleeping `pause` after every `per_segment` tuples, then closes; a failure goes to fail() (a push
// failure ends the pushing without a close).
void push_numbered(ReplicateSource& source, std::size_t index, std::uint64_t count, std::uint64_t per_segment,
                   std::chrono::microseconds pause) {
  for (std::uint64_t seq = 1; seq <= count; ++seq) {
    if (Status s = source.push(Pair{key_of(index, seq), seq}); !s) return fail("push: " + s.message());
    if (seq % per_segment == 0) std::this_thread::sleep_for(pause);
  }
  if (Status s = source.close(); !s) fail("close: " + s.message());
}

// Ranks: 0 hosts targets 0 and 1 and the sequencer, 1 the victim source, 2 a second source and
// target 2. kill: the victim takes a sequence number and dies before writing; delay: it sleeps
// past the gap timeout before writing.
int gap_scenario(cluster::Node& node, bool kill, Replication replication) {
  constexpr int kVictimSegment = 40;        // the victim's segment that goes wrong
  constexpr std::uint64_t kPerSegment = 4;  // tuples per segment
  const std::string name =
      std::string(kill ? "gap-kill-" : "gap-delay-") + std::string(replication_name(replication));
  const FlowSpec spec = three_target_spec(
      name, {.replication = replication, .fanout = 1, .ordered = true, .gap_timeout = std::chrono::milliseconds(300)},
      kPerSegment);
  if (node.rank() == 0) create_flow(node, spec);
  std::vector<std::thread> threads;
  std::vector<OrderedLog> logs(3);
  start_three_targets(node, spec, threads, logs);
  if (node.rank() == 1 || node.rank() == 2) {
    threads.emplace_back([&] {
      try {
        fabric::Worker worker(node.fabric(), "source");
        const bool victim = node.rank() == 1;
        const std::size_t index = victim ? 0 : 1;
        int segments = 0;
        ReplicateSourceOptions options;
        if (victim) {
          options.on_sequence = [&](std::uint64_t sequence) {
            if (++segments != kVictimSegment) return;
            say(std::string(kill ? "victim dies holding sequence " : "victim delays sequence ") +
                std::to_string(sequence));
            if (kill) die_quietly(&worker);
            std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          };
        }
        ReplicateSource source(node, worker, name, 0, options);
        const std::uint64_t segments_to_push = victim ? 2 * kVictimSegment : 400;
        push_numbered(source, index, segments_to_push * kPerSegment, kPerSegment,
                      std::chrono::microseconds(victim ? 1000 : 2500));
      } catch (const std::exception& e) {
        fail(std::string("source: ") + e.what());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  if (node.rank() == 2) {
    const OrderedLog& l = logs[2];
    node.registry().publish(name + "/log", std::to_string(l.digest) + " " + std::to_string(l.gaps) +
                                               " " + std::to_string(l.missing) + " " +
                                               std::to_string(l.late));
  }
  if (node.rank() == 0) {
    std::istringstream in(node.wait_for(name + "/log", std::chrono::seconds(10)));
    in >> logs[2].digest >> logs[2].gaps >> logs[2].missing >> logs[2].late;
    int same = 0;
    for (std::size_t t = 0; t < 3; ++t) {
      const OrderedLog& l = logs[t];
      if (l.gaps != 1 || l.missing != 1)
        fail("target " + std::to_string(t) + " reported " + std::to_string(l.gaps) + " gaps, " +
             std::to_string(l.missing) + " numbers missing (want 1, 1)");
      if (!kill && l.late != 1)
        fail("target " + std::to_string(t) + " dropped " + std::to_string(l.late) +
             " late segments (want 1)");
      same += l.digest == logs[0].digest ? 1 : 0;
    }
    if (same != 3) fail("the targets consumed different sequences");
    if (kill && logs[0].failures_seen == 0) fail("target 0 did not report the dead source");
    std::printf("%s: %d targets with identical sequences, 1 gap each%s\n", name.c_str(), same,
                kill ? "" : ", late segment dropped");
  }
  std::fflush(stdout);
  if (kill) std::_Exit(failures == 0 ? 0 : 1);  // rank 1 is gone: no final barrier
  node.finish();
  return failures == 0 ? 0 : 1;
}

// Faults injected by the flow_faults setting (the test sets DFI_FLOW_FAULTS): sources on ranks 1
// and 2, targets 0 and 1 on rank 0, target 2 on rank 2. The test's rules drop 3 segments of rank
// 1's ring at rank 2 and delay one of rank 1's segments by 300 ms at rank 0. Rank 2 must report
// exactly 3 gaps of one number; rank 0's targets no gap (the delay is below the gap timeout) but a
// pause of at least the delay.
int injected_faults(cluster::Node& node, const std::string& sequencer) {
  constexpr std::uint64_t kPerSegment = 4, kSegments = 120;
  const bool stamp = sequencer == "stamp";
  const FlowSpec spec = three_target_spec(
      stamp ? "rep-injected-stamp" : "rep-injected",
      {.ordered = true,
       .gap_timeout = std::chrono::milliseconds(800),
       .sequencer = stamp ? Sequencer::stamp : Sequencer::counter},
      kPerSegment);
  if (node.rank() == 0) create_flow(node, spec);
  std::vector<std::thread> threads;
  std::vector<OrderedLog> logs(3);
  start_three_targets(node, spec, threads, logs);
  if (node.rank() == 1 || node.rank() == 2) {
    threads.emplace_back([&] {
      try {
        fabric::Worker worker(node.fabric(), "source");
        const std::size_t index = node.rank() == 1 ? 0 : 1;
        ReplicateSource source(node, worker, spec.name, 0);
        push_numbered(source, index, kSegments * kPerSegment, kPerSegment, std::chrono::milliseconds(1));
      } catch (const std::exception& e) {
        fail(std::string("source: ") + e.what());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  if (node.rank() == 2) {
    const OrderedLog& l = logs[2];
    node.registry().publish(spec.name + "/log", std::to_string(l.gaps) + " " + std::to_string(l.missing));
  }
  if (node.rank() == 0) {
    std::istringstream in(node.wait_for(spec.name + "/log", std::chrono::seconds(20)));
    in >> logs[2].gaps >> logs[2].missing;
    if (logs[2].gaps != 3 || logs[2].missing != 3)
      fail("rank 2 reported " + std::to_string(logs[2].gaps) + " gaps, " + std::to_string(logs[2].missing) +
           " numbers missing (want 3, 3: the dropped segments)");
    for (std::size_t t = 0; t < 2; ++t) {
      if (logs[t].gaps != 0) fail("target " + std::to_string(t) + " on rank 0 reported a gap: only rank 2 drops");
      // Stamped: target 0 numbers the other source's segments while its copy of one is held, so
      // it never pauses; target 1 (also on rank 0) pauses because the same rule holds its copy.
      if (stamp && t == 0) continue;
      if (logs[t].longest_pause_ms < 290)
        fail("target " + std::to_string(t) + "'s longest pause was " + std::to_string(logs[t].longest_pause_ms) +
             " ms: the 300 ms delay did not hold it back");
    }
    if (logs[0].digest != logs[1].digest) fail("rank 0's targets consumed different sequences");
    std::printf("injected%s: rank 2 saw 3 gaps, rank 0's targets none and a pause of %.0f ms\n",
                stamp ? " (stamp)" : "",
                stamp ? logs[1].longest_pause_ms : std::min(logs[0].longest_pause_ms, logs[1].longest_pause_ms));
  }
  std::fflush(stdout);
  node.finish();
  return failures == 0 ? 0 : 1;
}

// A stamped flow whose source dies (rank 1, after 40 segments): it never held a number, so no
// target reports a gap; every target names the dead source, goes on with the other source's
// segments and consumes the same sequence as the others (target 0 forwarded all it numbered).
int stamp_kill_source(cluster::Node& node) {
  constexpr std::uint64_t kPerSegment = 4;
  const FlowSpec spec = three_target_spec(
      "rep-stamp-kill-source",
      {.ordered = true, .gap_timeout = std::chrono::milliseconds(300), .sequencer = Sequencer::stamp}, kPerSegment);
  if (node.rank() == 0) create_flow(node, spec);
  std::vector<std::thread> threads;
  std::vector<OrderedLog> logs(3);
  start_three_targets(node, spec, threads, logs);
  if (node.rank() == 1 || node.rank() == 2) {
    threads.emplace_back([&] {
      try {
        fabric::Worker worker(node.fabric(), "source");
        const bool victim = node.rank() == 1;
        ReplicateSource source(node, worker, spec.name, 0);
        if (!victim) return push_numbered(source, 1, 200 * kPerSegment, kPerSegment, std::chrono::microseconds(2500));
        for (std::uint64_t seq = 1; seq <= 40 * kPerSegment; ++seq) {
          if (Status st = source.push(Pair{key_of(0, seq), seq}); !st) return fail("push: " + st.message());
          if (seq % kPerSegment == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        (void)source.flush();
        die_quietly(&worker);
      } catch (const std::exception& e) {
        fail(std::string("source: ") + e.what());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  if (node.rank() == 2) {
    const OrderedLog& l = logs[2];
    node.registry().publish(spec.name + "/log", std::to_string(l.digest) + " " + std::to_string(l.gaps) + " " +
                                                    std::to_string(l.failures_seen) + " " + std::to_string(l.per_source[0]));
  }
  if (node.rank() == 0) {
    std::istringstream in(node.wait_for(spec.name + "/log", std::chrono::seconds(20)));
    logs[2].per_source.assign(2, 0);
    in >> logs[2].digest >> logs[2].gaps >> logs[2].failures_seen >> logs[2].per_source[0];
    for (std::size_t t = 0; t < 3; ++t) {
      const OrderedLog& l = logs[t];
      if (l.gaps != 0) fail("target " + std::to_string(t) + " reported " + std::to_string(l.gaps) + " gap(s)");
      if (l.failures_seen == 0) fail("target " + std::to_string(t) + " did not report the dead source");
      if (l.digest != logs[0].digest) fail("target " + std::to_string(t) + " consumed another sequence than target 0");
      if (l.per_source[0] != logs[0].per_source[0]) fail("target " + std::to_string(t) + " got another count of the dead source's tuples");
    }
    if (logs[0].failure_text.find("source (rank 1, thread 0) failed before closing") == std::string::npos)
      fail("target 0 named the failure as: " + logs[0].failure_text);
    if (logs[0].per_source[0] == 0) fail("nothing of the dead source arrived before it died");
    std::printf("stamp-kill-source: 3 targets with identical sequences, no gap, the dead source named at each "
                "(%llu of its tuples in)\n",
                static_cast<unsigned long long>(logs[0].per_source[0]));
  }
  std::fflush(stdout);
  if (node.rank() == 1) std::_Exit(0);  // the victim's process (its source thread died quietly already)
  node.finish();
  return failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// Failures in unordered flows

// A slow target (rank 0) behind 2-segment rings holds its sources back for much longer than the
// gap timeout; the fast targets must still see every segment in time: no false gaps anywhere.
int slow_target(cluster::Node& node) {
  constexpr std::uint64_t kPerSegment = 4, kSegments = 40;
  FlowSpec spec = pair_spec("rep-slow-target", {{1, 0}, {2, 0}}, {{0, 0}, {1, 1}, {2, 1}});
  spec.type_options = ReplicateOptions{.ordered = true, .gap_timeout = std::chrono::milliseconds(400)};
  spec.options.segments = 2;
  spec.options.segment_bytes = static_cast<std::uint32_t>(16 + 8 + kPerSegment * sizeof(Pair));
  spec.options.stall_timeout = std::chrono::seconds(20);
  if (node.rank() == 0) create_flow(node, spec);
  std::vector<std::thread> threads;
  OrderedLog log;
  const int id = node.rank() == 0 ? 0 : 1;
  threads.emplace_back([&] {
    try {
      ReplicateTarget target(node, spec.name, id);
      if (node.rank() != 0) {
        log = consume_ordered(target, 2, "target on rank " + std::to_string(node.rank()));
        return;
      }
      std::uint64_t expected = 1, batches = 0;
      ReplicateBatch batch;
      for (;;) {
        Status s = target.consume(batch, std::chrono::seconds(20));
        if (!s) return fail("slow target: " + s.message());
        if (batch.end) break;
        if (batch.gap() || batch.sequence != expected++)
          return fail("slow target: gap or disorder");
        for (const Pair& p : batch.as<Pair>())
          log.digest = mix(log.digest ^ p.key ^ (batch.sequence << 40));
        if (++batches % 25 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      }
    } catch (const std::exception& e) {
      fail(std::string("target: ") + e.what());
    }
  });
  if (node.rank() != 0) {
    threads.emplace_back([&] {
      try {
        fabric::Worker worker(node.fabric(), "source");
        ReplicateSource source(node, worker, spec.name, 0);
        const std::size_t index = node.rank() == 1 ? 0 : 1;
        for (std::uint64_t seq = 1; seq <= kSegments * kPerSegment; ++seq) {
          if (Status s = source.push(Pair{key_of(index, seq), seq}); !s)
            return fail("push: " + s.message());
        }
        if (Status s = source.close(); !s) fail("close: " + s.message());
      } catch (const std::exception& e) {
        fail(std::string("source: ") + e.what());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  node.registry().publish("slow/" + std::to_string(node.rank()),
                          std::to_string(log.digest) + " " + std::to_string(log.gaps));
  node.barrier("slow/done");
  if (node.rank() == 0) {
    std::uint64_t gaps = 0;
    bool same = true;
    for (int r = 0; r < node.size(); ++r) {
      std::istringstream in(node.registry().lookup("slow/" + std::to_string(r)));
      std::uint64_t digest = 0, g = 0;
      in >> digest >> g;
      gaps += g;
      same = same && digest == log.digest;
    }
    if (gaps != 0) fail("a slow target made others report " + std::to_string(gaps) + " gaps");
    if (!same) fail("the targets consumed different sequences");
    std::printf("slow target: %s\n",
                failures == 0 ? "no false gaps, identical sequences" : "FAILURES");
  }
  node.finish();
  return failures == 0 ? 0 : 1;
}

int kill_source(cluster::Node& node) {
  FlowSpec spec = pair_spec("rep-victim-source", {{1, 0}, {2, 0}}, {{0, 0}});
  if (node.rank() == 0) create_flow(node, spec);
  if (node.rank() != 0) {
    fabric::Worker worker(node.fabric(), "pusher");
    ReplicateSource source(node, worker, spec.name, 0);
    for (std::uint64_t i = 0;; ++i) {
      if (node.rank() == 1 && i == 5000) {
        (void)source.flush();
        die_quietly(&worker);
      }
      if (!source.push(Pair{i, i})) break;
      if (node.rank() == 2 && i == 5000) {
        (void)source.close();
        return 0;
      }
    }
    return 0;
  }
  ReplicateTarget target(node, spec.name, 0);
  ReplicateBatch batch;
  Status s;
  while ((s = target.consume(batch, std::chrono::seconds(20))) && !batch.end) {
  }
  if (s.is_ok()) return fail("consume ended normally although a source died"), 1;
  say("target saw: " + s.message());
  if (s.code() != Errc::peer_failed || s.message().find("rank 1") == std::string::npos)
    fail("wrong error");
  std::_Exit(failures == 0 ? 0 : 1);
}

// Chain: source (rank 0) -> target 0 (rank 1, dies) -> target 1 (rank 2) -> target 2 (rank 0).
int kill_relay(cluster::Node& node) {
  FlowSpec spec = pair_spec("rep-victim-relay", {{0, 0}}, {{1, 0}, {2, 0}, {0, 1}});
  spec.type_options = ReplicateOptions{.replication = Replication::relay, .fanout = 1};
  spec.options.segments = 4;
  spec.options.segment_bytes = 16 + 8 + 16 * 8;
  if (node.rank() == 0) create_flow(node, spec);
  // The first error must name rank 1; after it the flow goes on (the relay's subtree ends).
  auto consume_until_error = [&](ReplicateTarget& target, const std::string& who) {
    ReplicateBatch batch;
    Status first;
    for (int errors = 0; errors < 10;) {
      Status s = target.consume(batch, std::chrono::seconds(20));
      if (s && batch.end) break;
      if (s) continue;
      if (first.is_ok()) first = s;
      if (s.code() != Errc::peer_failed) break;
      ++errors;
    }
    if (first.is_ok()) return fail(who + ": the flow ended normally although its relay died");
    say(who + " saw: " + first.message());
    if (first.code() != Errc::peer_failed || first.message().find("rank 1") == std::string::npos)
      fail(who + ": wrong error");
    if (!target.end()) fail(who + ": the flow did not end after the failure");
  };
  if (node.rank() == 1) {
    fabric::Worker worker(node.fabric(), "relay");
    ReplicateTargetOptions options;
    options.worker = &worker;
    ReplicateTarget target(node, spec.name, 0, options);
    ReplicateBatch batch;
    for (int i = 0; i < 20; ++i) (void)target.consume(batch);
    die_quietly(&worker);
  }
  if (node.rank() == 2) {
    ReplicateTarget target(node, spec.name, 0);
    consume_until_error(target, "target 1");
    std::fflush(stdout);
    node.registry().publish("relay-victim/reported", "yes");
    std::_Exit(failures == 0 ? 0 : 1);
  }
  std::thread below([&] {
    ReplicateTarget target(node, spec.name, 1);
    consume_until_error(target, "target 2");
  });
  fabric::Worker worker(node.fabric(), "pusher");
  {
    ReplicateSource source(node, worker, spec.name, 0);
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    Status s;
    for (std::uint64_t i = 0; s.is_ok() && std::chrono::steady_clock::now() < give_up; ++i)
      s = source.push(Pair{i, i});
    say("source saw: " + s.message());
    if (s.code() != Errc::peer_failed && s.code() != Errc::flow_failed)
      fail("source: unexpected error " + s.message());
  }
  below.join();
  (void)node.wait_for("relay-victim/reported", std::chrono::seconds(10));
  std::fflush(stdout);
  std::_Exit(failures == 0 ? 0 : 1);
}

// ---------------------------------------------------------------------------------------------

template <class F>
void expect_error(const std::string& what, Errc code, const std::string& part, F&& f) {
  try {
    Status s = f();
    if (s.is_ok()) return fail(what + ": no error");
    if (s.code() != code || s.message().find(part) == std::string::npos) {
      return fail(what + ": got " + std::string(errc_name(s.code())) + ": " + s.message());
    }
    say("error ok: " + what + " -> " + s.message());
  } catch (const Error& e) {
    if (e.code() != code || std::string(e.what()).find(part) == std::string::npos) {
      return fail(what + ": got " + std::string(errc_name(e.code())) + ": " + e.what());
    }
    say("error ok: " + what + " -> " + e.what());
  }
}

int errors(cluster::Node& node) {
  if (node.rank() == 1) {  // hosts the target
    ReplicateTarget target(node, "rep-good", 0);
    ReplicateBatch batch;
    while (target.consume(batch) && !batch.end) {
    }
    node.finish();
    return failures == 0 ? 0 : 1;
  }
  FlowSpec good = pair_spec("rep-good", {{0, 0}}, {{1, 0}});
  create_flow(node, good);
  FlowSpec shuffle = good;
  shuffle.name = "a-shuffle";
  shuffle.type = FlowType::shuffle;
  shuffle.key_column = "key";
  create_flow(node, shuffle);

  expect_error("duplicate flow", Errc::already_exists, "'rep-good' already exists", [&] {
    create_flow(node, good);
    return Status();
  });
  expect_error("unknown flow", Errc::not_found, "'nope' does not exist", [&] {
    ReplicateTarget t(node, "nope", 0);
    return Status();
  });
  expect_error("wrong flow type", Errc::invalid_argument, "is a shuffle flow, not a replicate flow",
               [&] {
                 ReplicateTarget t(node, "a-shuffle", 0);
                 return Status();
               });
  expect_error("schema mismatch", Errc::invalid_argument, "schema", [&] {
    ReplicateTargetOptions options;
    options.expected_schema = Schema({{"key", Type::uint64}});
    ReplicateTarget t(node, "rep-good", 0, options);
    return Status();
  });
  expect_error("target not in the flow", Errc::invalid_argument, "has no target (rank 0, id 3)",
               [&] {
                 ReplicateTarget t(node, "rep-good", 3);
                 return Status();
               });
  expect_error("source not in the flow", Errc::invalid_argument, "has no source (rank 0, thread 9)",
               [&] {
                 fabric::Worker w(node.fabric(), "w");
                 ReplicateSource s(node, w, "rep-good", 9);
                 return Status();
               });
  expect_error("tuple larger than a segment", Errc::invalid_argument,
               "after the 8 B segment header", [&] {
                 FlowSpec big = good;
                 big.name = "rep-big";
                 big.options.segment_bytes =
                     16 + 16;  // 16 B payload: the header leaves 8 B for a 16 B tuple
                 create_flow(node, big);
                 return Status();
               });
  expect_error("fan-out 0", Errc::invalid_argument, "fan-out must be at least 1", [&] {
    FlowSpec bad = good;
    bad.name = "rep-fanout";
    bad.type_options.get<ReplicateOptions>().replication = Replication::relay;
    bad.type_options.get<ReplicateOptions>().fanout = 0;
    create_flow(node, bad);
    return Status();
  });
  expect_error("stamp without ordered", Errc::invalid_argument, "stamp sequencer numbers segments: set ordered", [&] {
    FlowSpec bad = good;
    bad.name = "rep-stamp-unordered";
    bad.type_options.get<ReplicateOptions>().sequencer = Sequencer::stamp;
    create_flow(node, bad);
    return Status();
  });
  expect_error("stamp with relay", Errc::invalid_argument, "relay replication does not apply", [&] {
    FlowSpec bad = good;
    bad.name = "rep-stamp-relay";
    bad.type_options.get<ReplicateOptions>().ordered = true;
    bad.type_options.get<ReplicateOptions>().sequencer = Sequencer::stamp;
    bad.type_options.get<ReplicateOptions>().replication = Replication::relay;
    create_flow(node, bad);
    return Status();
  });
  expect_error("ordered without gap timeout", Errc::invalid_argument, "positive gap timeout", [&] {
    FlowSpec bad = good;
    bad.name = "rep-gap";
    bad.type_options.get<ReplicateOptions>().ordered = true;
    bad.type_options.get<ReplicateOptions>().gap_timeout = std::chrono::milliseconds(0);
    create_flow(node, bad);
    return Status();
  });
  fabric::Worker worker(node.fabric(), "errors");
  ReplicateSource source(node, worker, "rep-good", 0);
  std::uint64_t three[3] = {1, 2, 3};
  expect_error("wrong tuple width", Errc::invalid_argument,
               "tuple of 24 B does not match the schema's 16 B",
               [&] { return source.push(three, sizeof three); });
  if (Status s = source.push(Pair{1, 1}); !s) fail("good push: " + s.message());
  if (Status s = source.close(); !s) fail("close: " + s.message());
  expect_error("push after close", Errc::flow_failed, "after close", [&] {
    return source.push(Pair{2, 2});
  });
  node.finish();
  return failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// Measurements

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Rank 0 replicates MIB MiB of 64 B tuples to one target on every other rank.
int bench_bw(cluster::Node& node, const std::string& mode, std::uint64_t mib) {
  const ModeSpec m = parse_mode(mode);
  FlowSpec spec;
  spec.name = "bench-bw";
  spec.type = FlowType::replicate;
  spec.sources = {{0, 0}};
  for (int r = 1; r < node.size(); ++r) spec.targets.push_back({r, 0});
  spec.schema = Schema({{"key", Type::uint64}, {"payload", Type::chars, 56}});
  // relay: a chain, the source writes once
  spec.type_options = ReplicateOptions{.replication = m.replication, .fanout = 1, .ordered = m.ordered};
  if (node.rank() == 0) create_flow(node, spec);
  constexpr std::size_t kWidth = 64;
  const std::uint64_t tuples = mib * 1024 * 1024 / kWidth;
  if (node.rank() == 0) {
    fabric::Worker worker(node.fabric(), "bench source");
    ReplicateSource source(node, worker, spec.name, 0);
    std::vector<std::byte> block(1024 * kWidth);
    for (std::size_t i = 0; i < 1024; ++i) {
      const std::uint64_t key = i;
      std::memcpy(block.data() + i * kWidth, &key, 8);
    }
    node.barrier("bench/start");
    const auto start = std::chrono::steady_clock::now();
    for (std::uint64_t sent = 0; sent < tuples; sent += 1024) {
      if (Status s = source.push_bulk(block.data(), 1024); !s)
        return fail("push: " + s.message()), 1;
    }
    if (Status s = source.close(); !s) return fail("close: " + s.message()), 1;
    const double push_seconds = seconds_since(start);
    node.barrier("bench/done");
    std::vector<double> rates;
    for (int r = 1; r < node.size(); ++r)
      rates.push_back(std::stod(node.registry().lookup("bench/rate/" + std::to_string(r))));
    std::sort(rates.begin(), rates.end());
    std::printf(
        "bench-bw %s: %llu MiB of 64 B tuples to %d targets; source done in %.3f s; per target "
        "GB/s:",
        mode.c_str(), static_cast<unsigned long long>(mib), node.size() - 1, push_seconds);
    for (double r : rates) std::printf(" %.2f", r);
    std::printf("; slowest %.2f GB/s\n", rates.front());
  } else {
    ReplicateTarget target(node, spec.name, 0);
    node.barrier("bench/start");
    const auto start = std::chrono::steady_clock::now();
    ReplicateBatch batch;
    std::uint64_t got = 0, sum = 0;
    Status s;
    while ((s = target.consume(batch)) && !batch.end) {
      for (std::size_t i = 0; i < batch.count; ++i) {
        std::uint64_t key;
        std::memcpy(&key, batch.tuple(i), 8);
        sum += key;
      }
      got += batch.count;
    }
    const double secs = seconds_since(start);
    if (!s) fail("consume: " + s.message());
    if (got != tuples) fail("received " + std::to_string(got) + " of " + std::to_string(tuples));
    node.registry().publish("bench/rate/" + std::to_string(node.rank()),
                            std::to_string(static_cast<double>(got * kWidth) / secs / 1e9));
    if (sum == 42) std::printf("?\n");
    node.barrier("bench/done");
  }
  node.finish();
  return failures == 0 ? 0 : 1;
}

// Rank 0 pushes one 64 B tuple (latency mode); every other rank consumes it and pushes a 64 B ack
// back on a shuffle flow; a round ends when rank 0 has every ack.
int bench_lat(cluster::Node& node, const std::string& mode, int rounds) {
  const ModeSpec m = parse_mode(mode);
  FlowSpec spec;
  spec.name = "bench-lat";
  spec.type = FlowType::replicate;
  spec.sources = {{0, 0}};
  for (int r = 1; r < node.size(); ++r) spec.targets.push_back({r, 0});
  spec.schema = Schema({{"key", Type::uint64}, {"payload", Type::chars, 56}});
  spec.options.mode = Mode::latency;
  spec.type_options = ReplicateOptions{.replication = m.replication, .fanout = 1, .ordered = m.ordered};
  FlowSpec acks;
  acks.name = "bench-acks";
  for (int r = 1; r < node.size(); ++r) acks.sources.push_back({r, 0});
  acks.targets = {{0, 0}};
  acks.schema = spec.schema;
  acks.key_column = "key";
  acks.options.mode = Mode::latency;
  if (node.rank() == 0) {
    create_flow(node, spec);
    create_flow(node, acks);
  }
  struct Tuple {
    std::uint64_t key;
    char payload[56];
  } tuple{};
  fabric::Worker worker(node.fabric(), "bench");
  const int warmup = rounds / 10;
  if (node.rank() == 0) {
    ShuffleTarget ack_target(node, acks.name, 0);
    ReplicateSource source(node, worker, spec.name, 0);
    std::vector<double> micros;
    TupleBatch batch;
    for (int i = 0; i < rounds + warmup; ++i) {
      tuple.key = static_cast<std::uint64_t>(i);
      const auto start = std::chrono::steady_clock::now();
      if (Status s = source.push(tuple); !s) return fail("push: " + s.message()), 1;
      for (int got = 0; got < node.size() - 1;) {
        if (Status s = ack_target.consume(batch); !s || batch.empty())
          return fail("ack: " + s.message()), 1;
        got += static_cast<int>(batch.count);
      }
      if (i >= warmup) micros.push_back(seconds_since(start) * 1e6);
    }
    (void)source.close();
    while (ack_target.consume(batch) && !batch.empty()) {
    }
    std::sort(micros.begin(), micros.end());
    std::printf(
        "bench-lat %s: 64 B to %d targets and back, %d rounds: median %.1f us, p90 %.1f us, p99 "
        "%.1f us\n",
        mode.c_str(), node.size() - 1, rounds, micros[micros.size() / 2],
        micros[micros.size() * 9 / 10], micros[micros.size() * 99 / 100]);
  } else {
    ReplicateTargetOptions options;
    options.worker = &worker;
    ReplicateTarget target(node, spec.name, 0, options);
    ShuffleSource ack(node, worker, acks.name, 0);
    ReplicateBatch batch;
    while (target.consume(batch) && !batch.end) {
      for (std::size_t i = 0; i < batch.count; ++i) {
        std::memcpy(&tuple, batch.tuple(i), sizeof tuple);
        if (Status s = ack.push(tuple); !s) return fail("ack push: " + s.message()), 1;
      }
    }
    (void)ack.close();
  }
  node.finish();
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: replicate_node property MODE SEED COUNT | gap-kill REPL | gap-delay REPL "
                 "| injected | kill-source | "
                 "kill-relay | errors | bench-bw MODE [MIB] | bench-lat MODE [ROUNDS]\n");
    return 2;
  }
  try {
    cluster::Node node;
    const std::string scenario = argv[1];
    auto replication = [&](int i) {
      return argc > i && std::string(argv[i]) == "relay" ? Replication::relay : Replication::naive;
    };
    if (scenario == "property" && argc == 5)
      return property(node, argv[2], std::stoull(argv[3]), std::stoi(argv[4]));
    if (scenario == "gap-kill") return gap_scenario(node, true, replication(2));
    if (scenario == "gap-delay") return gap_scenario(node, false, replication(2));
    if (scenario == "kill-source") return kill_source(node);
    if (scenario == "slow-target") return slow_target(node);
    if (scenario == "injected") return injected_faults(node, argc > 2 ? argv[2] : "counter");
    if (scenario == "stamp-kill-source") return stamp_kill_source(node);
    if (scenario == "kill-relay") return kill_relay(node);
    if (scenario == "errors") return errors(node);
    if (scenario == "bench-bw" && argc >= 3)
      return bench_bw(node, argv[2], argc > 3 ? std::stoull(argv[3]) : 256);
    if (scenario == "bench-lat" && argc >= 3)
      return bench_lat(node, argv[2], argc > 3 ? std::stoi(argv[3]) : 10000);
    fail("unknown scenario " + scenario);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  return 1;
}
