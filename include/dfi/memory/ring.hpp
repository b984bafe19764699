// memory::RingLayout — the segment ring that one source writes into at one target (003 §5.1).
//
// A ring is `segments` contiguous segments of `segment_bytes`. Each segment ends with a 16-byte
// footer: [fill bytes: u64][state: u64]. The state word publishes the segment:
//
//   state = sequence << 2 | flags      flags: kConsumable (1), kEndOfStream (2)
//
// Sequence numbers start at 1; segment n lives in slot (n - 1) % segments. The writer writes the
// payload and the fill word, orders them before the state word (fence, or a release store when
// it writes through a pointer), then writes the state word. A reader takes segment n when the
// state word of its slot says sequence n and consumable (an acquire load).
//
// After the segments, each ring has two words that say where it stands (each on a cache line of
// its own), so a third party (the data mover of network-driven flows) learns its state with one
// read each:
//   published head  the sequence of the last segment published (written after its state word,
//                   but before it for the end-of-stream segment, see Lifetime; the state word
//                   stays the truth: a reader may see the head before the state it names);
//   released tail   the number of segments the reader released (credits, 003 §5.3). A reader
//                   releases segment n by raising the tail to n; the writer may write sequence m
//                   into its slot exactly when tail >= m - segments. Free slots are counted in
//                   one place: RingLayout::free_slots(head, tail).
//
// Lifetime: the writer touches the ring not at all after it published the end-of-stream
// segment's state word (everything it issued before, the head included, is ordered ahead of it
// by the fence), so a reader may free its ring once it has seen end-of-stream from every writer.
//
// Where the transport has no native RMA (tcp), a writer sends each segment as one active message
// to a SegmentReceiver on the ring's owner (segment_receiver.hpp), whose handler places the
// payload and publishes fill, state and head exactly as a writer through a mapped pointer would;
// the reader cannot tell the difference. The wire format of those messages:
//   kSegmentAm  header {ring offset: u64, state: u64}, data = the payload (fill = its size)
//   kCreditAm   data {ring offset, released-word token, answered-word token, question: u64},
//               sent with a reply endpoint; the answer raises the writer's two registered words
//               to the ring's released tail and to the question's number
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dfi::memory {

inline constexpr std::size_t kFooterBytes = 16;
inline constexpr std::size_t kWordLine = 64;  // bytes between the head and the tail word
inline constexpr std::uint16_t kSegmentAm = 1;
inline constexpr std::uint16_t kCreditAm = 2;
inline constexpr std::uint64_t kConsumable = 1;
inline constexpr std::uint64_t kEndOfStream = 2;

constexpr std::uint64_t state_word(std::uint64_t sequence, std::uint64_t flags) {
  return (sequence << 2) | flags;
}
constexpr std::uint64_t state_sequence(std::uint64_t state) { return state >> 2; }
constexpr std::uint64_t state_flags(std::uint64_t state) { return state & 3u; }

struct RingLayout {
  std::uint32_t segments = 0;
  std::uint32_t segment_bytes = 0;  // including the footer

  // Validated construction: segments >= 1, segment_bytes a multiple of 8 and larger than the
  // footer. Throws dfi::Error(invalid_argument) naming the bad value.
  static RingLayout make(std::uint32_t segments, std::uint32_t segment_bytes);

  std::size_t payload_capacity() const { return segment_bytes - kFooterBytes; }
  // Ring bytes including the trailing head and tail words, each on a cache line of its own (the
  // writer stores one, the reader the other, once per segment).
  std::size_t bytes() const { return std::size_t{segments} * segment_bytes + 2 * kWordLine; }
  std::size_t slot_offset(std::uint64_t sequence) const {
    return static_cast<std::size_t>((sequence - 1) % segments) * segment_bytes;
  }
  std::size_t fill_offset(std::uint64_t sequence) const {
    return slot_offset(sequence) + payload_capacity();
  }
  std::size_t state_offset(std::uint64_t sequence) const { return fill_offset(sequence) + 8; }
  std::size_t head_offset() const { return std::size_t{segments} * segment_bytes; }
  std::size_t tail_offset() const { return head_offset() + kWordLine; }
  // Slots free for the writer when it published `head` segments and the reader released `tail`.
  std::uint64_t free_slots(std::uint64_t head, std::uint64_t tail) const {
    const std::uint64_t in_flight = head - tail;
    return in_flight < segments ? segments - in_flight : 0;
  }
};

enum class RingMode { bandwidth, latency };

struct RingCounters {
  std::uint64_t segments = 0;  // published, including the end-of-stream segment
  std::uint64_t bytes = 0;     // payload bytes published
  std::uint64_t stalls = 0;    // times a free slot was not there when needed
};

// What a reader sees of one published segment.
struct SegmentView {
  const std::byte* data = nullptr;
  std::size_t bytes = 0;          // payload bytes (a multiple of the tuple width)
  std::uint64_t sequence = 0;
  bool end_of_stream = false;     // the writer closed; this segment carries no tuples
};

// Atomic access to a word of ring memory that another process (or the NIC) also touches.
inline std::uint64_t load_acquire(const void* word) {
  return std::atomic_ref(*static_cast<std::uint64_t*>(const_cast<void*>(word)))
      .load(std::memory_order_acquire);
}
inline void store_release(void* word, std::uint64_t value) {
  std::atomic_ref(*static_cast<std::uint64_t*>(word)).store(value, std::memory_order_release);
}

// Publishes segment `sequence` of the ring at `ring` (in this process's address space: local or
// mapped) whose payload is in its slot: the fill word, then the state word with release order,
// and the published head — after the state, except for end-of-stream, where the head goes
// first, since the reader may free the ring as soon as it sees that state (see Lifetime). The
// one publication order of every writer and receiver that stores through a pointer.
inline void publish_in_place(std::byte* ring, const RingLayout& layout, std::uint64_t sequence,
                             std::uint64_t fill, std::uint64_t state) {
  std::byte* footer = ring + layout.fill_offset(sequence);
  std::memcpy(footer, &fill, sizeof fill);
  const bool last = (state_flags(state) & kEndOfStream) != 0;
  if (last) store_release(ring + layout.head_offset(), sequence);
  store_release(footer + 8, state);
  if (!last) store_release(ring + layout.head_offset(), sequence);
}

}  // namespace dfi::memory
