// memory::RingWriter — the source's side of one segment ring at a remote target.
//
// Tuples are appended into the current segment; a full segment is published and the next one
// acquired. Three ways to reach the ring, chosen once at construction, per connection:
//  - mapped (shm, RemoteMemory::mapped() != null): tuples are copied straight into the target's
//    ring and the state word is published with a release store; no fabric call at all;
//  - put (native RMA, Endpoint::rma_native(): shm without direct writes, InfiniBand, RoCE):
//    tuples are batched in a local staging segment, written with one put, then fence, then a put
//    of the state word;
//  - active message (emulated RMA: tcp; needs options.allow_am, i.e. a SegmentReceiver on the
//    endpoint's peer worker): the staging segment travels as one zero-copy active message that
//    the target's handler places into the slot and publishes (ring.hpp has the wire format). The
//    target never applies a one-sided write, so a writer that dies mid-stream cannot make UCX
//    abort the target (UCX 1.13 does when the acknowledgement of an emulated put fails).
// On both staging paths, completion of a staging segment's send is waited for only when the
// staging buffers wrap around.
// Free slots: the mapped path reads the state word of the slot it is about to write (a local
// load). The staging paths track them with credits (003 §5.3): a local count of free slots,
// refreshed from the number of segments the target released. The put path reads that number
// with a get issued in the background once half the credits are used (one remote read per half
// ring, not one per segment); on the active-message path the same question goes by
// active message: the writer asks once per half ring (and while it waits for a slot), the
// target's handler answers through the reply endpoint; never a connection back to the writer.
// Latency mode publishes every append as its own segment.
//
// Owned by one thread (the one owning the endpoint's worker).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dfi/common/backoff.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/memory/ring.hpp"

namespace dfi::memory {

enum class RingMode { bandwidth, latency };

struct RingWriterOptions {
  RingMode mode = RingMode::bandwidth;
  bool allow_mapped = true;          // use the mapped path when the transport offers it
  bool allow_am = false;             // the target runs a SegmentReceiver on the endpoint's worker
  std::size_t staging_segments = 4;  // put path: local segments in flight before wrap-around
  std::chrono::milliseconds stall_timeout{60000};  // longest wait for a free slot (0 = forever)
};

struct RingCounters {
  std::uint64_t segments = 0;  // published, including the end-of-stream segment
  std::uint64_t bytes = 0;     // payload bytes published
  std::uint64_t stalls = 0;    // times a free slot was not there when needed
};

class RingWriter {
 public:
  // `remote` is the target's region holding the ring at `ring_offset`. `label` names this
  // (flow, source, target) in every error. Allocates the staging segments (put path).
  RingWriter(fabric::Worker& worker, fabric::Endpoint& endpoint, const fabric::RemoteMemory& remote,
             std::size_t ring_offset, RingLayout layout, RingWriterOptions options, std::string label);
  // Not movable: the target raises a word inside it by active message.
  RingWriter(const RingWriter&) = delete;
  RingWriter& operator=(const RingWriter&) = delete;
  ~RingWriter();

  // Copies `bytes` (<= payload capacity) into the current segment; publishes it first when the
  // tuple does not fit. In latency mode, publishes at once. Errors: peer_failed, timeout (no free
  // slot within stall_timeout), flow_failed (used after close).
  Status append(const void* data, std::size_t bytes) {
    if (mode_ == RingMode::latency) [[unlikely]] return append_latency(data, bytes);
    if (fill_ + bytes > capacity_) [[unlikely]] {
      if (Status s = next_segment(); !s) return labelled(std::move(s));
    }
    std::memcpy(cursor_ + fill_, data, bytes);
    fill_ += bytes;
    return {};
  }

  // Publishes the current segment if it holds anything (and hands it to the fabric: does not wait
  // until it is visible at the target).
  Status flush();
  // Waits until every put issued so far has left this process (local completion; over TCP the
  // fence before a state word may hold it back until the payload is acknowledged). Without it, a
  // published segment may wait in UCX until this worker is progressed again. Errors: peer_failed,
  // timeout. No-op on the mapped path.
  Status drain();
  // Publishes what is left, then an end-of-stream segment, then waits until all of it is
  // visible at the target. Idempotent.
  Status close();

  enum class Path { mapped, put, active_message };
  Path path() const noexcept { return path_; }
  bool mapped() const noexcept { return mapped_ != nullptr; }
  // Slots of the ring that the target released and this writer has not used yet: the next
  // segment finds its slot free at once when this is non-zero. Progresses the worker (staging
  // paths); reads the ring's credit word (mapped: a load; put: a get; active message: the word
  // the target raises). Never call it after close(). Errors: peer_failed, timeout.
  Status free_slots(std::uint64_t& free);
  bool closed() const noexcept { return closed_; }
  const RingCounters& counters() const noexcept { return counters_; }
  // Local memory this writer uses (staging segments).
  std::size_t memory_bytes() const noexcept { return staging_.size(); }

 private:
  struct Staging {
    std::byte* base = nullptr;           // segment_bytes, footer included
    std::vector<fabric::Request> puts;   // in flight from this buffer
    std::uint64_t header[2] = {0, 0};    // active message: {ring offset, state}, read by UCX
  };

  Status append_latency(const void* data, std::size_t bytes);
  // Prefixes an error from the fabric with this ring's label (flow, source, target).
  Status labelled(Status status) const;
  Status next_segment();                        // publish current (if any), acquire the next
  Status close_ring();
  Status acquire();                             // wait until slot of next_ is free
  Status publish(std::uint64_t flags);          // write current segment with state flags
  Status wait_free_slot_mapped();   // bandwidth mode, mapped: the slot's own state word
  Status wait_free_slot_credits();  // otherwise: credits
  Status stalled_error() const;
  std::uint64_t remote_word(std::size_t offset);  // mapped read of a ring word
  // The target's released-segments count as far as this writer can learn it without waiting
  // (put path: waits for the background get, or issues one and waits).
  Status released_count(std::uint64_t& released);
  // Free slots if the target released `released` segments.
  std::uint64_t free_after(std::uint64_t released) const noexcept;
  void send_segment(Staging& staging, std::uint64_t state);  // active-message path
  void register_credit_words();
  // Asks the target for its released count unless a question is still unanswered.
  void ask_for_credits();

  fabric::Worker* worker_ = nullptr;
  fabric::Endpoint* endpoint_ = nullptr;
  const fabric::RemoteMemory* remote_ = nullptr;
  std::size_t ring_offset_ = 0;
  RingLayout layout_;
  RingMode mode_ = RingMode::bandwidth;
  std::chrono::milliseconds stall_timeout_{0};
  std::string label_;
  BackoffSettings backoff_;

  Path path_ = Path::put;
  std::byte* mapped_ = nullptr;   // the ring through a mapped pointer, or null (put path)
  std::byte* cursor_ = nullptr;   // payload of the current segment (mapped ring or staging)
  std::size_t fill_ = 0;
  std::size_t capacity_ = 0;      // 0 while no segment is acquired
  std::uint64_t next_ = 1;        // sequence of the current (or next) segment
  bool closed_ = false;

  fabric::MemoryRegion staging_;
  std::vector<Staging> stagings_;
  std::uint64_t state_out_ = 0;   // unused on the mapped path

  // Credits: free slots as far as this writer knows, and the background read of the
  // target's released-segments word that refreshes them.
  std::uint64_t credits_ = 0;
  std::uint64_t released_seen_ = 0;
  fabric::Request credit_read_;
  bool credit_read_pending_ = false;

  // Active-message path: the words the target's answers raise (released count, number of the
  // last question answered), and the question in flight (UCX reads it until the send completes).
  std::uint64_t released_raised_ = 0;
  std::uint64_t answered_ = 0;
  std::uint64_t asked_ = 0;
  std::uint32_t released_token_ = 0;
  std::uint32_t answered_token_ = 0;
  std::uint64_t question_[4] = {0, 0, 0, 0};
  fabric::Request question_sent_;

  RingCounters counters_;
};

}  // namespace dfi::memory
