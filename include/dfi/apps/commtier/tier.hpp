// apps::commtier — messaging between a compute unit (CU) and a storage unit (SU) through one or
// several receive buffers per connected pair (002 §2.2, §3.1).
//
//   // once, anywhere (say rank 0):
//   commtier::TierSpec spec{.name = "scan", .cu_rank = 1, .su_rank = 0};
//   spec.cu = {.count = 4, .bytes = 256 << 10};         // the CU receives into 4 RBs of 256 KiB
//   spec.su = {.count = 2, .bytes = 64 << 10};          // the SU into 2 RBs of 64 KiB
//   commtier::create_tier(node, spec);
//   // on the SU, in a thread owning `worker`:
//   commtier::Sender out(node, worker, "scan", commtier::Side::su, 0);
//   out.send(kColumn, column.data(), column.size()).throw_if_error();
//   // on the CU:
//   commtier::Receiver in(node, "scan", commtier::Side::cu, 0);
//   std::vector<std::byte> data;
//   commtier::Transfer t;
//   in.receive_transfer(data, t).throw_if_error();      // t.opcode == kColumn, data = the column
//
// How 002's three kinds of buffers map onto DFI's segment rings (memory/ring.hpp):
//  - Receive buffers (RB): the slots of one ring that the receiving side hosts per lane and
//    direction, `count` of them, each with room for `bytes` of payload in one message (plus the
//    message's 24-byte header and the ring's 16-byte footer), so that a transfer of `bytes`
//    travels in one RB and one of n x `bytes` in n. One RB
//    (count = 1) is 002's single-buffer mode: the sender waits until the receiver has consumed
//    and released it before it writes the next package. Several RBs let the sender fill the next
//    one while the receiver still consumes the last.
//  - Buffer info (BI): each RB's footer state word (sequence | consumable | end-of-stream) is its
//    "data ready" entry, which the receiver polls; the ring's released-tail word is the "free
//    again" entry the sender reads (credits). The sender's view of the remote BI is its credit
//    count; it writes into the next RB the receiver released, in order.
//  - Send buffer (SB): where the transport maps the remote ring (shm), the sender writes its
//    messages straight into the RB (no SB copy); elsewhere it fills a local staging segment that
//    travels as one put (RDMA) or one active message (tcp) — SegmentWriter's staging segments,
//    whose number is the SB's size in RBs.
//
// Messages (002 §3.1: "operation code, some meta data and the actual payload"): a transfer of any
// size is cut into messages of at most one RB's payload room; each message is a 24-byte header {opcode: u32,
// payload bytes: u32, total bytes of the transfer: u64, offset of this part: u64} followed by its
// payload, padded to 8 bytes. An RB holds as many messages as fit; a transfer larger than an RB
// travels as several packages, in order.
//
// Lanes: a tier has `lanes` independent lanes (002 §4.1.1/§4.2.1's sending and receiving
// threads); each lane has its own RBs in both directions and is used by one sending and one
// receiving thread per side. Every lane delivers every message exactly once and in order.
//
// Under the hood, each (direction, lane) is one 1:1 flow of the flow type kCommtier:
// "<name>.to_su.<lane>" (CU -> SU) and "<name>.to_cu.<lane>" (SU -> CU), so the tier shares the
// flows' rings, connection set-up, credits and failure model: a dead peer makes the next call
// return peer_failed naming the tier's flow and the peer's rank, every later call flow_failed.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "dfi/flow/flow_type.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::apps::commtier {

enum class Side { cu, su };
// "cu" / "su".
std::string_view side_name(Side side) noexcept;
// Parses "cu" or "su"; throws dfi::Error(invalid_argument).
Side parse_side(std::string_view text);
inline Side other_side(Side side) noexcept { return side == Side::cu ? Side::su : Side::cu; }

// The receive buffers one side holds per lane (002 §3.1: the number and size may differ between
// the CU and the SU; all RBs of one side have the same size).
struct Buffers {
  std::uint32_t count = 4;          // receive buffers per lane; 1 = 002's single-buffer mode
  std::uint32_t bytes = 1u << 20;   // one RB's payload room: a message of this many bytes fills
                                    // it (>= 64, a multiple of 8; at most kMaxBufferBytes)
};

inline constexpr std::uint32_t kMaxBuffers = 64;
inline constexpr std::uint32_t kMaxBufferBytes = 1u << 30;
inline constexpr std::uint32_t kMaxLanes = 64;

struct TierSpec {
  std::string name;
  int cu_rank = 0;
  int su_rank = 1;
  std::uint32_t lanes = 1;
  Buffers cu;  // what the CU receives into (the SU's messages)
  Buffers su;  // what the SU receives into (the CU's messages)
  // Longest wait for a free RB or for a message; 0: the flow_timeout_ms setting.
  std::chrono::milliseconds stall_timeout{0};

  // Throws dfi::Error(invalid_argument) naming the tier and the problem: empty name, a rank
  // outside [0, cluster_size), cu_rank == su_rank, lanes outside [1, kMaxLanes], a buffer count
  // outside [1, kMaxBuffers], a buffer size below 64 B, not a multiple of 8, or above
  // kMaxBufferBytes.
  void validate(int cluster_size) const;
  // The buffers `side` receives into.
  const Buffers& receive_buffers(Side side) const noexcept { return side == Side::cu ? cu : su; }
  int rank(Side side) const noexcept { return side == Side::cu ? cu_rank : su_rank; }
};

// Validates `spec` and creates its flows (2 x lanes) and its registry record. Call once per tier,
// from any one process. Throws dfi::Error: invalid_argument (bad spec), already_exists (a tier or
// flow of that name exists), and what the registry throws (timeout, peer_failed).
void create_tier(cluster::Node& node, const TierSpec& spec);

// Waits (until `timeout`; 0: the registry_timeout_ms setting) for tier `name` and returns its spec.
// Throws dfi::Error: not_found (not created in time), protocol (a malformed record).
TierSpec open_tier(cluster::Node& node, std::string_view name,
                   std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

// The flow carrying lane `lane`'s messages towards `to`.
std::string lane_flow(std::string_view tier, Side to, std::uint32_t lane);

// The flow type of a tier's lanes: 1:1 flows whose segments carry messages (8-byte words).
extern const flow::FlowTypeTraits kCommtierTraits;
inline constexpr flow::FlowType kCommtier{kCommtierTraits};

}  // namespace dfi::apps::commtier
