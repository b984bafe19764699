// memory::SegmentWriter<Access> — the one writer of segment rings (ring.hpp), for every flow and
// for the data mover: acquire a slot, fill it, publish it.
//
//   std::span<std::byte> payload;
//   writer.acquire(payload);           // waits for a free slot; a span of payload_capacity bytes
//   ... write n bytes into payload ...
//   writer.publish(n);                 // fill word, state word, published head
//   writer.publish_from(data, n);      // or: acquire + one copy + publish
//
// Access (ring_access.hpp) says where the ring is:
//  - LocalRing: the span is the slot itself; publish is three stores (then the ring's PublishHook,
//    if it has one). No fabric call.
//  - RemoteRing, mapped path: the span is the slot in the peer's memory (through ucp_rkey_ptr);
//    publish is three stores, the state word with release order.
//  - RemoteRing, put path: the span is a local staging segment; publish puts payload and fill,
//    fences, puts the state word, then the head word.
//  - RemoteRing, active-message path: the span is a staging segment that travels as one
//    zero-copy active message; the owner's SegmentReceiver places it and publishes it.
// On the staging paths, completion of a staging segment's send is waited for only when the
// staging segments wrap around (options.staging_segments).
//
// Free slots are credits (003 §5.3): a local count, refreshed from the ring's released tail
// (RingLayout::free_slots) when it runs out, and ahead of time once per half ring on the staging
// paths (put: a background get of the tail; active message: a question the owner's receiver
// answers through the reply endpoint by raising two words this writer registered). Where the
// ring is local or mapped, the tail is a load.
//
// Shared rings (RingShare): several writers, each owned by its own thread, feed one ring. Each
// fills a segment of its own (a local buffer where the ring is local or mapped, its staging
// segment otherwise) and takes the ring's next sequence only when it publishes it, and only once
// that sequence's slot is free: one compare-and-swap per segment, no lock, and a writer that
// stops writing (or sleeps waiting for a slot) never holds back the others' segments. It then
// copies the segment in (local, mapped) or sends it (staging paths), and publishes it. Each writer's segments keep its order; the
// writers' segments interleave. The last writer to close publishes the end-of-stream.
//
// Owned by one thread (the one owning the endpoint's worker). Not movable: the ring's owner
// raises words inside it by active message.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dfi/common/backoff.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/memory/ring.hpp"
#include "dfi/memory/ring_access.hpp"

namespace dfi::memory {

// What the writers of one shared ring share (see above). Create it with the number of writers
// that will close the ring; it must outlive them. Thread-safe.
struct RingShare {
  explicit RingShare(std::uint32_t writers) noexcept : open(writers) {}
  alignas(64) std::atomic<std::uint64_t> next{1};  // the sequence the next publication takes
  alignas(64) std::atomic<std::uint64_t> tail{0};  // the highest released tail a writer learned
  std::atomic<std::uint32_t> open;                 // writers that have not closed or abandoned
  std::atomic<bool> abandoned{false};              // one abandoned: no end-of-stream at all
};

struct SegmentWriterOptions {
  std::size_t staging_segments = 4;  // staging paths: local segments in flight before wrap-around
  std::chrono::milliseconds stall_timeout{60000};  // longest wait for a free slot (0 = forever)
  RingShare* share = nullptr;  // set: one of several writers of a shared ring (see above)
};

template <class Access>
class SegmentWriter {
 public:
  // Builds the access policy in place from `access_args` (LocalRing or RemoteRing constructor
  // arguments). RemoteRing: allocates the staging segments (staging paths); on the
  // active-message path makes one round trip to the owner before returning, so that UCX has
  // finished setting up the connection (UCX 1.13 asserts in the owner when a writer dies while
  // its wireup reply is pending). Throws dfi::Error naming the ring.
  template <class... AccessArgs>
  explicit SegmentWriter(SegmentWriterOptions options, AccessArgs&&... access_args)
      : access_(std::forward<AccessArgs>(access_args)...) {
    init(options);
  }
  SegmentWriter(const SegmentWriter&) = delete;
  SegmentWriter& operator=(const SegmentWriter&) = delete;
  ~SegmentWriter();

  // Waits until the next segment's slot is free and returns its payload span
  // (layout().payload_capacity() bytes). Calling it again before publish() returns the same span.
  // Errors: peer_failed, timeout (no free slot within stall_timeout), flow_failed (after close).
  Status acquire(std::span<std::byte>& payload);
  // Publishes the acquired segment with `fill` payload bytes and `flags` (kConsumable, plus
  // kEndOfStream for the last one; use close() for that). Hands it to the fabric: does not wait
  // until it is visible at the reader. Errors: invalid_argument (nothing acquired, fill larger
  // than the span, a fill other than the one written with write()), peer_failed.
  Status publish(std::size_t fill, std::uint64_t flags = kConsumable);
  // Two-phase publication, for a party that writes one segment into several rings and must not
  // let any of them show it before all hold it (the data mover's ordered replication):
  // write(fill) sends the acquired segment's payload and fill word into the ring (put path: puts,
  // whose remote completion Endpoint::flush() confirms; local and mapped: already there) without
  // publishing it; the publish(fill) after it writes only the state and head words. Errors:
  // invalid_argument (nothing acquired, fill larger than the span, written twice, the
  // active-message path, where a segment travels with its state in one message, or a shared
  // ring), peer_failed.
  Status write(std::size_t fill);
  // acquire(), one copy of `bytes` from `data` into the span, publish(). `data` may be reused when
  // it returns. Errors: as acquire() and publish(); invalid_argument when `bytes` exceeds the
  // payload capacity.
  Status publish_from(const void* data, std::size_t bytes, std::uint64_t flags = kConsumable);
  // Slots of the ring that the reader released and this writer has not used yet: the next
  // acquire() returns at once when this is non-zero. Reads the released tail (a load where local
  // or mapped; the staging paths progress the worker and may ask the owner). Never call it after
  // close(). Errors: peer_failed, timeout.
  Status free_slots(std::uint64_t& free);
  // Waits until every send issued so far has left this process (staging paths; local
  // completion). Without it, a published segment may wait in UCX until the worker is progressed
  // again. Errors: peer_failed, timeout.
  Status drain();
  // Publishes an end-of-stream segment (in the acquired slot, if any), then waits until
  // everything is on its way (put path: visible at the reader). A writer of a shared ring waits
  // for its own segments (put path: until visible), and only the last one to close publishes the
  // end-of-stream. Idempotent.
  Status close();

  // Leaves the ring without an end-of-stream, for a writer whose reader learns of the end some
  // other way (a replicated service moving to a new view): waits for the sends in flight (their
  // errors ignored), then refuses every later call as after close(). Idempotent; never throws.
  void abandon() noexcept;

  // Continues a ring that an earlier writer (a data mover that died) published `published`
  // segments into: the next segment gets sequence published + 1, and the credits are read from
  // the ring's released tail when first needed. `ended`: the last of them was end-of-stream (the
  // writer is closed). For a writer rebuilt from the ring's words; call before any other call.
  // Not for a writer of a shared ring.
  void resume(std::uint64_t published, bool ended) noexcept {
    next_ = published + 1;
    credits_ = 0;
    closed_ = ended;
  }

  bool closed() const noexcept { return closed_; }
  // The sequence the next published segment gets (1 for the first; a shared ring: the next
  // sequence any of its writers takes).
  std::uint64_t next_sequence() const noexcept {
    return share_ != nullptr ? share_->next.load(std::memory_order_relaxed) : next_;
  }
  const RingCounters& counters() const noexcept { return counters_; }
  const RingLayout& layout() const noexcept { return access_.layout(); }
  const std::string& label() const noexcept { return access_.label(); }
  Access& access() noexcept { return access_; }
  const Access& access() const noexcept { return access_; }
  // True when the span of acquire() lies in the ring itself (local or mapped, not shared):
  // tuples are written in place, and nothing is sent.
  bool in_place() const noexcept;
  // Local memory this writer uses (staging segments; a shared ring's local segment).
  std::size_t memory_bytes() const noexcept { return staging_.size() + own_.size(); }

 private:
  struct Staging {
    std::byte* base = nullptr;            // segment_bytes, footer included
    std::vector<fabric::Request> sends;   // in flight from this buffer
    std::uint64_t header[2] = {0, 0};     // active message: {ring offset, state}, read by UCX
  };

  void init(SegmentWriterOptions options);
  // Prefixes an error with this ring's label.
  Status labelled(Status status) const;
  // Waits until the slot of segment `sequence` is free (the credits cover it).
  Status wait_for_credit(std::uint64_t sequence);
  // The staging segment the next publication uses.
  Staging& staging() noexcept { return stagings_[published_ % stagings_.size()]; }
  // Publishes end-of-stream (in the acquired slot, if any), then finish_sends().
  Status end_stream();
  // Waits until every send issued so far has left (put path: is visible at the reader).
  Status finish_sends();
  // Checks that a segment is acquired and `fill` fits it (the common checks of write and publish).
  Status check_fill(std::size_t fill, const char* what) const;
  // Put path: the acquired staging segment's payload and fill word into slot `sequence`.
  void put_payload(Staging& staging, std::size_t fill, std::uint64_t sequence);
  // The reader's released tail as far as this writer can learn it now; the caller is short of
  // credits (active messages: progress, and ask when none are free; put: wait for a get, the
  // background one if it is in flight).
  // `sequence`: the segment waiting for its slot (asked for when it has none).
  Status released(std::uint64_t& tail, std::uint64_t sequence);
  // Refreshes the credits in the background (once per half ring).
  void refresh_ahead();
  // A shared ring: remembers a released tail learned, for every writer.
  void learned(std::uint64_t tail) noexcept;
  void ask_for_credits();  // active-message path: one question at a time
  std::byte* ring_base() const noexcept;  // local or mapped ring, else null

  Access access_;
  std::chrono::milliseconds stall_timeout_{0};
  BackoffSettings backoff_;
  std::byte* acquired_ = nullptr;  // payload of the acquired segment, or null
  std::optional<std::size_t> written_;  // the fill write() sent for the acquired segment
  std::uint64_t next_ = 1;         // sequence of the acquired (or next) segment
  std::uint64_t credits_ = 0;
  std::uint64_t published_ = 0;  // segments this writer published (picks its staging segment)
  bool closed_ = false;
  RingCounters counters_;

  // Shared rings.
  RingShare* share_ = nullptr;
  std::vector<std::byte> own_;  // local or mapped ring: the segment filled before it is copied in
  std::uint64_t tail_known_ = 0;  // the highest released tail this writer knows
  std::uint64_t refreshed_at_ = 0;  // the sequence published when credits were last asked for

  // Staging paths.
  fabric::MemoryRegion staging_;
  std::vector<Staging> stagings_;
  std::uint64_t tail_seen_ = 0;        // put path: the background get's target
  fabric::Request tail_read_;
  bool tail_read_pending_ = false;
  // Active-message path: the words the owner's answers raise (released tail, number of the last
  // question answered), and the question in flight (UCX reads it until the send completes).
  std::uint64_t tail_raised_ = 0;
  std::uint64_t answered_ = 0;
  std::uint64_t asked_ = 0;
  std::uint32_t tail_token_ = 0;
  std::uint32_t answered_token_ = 0;
  std::uint64_t question_[4] = {0, 0, 0, 0};
  fabric::Request question_sent_;
};

extern template class SegmentWriter<LocalRing>;
extern template class SegmentWriter<RemoteRing>;

}  // namespace dfi::memory
