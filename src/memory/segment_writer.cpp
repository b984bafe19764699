#include "dfi/memory/segment_writer.hpp"

#include <algorithm>
#include <cstring>
#include <span>

#include "dfi/common/deadline.hpp"
#include "dfi/fabric/worker.hpp"

namespace dfi::memory {
namespace {

std::chrono::nanoseconds timeout_or_forever(std::chrono::milliseconds timeout) {
  if (timeout.count() == 0) return std::chrono::hours(24 * 365);
  return timeout;
}

}  // namespace

template <class Access>
void SegmentWriter<Access>::init(SegmentWriterOptions options) {
  stall_timeout_ = options.stall_timeout;
  const RingLayout& layout = access_.layout();
  bool polls_are_syscalls = false;
  if constexpr (Access::kRemote) polls_are_syscalls = access_.path() == RemoteRing::Path::active_message;
  backoff_ = BackoffSettings::from_config(polls_are_syscalls);
  credits_ = layout.segments;
  share_ = options.share;
  if (share_ != nullptr && ring_base() != nullptr) own_.resize(layout.segment_bytes);
  if constexpr (Access::kRemote) {
    if (access_.path() == RemoteRing::Path::mapped) return;
    const std::size_t count = std::max<std::size_t>(1, options.staging_segments);
    staging_ = fabric::MemoryRegion(access_.worker().context(), count * layout.segment_bytes);
    for (std::size_t i = 0; i < count; ++i) {
      stagings_.push_back(Staging{static_cast<std::byte*>(staging_.data()) + i * layout.segment_bytes, {}, {0, 0}});
    }
    if (access_.path() == RemoteRing::Path::active_message) {
      tail_token_ = access_.worker().register_word(&tail_raised_);
      answered_token_ = access_.worker().register_word(&answered_);
      // One round trip before the first segment (see the constructor's comment).
      std::uint64_t tail = 0;
      if (Status s = access_.load(layout.tail_offset(), tail); !s) {
        throw Error(s.code(), access_.label() + ": " + s.message());
      }
    }
  }
}

template <class Access>
SegmentWriter<Access>::~SegmentWriter() {
  if constexpr (Access::kRemote) {
    if (tail_token_ != 0) access_.worker().unregister_word(tail_token_);
    if (answered_token_ != 0) access_.worker().unregister_word(answered_token_);
  }
}

template <class Access>
bool SegmentWriter<Access>::in_place() const noexcept {
  return ring_base() != nullptr && share_ == nullptr;
}

template <class Access>
std::byte* SegmentWriter<Access>::ring_base() const noexcept {
  if constexpr (Access::kRemote) {
    return access_.mapped();
  } else {
    return access_.base();
  }
}

template <class Access>
Status SegmentWriter<Access>::labelled(Status status) const {
  if (status.is_ok() || status.message().starts_with(access_.label())) return status;
  return {status.code(), access_.label() + ": " + status.message()};
}

template <class Access>
void SegmentWriter<Access>::ask_for_credits() {
  if constexpr (Access::kRemote) {
    if (answered_ < asked_ || !question_sent_.done()) return;  // one question at a time
    question_[0] = access_.offset();
    question_[1] = tail_token_;
    question_[2] = answered_token_;
    question_[3] = ++asked_;
    question_sent_ = access_.endpoint().am_send_async(kCreditAm, {}, std::as_bytes(std::span(question_)),
                                                      /*reply=*/true);
  }
}

template <class Access>
Status SegmentWriter<Access>::released(std::uint64_t& tail, std::uint64_t sequence) {
  const RingLayout& layout = access_.layout();
  if (std::byte* ring = ring_base(); ring != nullptr) {
    tail = load_acquire(ring + layout.tail_offset());
    if constexpr (Access::kRemote) access_.worker().progress();  // keepalive and the like
    return {};
  }
  if constexpr (Access::kRemote) {
    if (access_.path() == RemoteRing::Path::active_message) {
      access_.worker().progress();  // runs the handler that raises tail_raised_
      tail = tail_raised_;
      if (layout.free_slots(sequence - 1, tail) == 0) ask_for_credits();  // waiting: ask (again)
      return question_sent_.done() ? question_sent_.wait() : Status();
    }
    if (!tail_read_pending_) {
      tail_read_ = access_.endpoint().get_async(&tail_seen_, 8, access_.remote(), access_.offset() + layout.tail_offset());
    }
    tail_read_pending_ = false;
    if (Status s = tail_read_.wait(); !s) return s;
    tail = tail_seen_;
  }
  return {};
}

template <class Access>
void SegmentWriter<Access>::refresh_ahead() {
  if constexpr (Access::kRemote) {
    if (access_.path() == RemoteRing::Path::active_message) {
      ask_for_credits();
    } else if (access_.path() == RemoteRing::Path::put && !tail_read_pending_) {
      tail_read_ = access_.endpoint().get_async(&tail_seen_, 8, access_.remote(),
                                                access_.offset() + access_.layout().tail_offset());
      tail_read_pending_ = true;
    }
  }
}

template <class Access>
void SegmentWriter<Access>::learned(std::uint64_t tail) noexcept {
  tail_known_ = std::max(tail_known_, tail);
  std::uint64_t shared = share_->tail.load(std::memory_order_relaxed);
  while (shared < tail && !share_->tail.compare_exchange_weak(shared, tail, std::memory_order_relaxed)) {
  }
}

template <class Access>
Status SegmentWriter<Access>::wait_for_credit(std::uint64_t sequence) {
  const RingLayout& layout = access_.layout();
  if (share_ == nullptr) {
    if (credits_ > 0) return {};
  } else {
    // What any writer of the ring learned counts for all (free slots are the ring's). Returns
    // when the slot of `sequence` is free, or when another writer has taken `sequence` already
    // (the caller then tries the next).
    tail_known_ = std::max(tail_known_, share_->tail.load(std::memory_order_relaxed));
    if (sequence <= tail_known_ + layout.segments) return {};
  }
  Deadline deadline(timeout_or_forever(stall_timeout_));
  Backoff backoff(backoff_, reinterpret_cast<std::uintptr_t>(this) ^ sequence);
  for (;;) {
    std::uint64_t tail = 0;
    if (Status s = released(tail, sequence); !s) return s;
    if (share_ != nullptr) {
      learned(tail);
      if (sequence <= tail_known_ + layout.segments) return {};
      sequence = std::max(sequence, share_->next.load(std::memory_order_relaxed));  // taken meanwhile?
    } else {
      credits_ = layout.free_slots(sequence - 1, tail);
      if (credits_ > 0) return {};
    }
    if (backoff.rounds() == 0) ++counters_.stalls;
    if (Status s = access_.status(); !s) return s;
    if (deadline.expired()) {
      return {Errc::timeout, access_.label() + ": no free segment within " + std::to_string(stall_timeout_.count()) +
                                 " ms (is the reader consuming?)"};
    }
    if constexpr (Access::kRemote) {
      if (access_.path() == RemoteRing::Path::active_message) {
        // The credits come as an active message to this worker: sleep on its events (woken at
        // once by the answer) instead of polling it, each poll being a system call.
        // The targets this thread reads meanwhile: their writers may be what our reader waits
        // for (fabric::owned_workers).
        backoff.pause([this](std::chrono::microseconds pause) {
          if (fabric::owned_workers::progress(&access_.worker()) != 0) return;
          access_.worker().wait_for_event(pause);
        });
        continue;
      }
    }
    backoff.pause();
  }
}

template <class Access>
Status SegmentWriter<Access>::acquire(std::span<std::byte>& payload) {
  const std::size_t capacity = access_.layout().payload_capacity();
  if (acquired_ != nullptr) {
    payload = {acquired_, capacity};
    return {};
  }
  if (closed_) return {Errc::flow_failed, access_.label() + ": write after close"};
  // A shared ring's sequence (and so its slot) is taken when the segment is published.
  if (share_ == nullptr) {
    if (Status s = wait_for_credit(next_); !s) return labelled(std::move(s));
  }
  if (std::byte* ring = ring_base(); ring != nullptr) {
    acquired_ = share_ == nullptr ? ring + access_.layout().slot_offset(next_) : own_.data();
  } else {
    Staging& next = staging();
    for (fabric::Request& send : next.sends) {  // wrap-around: the only completion we wait for
      if (Status s = send.wait(); !s) return labelled(std::move(s));
    }
    next.sends.clear();
    acquired_ = next.base;
  }
  payload = {acquired_, capacity};
  return {};
}

template <class Access>
Status SegmentWriter<Access>::check_fill(std::size_t fill, const char* what) const {
  const std::size_t capacity = access_.layout().payload_capacity();
  if (acquired_ == nullptr) {
    return {Errc::invalid_argument, access_.label() + ": " + what + " without an acquired segment"};
  }
  if (fill > capacity) {
    return {Errc::invalid_argument, access_.label() + ": " + what + " of " + std::to_string(fill) +
                                        " B into a segment payload of " + std::to_string(capacity) + " B"};
  }
  return {};
}

template <class Access>
void SegmentWriter<Access>::put_payload(Staging& staging, std::size_t fill, std::uint64_t sequence) {
  if constexpr (Access::kRemote) {
    const RingLayout& layout = access_.layout();
    const std::size_t capacity = layout.payload_capacity();
    fabric::Endpoint& endpoint = access_.endpoint();
    std::byte* footer = staging.base + capacity;
    const std::uint64_t fill_word = fill;
    std::memcpy(footer, &fill_word, 8);
    const std::size_t slot = access_.offset() + layout.slot_offset(sequence);
    const fabric::RemoteMemory& remote = access_.remote();
    if (fill == capacity) {  // payload and fill word are contiguous: one put
      staging.sends.push_back(endpoint.put_async(staging.base, capacity + 8, remote, slot));
    } else {
      if (fill > 0) staging.sends.push_back(endpoint.put_async(staging.base, fill, remote, slot));
      staging.sends.push_back(endpoint.put_async(footer, 8, remote, slot + capacity));
    }
  }
}

template <class Access>
Status SegmentWriter<Access>::write(std::size_t fill) {
  if (Status s = check_fill(fill, "write"); !s) return s;
  if (written_) return {Errc::invalid_argument, access_.label() + ": segment " + std::to_string(next_) + " written twice"};
  if (share_ != nullptr) {
    return {Errc::invalid_argument, access_.label() + ": a two-phase publication needs a ring of one writer"};
  }
  if constexpr (Access::kRemote) {
    if (access_.path() == RemoteRing::Path::active_message) {
      return {Errc::invalid_argument,
              access_.label() + ": a two-phase publication needs one-sided writes (the active-message path "
                                "sends a segment with its state)"};
    }
    if (ring_base() == nullptr) {
      put_payload(staging(), fill, next_);
      if (Status s = access_.endpoint().status(); !s) return labelled(std::move(s));
    }
  }
  written_ = fill;
  return {};
}

template <class Access>
Status SegmentWriter<Access>::publish(std::size_t fill, std::uint64_t flags) {
  const RingLayout& layout = access_.layout();
  const std::size_t capacity = layout.payload_capacity();
  if (Status s = check_fill(fill, "publish"); !s) return s;
  if (written_ && *written_ != fill) {
    return {Errc::invalid_argument, access_.label() + ": publish of " + std::to_string(fill) + " B after a write of " +
                                        std::to_string(*written_) + " B"};
  }
  std::uint64_t sequence = next_;
  if (share_ != nullptr) {
    // The ring's next sequence, taken only once its slot is free: the reader takes segments in
    // sequence order, so between taking a sequence and publishing it a writer only copies or
    // sends (a writer that waited there, or slept in a backoff, would stall every other writer).
    sequence = share_->next.load(std::memory_order_relaxed);
    for (;;) {
      if (Status s = wait_for_credit(sequence); !s) return labelled(std::move(s));
      if (share_->next.compare_exchange_weak(sequence, sequence + 1, std::memory_order_relaxed)) break;
    }
    if (std::byte* ring = ring_base(); ring != nullptr && fill > 0) {
      std::memcpy(ring + layout.slot_offset(sequence), own_.data(), fill);
    }
  }
  const std::uint64_t state = state_word(sequence, flags);
  if (std::byte* ring = ring_base(); ring != nullptr) {
    publish_in_place(ring, layout, sequence, fill, state);
  } else if constexpr (Access::kRemote) {
    Staging& staging = this->staging();
    fabric::Endpoint& endpoint = access_.endpoint();
    if (access_.path() == RemoteRing::Path::active_message) {
      staging.header[0] = access_.offset();
      staging.header[1] = state;
      staging.sends.push_back(endpoint.am_send_async(kSegmentAm, std::as_bytes(std::span(staging.header)),
                                                     std::span(staging.base, fill)));
    } else {
      if (!written_) put_payload(staging, fill, sequence);
      std::byte* footer = staging.base + capacity;
      std::memcpy(footer + 8, &state, 8);
      const std::size_t slot = access_.offset() + layout.slot_offset(sequence);
      const fabric::RemoteMemory& remote = access_.remote();
      // The head is a hint for third parties (the state word stays the truth): after the state,
      // except for end-of-stream, where it goes before the fence, since the reader may free the
      // ring as soon as it sees that state (ring.hpp).
      staging.header[0] = sequence;
      const std::size_t head = access_.offset() + layout.head_offset();
      const bool last = (flags & kEndOfStream) != 0;
      if (last) staging.sends.push_back(endpoint.put_async(&staging.header[0], 8, remote, head));
      // Payload before state: the reader may read the payload as soon as it sees the state word.
      if (Status f = access_.worker().fence(); !f) return labelled(std::move(f));
      staging.sends.push_back(endpoint.put_async(footer + 8, 8, remote, slot + capacity + 8));
      if (!last) staging.sends.push_back(endpoint.put_async(&staging.header[0], 8, remote, head));
    }
    if (Status s = endpoint.status(); !s) return labelled(std::move(s));
    // Sends that did not fit into the transport at once wait in UCX until the worker is
    // progressed; one pass sends them now, so a published segment does not depend on the
    // caller's next fabric call (a thread that pushes and then waits elsewhere). done() makes
    // that pass while the last send is pending, and none when it completed inside the call
    // (over tcp each pass is a system call).
    (void)staging.sends.back().done();
  }
  if constexpr (!Access::kRemote) access_.published();
  ++counters_.segments;
  counters_.bytes += fill;
  ++published_;
  // Refresh the credits in the background once half are used, so the writer learns about
  // released slots one round trip ahead of needing them. Never after end-of-stream: the reader
  // may free the ring as soon as it sees that segment.
  const bool last = (flags & kEndOfStream) != 0;
  if (share_ == nullptr) {
    if (credits_ > 0) --credits_;
    if (!last && credits_ == layout.segments / 2) refresh_ahead();
    ++next_;
  } else if (!last && layout.free_slots(sequence, tail_known_) <= layout.segments / 2 &&
             sequence >= refreshed_at_ + layout.segments / 2) {
    refreshed_at_ = sequence;  // at most once per half ring of this writer's view
    refresh_ahead();
  }
  acquired_ = nullptr;
  written_.reset();
  return {};
}

template <class Access>
Status SegmentWriter<Access>::publish_from(const void* data, std::size_t bytes, std::uint64_t flags) {
  const std::size_t capacity = access_.layout().payload_capacity();
  if (bytes > capacity) {
    return {Errc::invalid_argument, access_.label() + ": segment of " + std::to_string(bytes) +
                                        " B larger than the segment payload of " + std::to_string(capacity) + " B"};
  }
  std::span<std::byte> payload;
  if (Status s = acquire(payload); !s) return s;
  if (bytes > 0) std::memcpy(payload.data(), data, bytes);
  return publish(bytes, flags);
}

template <class Access>
Status SegmentWriter<Access>::free_slots(std::uint64_t& free) {
  if (Status s = access_.status(); !s) return labelled(std::move(s));
  std::uint64_t tail = 0;
  const std::uint64_t next = next_sequence();
  if (Status s = released(tail, next); !s) return labelled(std::move(s));
  free = access_.layout().free_slots(next - 1, tail);
  return {};
}

template <class Access>
Status SegmentWriter<Access>::drain() {
  for (Staging& staging : stagings_) {
    for (fabric::Request& send : staging.sends) {
      if (Status s = send.wait(); !s) return labelled(std::move(s));
    }
    staging.sends.clear();
  }
  return {};
}

template <class Access>
Status SegmentWriter<Access>::finish_sends() {
  if (Status s = drain(); !s) return s;
  if constexpr (Access::kRemote) {
    if (access_.path() == RemoteRing::Path::put) {
      if (tail_read_pending_) (void)tail_read_.wait();
      tail_read_ = fabric::Request();
      tail_read_pending_ = false;
      return labelled(access_.endpoint().flush());
    }
  }
  // Local, mapped: stores are visible. Active messages: drained means every segment left this
  // process, which is all the writer can know without the reader (an endpoint flush over tcp
  // waits for the peer's progress).
  return access_.status();
}

template <class Access>
Status SegmentWriter<Access>::end_stream() {
  std::span<std::byte> payload;
  if (Status s = acquire(payload); !s) return s;
  if (Status s = publish(0, kConsumable | kEndOfStream); !s) return s;
  closed_ = true;
  return finish_sends();
}

template <class Access>
Status SegmentWriter<Access>::close() {
  if (closed_) return {};
  if (share_ == nullptr) return end_stream();
  // A shared ring: this writer's segments are on their way (put path: visible) before it counts
  // as closed, so that nothing of it reaches the ring after the end-of-stream, whoever publishes
  // that. Closed from here on, so that it counts down once.
  closed_ = true;
  if (Status s = finish_sends(); !s) return s;
  if (share_->open.fetch_sub(1, std::memory_order_acq_rel) != 1) return {};
  // The last: every other writer's sequences were taken before this one's (their closes
  // happened before), so the end-of-stream comes after all of their segments.
  if (share_->abandoned.load(std::memory_order_relaxed)) return {};
  closed_ = false;
  return end_stream();
}

template <class Access>
void SegmentWriter<Access>::abandon() noexcept {
  if (closed_) return;
  closed_ = true;
  if (share_ != nullptr) {
    share_->abandoned.store(true, std::memory_order_relaxed);
    share_->open.fetch_sub(1, std::memory_order_acq_rel);
  }
  for (Staging& staging : stagings_) {
    for (fabric::Request& send : staging.sends) (void)send.wait();
    staging.sends.clear();
  }
}

template class SegmentWriter<LocalRing>;
template class SegmentWriter<RemoteRing>;

}  // namespace dfi::memory
