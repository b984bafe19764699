// memory::RingReader — the target's side of one segment ring, in the target's own memory.
//
// Zero copy: peek() returns a view of the next consumable segment inside the ring; the segment
// stays valid until release(), which hands the slot back to the source. Owned by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "dfi/memory/ring.hpp"

namespace dfi::memory {

struct SegmentView {
  const std::byte* data = nullptr;
  std::size_t bytes = 0;          // payload bytes (a multiple of the tuple width)
  std::uint64_t sequence = 0;
  bool end_of_stream = false;     // the source closed; this segment carries no tuples
};

class RingReader {
 public:
  RingReader() = default;
  RingReader(std::byte* base, RingLayout layout) : base_(base), layout_(layout) {}

  // The next segment if its state says consumable, else nullopt. Does not advance.
  std::optional<SegmentView> peek() const {
    const std::uint64_t state = load_acquire(base_ + layout_.state_offset(next_));
    if (state_sequence(state) != next_ || (state_flags(state) & kConsumable) == 0) return std::nullopt;
    SegmentView view;
    view.data = base_ + layout_.slot_offset(next_);
    view.bytes = *reinterpret_cast<const std::uint64_t*>(base_ + layout_.fill_offset(next_));
    view.sequence = next_;
    view.end_of_stream = (state_flags(state) & kEndOfStream) != 0;
    return view;
  }

  // Hands the segment last returned by peek() back to the source and moves to the next one.
  void release() {
    store_release(base_ + layout_.state_offset(next_), state_word(next_, 0));
    ++next_;
    store_release(base_ + layout_.credit_offset(), next_ - 1);  // released count, for credits
  }

  std::uint64_t next_sequence() const { return next_; }
  const RingLayout& layout() const { return layout_; }

 private:
  std::byte* base_ = nullptr;
  RingLayout layout_;
  std::uint64_t next_ = 1;
};

}  // namespace dfi::memory
