// driven::Mover — the data mover of driven flows (flow.hpp): the only party that calls the
// fabric. It holds the memory keys of every buffer of its flows (from the registry), learns
// their state by reading their published-head and released-tail words, moves segments from
// producer rings into consumer rings, and advances the consumers' heads and the producers' tails.
//
//   driven::Mover mover(node);
//   mover.add_flow("orders");                      // waits for every producer's and consumer's buffers
//   mover.run(std::chrono::minutes(1)).throw_if_error();   // until every flow has ended
//
// One loop, eRPC style: poll (a producer ring's head), schedule (by the flow's pattern, below;
// as much as a consumer has room for, up to batch_bytes), transfer (a get of the segment into
// the mover's buffer, or a copy through the mapping on shm; a put into the consumer's ring),
// advance (the consumer's state and head words, the producer's tail). Nothing is allocated per
// transfer. Scheduling per pattern (flow.hpp):
//   shuffle    per consumer, round robin over its producers' rings for it, one segment each per
//              round, while the consumer has room and its batch is not full;
//   balance    in rounds over the consumers (the first one rotating), each consumer with room
//              takes one segment from the next producer that has one (round robin over the
//              producers); a full consumer is skipped, so each gets what its pace allows, and a
//              segment is taken once, by one consumer (the per-producer lock of 000 §6.1 is the
//              mover's ownership of the producer's reader: see mover.cpp for what several movers
//              sharing a flow would need);
//   replicate  the next producer segment round robin (the global order) while every consumer
//              has room: written into every consumer's ring first (put path: the endpoints
//              flushed), then published at every consumer (all-or-nothing), then released.
//
// Doorbell mode (flow.hpp, Doorbells; src/driven/bell.hpp): per flow, the mover registers one
// bell word per PU with its worker and keeps a state — active (served every pass, as in polling
// mode), checking (it found nothing, armed the PUs that rang since they were last armed, and
// makes one more pass), or sleeping (not served until a bell word grew, a consumer joins or
// leaves, or safety_poll passed; a safety pass that finds work re-arms every PU, since one of them
// may have rung into the void). A pass over only sleeping flows compares the bell words with what
// it saw (its own memory) and nothing else. When every flow is in doorbell mode, run() backs off
// with a short spin and then blocks on the worker's events for up to the shortest safety_poll
// (at most kShareRefresh): a bell's message wakes it.
//
// QoS between flows (flow.hpp): a mover with several flows divides its transfer work between
// them by deficit round robin in payload bytes. Each pass gives every flow a quantum in
// proportion to its share (the largest share: half a ring, or batch_bytes if smaller); a flow
// moves whole segments while it has credit (the last one may overshoot, paid back next pass).
// A flow that had nothing more to move keeps at most one quantum of credit (no hoarding), and a
// pass that moved nothing while some flow waited for credit skips ahead to when it has some, so
// the mover never idles while a flow has work (work-conserving). The shares are read from the
// registry (set_share) at most every kShareRefresh per flow, with one clock read per pass.
//
// How the bytes travel depends on the transport: on shm, where UCX maps the PUs' buffers into
// the mover, a transfer is one memcpy and the PUs' CPUs do nothing; where RMA is native (verbs)
// it is a get and a put by the NIC; over tcp UCX emulates both with active messages that the
// PUs' progress threads serve — the PUs' CPUs pay for every transfer there (measured in
// `dfi bench driven-*`).
//
// Recovery (beyond 000 §6.3, which only envisions it): a mover killed — SIGKILL at any
// instruction — and restarted (`dfi mover FLOW` again, as the same rank or as another rank once
// the first is declared dead) continues every flow with nothing lost or moved twice. The mover
// keeps no state that the PUs' buffers and the registry cannot rebuild:
//   - a producer ring's reader continues after its released tail (the tail is raised only after
//     the segment reached the consumer); a tail on an end-of-stream segment means that ring
//     ended (the producer writes nothing after it);
//   - a consumer ring's writer continues after its last published segment (the state words are
//     the truth; the head word is at most one behind, or one ahead for end-of-stream, whose head
//     goes first); one whose last segment is end-of-stream is closed;
//   - the half-done transfer: every transfer of producer p's segment s into consumer c's ring as
//     its segment q first writes c's link word of p, (s, q) (links.hpp: one word per producer
//     after the consumer's ring), then publishes q, then raises p's tail to s. A restart that
//     finds p's ring released up to s - 1 and a link word (s, q) with q published at c knows s
//     was delivered and only raises the tail; a link word whose q is not published means s was
//     not delivered, and s moves again (to q, or in a balance flow to any consumer). That word
//     is cleared before anything moves: once c's segment q is published with another producer's
//     segment, it would name s as delivered to a later restart. Killed before the link word: the
//     old word names an older s and is ignored.
//   - per pattern: shuffle (1:1 and N:M) has one link per (producer ring, consumer): at most one
//     is half done. Balance: the per-producer lock of 000 §6.1 is this mover's ownership of the
//     producer's reader, so nothing of it outlives the mover; the link words of all consumers
//     that opened are read, at most one names s as delivered (two would be a protocol error).
//     Replicate: the link words are written for every consumer in phase one; a mover killed in
//     phase two (published at some consumers, not all) leaves the consumers that hold s one
//     segment ahead of the others; the restart rolls forward — s goes to the others first (the
//     global order continues from there), then the tail is raised. All-or-nothing becomes
//     all-eventually: no consumer sees another segment where another consumer saw s.
//   - PUs let go of: a PU frees its buffers only after the mover published its done record
//     (names.hpp: a producer's after the mover released the end-of-stream of each of its rings,
//     a consumer's after its end-of-stream was published); a restart never attaches a PU with a
//     done record, and publishes the ones its predecessor died before writing.
//   - the mover record ("<rank> <pid>") is taken over by a later process of the same rank, or by
//     another rank once the holder is declared dead; a live holder keeps it (already_exists).
// A PU killed mid-flow is not a pause but the end of its flow: the mover gives that flow up (step(),
// driven/<flow>/failed) and serves its other flows on; the flow's other PUs get peer_failed naming
// the dead PU (peers.hpp).
// The PUs are oblivious: a dead mover is a pause (producers fill their rings, then wait; consumers
// wait), and only a PU that waits its stall timeout gets an error, naming the mover and whether
// it died and was not resumed (peers.hpp). What the restart costs: the new process joins the
// cluster (cluster::Node rejoins the rank), attaches every buffer and reads two or three words per
// ring. The restart assumes the dead process's
// writes have landed before the new one reads the words: on shm they are stores; over tcp they
// are data in the PUs' sockets that their progress threads apply within microseconds, while a
// restart takes a new process and a UCX context (hundreds of milliseconds).
//
// Owned by one thread (it owns a fabric worker).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dfi/common/deadline.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/fabric/worker.hpp"

namespace dfi::cluster {
class Node;
}


namespace dfi::driven {

struct MoverCounters {
  // Segments written into consumer rings and their payload bytes (end-of-stream markers not
  // counted; a replicated segment counts once per consumer).
  std::uint64_t segments = 0;
  std::uint64_t bytes = 0;
  std::uint64_t idle_steps = 0;  // steps that found nothing to move
  std::uint64_t retries = 0;     // failed passes retried (Mover::step)
  // Doorbell mode (flow.hpp, Doorbells): bells found rung (one per PU and look), armed words
  // stored into PUs' buffers, passes of a sleeping flow made by the safety poll, and those of
  // them that found data to move — work no bell announced in time: a bell lost, or later than
  // DrivenOptions::safety_poll.
  std::uint64_t bells = 0;
  std::uint64_t arms = 0;
  std::uint64_t safety_polls = 0;
  std::uint64_t safety_finds = 0;
};

// What add_flow found in a flow's buffers (Recovery, above): all zero for a flow that starts.
struct MoverRecovery {
  bool resumed = false;         // an earlier mover served the flow: this one continued it
  std::uint64_t taken = 0;      // producer segments released before (end-of-stream not counted)
  std::uint64_t delivered = 0;  // segments published into consumer rings before (ditto)
  std::uint64_t completed = 0;  // half-done transfers finished (a delivered segment released)
  std::uint64_t forgotten = 0;  // announced transfers forgotten (link words of unpublished moves)
  std::uint64_t producers_done = 0;  // PUs let go of before (never attached again)
  std::uint64_t consumers_done = 0;
  // What add_flow took (steady_clock): until every PU's buffers were found in the registry and
  // attached, and then recover() (reading the words, finishing the half-done transfer).
  std::chrono::steady_clock::time_point started{};
  std::chrono::steady_clock::time_point attached{};
  std::chrono::steady_clock::time_point recovered{};
};

// Where crash_at() kills the mover's process: a transfer whose link word is written but whose
// segment is not published anywhere yet (link), or whose segment is published at a consumer
// (replicate: at some of the consumers) but not released at the producer (publish).
enum class CrashPoint { link, publish };

class Mover {
 public:
  explicit Mover(cluster::Node& node);
  ~Mover();
  Mover(const Mover&) = delete;
  Mover& operator=(const Mover&) = delete;

  // Takes over driven flow `name`: waits (up to `timeout`, 0: the registry_timeout_ms setting)
  // until it exists and every producer and consumer has published its buffers (a balance flow's
  // consumers are not waited for: step() attaches them when they open), then connects to their
  // ranks and derives from the buffers' words where the flow stands (Recovery, above: a flow an
  // earlier mover served, which died, is continued; recovery(name) says what was found).
  // Throws dfi::Error: not_found, invalid_argument (not a driven flow, added twice),
  // already_exists (a live mover on another rank, or another Mover of this process, serves the
  // flow), timeout (naming who did not appear), peer_failed, protocol (the buffers' words
  // contradict the protocol).
  void add_flow(std::string_view name, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // One pass over every flow: moves what is published and fits. `moved` gets the payload bytes
  // written into consumer rings. A flow whose pass fails while all its PUs are alive (a remote
  // operation timed out, a connection broke) is retried: its endpoints and attachments are
  // opened again and the rings' words say where it stands, as for a restarted mover (Recovery,
  // above): nothing lost or moved twice; counters().retries counts them. After kMaxRetries
  // retries in a row without data moved in between, or when a PU died, the flow is given up — the mover never touches
  // it again and publishes the failure for its PUs (a PU killed mid-flow: its PUs also learn it
  // from the failure detector, peers.hpp) — and the other flows go on being served, this pass
  // and later ones. Returns the failure of a flow given up in this pass (the first): peer_failed
  // naming the flow and the rank, timeout (a remote operation did not complete within
  // op_timeout_ms), protocol; failure(name) keeps it.
  Status step(std::uint64_t& moved);
  // Calls step() until every flow has ended (all producers closed, everything moved into the
  // consumers and their end-of-stream published; in a balance flow, into the consumers that
  // joined) or was given up, waiting between empty steps as the flows' poll_interval says (all
  // flows in doorbell mode with poll_interval 0: blocked on the worker's events until a bell).
  // Errors: the first flow given up's failure (naming the others given up), once every other
  // flow ended; timeout when the flows have not ended by `timeout` (naming what is still open).
  Status run(std::chrono::milliseconds timeout);
  // True when every flow added has ended or was given up.
  bool done() const noexcept;
  // When this mover first published a segment at a consumer (steady_clock; the epoch while it
  // did not): a restarted mover's first move, for the restart pause (dfi mover and the crash_at
  // seam print it).
  std::chrono::steady_clock::time_point first_move() const noexcept { return first_move_; }
  // Why flow `name` was given up (step()), or ok while it was not. Throws dfi::Error(not_found)
  // for a flow not added.
  Status failure(std::string_view name) const;
  // Paces run() to at most `bytes_per_second` payload bytes moved (0, the default: no limit),
  // like a link of that bandwidth between the mover and the PUs (000 throttles transfers to a
  // rate; the switch port is the bottleneck its QoS divides). After a pass that moved bytes,
  // run() sleeps until they fit the rate; a mover that fell behind (idle, or woken late) catches
  // up at most 5 ms worth. step() is not paced.
  // Throws dfi::Error(invalid_argument) for a negative or non-finite rate.
  void limit_rate(double bytes_per_second);

  // Test seam for Recovery: the process kills itself (SIGKILL) the `count`-th time (from 1) a
  // transfer of any flow reaches `point`, leaving the half-done transfer Recovery must finish.
  // One branch per transfer while unarmed. Throws dfi::Error(invalid_argument) for count 0.
  void crash_at(CrashPoint point, std::uint64_t count);
  // Test seam for retries: the `count`-th transfer reaching `point` fails there (Errc::io), as
  // a failed remote operation would, leaving the same half-done transfer; step() retries the
  // flow. Disarms itself when it fires (arm it again for another failure). Throws
  // dfi::Error(invalid_argument) for count 0.
  void fail_at(CrashPoint point, std::uint64_t count);

  // How many times in a row a flow's pass may fail and be retried before it is given up.
  static constexpr int kMaxRetries = 3;

  // What the mover moved over all its flows.
  const MoverCounters& counters() const noexcept { return counters_; }
  // What it moved for flow `name` (idle_steps: its passes that moved nothing). Throws
  // dfi::Error(not_found) for a flow not added.
  const MoverCounters& counters(std::string_view name) const;
  // What add_flow found in flow `name`'s buffers. Throws dfi::Error(not_found) for a flow not
  // added.
  const MoverRecovery& recovery(std::string_view name) const;
  // The share the mover applies to flow `name` now: DrivenOptions::share, or the last value of
  // set_share() it read. Throws dfi::Error(not_found) for a flow not added.
  std::int64_t share(std::string_view name) const;

 private:
  struct Flow;
  struct Crash;

  fabric::Endpoint& endpoint(Flow& f, int rank);
  // Attaches the region a PU published (`descriptor`) on `rank`.
  fabric::RemoteMemory& attach(Flow& f, int rank, const std::string& descriptor);
  // Builds the writer of consumer c's ring in `region`.
  void attach_consumer(Flow& f, std::size_t c, fabric::RemoteMemory& region);
  // Reads the flow's share record and, in a balance flow, attaches consumers that opened and
  // marks those that asked to leave (registry lookups, at most every kShareRefresh unless
  // `now_or_never`). Errors: as the registry's; protocol for a share record that is no share.
  Status poll_registry(Flow& f, std::chrono::steady_clock::time_point now, bool now_or_never);
  // Opens flow `name` (add_flow's work; `again`: a retry of a flow this mover holds already).
  std::unique_ptr<Flow> open_flow(std::string_view name, const Deadline& deadline, bool again);
  // Replaces flows_[index] after `failure` by the same flow opened again (step()); false when it
  // must be given up instead.
  bool retry(std::size_t index, const Status& failure);
  // Marks `f` failed with `failure` and publishes its failure record (names.hpp).
  void give_up(Flow& f, const Status& failure);
  Status dead_pu(const Flow& f, bool unfinished_only) const;
  // After someone was declared dead: gives up every flow with a PU on a dead rank that the mover
  // had not let go of yet; the first such failure.
  Status check_pus();
  // QoS (deficit round robin, mover.cpp): every flow's quantum from the shares.
  void set_quanta();
  // Adds the rounds of credit after which the first flow waiting for credit may move again.
  void fast_forward();
  const Flow& find(std::string_view name) const;
  // Throws already_exists when a live mover holds the flow's mover record (add_flow).
  void claim(const Flow& f);
  // This mover's mover record: "<rank> <pid>".
  std::string identity() const;

  cluster::Node& node_;
  fabric::Worker worker_;
  fabric::FailureWatch watch_;  // PUs declared dead (check_pus)
  std::vector<std::unique_ptr<Flow>> flows_;
  MoverCounters counters_;
  std::unique_ptr<Crash> crash_;
  bool quanta_stale_ = true;  // a flow was added or a share changed since set_quanta()
  double rate_ = 0;           // limit_rate(): bytes per second, 0: none
  std::chrono::steady_clock::time_point first_move_{};  // the first segment published (Flow::transfer)
};

}  // namespace dfi::driven
