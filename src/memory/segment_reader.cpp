#include "dfi/memory/segment_reader.hpp"

#include <cstring>

namespace dfi::memory {

Status SegmentReader<RemoteRing>::peek(std::optional<SegmentView>& view) {
  view.reset();
  const RingLayout& layout = access_.layout();
  if (std::byte* ring = access_.mapped(); ring != nullptr) {
    view = peek_in_place(ring, layout, next_);  // the same loads, through the pointer
    return access_.status();
  }
  if (head_ < next_) {
    if (Status s = access_.load(layout.head_offset(), head_); !s) return s;
    if (head_ < next_) return {};
  }
  if (Status s = access_.read(layout.slot_offset(next_), buffer_.data(), layout.segment_bytes); !s) return s;
  std::uint64_t fill = 0, state = 0;
  std::memcpy(&fill, buffer_.data() + layout.payload_capacity(), 8);
  std::memcpy(&state, buffer_.data() + layout.payload_capacity() + 8, 8);
  // The head may arrive before the state it follows (puts over a reordering transport): the
  // state word decides.
  if (state_sequence(state) != next_ || (state_flags(state) & kConsumable) == 0) return {};
  if (fill > layout.payload_capacity()) {
    return {Errc::protocol, access_.label() + ": segment " + std::to_string(next_) + " claims " +
                                std::to_string(fill) + " B in a slot of " +
                                std::to_string(layout.payload_capacity()) + " B"};
  }
  SegmentView v;
  v.data = buffer_.data();
  v.bytes = fill;
  v.sequence = next_;
  v.end_of_stream = (state_flags(state) & kEndOfStream) != 0;
  view = v;
  return {};
}

Status SegmentReader<RemoteRing>::release() {
  if (Status s = access_.store(access_.layout().tail_offset(), next_); !s) return s;
  ++next_;
  return {};
}

}  // namespace dfi::memory
