// apps::kv service — a key-value store replicated over flows (003 §4.3.2, Fig 3).
//
// Ranks 0 .. replicas-1 are the replicas (rank 0 leads view 0); clients are threads of the other
// ranks. A request is one fixed-width tuple (key, operation, value); so is a reply. Every value of
// a service has the same width, ServiceOptions::value_bytes (64 B by default), chosen when the
// service starts: a tuple is its header struct below (Request, Reply, Accept) followed at once by
// value_bytes bytes of value (value_of). create_service publishes the width; every replica and
// client checks its own against it before it opens a flow (a mismatch is invalid_argument naming
// both widths and the rank that created the service). Every view v of the service has flows of
// its own, the first view's created by create_service:
//
//   <name>.v<v>.requests     shuffle  every client thread -> the leader          (Request)
//   <name>.v<v>.accept       replicate the leader -> every follower   (Accept; NOPaxos: gap agreement)
//   <name>.v<v>.accepted     shuffle  every follower -> the leader    (Accepted; NOPaxos: gap agreement)
//   <name>.v<v>.replies.<i>  shuffle  the leader -> client i (its index); NOPaxos: every replica (Reply)
//
// A client creates its own replies flow of a view, and opens its target, as it joins the view
// (before it sends there); a replica opens its source when it first answers the client. So a view
// change waits for no client: one that is idle joins the new view when it next sends (or closes),
// and one that never comes back costs nothing.
//
// Protocols:
//   unreplicated  the leader executes each request and replies: the baseline of the benchmark.
//   paxos         Multi-Paxos. The leader takes the requests that arrived, gives every write the
//                 next log slot and sends the whole batch as one *round* of Accept tuples on the
//                 replicate flow (a read-only round sends one heartbeat tuple). A follower appends
//                 what it consumes to its log and answers each consumed batch with one Accepted
//                 tuple naming the last round and slot it holds (the rings keep each pair in
//                 order, so the answer covers every earlier round). A round is chosen once a
//                 majority of the replicas (the leader and replicas/2 followers) hold it; the
//                 leader then applies its writes in slot order and replies. Every Accept carries
//                 the leader's commit slot, and followers apply their log up to it. Rounds are
//                 pipelined: up to max_rounds_in_flight are outstanding, which bounds every
//                 ring's fill (no flow can block another).
//
//                 Views (src/apps/kv/views.hpp). A view ends when one of its replicas is declared
//                 dead (the registry's failure detector: its connection closed). The survivors
//                 publish the length of their logs for the next view; every replica and client
//                 decides that view from the same records — its members are the replicas that
//                 published (at least a majority, else every rank stops with an error saying
//                 so), its leader the one with the longest log. A replica's log holds every
//                 write that was chosen (a chosen write is on a majority, and every survivor's
//                 log is a prefix of the old leader's), so the longest log holds them all. The
//                 new leader creates the view's flows and opens the view with round 0, its
//                 state (store and client table, which a follower swaps in only once it arrived
//                 whole and only if it is ahead of its own), and round 1, its log after its
//                 applied slot, proposed again. Clients follow into the view and send every
//                 request not yet answered again; each replica keeps, per client, the number of
//                 its last applied write and the result of its recent writes, so a write sent
//                 twice is applied once and answered with its first result. Flows of a view
//                 that ended are abandoned, not closed: no peer takes their silence for the end
//                 of the service. Rank 0 hosts the registry unless it runs on its own (`dfi
//                 registry serve`, DFI_REGISTRY_EXTERNAL=1): only then may rank 0 die.
//
//   nopaxos       NOPaxos (Li et al., OSDI 2016): <name>.v0.requests is an *ordered* replicate
//                 flow from every client to every replica — the ordered unreliable multicast,
//                 whose sequencer stands in for the paper's switch: a counter in the leader's
//                 memory that every client's segment takes a number from (sequencer counter),
//                 or the leader itself, which numbers the segments the clients send it alone and
//                 forwards them to the followers (sequencer stamp) — and <name>.v0.replies
//                 has every replica as a source. A segment's sequence number is its log slot.
//                 The leader executes the requests in that one order and sends every result; a
//                 follower logs the writes and acknowledges each consumed segment (one client's
//                 consecutive requests, one copy) with one tuple. A client completes a request
//                 once it holds the leader's reply and replicas/2 followers' to the same copy (a
//                 majority). No Multi-Paxos rounds: one fewer message delay.
//
//                 Gap agreement (§5.2.3) runs on the accept/accepted flows: a sequence number
//                 that a replica's flow reports as a gap (a client died holding it, or its
//                 segment came later than gap_timeout) is decided by the leader — a NO-OP
//                 (kGapCommit) when the leader lacks it, which it replicates to the followers and
//                 passes only once replicas/2 of them hold it; its own requests (kGapFill) to a
//                 follower that lacks what the leader holds. A follower never skips a number on
//                 its own; one that held a number the leader made a NO-OP replaces it, and it
//                 applies writes only up to the leader's kGapSync (after every decision before
//                 it). A request whose slot became a NO-OP is never answered; its client sends
//                 it again after retry_timeout (same number, a new copy), and each replica's
//                 client table applies a write once. A dead client ends its own stream only.
//                 A dead replica (the leader and with it the sequencer, or a follower) starts a
//                 view change: a new session on new flows, whose leader merges the survivors'
//                 logs and synchronises the followers with START-VIEW (service.cpp).
//
// Reads are linearizable through a quorum round, not through the log (Raft's "read index"): a
// read that arrived before round r started is answered once round r is chosen and every write of
// rounds <= r is applied. It sees every write that completed before it was invoked (those were
// applied earlier) and nothing that was not chosen. Reads need no log slot and no payload on the
// replicate flow (95 % of the YCSB mix), and — unlike a leader lease — no assumption about clock
// drift; a deposed leader cannot complete a round, since its followers left its view.
//
// Not yet (issue 12, later slices): log catch-up for a replica that restarts, a replica that is
// alive but cut off (a view change waits for every live replica's state record, up to the
// timeout), NOPaxos view change. A dead client is its own loss: the service goes on without it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dfi/flow/replicate.hpp"
#include "dfi/flow/schema.hpp"
#include "dfi/flow/spec.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::apps::kv {

// The width of a value when ServiceOptions::value_bytes is not set (the 64 B).
inline constexpr std::size_t kDefaultValueBytes = 64;
// value_bytes must be a multiple of 8 (the headers' alignment) in kMinValueBytes .. kMaxValueBytes.
inline constexpr std::size_t kMinValueBytes = 8;
inline constexpr std::size_t kMaxValueBytes = 4096;

enum class Op : std::uint32_t { get = 1, put = 2, del = 3 };
enum class Protocol { unreplicated, paxos, nopaxos };

// "unreplicated" / "paxos" / "nopaxos".
std::string_view protocol_name(Protocol protocol) noexcept;
// Parses the names above; throws dfi::Error(invalid_argument) naming the accepted values.
Protocol parse_protocol(std::string_view name);

// A client's request (the header of a request tuple; its value follows it: value_of). `client`
// is the client's index (its target in <name>.replies), `seq` its request counter; the value is
// used by put.
struct Request {
  std::uint64_t client = 0;
  std::uint64_t seq = 0;
  std::uint64_t key = 0;
  std::uint32_t op = 0;  // Op
  // NOPaxos: the request's copy — the client's resend epoch when it sent this copy (0, then
  // higher after each resend), echoed in the replies. Multi-Paxos: 0 on the wire; in the
  // leader's log, 1 marks a request received in the current view.
  std::uint32_t pad = 0;
};
static_assert(sizeof(Request) == 32);

// ack: a NOPaxos follower's acknowledgement of the `count` requests seq-count+1 .. seq of one
// client, which arrived together in one segment (one tuple per segment, not per request).
enum class ReplyStatus : std::uint32_t { ok = 0, not_found = 1, ack = 2 };

// The answer to request (client, seq) (the header of a reply tuple; its value follows it): for
// get, the value or not_found; put and delete: ok
// (delete of an absent key: not_found). NOPaxos: `epoch` is the copy of the request it answers
// (Request::pad): a client counts only the answers to the copy it sent last.
struct Reply {
  std::uint64_t client = 0;
  std::uint64_t seq = 0;
  std::uint32_t status = 0;  // ReplyStatus
  std::uint32_t count = 0;   // ack: the requests it covers
  std::uint32_t epoch = 0;   // NOPaxos: the copy answered
  std::uint32_t pad = 0;
};
static_assert(sizeof(Reply) == 32);

// Multi-Paxos: the leader's proposal of one write for `slot` in `round` (slot 0: a heartbeat,
// no write), with the leader's commit slot. NOPaxos (gap agreement, see above): `round` is a
// GapMessage, `slot` the sequence number it is about. The header of an accept tuple: the value of
// `request` follows it (the request is its last member, so value_of(accept.request) is that value).
struct Accept {
  std::uint64_t view = 0;
  std::uint64_t round = 0;
  std::uint64_t slot = 0;
  std::uint64_t commit = 0;
  Request request;
};
static_assert(sizeof(Accept) == 64);

// Multi-Paxos: follower `follower` (its index among the followers) holds every round up to
// `round` and every slot up to `slot`. NOPaxos: `round` is a GapAnswer about sequence number
// `slot`.
struct Accepted {
  std::uint64_t view = 0;
  std::uint64_t follower = 0;
  std::uint64_t round = 0;
  std::uint64_t slot = 0;
};

// NOPaxos gap agreement, the leader to the followers on <name>.v<v>.accept (Accept::round):
enum GapMessage : std::uint64_t {
  kGapCommit = 1,  // GAP-COMMIT: sequence number `slot` is a NO-OP everywhere
  kGapFill = 2,    // the leader holds `slot`: one of its requests (Accept::request); Accept::commit
                   // says how many the slot has
  kGapSync = 3,    // the leader has decided every sequence number up to `slot`: apply them
  kStartView = 4,  // START-VIEW of a view after the first: one piece of the new leader's state
                   // (Accept::request carries a state operation, as Multi-Paxos's round 0)
};
// ... and the followers' answers on <name>.v<v>.accepted (Accepted::round):
enum GapAnswer : std::uint64_t {
  kGapAt = 1,        // the follower has a gap at `slot` and waits for the leader's decision
  kGapCommitted = 2, // GAP-COMMIT-REP: it holds a NO-OP at `slot` and every number before it
  kGapSynced = 3,    // it holds every sequence number up to `slot` (after a kGapSync)
};

// The value of a tuple whose header `h` is (a Request, Reply or Accept::request inside a tuple, or
// inside storage laid out as one): the value_bytes bytes right after the header.
template <class Header>
const char* value_of(const Header& h) noexcept {
  return reinterpret_cast<const char*>(&h + 1);
}
template <class Header>
char* value_of(Header& h) noexcept {
  return reinterpret_cast<char*>(&h + 1);
}

// A tuple's width for values of `value_bytes`: its header and the value.
constexpr std::size_t request_bytes(std::size_t value_bytes) noexcept { return sizeof(Request) + value_bytes; }
constexpr std::size_t reply_bytes(std::size_t value_bytes) noexcept { return sizeof(Reply) + value_bytes; }
constexpr std::size_t accept_bytes(std::size_t value_bytes) noexcept { return sizeof(Accept) + value_bytes; }

// The flows' schemas (C layout of the structs above, then a chars column of value_bytes).
flow::Schema request_schema(std::size_t value_bytes = kDefaultValueBytes);
flow::Schema reply_schema(std::size_t value_bytes = kDefaultValueBytes);
flow::Schema accept_schema(std::size_t value_bytes = kDefaultValueBytes);
flow::Schema accepted_schema();

struct ServiceOptions {
  std::string name = "kv";        // flows "<name>.v<view>.requests" ...; a name per run
  Protocol protocol = Protocol::paxos;
  // Width of every value (put, get), a multiple of 8 in kMinValueBytes .. kMaxValueBytes. Every
  // replica and client of a service must use the same (checked when they start).
  std::size_t value_bytes = kDefaultValueBytes;
  int replicas = 3;               // ranks 0 .. replicas-1; rank 0 leads (unreplicated: 1)
  int client_threads = 1;         // client threads on every rank >= replicas
  std::size_t window = 16;        // outstanding requests per client thread (sizes the rings)
  std::size_t max_rounds_in_flight = 8;  // Multi-Paxos pipelining depth
  std::size_t round_requests = 512;      // most requests the leader takes into one round
  std::chrono::milliseconds timeout{30000};  // set-up waits; a peer silent this long is an error
  // NOPaxos: how long a sequence number may be missing at a replica before it is a gap (the
  // ordered flow's gap_timeout), and how long a client waits for the leader's answer to a request
  // before it sends it again (its slot may have become a NO-OP).
  std::chrono::milliseconds gap_timeout{500};
  std::chrono::milliseconds retry_timeout{1500};
  // NOPaxos: who numbers the requests (flow::Sequencer, dfi/flow/replicate.hpp). counter: a client
  // takes a number for each segment from a counter in the leader's memory (a remote fetch-add),
  // then writes the segment to every replica. stamp: a client writes to the leader alone, which
  // numbers each segment as it takes it and forwards it to the followers: no client holds a
  // number while descheduled, and over tcp no client waits for an emulated fetch-add (the
  // default: faster on shm and tcp, bench/notes/kv.md). Chosen by whoever creates the view's
  // flows; every member follows the flow's record.
  flow::Sequencer sequencer = flow::Sequencer::stamp;
  // Test seam (NOPaxos clients): the requests flow's ReplicateSourceOptions::on_sequence (counter
  // sequencer only: with stamp, clients take no number, and check_options refuses it).
  std::function<void(std::uint64_t sequence)> on_sequence;
};

// The clients, in index order: thread t of rank r is client (r - replicas) * client_threads + t.
std::vector<flow::SourceRef> client_threads(const ServiceOptions& options, int cluster_size);
// Throws dfi::Error(invalid_argument, "kv service '<name>': <problem>") for bad options on a
// cluster of `cluster_size` ranks (at least one client rank, replicas 1..size-1, unreplicated with
// one replica, a non-empty name, window and round sizes >= 1, value_bytes as above).
void check_options(const ServiceOptions& options, int cluster_size);

// Creates the service's flows and publishes its value width. Call once, from any one rank (the
// bench calls it on rank 0). Throws what flow::create_flow throws, and invalid_argument as
// check_options.
void create_service(cluster::Node& node, const ServiceOptions& options);

// Waits (up to options.timeout) for the value width that create_service published and compares
// it with options.value_bytes. Throws dfi::Error: invalid_argument "kv service '<name>': rank <r>
// uses <a>-byte values, the service (created by rank <c>) <b>-byte values" on a mismatch,
// timeout when the service was not created in time. run_replica and Client call it first.
void check_value_bytes(cluster::Node& node, const ServiceOptions& options);

struct ReplicaStats {
  std::uint64_t writes = 0;   // applied
  std::uint64_t reads = 0;    // answered (leader)
  std::uint64_t rounds = 0;   // Multi-Paxos rounds sent (leader) or consumed (follower)
  std::uint64_t slots = 0;    // highest slot applied
  std::uint64_t keys = 0;     // keys in the store at the end
  std::uint64_t digest = 0;   // order-independent digest of the store at the end: replicas that
                              // applied the same writes agree
  std::uint64_t answered = 0; // requests answered as leader (in every view it led)
  std::uint64_t view = 0;     // the view the service ended in (Multi-Paxos)
  std::uint64_t noops = 0;    // NOPaxos: sequence numbers that gap agreement made NO-OPs
  std::uint64_t filled = 0;   // NOPaxos follower: gaps it filled with the leader's requests (kGapFill)
};

// Runs this rank's replica (leader or follower in each view, see above) on the calling thread
// until every client closed its requests or died: then the leader closes the accept flow, the
// followers close theirs (NOPaxos: the followers first, once the leader synced the last number),
// and the leader closes the replies. Multi-Paxos goes through a new view whenever a replica dies.
// Throws dfi::Error naming the service, the flow and the peer: peer_failed (fewer than a majority
// of the replicas alive; NOPaxos and unreplicated: any replica died), timeout (NOPaxos also: no
// majority answered a NO-OP, or no decision for a gap, within `timeout`), protocol (a malformed
// tuple).
ReplicaStats run_replica(cluster::Node& node, const ServiceOptions& options);

}  // namespace dfi::apps::kv
