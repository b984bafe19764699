// driven::Producer — a processing unit's sending side of a driven flow (flow.hpp).
//
// The producer owns its segment rings — one per consumer in a shuffle flow, one in a balance or
// replicate flow — in a region registered with the fabric and published for the mover. push()
// routes a tuple (shuffle: key hash, or the caller's choice with push_to) and appends it to that
// ring's current segment; a full segment is published with
// three local stores (fill, state, head). Nothing on this path calls the fabric, progresses a
// worker, allocates or makes a system call: the mover reads the rings' head words and segments,
// and raises their released tails when it has moved them.
//
// Owned by one thread. Not movable (the mover holds the rings' address).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dfi/common/error.hpp"
#include "dfi/driven/flow.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/flow/spec.hpp"
#include "dfi/kernels/hash.hpp"
#include "dfi/memory/tuple_writer.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::driven {

namespace detail {
class PeerCheck;
class Doorbell;
}

class Producer {
 public:
  // Opens producer `thread` of this rank in driven flow `name`: waits (up to `open_timeout`, 0:
  // the registry_timeout_ms setting) until the flow exists, allocates its rings and publishes
  // them. Does not wait for the mover or the consumers. Throws dfi::Error: not_found (no such
  // flow), invalid_argument (not a driven flow, no such producer), already_exists (opened
  // twice), timeout.
  Producer(cluster::Node& node, std::string_view name, int thread,
           std::chrono::milliseconds open_timeout = std::chrono::milliseconds(0));
  // Closes if close() was not called (errors are printed to stderr).
  ~Producer();
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  // Appends one tuple of exactly the schema's width: in a shuffle flow to the ring of the consumer
  // its key's hash routes to, in a balance or replicate flow to the producer's one ring. Waits
  // while that ring is full (the mover has not taken its segments yet), with local loads
  // only. A mover that died is a pause: a restarted one continues (mover.hpp, Recovery).
  // Errors: invalid_argument (wrong width; an explicit_target flow), timeout (the ring stayed
  // full for the flow's stall timeout; the message says what became of the mover), peer_failed
  // (that consumer's rank died while the ring was full: the first call that sees it),
  // flow_failed (after close, and every call after a peer_failed, naming the same peer).
  Status push(const void* tuple, std::size_t bytes) {
    if (bytes != push_width_) [[unlikely]] return push_error(bytes);
    std::size_t target = 0;
    if (rings_.size() > 1) {
      const std::byte* key = static_cast<const std::byte*>(tuple) + key_offset_;
      target = kernels::route(kernels::load_key(key, key_bytes_), rings_.size());
    }
    Status s = rings_[target]->append(tuple, bytes);
    if (!s) [[unlikely]] return latch(std::move(s));
    return s;
  }
  // Appends one tuple to consumer `target` (index into the spec's targets) of a shuffle flow; any
  // routing. Errors: as push(), invalid_argument for a target out of range or a balance or
  // replicate flow (the mover chooses the consumers there).
  Status push_to(std::size_t target, const void* tuple, std::size_t bytes);
  // Publishes every partly filled segment, so the mover sees it without more pushes.
  Status flush();
  // Publishes what is batched and end-of-stream in every ring, then waits until the mover has
  // taken everything and recorded that it will not read the rings again (they may be freed
  // after that; a registry lookup or a few). Errors: timeout (the mover did not take it within
  // the stall timeout; the message says whether the mover died and was not restarted),
  // peer_failed (a consumer died). Idempotent.
  Status close();

  // Doorbell mode (flow.hpp, Doorbells): how often this producer rang the mover (at most once
  // per published segment; 0 in polling mode).
  std::uint64_t doorbells() const noexcept;
  // Test seam for doorbell mode: from now on every bell is lost (the producer behaves as if it
  // rang, the mover hears nothing); the mover's safety poll must carry the flow. No effect in
  // polling mode.
  void mute_doorbell() noexcept;

  // Rings this producer writes: the consumers of a shuffle flow, else 1.
  std::size_t ring_count() const noexcept { return rings_.size(); }
  // Segments and payload bytes published, and how often a ring was full when a segment had to
  // go out.
  flow::FlowCounters counters() const;

 private:
  using Ring = memory::TupleWriter<memory::LocalRing>;

  Status push_error(std::size_t bytes) const;
  // failure_.latch(); after a flow-ending error push() accepts nothing.
  Status latch(Status status);

  cluster::Node& node_;
  flow::FlowSpec spec_;
  std::size_t index_ = 0;  // in the spec's sources
  std::string label_;
  fabric::MemoryRegion region_;
  std::unique_ptr<detail::PeerCheck> peers_;   // the mover and the consumers
  memory::LocalRing::PeerStatus peer_status_;  // what the rings ask while they wait (before rings_:
                                               // they hold its address)
  std::unique_ptr<detail::Doorbell> bell_;     // doorbell mode, else null (before rings_: their hook)
  std::vector<std::unique_ptr<Ring>> rings_;
  std::size_t tuple_bytes_ = 0;
  // The width push() accepts: the schema's in a key-hash flow while open, none (SIZE_MAX)
  // otherwise, so that the hot path makes one comparison for all three.
  std::size_t push_width_ = std::numeric_limits<std::size_t>::max();
  std::size_t key_offset_ = 0;
  std::size_t key_bytes_ = 0;
  bool closed_ = false;
  Pattern pattern_ = Pattern::shuffle;
  std::chrono::milliseconds stall_timeout_{0};
  flow::detail::FailureLatch failure_;
};

}  // namespace dfi::driven
