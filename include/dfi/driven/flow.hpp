// Network-driven ("zero-sided") flows (paper 000): processing units (PUs) only push into and pop
// from buffers in their own memory; a data mover — a process that could equally run on a DPU or
// a switch's CPU — moves the data with the fabric's one-sided operations.
//
//   // once, anywhere: a key-hash shuffle from two producers to two consumers
//   flow::FlowSpec spec{.name = "orders", .type = driven::kDriven,
//                       .sources = {{0, 0}, {1, 0}},     // producers: (rank, thread)
//                       .targets = {{0, 0}, {1, 0}},     // consumers: (rank, id)
//                       .schema = ..., .key_column = "key"};
//   flow::create_flow(node, spec);
//   // a producer thread (no worker, no fabric call: local loads and stores only)
//   driven::Producer out(node, "orders", 0);
//   out.push(&tuple, sizeof tuple).throw_if_error();
//   out.close().throw_if_error();             // returns once the mover took everything
//   // a consumer thread (local loads and stores only)
//   driven::Consumer in(node, "orders", 0);
//   flow::TupleBatch batch;
//   for (;;) { in.consume(batch).throw_if_error(); if (batch.empty()) break; ... }
//   // the mover (any rank, or `dfi mover`): driven::Mover (mover.hpp)
//
// Three patterns (DrivenOptions::pattern, 000 §5–6), all on the segment rings of
// memory/ring.hpp, whose published-head and released-tail words are what the mover reads:
//
//   shuffle     N:M by key (or push_to): a producer holds one ring per consumer (N x M producer
//               rings), a consumer one ring that the mover fills from every producer round robin
//               (M consumer rings). Every tuple reaches the consumer it was routed to.
//   balance     N:M load balancing: a producer holds one ring (N + M rings in all); the mover
//               serves each consumer from every producer at the consumer's own pace — a consumer
//               with room gets the next segments of any producer, round robin — and takes each
//               producer segment exactly once, for one consumer. A slow consumer gets less.
//               Consumers are elastic: the mover serves a consumer from when it opens (it need
//               not be there when the flow starts) until it leaves (Consumer::leave: it drains
//               what it was given, then sees end-of-stream); the producers do not notice.
//   replicate   every producer's segments to every consumer (one ring each, N + M), in one global
//               order the mover chooses: a segment is written into every consumer's ring before
//               any consumer's ring shows it (all-or-nothing), so all consumers see the same
//               sequence of segments.
//
// Rate shares (QoS, 000 §5.2): every driven flow has a share (DrivenOptions::share, default 1).
// When several flows served by one mover have segments to move, the mover divides its transfer
// work (payload bytes it copies into consumer rings) between them in proportion to their shares;
// a flow with nothing to move (empty producer rings, full consumer rings) leaves its part to the
// others (work-conserving). set_share() changes a flow's share while it runs: the mover picks it
// up within kShareRefresh; the PUs do not notice.
//
// Doorbells (000 §4: "by polling ... or by doorbells"; DrivenOptions::doorbell). By default the
// mover reads every producer's head and every consumer's tail on each pass (over tcp each read is
// a message that the PU's progress thread answers), sleeping poll_interval after a pass that found
// nothing. In doorbell mode it does so only while a flow has work: once a pass finds nothing, it
// arms the flow's PUs (a one-word store into each PU's buffer), looks once more, and then leaves
// the flow alone until a PU rings — a producer after it published a segment, a consumer after it
// gave one back — or until safety_poll passed. A bell is a small active message that raises a
// word the mover registered with its worker, so a mover whose flows all sleep blocks on its
// worker's events (Mover::run, poll_interval 0) and a bell wakes it, over shm as over tcp. A bell
// is rung at most once per publication and only when the mover armed the PU: a PU that rang is
// not armed again until the mover ran out of work, so ringing an already rung bell costs nothing.
// What a bell costs the PU's thread: a fence and a load of its own armed word per publication, and
// when armed, the message — a fabric call on a worker of the PU's own (claimed from the rank's
// progress thread, which completes it): on shm a copy into the mover's shared-memory queue and a
// wake-up signal when the mover sleeps, over tcp a send system call. Unlike the rest of a driven
// flow, that is fabric work on the PU's thread; the bench (driven-lat) measures what it buys.
// Details and why no bell is lost: src/driven/bell.hpp.
//
// In every pattern a consumer sees the segments of one producer in the order they were pushed
// (in balance, the subsequence that consumer got). Segments move whole: a consumer's batch is
// one producer's segment.
#pragma once

#include <chrono>
#include <cstdint>

#include <string_view>

#include "dfi/flow/flow_type.hpp"
#include "dfi/flow/spec.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::driven {

// How a driven flow's tuples go from producers to consumers (see above).
enum class Pattern { shuffle, balance, replicate };

// The pattern's name in records and messages ("shuffle", "balance", "replicate").
const char* pattern_name(Pattern pattern) noexcept;

// The options of a driven flow (FlowSpec::type_options).
struct DrivenOptions {
  Pattern pattern = Pattern::shuffle;
  // How long the mover waits between looks at a flow's buffers when the last look found nothing
  // to move (0: it backs off on its own, from spinning to short sleeps).
  std::chrono::microseconds poll_interval{0};
  // The most payload bytes the mover moves for one consumer before it looks at the next
  // (adaptive batching: everything available that fits, up to this).
  std::uint64_t batch_bytes = 4u << 20;
  // The flow's rate share at creation (QoS, above): 1 to kMaxShare. A mover serving several
  // flows gives each backlogged flow transfer bytes in proportion to its share. set_share()
  // changes it at run time.
  std::int64_t share = 1;
  // Doorbell mode (Doorbells, above): the mover reads the flow's heads and tails only after a PU
  // rang (and while that finds work), instead of on every pass.
  bool doorbell = false;
  // Doorbell mode: the longest a flow whose PUs did not ring goes unread (the safety poll that
  // carries a lost doorbell). > 0.
  std::chrono::microseconds safety_poll{20000};
};

// The largest share a flow may have (shares are relative: 1:3 is 100:300).
inline constexpr std::int64_t kMaxShare = 1'000'000;
// How often a mover looks for share changes (and, in a balance flow, for consumers that joined
// or asked to leave): a registry lookup per flow at most this often, checked once per pass.
inline constexpr std::chrono::milliseconds kShareRefresh{20};

// Sets the rate share of driven flow `name` while it runs (QoS, above): writes the flow's share
// record (`driven/<name>/share`) in the registry, which the flow's mover reads every
// kShareRefresh; the flow's producers and consumers do not notice. May be called on any rank,
// from any thread, before or after the mover started (the record wins over
// DrivenOptions::share from then on). Waits (up to `timeout`, 0: the registry_timeout_ms
// setting) until the flow exists. Throws dfi::Error: invalid_argument (share outside 1 ..
// kMaxShare, naming the flow and the share; a flow that is not driven), not_found (no such flow
// by the timeout), peer_failed (the registry is gone).
void set_share(cluster::Node& node, std::string_view name, std::int64_t share,
               std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

extern const flow::FlowTypeTraits kDrivenTraits;
// The flow type of driven flows: sources are the producers, targets the consumers. Shuffle
// routing: key_hash (key column, default) or explicit_target (Producer::push_to); balance and
// replicate flows do not route (the routing field and the key column are not used). Bandwidth
// mode only.
inline constexpr flow::FlowType kDriven{kDrivenTraits};

}  // namespace dfi::driven
