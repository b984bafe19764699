// driven::Consumer — a processing unit's receiving side of a driven flow (flow.hpp).
//
// The consumer owns one segment ring, in a region registered with the fabric and published for
// the mover, which fills it from the flow's producers as the pattern says (flow.hpp: shuffle,
// balance, replicate); each producer's segments arrive in the order pushed. consume() hands out
// the next segment's tuples in place and gives the previous segment back by raising the ring's
// released tail: local loads and stores only, no fabric call, no worker, no system call while
// data is there.
//
// In a balance flow consumers come and go while the flow runs: the mover attaches a consumer when
// it opens (it need not be there when the flow starts) and stops serving it after leave().
//
// Owned by one thread. Not movable (the mover holds the ring's address).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "dfi/common/backoff.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/flow/spec.hpp"
#include "dfi/memory/segment_reader.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::driven {

namespace detail {
class PeerCheck;
class Doorbell;
}

class Consumer {
 public:
  // Opens consumer `id` of this rank in driven flow `name`: waits (up to `open_timeout`, 0: the
  // registry_timeout_ms setting) until the flow exists, allocates its ring and publishes it.
  // Throws dfi::Error: not_found, invalid_argument (not a driven flow, no such consumer),
  // already_exists (opened twice), timeout.
  Consumer(cluster::Node& node, std::string_view name, int id,
           std::chrono::milliseconds open_timeout = std::chrono::milliseconds(0));
  ~Consumer();
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  // Gives back the previous batch's segment, then waits for the next one. Returns ok with a
  // non-empty batch, or ok with an empty batch once every producer has closed and everything
  // was moved (then end() is true; the call that returns it waits, a registry lookup or a few,
  // until the mover recorded that it let go of the ring). batch.source is 0: the ring mixes
  // producers. A mover that died is a pause: a restarted one continues (mover.hpp, Recovery).
  // Errors: timeout (nothing within `timeout`, 0: the flow's stall timeout; the message says what
  // became of the mover), peer_failed (a producer's rank died: the first call that sees it),
  // flow_failed (every call after that, naming the same peer).
  Status consume(flow::TupleBatch& batch, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Like consume() but never waits: Errc::retry (a bare code) when nothing is there yet.
  Status try_consume(flow::TupleBatch& batch);
  // Balance flows: asks the mover to stop giving this consumer segments (a registry record; the
  // mover looks every few milliseconds). Keep consuming: what is already in the ring is this
  // consumer's, and end-of-stream follows it (then end() is true and the consumer may go). The
  // producers do not notice; nothing is lost or taken twice. A consumer slot joins once: opened
  // again later it is already_exists. Idempotent. Errors: invalid_argument (not a balance flow),
  // what the registry returns.
  Status leave();
  bool end() const noexcept { return ended_; }
  // Doorbell mode (flow.hpp, Doorbells): how often this consumer rang the mover (at most once per
  // segment given back; 0 in polling mode).
  std::uint64_t doorbells() const noexcept;
  // Test seam for doorbell mode: from now on every bell is lost (as Producer::mute_doorbell).
  void mute_doorbell() noexcept;
  const flow::FlowCounters& counters() const noexcept { return counters_; }

 private:
  bool take(flow::TupleBatch& batch);
  // After end-of-stream: waits until the mover recorded that it let go of the ring.
  Status confirm_end();

  cluster::Node& node_;
  flow::FlowSpec spec_;
  std::size_t index_ = 0;  // in the spec's targets
  bool left_ = false;
  std::string label_;
  fabric::MemoryRegion region_;
  memory::SegmentReader<memory::LocalRing> reader_;
  BackoffSettings backoff_;
  std::chrono::milliseconds stall_timeout_{0};
  std::size_t tuple_bytes_ = 0;
  bool held_ = false;   // the caller holds the segment last handed out
  bool ended_ = false;
  bool confirmed_ = false;  // the mover's done record was seen after end-of-stream
  flow::FlowCounters counters_;
  flow::detail::FailureLatch failure_;
  std::unique_ptr<detail::PeerCheck> peers_;  // the mover and the producers
  std::unique_ptr<detail::Doorbell> bell_;    // doorbell mode, else null
};

}  // namespace dfi::driven
