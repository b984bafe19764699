#include "dfi/apps/commtier/channel.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "dfi/cluster/node.hpp"
#include "dfi/common/deadline.hpp"

namespace dfi::apps::commtier {
namespace {

constexpr std::size_t round_up_8(std::size_t n) { return (n + 7) & ~std::size_t{7}; }

// Checks that this rank is `side` of the tier and that the lane exists.
void check_end(const TierSpec& tier, int rank, Side side, std::uint32_t lane, const char* what) {
  if (tier.rank(side) != rank) {
    throw Error(Errc::invalid_argument, "commtier '" + tier.name + "': rank " + std::to_string(rank) +
                                            " cannot open a " + what + " at the " + std::string(side_name(side)) +
                                            ", which is rank " + std::to_string(tier.rank(side)));
  }
  if (lane >= tier.lanes) {
    throw Error(Errc::invalid_argument, "commtier '" + tier.name + "' has " + std::to_string(tier.lanes) +
                                            " lane(s); there is no lane " + std::to_string(lane));
  }
}

flow::detail::SourceRings open_sender(cluster::Node& node, fabric::Worker& worker, std::string_view name, Side from,
                                      std::uint32_t lane, std::chrono::milliseconds timeout) {
  const Deadline deadline = flow::detail::open_deadline(timeout);
  const TierSpec tier = open_tier(node, name, flow::detail::time_left(deadline));
  check_end(tier, node.rank(), from, lane, "sender");
  flow::FlowSpec spec =
      flow::detail::open_spec(node, lane_flow(name, other_side(from), lane), kCommtier, std::nullopt, deadline);
  return flow::detail::SourceRings(node, worker, std::move(spec), 0, deadline);
}

flow::detail::TargetRings open_receiver(cluster::Node& node, std::string_view name, Side at, std::uint32_t lane,
                                        std::chrono::milliseconds timeout) {
  const Deadline deadline = flow::detail::open_deadline(timeout);
  const TierSpec tier = open_tier(node, name, flow::detail::time_left(deadline));
  check_end(tier, node.rank(), at, lane, "receiver");
  flow::FlowSpec spec = flow::detail::open_spec(node, lane_flow(name, at, lane), kCommtier, std::nullopt, deadline);
  return flow::detail::TargetRings(node, std::move(spec), 0);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Sender::Sender(cluster::Node& node, fabric::Worker& worker, std::string_view tier, Side from, std::uint32_t lane,
               std::chrono::milliseconds open_timeout)
    : rings_(open_sender(node, worker, tier, from, lane, open_timeout)),
      writer_(&rings_.writer(0).segments()),
      capacity_(writer_->layout().payload_capacity()) {}

Sender::~Sender() {
  if (rings_.closed()) return;
  if (Status s = close(); !s) std::fprintf(stderr, "dfi: closing on destruction: %s\n", s.message().c_str());
}

bool Sender::direct() const noexcept { return writer_->in_place(); }

Status Sender::latch(Status status) { return failure_.latch(std::move(status)); }

Status Sender::hand_over() {
  if (fill_ == 0) return {};
  const std::size_t fill = fill_;
  fill_ = 0;
  buffer_ = {};
  ++counters_.buffers;
  return latch(writer_->publish(fill));
}

Status Sender::append(std::uint32_t opcode, const std::byte* data, std::size_t bytes) {
  if (failure_.failed()) [[unlikely]] return failure_.again(label());
  if (rings_.closed()) [[unlikely]] return {Errc::invalid_argument, label() + ": send after close"};
  std::uint64_t offset = 0;
  do {
    const std::size_t left = bytes - offset;
    // A message needs its header and, unless the transfer is empty, a word of payload.
    if (buffer_.size() - fill_ < kMessageHeaderBytes + (left > 0 ? 8 : 0)) {
      if (Status s = hand_over(); !s) return s;
      if (Status s = writer_->acquire(buffer_); !s) return latch(std::move(s));
    }
    // fill_ and the room are multiples of 8, so the padded payload fits whenever the payload does.
    const std::size_t part = std::min(left, buffer_.size() - fill_ - kMessageHeaderBytes);
    const MessageHeader header{opcode, static_cast<std::uint32_t>(part), bytes, offset};
    std::byte* at = buffer_.data() + fill_;
    std::memcpy(at, &header, sizeof header);
    if (part > 0) std::memcpy(at + kMessageHeaderBytes, data + offset, part);
    fill_ += kMessageHeaderBytes + round_up_8(part);
    offset += part;
    ++counters_.messages;
  } while (offset < bytes);
  ++counters_.transfers;
  counters_.payload_bytes += bytes;
  counters_.stalls = writer_->counters().stalls;
  return {};
}

Status Sender::post(std::uint32_t opcode, const void* data, std::size_t bytes) {
  if (data == nullptr && bytes > 0) return {Errc::invalid_argument, label() + ": no data for a transfer of " +
                                                                        std::to_string(bytes) + " B"};
  return append(opcode, static_cast<const std::byte*>(data), bytes);
}

Status Sender::send(std::uint32_t opcode, const void* data, std::size_t bytes) {
  if (Status s = post(opcode, data, bytes); !s) return s;
  return flush();
}

Status Sender::flush() {
  if (failure_.failed()) return failure_.again(label());
  if (rings_.closed()) return {};
  if (Status s = hand_over(); !s) return s;
  return latch(writer_->drain());
}

Status Sender::close() {
  if (rings_.closed()) return failure_.failed() ? failure_.again(label()) : Status();
  if (failure_.failed()) {
    (void)rings_.close();  // end of stream, if the peer is still there
    return failure_.again(label());
  }
  if (Status s = hand_over(); !s) {
    (void)rings_.close();
    return s;
  }
  return latch(rings_.close());
}

// ---------------------------------------------------------------------------------------------

Receiver::Receiver(cluster::Node& node, std::string_view tier, Side at, std::uint32_t lane,
                   std::chrono::milliseconds open_timeout)
    : rings_(open_receiver(node, tier, at, lane, open_timeout)),
      stall_timeout_(flow::detail::stall_timeout(rings_.spec())) {}

Status Receiver::malformed(const std::string& what) const {
  return {Errc::protocol, label() + ": malformed message at byte " + std::to_string(at_) + " of receive buffer " +
                              std::to_string(buffer_.sequence) + ": " + what};
}

Status Receiver::peek(const MessageHeader*& header, std::chrono::milliseconds timeout) {
  header = nullptr;
  if (at_ >= buffer_.bytes) {  // this RB is done (or none was taken yet): the next one
    if (ended_) return {};
    std::size_t source = 0;
    Status s = rings_.next(buffer_, source, timeout.count() > 0 ? timeout : stall_timeout_);  // gives the last RB back
    at_ = 0;
    if (!s) {
      buffer_ = {};
      return s;
    }
    if (rings_.finished()) {
      buffer_ = {};
      ended_ = true;
      if (in_transfer_) {
        return {Errc::protocol, label() + ": the sender closed in the middle of a transfer (" +
                                    std::to_string(expected_offset_) + " of " + std::to_string(expected_total_) +
                                    " B received)"};
      }
      return {};
    }
    ++counters_.buffers;
  }
  const std::size_t room = buffer_.bytes - at_;
  if (room < kMessageHeaderBytes) return malformed(std::to_string(room) + " B left, less than a header");
  const auto* h = reinterpret_cast<const MessageHeader*>(buffer_.data + at_);
  if (h->payload_bytes > room - kMessageHeaderBytes) {
    return malformed("a payload of " + std::to_string(h->payload_bytes) + " B in the " +
                     std::to_string(room - kMessageHeaderBytes) + " B left");
  }
  if (h->offset > h->total_bytes || h->payload_bytes > h->total_bytes - h->offset) {
    return malformed("payload " + std::to_string(h->payload_bytes) + " B at offset " + std::to_string(h->offset) +
                     " of a transfer of " + std::to_string(h->total_bytes) + " B");
  }
  if (h->payload_bytes == 0 && h->total_bytes != 0) return malformed("an empty part of a non-empty transfer");
  if (in_transfer_ && (h->offset != expected_offset_ || h->total_bytes != expected_total_ ||
                       h->opcode != expected_opcode_)) {
    return malformed("opcode " + std::to_string(h->opcode) + ", offset " + std::to_string(h->offset) + " of " +
                     std::to_string(h->total_bytes) + " B where the transfer under way (opcode " +
                     std::to_string(expected_opcode_) + ") continues at " + std::to_string(expected_offset_) +
                     " of " + std::to_string(expected_total_) + " B");
  }
  if (!in_transfer_ && h->offset != 0) {
    return malformed("a transfer starting at offset " + std::to_string(h->offset));
  }
  header = h;
  return {};
}

void Receiver::take(const MessageHeader& header, Message& message) {
  message.opcode = header.opcode;
  message.payload = {buffer_.data + at_ + kMessageHeaderBytes, header.payload_bytes};
  message.total_bytes = header.total_bytes;
  message.offset = header.offset;
  message.end_of_stream = false;
  at_ += kMessageHeaderBytes + round_up_8(header.payload_bytes);
  ++counters_.messages;
  counters_.payload_bytes += header.payload_bytes;
  if (message.last()) {
    in_transfer_ = false;
    ++counters_.transfers;
  } else {
    in_transfer_ = true;
    expected_offset_ = header.offset + header.payload_bytes;
    expected_total_ = header.total_bytes;
    expected_opcode_ = header.opcode;
  }
}

Status Receiver::receive(Message& message, std::chrono::milliseconds timeout) {
  message = Message{};
  const MessageHeader* header = nullptr;
  if (Status s = peek(header, timeout); !s) return s;
  if (header == nullptr) {
    message.end_of_stream = true;
    return {};
  }
  take(*header, message);
  return {};
}

Status Receiver::whole(std::byte* into, std::size_t room, Take mode, Transfer& transfer,
                       std::chrono::milliseconds timeout, std::vector<std::byte>* grow) {
  transfer = Transfer{};
  if (in_transfer_) {
    return {Errc::invalid_argument, label() + ": a whole transfer asked for in the middle of one taken message by message"};
  }
  const MessageHeader* header = nullptr;
  if (Status s = peek(header, timeout); !s) return s;
  if (header == nullptr) {
    transfer.end_of_stream = true;
    return {};
  }
  if (grow != nullptr) {  // the caller's vector takes the transfer's size
    grow->resize(header->total_bytes);
    into = grow->data();
    room = grow->size();
  }
  if (mode == Take::copy && header->total_bytes > room) {
    return {Errc::invalid_argument, label() + ": a transfer of " + std::to_string(header->total_bytes) +
                                        " B does not fit the " + std::to_string(room) + " B given"};
  }
  transfer.opcode = header->opcode;
  transfer.bytes = header->total_bytes;
  Message message;
  for (;;) {
    take(*header, message);
    if (mode == Take::copy && !message.payload.empty()) {
      std::memcpy(into + message.offset, message.payload.data(), message.payload.size());
    }
    ++transfer.messages;
    if (message.last()) return {};
    if (Status s = peek(header, timeout); !s) return s;
  }
}

Status Receiver::receive_transfer(std::span<std::byte> into, Transfer& transfer, std::chrono::milliseconds timeout) {
  return whole(into.data(), into.size(), Take::copy, transfer, timeout);
}

Status Receiver::receive_transfer(std::vector<std::byte>& into, Transfer& transfer,
                                  std::chrono::milliseconds timeout) {
  return whole(nullptr, 0, Take::copy, transfer, timeout, &into);
}

Status Receiver::discard_transfer(Transfer& transfer, std::chrono::milliseconds timeout) {
  return whole(nullptr, 0, Take::drop, transfer, timeout);
}

}  // namespace dfi::apps::commtier
