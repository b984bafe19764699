// memory::SegmentReader<Access> — the one reader of segment rings (ring.hpp).
//
//   SegmentReader<LocalRing>   a ring in this process's memory (a flow target's own rings):
//                              peek() is one acquire load; the view points into the ring (zero
//                              copy) and stays valid until release(). No fabric call.
//   SegmentReader<RemoteRing>  a ring in a peer's memory, for a third party such as the data
//                              mover: where the ring is mapped, the same loads through the
//                              pointer; otherwise a get of the published head, then one get of
//                              the segment into a local buffer (the view points there). release()
//                              raises the ring's released tail (a store, or a fenced put).
//
// Both release a segment by raising the released tail, which is all a writer needs to reuse the
// slot. Owned by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "dfi/common/error.hpp"
#include "dfi/memory/ring.hpp"
#include "dfi/memory/ring_access.hpp"

namespace dfi::memory {

// The segment with sequence `next` of the ring at `base` (in this process's address space) if its
// state says consumable, else nullopt: one acquire load, the view points into the ring.
inline std::optional<SegmentView> peek_in_place(const std::byte* base, const RingLayout& layout,
                                                std::uint64_t next) {
  const std::uint64_t state = load_acquire(base + layout.state_offset(next));
  if (state_sequence(state) != next || (state_flags(state) & kConsumable) == 0) return std::nullopt;
  SegmentView view;
  view.data = base + layout.slot_offset(next);
  view.bytes = load_acquire(base + layout.fill_offset(next));  // ordered before the state word
  view.sequence = next;
  view.end_of_stream = (state_flags(state) & kEndOfStream) != 0;
  return view;
}

template <class Access>
class SegmentReader;

template <>
class SegmentReader<LocalRing> {
 public:
  SegmentReader() = default;
  SegmentReader(std::byte* base, RingLayout layout) : base_(base), layout_(layout) {}

  // The next segment if its state says consumable, else nullopt. Does not advance.
  std::optional<SegmentView> peek() const { return peek_in_place(base_, layout_, next_); }
  // Hands the segment last returned by peek() back to the writer and moves to the next one.
  void release() { store_release(base_ + layout_.tail_offset(), next_++); }

  // The ring's published head (sequence of the last segment the writer published).
  std::uint64_t published() const { return load_acquire(base_ + layout_.head_offset()); }
  std::uint64_t next_sequence() const { return next_; }
  const RingLayout& layout() const { return layout_; }

 private:
  std::byte* base_ = nullptr;
  RingLayout layout_;
  std::uint64_t next_ = 1;
};

template <>
class SegmentReader<RemoteRing> {
 public:
  // Builds the RemoteRing in place from `access_args` (allow_am is ignored: a reader only loads,
  // gets and stores words).
  template <class... AccessArgs>
  explicit SegmentReader(AccessArgs&&... access_args) : access_(std::forward<AccessArgs>(access_args)...) {
    if (access_.mapped() == nullptr) buffer_.resize(access_.layout().segment_bytes);
  }

  // The next segment if the writer published it: `view` is set, or reset when nothing is there.
  // Does not advance; the view stays valid until release(). Errors: peer_failed, timeout.
  Status peek(std::optional<SegmentView>& view);
  // Hands the segment last returned by peek() back to the writer (raises the released tail) and
  // moves to the next one. Errors: peer_failed, timeout.
  Status release();
  // The ring's published head. Errors: peer_failed, timeout.
  Status published(std::uint64_t& head) const { return access_.load(access_.layout().head_offset(), head); }
  // Continues a ring whose reader (a data mover that died) released `released` segments: the
  // next peek() looks for sequence released + 1. For a reader rebuilt from the ring's released
  // tail; call before peek().
  void resume(std::uint64_t released) noexcept {
    next_ = released + 1;
    head_ = released;
  }

  std::uint64_t next_sequence() const { return next_; }
  const RingLayout& layout() const { return access_.layout(); }
  RemoteRing& access() noexcept { return access_; }

 private:
  RemoteRing access_;
  std::vector<std::byte> buffer_;  // the segment last read, where the ring is not mapped
  std::uint64_t head_ = 0;         // the published head as last read
  std::uint64_t next_ = 1;
};

}  // namespace dfi::memory
