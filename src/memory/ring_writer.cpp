#include "dfi/memory/ring_writer.hpp"

#include <span>
#include <thread>

#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"

namespace dfi::memory {
namespace {

std::chrono::nanoseconds timeout_or_forever(std::chrono::milliseconds timeout) {
  if (timeout.count() == 0) return std::chrono::hours(24 * 365);
  return timeout;
}

}  // namespace

RingLayout RingLayout::make(std::uint32_t segments, std::uint32_t segment_bytes) {
  if (segments == 0) throw Error(Errc::invalid_argument, "ring: segment count must be at least 1");
  if (segment_bytes <= kFooterBytes || segment_bytes % 8 != 0) {
    throw Error(Errc::invalid_argument, "ring: segment size " + std::to_string(segment_bytes) +
                                            " B must be a multiple of 8 and larger than the " +
                                            std::to_string(kFooterBytes) + " B footer");
  }
  return RingLayout{segments, segment_bytes};
}

RingWriter::RingWriter(fabric::Worker& worker, fabric::Endpoint& endpoint,
                       const fabric::RemoteMemory& remote, std::size_t ring_offset,
                       RingLayout layout, RingWriterOptions options, std::string label)
    : worker_(&worker), endpoint_(&endpoint), remote_(&remote), ring_offset_(ring_offset),
      layout_(layout), mode_(options.mode), stall_timeout_(options.stall_timeout),
      label_(std::move(label)), backoff_(BackoffSettings::from_config()), credits_(layout.segments) {
  if (ring_offset + layout.bytes() > remote.size()) {
    throw Error(Errc::invalid_argument, label_ + ": ring of " + std::to_string(layout.bytes()) +
                                            " B at offset " + std::to_string(ring_offset) +
                                            " exceeds the target region of " +
                                            std::to_string(remote.size()) + " B");
  }
  if (options.allow_mapped && remote.mapped() != nullptr) {
    path_ = Path::mapped;
    mapped_ = static_cast<std::byte*>(remote.mapped()) + ring_offset;
    return;
  }
  path_ = options.allow_am && !endpoint.rma_native() ? Path::active_message : Path::put;
  const std::size_t count = std::max<std::size_t>(1, options.staging_segments);
  staging_ = fabric::MemoryRegion(worker.context(), count * layout.segment_bytes);
  for (std::size_t i = 0; i < count; ++i) {
    stagings_.push_back(Staging{static_cast<std::byte*>(staging_.data()) + i * layout.segment_bytes, {}, {0, 0}});
  }
  if (path_ == Path::active_message) {
    register_credit_words();
    // One round trip before the first segment, so that UCX has finished setting up the
    // connection when open returns: UCX 1.13 asserts in the target when a writer dies while the
    // target's wireup reply is still pending (it purges the reply and trips an assertion).
    std::uint64_t released = 0;
    if (Status s = endpoint.get(&released, sizeof released, remote, ring_offset + layout.credit_offset()); !s) {
      throw Error(s.code(), label_ + ": " + s.message());
    }
  }
}

RingWriter::~RingWriter() {
  if (released_token_ != 0) worker_->unregister_word(released_token_);
  if (answered_token_ != 0) worker_->unregister_word(answered_token_);
}

void RingWriter::register_credit_words() {
  released_token_ = worker_->register_word(&released_raised_);
  answered_token_ = worker_->register_word(&answered_);
}

void RingWriter::ask_for_credits() {
  if (answered_ < asked_ || !question_sent_.done()) return;  // one question at a time
  question_[0] = ring_offset_;
  question_[1] = released_token_;
  question_[2] = answered_token_;
  question_[3] = ++asked_;
  question_sent_ = endpoint_->am_send_async(kCreditAm, {}, std::as_bytes(std::span(question_)), /*reply=*/true);
}

void RingWriter::send_segment(Staging& staging, std::uint64_t state) {
  staging.header[0] = ring_offset_;
  staging.header[1] = state;
  staging.puts.push_back(endpoint_->am_send_async(kSegmentAm, std::as_bytes(std::span(staging.header)),
                                                  std::span(staging.base, fill_)));
}

std::uint64_t RingWriter::remote_word(std::size_t offset) { return load_acquire(mapped_ + offset); }

Status RingWriter::labelled(Status status) const {
  if (status.is_ok() || status.message().starts_with(label_)) return status;
  return {status.code(), label_ + ": " + status.message()};
}

Status RingWriter::stalled_error() const {
  return {Errc::timeout, label_ + ": no free segment within " + std::to_string(stall_timeout_.count()) +
                             " ms (is the target consuming?)"};
}

Status RingWriter::wait_free_slot_mapped() {
  const std::uint64_t needed = layout_.free_state_for(next_);
  if (needed == 0) return {};  // first lap: the ring starts zeroed
  const std::size_t offset = layout_.state_offset(next_);
  Deadline deadline(timeout_or_forever(stall_timeout_));
  Backoff backoff(backoff_, reinterpret_cast<std::uintptr_t>(this) ^ next_);
  for (;;) {
    if (remote_word(offset) == needed) return {};
    if (backoff.rounds() == 0) ++counters_.stalls;
    if (Status s = endpoint_->status(); !s) return s;
    if (deadline.expired()) return stalled_error();
    worker_->progress();  // keepalive and anything else queued on this worker
    backoff.pause();
  }
}

Status RingWriter::wait_free_slot_credits() {
  if (credits_ > 0) return {};
  Deadline deadline(timeout_or_forever(stall_timeout_));
  Backoff backoff(backoff_, reinterpret_cast<std::uintptr_t>(this) ^ next_);
  for (;;) {
    std::uint64_t released;
    if (Status s = released_count(released); !s) return s;
    credits_ = free_after(released);
    if (credits_ > 0) return {};
    if (backoff.rounds() == 0) ++counters_.stalls;
    if (Status s = endpoint_->status(); !s) return s;
    if (deadline.expired()) return stalled_error();
    backoff.pause();  // released_count() progresses the worker each round
  }
}

Status RingWriter::released_count(std::uint64_t& released) {
  switch (path_) {
    case Path::mapped:
      released = remote_word(layout_.credit_offset());
      return {};
    case Path::active_message:
      worker_->progress();  // runs the handler that raises released_raised_
      released = released_raised_;
      if (free_after(released) == 0) ask_for_credits();  // waiting: ask (again)
      return question_sent_.done() ? question_sent_.wait() : Status();
    case Path::put:
      break;
  }
  if (!credit_read_pending_) {
    credit_read_ = endpoint_->get_async(&released_seen_, 8, *remote_, ring_offset_ + layout_.credit_offset());
  }
  credit_read_pending_ = false;
  if (Status s = credit_read_.wait(); !s) return s;
  released = released_seen_;
  return {};
}

std::uint64_t RingWriter::free_after(std::uint64_t released) const noexcept {
  const std::uint64_t in_flight = (next_ - 1) - released;
  return in_flight < layout_.segments ? layout_.segments - in_flight : 0;
}

Status RingWriter::free_slots(std::uint64_t& free) {
  if (Status s = endpoint_->status(); !s) return labelled(std::move(s));
  std::uint64_t released = 0;
  if (Status s = released_count(released); !s) return labelled(std::move(s));
  free = free_after(released);
  return {};
}

Status RingWriter::acquire() {
  Status s = mapped_ != nullptr && mode_ == RingMode::bandwidth ? wait_free_slot_mapped() : wait_free_slot_credits();
  if (!s) return s;
  if (mapped_ != nullptr) {
    cursor_ = mapped_ + layout_.slot_offset(next_);
  } else {
    Staging& staging = stagings_[next_ % stagings_.size()];
    for (fabric::Request& put : staging.puts) {  // wrap-around: the only completion we wait for
      if (Status p = put.wait(); !p) return p;
    }
    staging.puts.clear();
    cursor_ = staging.base;
  }
  fill_ = 0;
  capacity_ = layout_.payload_capacity();
  return {};
}

Status RingWriter::publish(std::uint64_t flags) {
  const std::uint64_t sequence = next_;
  const std::uint64_t state = state_word(sequence, flags);
  const std::size_t capacity = layout_.payload_capacity();
  if (mapped_ != nullptr) {
    std::byte* slot = mapped_ + layout_.slot_offset(sequence);
    std::memcpy(slot + capacity, &fill_, sizeof(std::uint64_t));
    store_release(slot + capacity + 8, state);
  } else if (path_ == Path::active_message) {
    send_segment(stagings_[sequence % stagings_.size()], state);
    if (Status s = endpoint_->status(); !s) return s;
    worker_->progress();  // as below: a published segment leaves without the caller's next call
  } else {
    Staging& staging = stagings_[sequence % stagings_.size()];
    std::byte* footer = staging.base + capacity;
    const std::uint64_t fill = fill_;
    std::memcpy(footer, &fill, 8);
    std::memcpy(footer + 8, &state, 8);
    const std::size_t slot = ring_offset_ + layout_.slot_offset(sequence);
    if (fill_ == capacity) {  // payload and fill word are contiguous: one put
      staging.puts.push_back(endpoint_->put_async(staging.base, capacity + 8, *remote_, slot));
    } else {
      if (fill_ > 0) staging.puts.push_back(endpoint_->put_async(staging.base, fill_, *remote_, slot));
      staging.puts.push_back(endpoint_->put_async(footer, 8, *remote_, slot + capacity));
    }
    // Payload before state: the target may read the payload as soon as it sees the state word.
    if (Status f = worker_->fence(); !f) return f;
    staging.puts.push_back(endpoint_->put_async(footer + 8, 8, *remote_, slot + capacity + 8));
    if (Status s = endpoint_->status(); !s) return s;
    // Puts that did not fit into the transport at once wait in UCX until the worker is
    // progressed; one pass sends them now, so a published segment does not depend on the
    // caller's next fabric call (a thread that pushes and then waits elsewhere).
    worker_->progress();
  }
  ++counters_.segments;
  counters_.bytes += fill_;
  if (credits_ > 0) --credits_;
  // Refresh the credits in the background once half are used (active messages: ask; put: a
  // background get), so the source learns about released slots one round trip ahead of needing
  // them. Never after end-of-stream: the
  // target may free the ring as soon as it sees that segment.
  if ((flags & kEndOfStream) == 0 && credits_ == layout_.segments / 2) {
    if (path_ == Path::active_message) {
      ask_for_credits();
    } else if (path_ == Path::put && !credit_read_pending_) {
      credit_read_ = endpoint_->get_async(&released_seen_, 8, *remote_, ring_offset_ + layout_.credit_offset());
      credit_read_pending_ = true;
    }
  }
  ++next_;
  cursor_ = nullptr;
  capacity_ = 0;
  fill_ = 0;
  return {};
}

Status RingWriter::next_segment() {
  if (closed_) return {Errc::flow_failed, label_ + ": append after close"};
  if (capacity_ != 0) {
    if (fill_ == 0) {
      return {Errc::invalid_argument, label_ + ": tuple larger than the segment payload of " +
                                          std::to_string(layout_.payload_capacity()) + " B"};
    }
    if (Status s = publish(kConsumable); !s) return s;
  }
  return acquire();
}

Status RingWriter::append_latency(const void* data, std::size_t bytes) {
  if (closed_) return {Errc::flow_failed, label_ + ": append after close"};
  if (bytes > layout_.payload_capacity()) {
    return {Errc::invalid_argument, label_ + ": tuple of " + std::to_string(bytes) +
                                        " B larger than the segment payload of " +
                                        std::to_string(layout_.payload_capacity()) + " B"};
  }
  if (Status s = acquire(); !s) return labelled(std::move(s));
  std::memcpy(cursor_, data, bytes);
  fill_ = bytes;
  return labelled(publish(kConsumable));
}

Status RingWriter::flush() {
  if (closed_ || capacity_ == 0 || fill_ == 0) return {};
  return labelled(publish(kConsumable));
}

Status RingWriter::drain() {
  for (Staging& staging : stagings_) {
    for (fabric::Request& put : staging.puts) {
      if (Status p = put.wait(); !p) return labelled(std::move(p));
    }
    staging.puts.clear();
  }
  return {};
}

Status RingWriter::close() { return labelled(close_ring()); }

Status RingWriter::close_ring() {
  if (closed_) return {};
  if (Status s = flush(); !s) return s;
  if (capacity_ == 0) {
    if (Status s = acquire(); !s) return s;
  }
  fill_ = 0;
  if (Status s = publish(kConsumable | kEndOfStream); !s) return s;
  closed_ = true;
  if (Status s = drain(); !s) return s;
  if (path_ == Path::put) {
    credit_read_ = fabric::Request();
    return endpoint_->flush();
  }
  // Active messages: drained means every segment left this process, which is all the writer can
  // know without the consumer (an endpoint flush over tcp waits for the peer's progress).
  return {};
}

}  // namespace dfi::memory
