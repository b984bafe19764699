#include "dfi/memory/segment_receiver.hpp"

#include <cstdio>
#include <cstring>

#include "dfi/memory/ring_reader.hpp"

namespace dfi::memory {

void notify_released(CreditReturn* credits, std::uint64_t count) { credits->released(count); }

// ---------------------------------------------------------------------------------------------
// CreditReturn

void CreditReturn::released(std::uint64_t count) { released_ = count; }

void CreditReturn::connect(fabric::Endpoint endpoint, std::uint32_t token) {
  raiser_ = std::make_unique<fabric::WordRaiser>(std::move(endpoint), token);
  failed_ = false;
  notified_ = 0;
  if (released_ > 0) send();
}

void CreditReturn::send() {
  notified_ = released_;
  if (!raiser_->raise(released_)) failed_ = true;
}

void CreditReturn::poll() {
  if (!raiser_ || failed_) return;
  if (released_ - notified_ >= threshold_) return send();
  if (!raiser_->idle() && !raiser_->poll()) failed_ = true;
}

CreditReturn::~CreditReturn() {
  // Credits to a writer that is gone or done do not matter: never wait for it to progress.
  if (raiser_) raiser_->endpoint().close_now();
}

// ---------------------------------------------------------------------------------------------
// SegmentReceiver

SegmentReceiver::SegmentReceiver(fabric::Worker& worker, std::byte* base, std::size_t rings, RingLayout layout,
                                 std::string label)
    : worker_(worker), base_(base), rings_(rings), layout_(layout), label_(std::move(label)) {
  // A quarter ring per credit message: a writer that used all its slots has at least three
  // quarters of them unread at the target, so the reader always gets to the next raise.
  for (std::size_t r = 0; r < rings; ++r) credits_.push_back(std::make_unique<CreditReturn>(layout.segments / 4));
  worker_.set_am_handler(kSegmentAm, [this](const fabric::AmMessage& m, fabric::AmReplier&) { on_segment(m); });
  worker_.set_am_handler(kHelloAm, [this](const fabric::AmMessage& m, fabric::AmReplier&) { on_hello(m); });
}

SegmentReceiver::~SegmentReceiver() {
  // The handlers capture this object: leave ones that ignore late messages behind.
  worker_.set_am_handler(kSegmentAm, [](const fabric::AmMessage&, fabric::AmReplier&) {});
  worker_.set_am_handler(kHelloAm, [](const fabric::AmMessage&, fabric::AmReplier&) {});
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
  std::uint64_t header[2];
  if (message.header.size() != sizeof header) return (void)ring_of(~0ull, "segment with a malformed header");
  std::memcpy(header, message.header.data(), sizeof header);
  const std::ptrdiff_t ring = ring_of(header[0], "segment");
  const std::uint64_t state = header[1];
  const std::uint64_t sequence = state_sequence(state);
  if (ring < 0 || sequence == 0) return;
  if (message.data.size() > layout_.payload_capacity()) return (void)ring_of(~0ull, "segment larger than a slot");
  std::byte* base = base_ + header[0];
  std::memcpy(base + layout_.slot_offset(sequence), message.data.data(), message.data.size());
  const std::uint64_t fill = message.data.size();
  std::memcpy(base + layout_.fill_offset(sequence), &fill, sizeof fill);
  store_release(base + layout_.state_offset(sequence), state);
}

void SegmentReceiver::on_hello(const fabric::AmMessage& message) {
  std::uint64_t header[3];
  if (message.header.size() != sizeof header) return (void)ring_of(~0ull, "hello with a malformed header");
  std::memcpy(header, message.header.data(), sizeof header);
  const std::ptrdiff_t ring = ring_of(header[0], "hello");
  if (ring < 0) return;
  hellos_.push_back(Hello{static_cast<std::size_t>(ring), static_cast<std::uint32_t>(header[1]),
                          static_cast<int>(header[2]),
                          std::string(reinterpret_cast<const char*>(message.data.data()), message.data.size())});
}

unsigned SegmentReceiver::progress() {
  const unsigned events = worker_.progress();
  if (!hellos_.empty()) [[unlikely]] {
    // Connecting inside a handler would re-enter UCX's progress: done here, after it.
    for (Hello& hello : hellos_) {
      try {
        credits_[hello.ring]->connect(worker_.connect(hello.rank, hello.address), hello.token);
      } catch (const Error& e) {
        std::fprintf(stderr, "dfi: %s: cannot return credits to the writer of ring %zu (rank %d): %s\n",
                     label_.c_str(), hello.ring, hello.rank, e.what());
      }
    }
    hellos_.clear();
  }
  for (auto& credits : credits_) credits->poll();
  return events;
}

}  // namespace dfi::memory
