// Replicate flows (003 §4.2.2, §5.4): N sources to M targets, every tuple to every target.
//
//   // once, anywhere:
//   flow::FlowSpec spec{.name = "log", .type = flow::FlowType::replicate,
//                       .sources = {{0, 0}}, .targets = {{1, 0}, {2, 0}, {3, 0}},
//                       .schema = Schema({{"key", Type::int64}, {"value", Type::int64}})};
//   spec.type_options.get<flow::ReplicateOptions>().ordered = true;   // optional: one global order
//   flow::create_flow(node, spec);
//   // in a source thread:                        // in a target thread:
//   flow::ReplicateSource src(node, worker, "log", 0);   flow::ReplicateTarget dst(node, "log", 0);
//   src.push(&tuple, sizeof tuple);               flow::ReplicateBatch batch;
//   src.close();                                  while (dst.consume(batch) && !batch.end) {
//                                                   if (batch.gap()) { ...batch.sequence... }
//                                                   for (auto& t : batch.as<Tuple>()) ... }
//
// How segments travel (ReplicateOptions::replication):
//  - naive: a source writes each segment into its ring at every target (one write per target).
//  - relay: a tree per source carries the segments, so a source's outgoing link carries each
//    segment `fanout` times instead of M times. Node 0 of source s's tree is the source; nodes
//    1..M are the targets, node k holding target (k - 1 + s) mod M (each source's tree is
//    rotated, so N:M flows spread the forwarding work); node k's children are nodes
//    k·fanout + 1 .. k·fanout + fanout. fanout = 1 is a chain, fanout >= M is naive. Every member
//    derives the same trees from the spec (relay_children / relay_parent below).
//    A relaying target forwards a segment into its children's rings before it releases the slot
//    it arrived in, forwards end-of-stream after the last segment, and forwards inside consume():
//    a relaying target must keep calling consume() until end, or its subtree stalls. Forwarding
//    never waits for ring space (it checks the free slots of the child's ring first), so no relay blocks
//    another one, whatever the trees look like.
//  - ordered (ReplicateOptions::ordered): every target hands out the segments in one global
//    sequence order, without copying: out-of-order segments wait in their ring slots (each
//    source's ring is in sequence order, so the heads of the rings form the receive list, and
//    consume() picks the head holding the next number — the paper's next list). Who numbers the
//    segments (ReplicateOptions::sequencer):
//      counter  (with naive or relay) before a segment goes out, its source takes the next number
//               with a remote fetch-add on a 64-bit counter (the sequencer) that the process of
//               target 0 hosts (003 §5.4). A source descheduled between taking a number and
//               writing its segment holds every target back until it runs again.
//      stamp    (naive only) a source writes its segments to target 0 alone, which numbers them
//               in the order it takes them from its rings and forwards each, numbered, to every
//               other target (a relay tree of depth two rooted at target 0) — a sequencer in the
//               data path, as NOPaxos's switch or middlebox, co-located with target 0. Sources
//               take no number and never hold one. Target 0's consume() (and try_consume()) does
//               the numbering and forwarding: nothing is numbered or forwarded while target 0's
//               application does not consume, and a child whose ring is full gets its copy on a
//               later call. The counter word of target 0 announces a number once every live
//               child has its copy, so a child reports a gap only for a copy that went astray.
//               A segment dropped (flow_faults) at target 0 was lost before the sequencer: it
//               gets no number and no target reports it.
//
// Gaps (ordered). A sequence number can be missing for good: a source died after taking it and
// before writing the segment everywhere (counter), or the segment was dropped on its way from
// target 0 to one target (stamp). When target 0 of a stamped flow dies, its counter dies with it:
// every other target reports peer_failed naming target 0 once it drained what target 0 wrote, and
// the last numbers may have reached some targets and not others, with no gap event — the
// application reconciles them, as a NOPaxos view change does. When number n is known to exist (a later number arrived,
// or the sequencer counter passed it) and has not arrived within gap_timeout, consume() returns a
// gap event: an ok status and a batch with gap() true, `sequence` = n and `gap_count` = how many
// consecutive numbers from n are missing; the flow continues after them. A segment that arrives
// after its gap was reported is dropped (counted as late). When every source's stream has ended
// (closed or died), numbers the counter issued but no segment carried are reported as a gap at
// once, before the end. Targets report the same gaps when the missing segment reached none of them
// (a source that dies before writing); a source that dies half-way through writing one segment
// may leave it at some targets and a gap at others — the application resolves that (NOPaxos gap
// agreement). Nothing is ever skipped silently and no missing number makes consume() wait longer
// than gap_timeout once it is known to exist.
//
// Failures. A dead peer is reported once per peer as Errc::peer_failed naming the flow and the
// peer; consume()/push() may then be called again and the flow continues without it: a source
// keeps writing to its other targets; a target drains what the dead writer left in its ring and
// counts that ring as ended (ordered: the numbers it never delivered become gaps). A relaying
// target whose upstream died passes a failure marker down its subtree, so every target below it
// reports the failure too, naming the failed rank. Other errors (timeout) end the flow.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

#include "dfi/cluster/shared_words.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/flow/detail/rings.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/flow/spec.hpp"

namespace dfi::fabric {
class Worker;
}

namespace dfi::flow {

// Every replicate segment starts with one 64-bit word: the global sequence number (ordered
// flows, from 1), 0 (unordered, and a stamped flow's segments until target 0 numbers them), or
// kReplicateAbortHeader (a relay's upstream failed; the next
// word is the failed rank). The tuples follow, 8-byte aligned.
inline constexpr std::size_t kReplicateHeaderBytes = 8;
inline constexpr std::uint64_t kReplicateAbortHeader = ~std::uint64_t{0};

// Who numbers an ordered flow's segments (see above).
enum class Sequencer {
  counter,  // each source, with a remote fetch-add on a counter target 0 hosts
  stamp,    // target 0, as it takes the segments, before it forwards them to the other targets
};
// The sequencer's name in records and messages ("counter", "stamp").
std::string_view sequencer_name(Sequencer sequencer);
// The sequencer named `name` ("counter" or "stamp"). Throws dfi::Error(invalid_argument) naming
// the unknown name and the known ones.
Sequencer parse_sequencer(std::string_view name);

// How a replicate flow reaches its targets (003 §4.2.2, §5.4).
enum class Replication {
  naive,  // each source writes every segment to every target
  relay,  // each source writes to `fanout` targets, which forward along a tree (see above)
};
// The replication's name in records and messages ("naive", "relay").
std::string_view replication_name(Replication replication);

// A replicate flow's own options, kept in FlowSpec::type_options (FlowType::replicate's
// descriptor, in replicate.cpp, validates them and carries them in the record as the fields
// replication, fanout, ordered, gap_timeout_ms and — when not the counter — sequencer).
struct ReplicateOptions {
  Replication replication = Replication::naive;
  std::uint32_t fanout = 2;       // relay: children per node of the tree; the source is its root
  bool ordered = false;           // one global order at every target, from a sequencer
  std::chrono::milliseconds gap_timeout{1000};  // ordered: how long a sequence number may be
                                                // missing before a gap event reports it
  Sequencer sequencer = Sequencer::counter;     // ordered: who numbers the segments (stamp:
                                                // naive replication only)
};

// The targets (indices into spec.targets) that receive source `source`'s segments directly from
// `from`: the source itself when `from` is nullopt, else target index *from. Naive flows: all
// targets from the source, none from a target; stamped flows: target 0 from the source, every
// other target from target 0.
std::vector<std::size_t> relay_children(const FlowSpec& spec, std::size_t source,
                                        std::optional<std::size_t> from);
// Who writes source `source`'s ring at target `target`: nullopt for the source itself, else the
// index of the relaying target.
std::optional<std::size_t> relay_parent(const FlowSpec& spec, std::size_t source,
                                        std::size_t target);

struct ReplicateSourceOptions {
  // If set, opening fails unless the flow's schema equals it.
  std::optional<Schema> expected_schema;
  // Longest wait of the open for the flow's creation, its targets' rings and (ordered by the
  // counter sequencer) the sequencer (0: the registry_timeout_ms setting).
  std::chrono::milliseconds open_timeout{0};
  // Test seam, ordered flows numbered by the counter sequencer: runs after a segment received its
  // sequence number and before it is written anywhere (tests kill or delay a source there to make
  // a gap). Never runs in a stamped flow (its sources take no number).
  std::function<void(std::uint64_t sequence)> on_sequence;
};

class ReplicateSource {
 public:
  // Opens source `thread` of this rank in replicate flow `name`: waits until the flow, the
  // targets it writes to and (ordered) the sequencer exist, then connects. `worker` must be the
  // calling thread's own. Throws dfi::Error: not_found (no such flow), invalid_argument (not a
  // replicate flow, no such source, schema mismatch), timeout, peer_failed.
  ReplicateSource(cluster::Node& node, fabric::Worker& worker, std::string_view name, int thread,
                  ReplicateSourceOptions options = {});
  // Closes the flow if close() was not called (errors are printed to stderr).
  ~ReplicateSource();
  ReplicateSource(const ReplicateSource&) = delete;
  ReplicateSource& operator=(const ReplicateSource&) = delete;

  // Appends one tuple of exactly the schema's width to the current segment; a full segment goes
  // out to every target (ordered: after taking its sequence number). Owned by one thread.
  // Errors: invalid_argument (wrong width), flow_failed (after close, or every target dead),
  // peer_failed (a target or the sequencer died; reported once per target, later calls go on
  // without it), timeout (a target stopped consuming; the segment going out stays queued and
  // is retried, for the targets that did not get it, by the next call). In latency mode every
  // push sends its own segment, and a tuple reported with a timeout is already queued.
  Status push(const void* tuple, std::size_t bytes) {
    if (bytes != tuple_bytes_) [[unlikely]] {
      return width_error(bytes);
    }
    if (fill_ + bytes > limit_) [[unlikely]] {
      if (Status s = make_room(); !s) return s;
    }
    std::memcpy(segment_.data() + kReplicateHeaderBytes + fill_, tuple, bytes);
    fill_ += bytes;
    ++tuples_;
    if (latency_) [[unlikely]] {
      return emit();
    }
    return {};
  }
  template <class T>
  Status push(const T& tuple) {
    static_assert(std::is_trivially_copyable_v<T>);
    return push(&tuple, sizeof(T));
  }
  // Pushes `count` contiguous tuples of the schema's width.
  Status push_bulk(const void* tuples, std::size_t count);
  // Sends the partly filled segment now (bandwidth mode batches until a segment is full) and waits
  // until everything pushed so far is visible at the targets it writes to. Pushes alone complete
  // in the background, which over TCP needs this thread to keep calling into the flow.
  Status flush();
  // Sends what is buffered, then end-of-stream to every target it writes to. Idempotent.
  Status close();
  // Leaves the flow without an end of stream (as ShuffleSource::abandon): the targets see the
  // segments published so far and then nothing; later pushes and close() fail with flow_failed.
  // Idempotent; never throws.
  void abandon() noexcept;

  // Targets this source writes to itself (all of them when naive, `fanout` when relaying).
  std::size_t link_count() const noexcept { return rings_.target_count(); }
  std::size_t memory_bytes() const noexcept { return rings_.memory_bytes() + segment_.size(); }
  FlowCounters counters() const;

 private:
  // The public constructor's work, with the one deadline every registry wait of the open shares.
  ReplicateSource(cluster::Node& node, fabric::Worker& worker, std::string_view name, int thread,
                  ReplicateSourceOptions options, const Deadline& deadline);
  Status make_room();
  Status emit();
  Status take_sequence(std::uint64_t& sequence);
  Status write_links();
  Status width_error(std::size_t bytes) const;

  detail::SourceRings rings_;
  std::size_t tuple_bytes_;
  bool latency_;
  bool takes_numbers_;  // ordered by the counter sequencer: each segment takes a number first
  fabric::Worker& worker_;
  std::vector<std::size_t> links_;  // target index of each link
  std::chrono::milliseconds stall_timeout_{0};
  BackoffSettings backoff_;
  Status failure_;                  // a target that died in the current call
  std::vector<std::byte> segment_;  // header word, then tuples
  std::size_t capacity_;            // tuple bytes per segment
  std::size_t fill_ = 0;
  std::size_t limit_;    // capacity_, or 0 while a sealed segment waits to go out
  bool sealed_ = false;  // the segment has its header and is going out
  bool closed_ = false;
  bool abandoned_ = false;
  std::vector<char> done_;                // per link: the sealed segment reached it
  std::vector<char> dead_;                // per link: its target died
  std::vector<std::uint64_t> link_free_;  // per link: slots known free (from its ring's released tail)
  std::size_t dead_links_ = 0;
  std::function<void(std::uint64_t)> on_sequence_;
  cluster::SharedWords sequencer_;  // takes_numbers_: attached to the sequencer in target 0's process
  std::string sequencer_name_;
  std::uint64_t tuples_ = 0;
};

// What one consume call hands out: tuples (a view into the ring, valid until the next consume),
// a gap event (ordered flows) or the end of the flow.
struct ReplicateBatch : TupleBatch {
  std::uint64_t sequence = 0;   // ordered: the segment's global sequence number, or the first
                                // missing number of a gap event; 0 otherwise
  std::uint64_t gap_count = 0;  // gap events: consecutive missing sequence numbers (> 0)
  bool end = false;             // every source's stream ended; no more batches

  bool gap() const noexcept { return gap_count > 0; }
};

struct ReplicateTargetOptions {
  // If set, opening fails unless the flow's schema equals it.
  std::optional<Schema> expected_schema;
  // Longest wait of the open for the flow's creation (0: the registry_timeout_ms setting).
  std::chrono::milliseconds open_timeout{0};
  // The calling thread's worker, used to forward (relay) and to read the sequencer (ordered).
  // Null: the target creates its own worker the first time it needs one.
  fabric::Worker* worker = nullptr;
};

struct ReplicateCounters {
  std::uint64_t tuples = 0;     // handed out
  std::uint64_t bytes = 0;      // tuple bytes handed out
  std::uint64_t segments = 0;   // segments handed out
  std::uint64_t forwarded = 0;  // segment copies written into children's rings (relay; stamp: target 0)
  std::uint64_t gaps = 0;       // gap events
  std::uint64_t missing = 0;    // sequence numbers reported missing
  std::uint64_t late = 0;       // segments dropped because their gap had been reported
};

class ReplicateTarget {
 public:
  // Opens target `id` of this rank in replicate flow `name` and publishes its rings; target 0 of
  // an ordered flow also hosts the sequencer. Owned by one thread (the one that consumes).
  // Throws dfi::Error: not_found, invalid_argument (not a replicate flow, no such target, schema
  // mismatch), already_exists (opened twice).
  ReplicateTarget(cluster::Node& node, std::string_view name, int id,
                  ReplicateTargetOptions options = {});
  // Target 0 of an ordered flow waits (bounded by the stall timeout) until the other targets are
  // done with the sequencer it hosts.
  ~ReplicateTarget();
  ReplicateTarget(const ReplicateTarget&) = delete;
  ReplicateTarget& operator=(const ReplicateTarget&) = delete;

  // Gives back the previous batch, forwards what this target relays, then waits for the next
  // batch: ok with tuples; ok with a gap event (ordered, batch.gap()); ok with batch.end once
  // every source's stream ended (end() is then true). Errors: timeout (nothing within `timeout`;
  // 0 = the flow's stall timeout), peer_failed (once per dead peer; call again to go on).
  Status consume(ReplicateBatch& batch,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // For code written against TupleBatch: ok with tuples, or ok with an empty batch at the end.
  // A gap event is returned as Errc::gap whose message names the missing numbers (call again
  // to go on) — never dropped.
  Status consume(TupleBatch& batch,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Like consume() but never waits: Errc::retry (a bare code, no message) when nothing is there
  // yet.
  Status try_consume(ReplicateBatch& batch);
  bool end() const noexcept;

  std::size_t memory_bytes() const noexcept;
  const ReplicateCounters& counters() const noexcept;

  struct State;  // defined in replicate_target.cpp

 private:
  std::unique_ptr<State> state_;
};

}  // namespace dfi::flow
