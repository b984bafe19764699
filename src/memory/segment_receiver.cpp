#include "dfi/memory/segment_receiver.hpp"

#include <cstdio>
#include <cstring>

namespace dfi::memory {

SegmentReceiver::SegmentReceiver(fabric::Worker& worker, std::byte* base, std::size_t rings, RingLayout layout,
                                 std::string label)
    : worker_(worker), base_(base), rings_(rings), layout_(layout), label_(std::move(label)) {
  worker_.set_am_handler(kSegmentAm, [this](const fabric::AmMessage& m, fabric::AmReplier&) { on_segment(m); });
  worker_.set_am_handler(kCreditAm,
                         [this](const fabric::AmMessage& m, fabric::AmReplier& r) { on_credit_request(m, r); });
}

SegmentReceiver::~SegmentReceiver() {
  // The handlers capture this object: leave ones that ignore late messages behind.
  worker_.set_am_handler(kSegmentAm, [](const fabric::AmMessage&, fabric::AmReplier&) {});
  worker_.set_am_handler(kCreditAm, [](const fabric::AmMessage&, fabric::AmReplier&) {});
}

std::ptrdiff_t SegmentReceiver::ring_of(std::uint64_t offset, const char* what) {
  const std::size_t ring_bytes = layout_.bytes();
  if (offset % ring_bytes == 0 && offset / ring_bytes < rings_) return static_cast<std::ptrdiff_t>(offset / ring_bytes);
  if (!complained_) {
    complained_ = true;
    std::fprintf(stderr, "dfi: %s: dropped a %s for ring offset %llu (%zu rings of %zu B): protocol error\n",
                 label_.c_str(), what, static_cast<unsigned long long>(offset), rings_, ring_bytes);
  }
  return -1;
}

void SegmentReceiver::on_segment(const fabric::AmMessage& message) {
  std::uint64_t header[2];  // {ring offset, state}
  if (message.header.size() != sizeof header) return (void)ring_of(~0ull, "segment with a malformed header");
  std::memcpy(header, message.header.data(), sizeof header);
  const std::ptrdiff_t ring = ring_of(header[0], "segment");
  const std::uint64_t state = header[1];
  const std::uint64_t sequence = state_sequence(state);
  if (ring < 0 || sequence == 0) return;
  if (message.data.size() > layout_.payload_capacity()) return (void)ring_of(~0ull, "segment larger than a slot");
  std::byte* base = base_ + header[0];
  std::memcpy(base + layout_.slot_offset(sequence), message.data.data(), message.data.size());
  publish_in_place(base, layout_, sequence, message.data.size(), state);
}

void SegmentReceiver::on_credit_request(const fabric::AmMessage& message, fabric::AmReplier& replier) {
  std::uint64_t request[4];  // {ring offset, released-word token, answered-word token, question}
  if (message.data.size() != sizeof request) return (void)ring_of(~0ull, "credit request of the wrong size");
  std::memcpy(request, message.data.data(), sizeof request);
  if (ring_of(request[0], "credit request") < 0) return;
  const std::uint64_t released = load_acquire(base_ + request[0] + layout_.tail_offset());
  const std::uint64_t answer[2][2] = {{request[1], released}, {request[2], request[3]}};
  (void)replier.raise(answer, 2);  // a writer that died gets nothing, and nothing aborts
}

}  // namespace dfi::memory
