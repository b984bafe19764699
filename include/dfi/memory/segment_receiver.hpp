// memory::SegmentReceiver — the target's side of the active-message path (ring.hpp, ring_writer.hpp).
//
// Where the transport has no native RMA (tcp), writers send each segment as one active message to
// a worker of the target instead of emulated puts. The receiver's handler, run inside progress()
// on the thread that consumes, places the payload into the ring slot and publishes fill and state
// exactly as a writer through a mapped pointer would, so RingReader reads these rings unchanged.
// Credits go back the other way: a writer says hello (its rank, worker address and the token of a
// word it registered), the receiver connects back, and each ring's CreditReturn raises that word
// to the ring's released count every `threshold` releases (a quarter ring by default), so a
// writer learns about free slots without ever asking.
//
// A writer only sends into a slot the reader released (credits), so the handler never overwrites
// unread data. Messages from a writer that died are complete or dropped by UCX; either way no
// one-sided write from a failed endpoint is applied.
//
// Owned by one thread, the consumer, which calls progress() holding the worker's claim
// (Worker::claim): a ProgressThread may run the handlers in between, while the consumer does
// something else, so that UCX connection set-up and peers' closes never wait for the consumer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/memory/ring.hpp"

namespace dfi::memory {

// Returns the released count of one ring to its writer (see the file comment).
class CreditReturn {
 public:
  explicit CreditReturn(std::uint64_t threshold) : threshold_(threshold == 0 ? 1 : threshold) {}
  ~CreditReturn();
  CreditReturn(const CreditReturn&) = delete;
  CreditReturn& operator=(const CreditReturn&) = delete;
  // The reader released segments up to `count` (RingReader::release calls it; only records, so
  // the reader may release without holding the worker).
  void released(std::uint64_t count);
  // The writer said hello: raise its word `token` through `endpoint` from now on.
  void connect(fabric::Endpoint endpoint, std::uint32_t token);
  // Sends the released count once `threshold` more segments were released, or a count that
  // waited for the previous message to leave. Needs the worker (SegmentReceiver::progress).
  void poll();
  // The writer's endpoint failed; nothing more is sent (the flow learns of the death through
  // its liveness check).
  bool failed() const noexcept { return failed_; }

 private:
  void send();

  std::unique_ptr<fabric::WordRaiser> raiser_;
  std::uint64_t released_ = 0;
  std::uint64_t notified_ = 0;
  std::uint64_t threshold_;
  bool failed_ = false;
};

class SegmentReceiver {
 public:
  // Serves `rings` rings of `layout`, back to back from `base`, for writers that send to
  // `worker`; installs the kSegmentAm and kHelloAm handlers on it. `label` names the target in
  // messages.
  SegmentReceiver(fabric::Worker& worker, std::byte* base, std::size_t rings, RingLayout layout,
                  std::string label);
  SegmentReceiver(const SegmentReceiver&) = delete;
  SegmentReceiver& operator=(const SegmentReceiver&) = delete;
  ~SegmentReceiver();

  // Progresses the worker (running the handlers), connects back to writers that said hello, and
  // sends credits that waited. Returns the worker's event count (0: nothing happened).
  unsigned progress();
  // The credit return of ring `ring`, for its RingReader.
  CreditReturn* credit_return(std::size_t ring) { return credits_[ring].get(); }

 private:
  struct Hello {
    std::size_t ring = 0;
    std::uint32_t token = 0;
    int rank = -1;
    std::string address;
  };

  void on_segment(const fabric::AmMessage& message);
  void on_hello(const fabric::AmMessage& message);
  // The ring a message's offset names, or -1 (logged once) when it names none.
  std::ptrdiff_t ring_of(std::uint64_t offset, const char* what);

  fabric::Worker& worker_;
  std::byte* base_;
  std::size_t rings_;
  RingLayout layout_;
  std::string label_;
  std::vector<std::unique_ptr<CreditReturn>> credits_;
  std::vector<Hello> hellos_;  // said hello inside a handler; connected after it
  bool complained_ = false;
};

}  // namespace dfi::memory
