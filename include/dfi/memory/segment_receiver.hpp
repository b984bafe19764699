// memory::SegmentReceiver — the target's side of the active-message path (ring.hpp, segment_writer.hpp).
//
// Where the transport has no native RMA (tcp), writers send each segment as one active message to
// a worker of the target instead of emulated puts. The receiver's handler places the payload into
// the ring slot and publishes fill, state and head exactly as a writer through a mapped pointer would,
// so SegmentReader reads these rings unchanged. Credits: a writer asks (kCreditAm, at most one
// question in flight, once per half ring or while it waits for a slot), and the handler answers
// with the ring's released tail through the sender's reply endpoint, raising words the writer
// registered (fabric::AmReplier::raise). No connection is ever made back to a writer, and an
// answer to a writer that died fails cleanly.
//
// A writer only sends into a slot the reader released (credits), so the handler never overwrites
// unread data. Messages from a writer that died are complete or dropped by UCX; either way no
// one-sided write from a failed endpoint is applied.
//
// The handlers run inside the worker's progress, on whichever thread holds the worker's claim
// (Worker::claim): the consumer while it waits for data, the process's progress thread while the
// consumer does something else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dfi/fabric/worker.hpp"
#include "dfi/memory/ring.hpp"

namespace dfi::memory {

class SegmentReceiver {
 public:
  // Serves `rings` rings of `layout`, back to back from `base`, for writers that send to
  // `worker`; installs the kSegmentAm and kCreditAm handlers on it. `label` names the target in
  // messages.
  SegmentReceiver(fabric::Worker& worker, std::byte* base, std::size_t rings, RingLayout layout,
                  std::string label);
  SegmentReceiver(const SegmentReceiver&) = delete;
  SegmentReceiver& operator=(const SegmentReceiver&) = delete;
  ~SegmentReceiver();

  // Progresses the worker, running the handlers; the caller holds its claim. Returns the
  // worker's event count (0: nothing happened).
  unsigned progress() { return worker_.progress(); }

 private:
  void on_segment(const fabric::AmMessage& message);
  void on_credit_request(const fabric::AmMessage& message, fabric::AmReplier& replier);
  // The ring a message's offset names, or -1 (logged once) when it names none.
  std::ptrdiff_t ring_of(std::uint64_t offset, const char* what);

  fabric::Worker& worker_;
  std::byte* base_;
  std::size_t rings_;
  RingLayout layout_;
  std::string label_;
  bool complained_ = false;
};

}  // namespace dfi::memory
