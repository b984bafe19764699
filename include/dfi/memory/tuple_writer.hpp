// memory::TupleWriter<Access> — tuple batching on top of a SegmentWriter (segment_writer.hpp).
//
// append() copies a tuple into the acquired segment (in place where the ring is local or mapped,
// else into a staging segment); a full segment is published and the next one acquired. Latency
// mode publishes every append as its own segment. The hot path is one bounds check and one copy.
//
// Owned by one thread, like the SegmentWriter under it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>

#include "dfi/common/error.hpp"
#include "dfi/memory/segment_writer.hpp"

namespace dfi::memory {

template <class Access>
class TupleWriter {
 public:
  template <class... AccessArgs>
  TupleWriter(RingMode mode, SegmentWriterOptions options, AccessArgs&&... access_args)
      : segments_(options, std::forward<AccessArgs>(access_args)...), mode_(mode) {}

  // Copies `bytes` (<= payload capacity) into the current segment; publishes it first when the
  // tuple does not fit. In latency mode, publishes at once. Errors: invalid_argument (tuple
  // larger than a segment's payload), peer_failed, timeout (no free slot within the stall
  // timeout), flow_failed (after close).
  Status append(const void* data, std::size_t bytes) {
    // One check on the hot path: in latency mode span_ stays empty, so every append takes the
    // slow path, which publishes it as a segment of its own.
    if (fill_ + bytes > span_.size()) [[unlikely]] {
      if (mode_ == RingMode::latency) return segments_.publish_from(data, bytes);
      if (Status s = next_segment(bytes); !s) return s;
    }
    copy_tuple(span_.data() + fill_, data, bytes);
    fill_ += bytes;
    return {};
  }
  // Appends a run of whole tuples of `width` bytes (`bytes` a multiple of it, checked by the
  // caller) with one memcpy per segment: fills the current segment with as many whole tuples as
  // fit, publishes every segment that has no room for another tuple at once (whole), and goes on
  // in the next. Latency mode publishes each tuple as a segment of its own, as append() does.
  // `appended` counts the bytes that went into segments (all of them unless an error stopped the
  // run: the tuples before it are in the flow, the rest are not). Errors: as append().
  Status append_run(const void* data, std::size_t bytes, std::size_t width, std::size_t& appended) {
    const auto* p = static_cast<const std::byte*>(data);
    appended = 0;
    if (mode_ == RingMode::latency) [[unlikely]] {
      for (; appended < bytes; appended += width) {
        if (Status s = segments_.publish_from(p + appended, width); !s) return s;
      }
      return {};
    }
    while (appended < bytes) {
      if (fill_ + width > span_.size()) {
        if (Status s = next_segment(width); !s) return s;
      }
      const std::size_t room = (span_.size() - fill_) / width * width;
      const std::size_t n = std::min(room, bytes - appended);
      std::memcpy(span_.data() + fill_, p + appended, n);
      fill_ += n;
      appended += n;
      if (fill_ + width > span_.size()) {
        if (Status s = flush(); !s) return s;
      }
    }
    return {};
  }
  // Publishes the current segment if it holds anything (does not wait until it is visible).
  Status flush() {
    if (fill_ == 0) return {};
    const std::size_t fill = fill_;
    fill_ = 0;
    span_ = {};
    return segments_.publish(fill);
  }
  // Publishes what is batched, then `bytes` from `data` as a segment of their own (one copy).
  Status publish_from(const void* data, std::size_t bytes) {
    if (Status s = flush(); !s) return s;
    return segments_.publish_from(data, bytes);
  }
  // SegmentWriter::drain.
  Status drain() { return segments_.drain(); }
  // Publishes what is batched, then end-of-stream; waits until all of it is on its way.
  // Idempotent.
  Status close() {
    if (segments_.closed()) return {};
    if (Status s = flush(); !s) return s;
    return segments_.close();
  }
  // Leaves the ring without publishing what is batched or an end-of-stream
  // (SegmentWriter::abandon). Appends after it fail (flow_failed).
  void abandon() noexcept {
    segments_.abandon();
    span_ = {};
    fill_ = 0;
  }
  // Slots free at the reader (SegmentWriter::free_slots).
  Status free_slots(std::uint64_t& free) { return segments_.free_slots(free); }

  SegmentWriter<Access>& segments() noexcept { return segments_; }
  const SegmentWriter<Access>& segments() const noexcept { return segments_; }
  bool closed() const noexcept { return segments_.closed(); }
  // Bytes appended and not yet published.
  std::size_t batched_bytes() const noexcept { return fill_; }
  const RingCounters& counters() const noexcept { return segments_.counters(); }
  std::size_t memory_bytes() const noexcept { return segments_.memory_bytes(); }

 private:
  // The copy of one tuple. A flow's tuples all have its schema's width, so the switch is one
  // well-predicted branch, and the common widths become a few inlined loads and stores instead
  // of a call to memcpy with a run-time size (the push's largest cost after the hash at 16 B).
  [[gnu::always_inline]] static void copy_tuple(std::byte* to, const void* from, std::size_t bytes) noexcept {
    switch (bytes) {
      case 8: std::memcpy(to, from, 8); return;
      case 16: std::memcpy(to, from, 16); return;
      case 24: std::memcpy(to, from, 24); return;
      case 32: std::memcpy(to, from, 32); return;
      case 48: std::memcpy(to, from, 48); return;
      case 64: std::memcpy(to, from, 64); return;
      default: std::memcpy(to, from, bytes); return;
    }
  }

  Status next_segment(std::size_t bytes) {
    if (bytes > segments_.layout().payload_capacity()) {
      return {Errc::invalid_argument, segments_.label() + ": tuple of " + std::to_string(bytes) +
                                          " B larger than the segment payload of " +
                                          std::to_string(segments_.layout().payload_capacity()) + " B"};
    }
    if (Status s = flush(); !s) return s;
    return segments_.acquire(span_);
  }

  SegmentWriter<Access> segments_;
  RingMode mode_;
  std::span<std::byte> span_;  // the acquired segment's payload, empty while none is acquired
  std::size_t fill_ = 0;
};

}  // namespace dfi::memory
