// apps::commtier::Sender / Receiver — one side's end of one lane of a tier (tier.hpp).
//
//   Sender    writes transfers into the peer's receive buffers (RBs): send() cuts a transfer into
//             messages, fills RB after RB, hands each full RB to the transport and the last one
//             when the transfer is complete. Owned by one thread, which owns the worker.
//   Receiver  polls its own RBs' buffer-info words (the footers' state words) and hands out the
//             messages in order: receive() one message (zero copy), receive_transfer() a whole
//             transfer copied into the caller's memory (002's consuming test). An RB is given
//             back to the sender (its released-tail word raised) when the receiver moves past
//             its last message. Owned by one thread.
//
// Errors name the tier's flow and the peer: peer_failed (the peer's rank died: the first call
// that sees it), flow_failed (every later call, at once, naming the same peer), timeout (no free
// RB, or no message, within the tier's stall timeout), protocol (a malformed message header),
// invalid_argument (misuse, named).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dfi/apps/commtier/tier.hpp"
#include "dfi/common/error.hpp"
#include "dfi/flow/detail/rings.hpp"

namespace dfi::fabric {
class Worker;
}

namespace dfi::apps::commtier {

// The header in front of every message's payload (tier.hpp: Messages).
struct MessageHeader {
  std::uint32_t opcode = 0;
  std::uint32_t payload_bytes = 0;
  std::uint64_t total_bytes = 0;  // of the whole transfer
  std::uint64_t offset = 0;       // of this message's payload in the transfer
};
static_assert(sizeof(MessageHeader) == 24);
inline constexpr std::size_t kMessageHeaderBytes = sizeof(MessageHeader);

// One message as a receiver sees it.
struct Message {
  std::uint32_t opcode = 0;
  std::span<const std::byte> payload;  // in the RB: valid until the next receive call
  std::uint64_t total_bytes = 0;       // of the transfer this message belongs to
  std::uint64_t offset = 0;            // where the payload starts in that transfer
  bool end_of_stream = false;          // the peer closed; no message (payload empty)

  bool first() const noexcept { return offset == 0; }
  bool last() const noexcept { return offset + payload.size() == total_bytes; }
};

// A whole transfer as receive_transfer() delivers it.
struct Transfer {
  std::uint32_t opcode = 0;
  std::uint64_t bytes = 0;
  std::uint32_t messages = 0;   // packages it travelled in
  bool end_of_stream = false;   // the peer closed; no transfer
};

struct ChannelCounters {
  std::uint64_t transfers = 0;
  std::uint64_t messages = 0;
  std::uint64_t payload_bytes = 0;
  std::uint64_t buffers = 0;  // RBs filled (sender) or consumed (receiver)
  std::uint64_t stalls = 0;   // sender: times no RB was free when one was needed
};

class Sender {
 public:
  // Opens the sending end of lane `lane` at side `from` (this rank must be that side's rank) of
  // tier `tier`; waits (open_timeout; 0: the registry_timeout_ms setting) for the tier and for the
  // peer's receiver, then connects. `worker` must be the calling thread's own. Throws dfi::Error:
  // not_found (no such tier), invalid_argument (this rank is not `from`'s rank, no such lane),
  // timeout, peer_failed.
  Sender(cluster::Node& node, fabric::Worker& worker, std::string_view tier, Side from, std::uint32_t lane,
         std::chrono::milliseconds open_timeout = std::chrono::milliseconds(0));
  // Closes the lane if close() was not called (errors are printed to stderr).
  ~Sender();
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  // Sends one transfer of `bytes` from `data` (0 bytes: one message with the opcode alone) and
  // hands everything to the transport: when it returns, `data` may be reused and the transfer is
  // on its way without further calls. Waits for free RBs as needed. Errors: peer_failed,
  // flow_failed, timeout, invalid_argument (after close).
  Status send(std::uint32_t opcode, const void* data, std::size_t bytes);
  // Like send(), but a partly filled last RB stays here for the next post() or send(), so that
  // small transfers share RBs; flush() (or send(), or close()) hands it over.
  Status post(std::uint32_t opcode, const void* data, std::size_t bytes);
  // Hands over the partly filled RB, if any, and waits until everything has left this process.
  Status flush();
  // Flushes, then tells the receiver that nothing more comes (its receive returns
  // end_of_stream after the last message). Idempotent.
  Status close();

  const ChannelCounters& counters() const noexcept { return counters_; }
  // The room of one RB at the peer for messages, their headers included (Buffers::bytes plus one
  // header).
  std::size_t buffer_bytes() const noexcept { return capacity_; }
  // True when messages are written straight into the peer's mapped RBs (shm).
  bool direct() const noexcept;
  const std::string& label() const noexcept { return rings_.label(); }

 private:
  Status append(std::uint32_t opcode, const std::byte* data, std::size_t bytes);
  Status hand_over();  // publishes the acquired RB's messages
  Status latch(Status status);

  flow::detail::SourceRings rings_;
  memory::SegmentWriter<memory::RemoteRing>* writer_;
  std::size_t capacity_;
  std::span<std::byte> buffer_;  // the acquired RB (or its staging segment), empty if none
  std::size_t fill_ = 0;
  ChannelCounters counters_;
  flow::detail::FailureLatch failure_;
};

class Receiver {
 public:
  // Opens the receiving end of lane `lane` at side `at` (this rank must be that side's rank) of
  // tier `tier` and publishes its RBs. Throws dfi::Error: not_found, invalid_argument (wrong rank,
  // no such lane), already_exists (opened twice).
  Receiver(cluster::Node& node, std::string_view tier, Side at, std::uint32_t lane,
           std::chrono::milliseconds open_timeout = std::chrono::milliseconds(0));
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  // The next message, waiting up to `timeout` (0: the tier's stall timeout). Its payload points
  // into the RB and stays valid until the next receive or receive_transfer call; the RB goes back
  // to the sender when that call moves past its last message. Ok with end_of_stream once the
  // sender closed. Errors: peer_failed, flow_failed, timeout, protocol (a malformed header,
  // naming what was wrong).
  Status receive(Message& message, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Receives the next whole transfer and copies its payload into `into` (the consuming test:
  // memory that is not an RB). Checks, before taking anything, that the transfer fits:
  // invalid_argument naming its size otherwise (the transfer stays there; call again with more
  // room). Must not be called in the middle of a transfer taken with receive(). Errors: as
  // receive().
  Status receive_transfer(std::span<std::byte> into, Transfer& transfer,
                          std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // The same, resizing `into` to the transfer's size.
  Status receive_transfer(std::vector<std::byte>& into, Transfer& transfer,
                          std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Receives the next whole transfer and drops it (002's throughput test: the receiver gives the
  // RBs back without reading them). Errors: as receive().
  Status discard_transfer(Transfer& transfer, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // The sender closed and every message was received.
  bool end() const noexcept { return ended_; }
  const ChannelCounters& counters() const noexcept { return counters_; }
  std::size_t memory_bytes() const noexcept { return rings_.memory_bytes(); }
  const std::string& label() const noexcept { return rings_.label(); }

 private:
  enum class Take { copy, drop };
  // Makes `header` the next message's header without taking it (reads the next RB if the current
  // one is done). Ok with ended_ set at end of stream.
  Status peek(const MessageHeader*& header, std::chrono::milliseconds timeout);
  void take(const MessageHeader& header, Message& message);  // takes the peeked message
  // The next whole transfer into `into` (`room` bytes), or into `*grow` resized to its size.
  Status whole(std::byte* into, std::size_t room, Take mode, Transfer& transfer,
               std::chrono::milliseconds timeout, std::vector<std::byte>* grow = nullptr);
  Status malformed(const std::string& what) const;

  flow::detail::TargetRings rings_;
  std::chrono::milliseconds stall_timeout_;
  memory::SegmentView buffer_;  // the RB being read
  std::size_t at_ = 0;          // next message's offset in it
  std::uint64_t expected_offset_ = 0;  // of the next message of the transfer under way
  std::uint64_t expected_total_ = 0;
  std::uint32_t expected_opcode_ = 0;
  bool in_transfer_ = false;  // messages of a transfer were taken, its last one not yet
  bool ended_ = false;
  ChannelCounters counters_;
};

}  // namespace dfi::apps::commtier
