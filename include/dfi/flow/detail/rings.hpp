// Ring plumbing shared by every flow type: the source side connects to one ring per target,
// the target side hosts one ring per source. Not part of the public API; flows build on it.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/detail/faults.hpp"
#include "dfi/flow/spec.hpp"
#include "dfi/memory/segment_reader.hpp"
#include "dfi/memory/segment_receiver.hpp"
#include "dfi/memory/tuple_writer.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::flow::detail {

// The deadline of one open: `timeout`, or the registry_timeout_ms setting when it is 0. Every
// registry wait of the open (the spec, the targets' rings, a sequencer) shares it.
Deadline open_deadline(std::chrono::milliseconds timeout);
// What is left of an open's deadline for one registry wait (at least 1 ms: 0 means "default").
std::chrono::milliseconds time_left(const Deadline& deadline);

// Looks up flow `name` (waiting until `deadline` for its creation) and checks that it has type
// `expected` (registered in this process first, so its record parses) and, if given, schema
// `expected_schema`. Throws dfi::Error: not_found (not created in time), invalid_argument (wrong
// type, schema mismatch), protocol (a record of a type this process does not know).
FlowSpec open_spec(cluster::Node& node, std::string_view name, FlowType expected,
                   const std::optional<Schema>& expected_schema, const Deadline& deadline);

// The index of this process's source `thread` in the spec; throws invalid_argument naming the flow.
std::size_t source_index(const FlowSpec& spec, int rank, int thread);
// The index of this process's target `id` in the spec; throws invalid_argument naming the flow.
std::size_t target_index(const FlowSpec& spec, int rank, int id);

// The ring each source of the spec writes into at every target (FlowOptions::rings): per thread,
// its own (the identity); per rank, its rank's, rings numbered in the order of the ranks' first
// sources in the spec. There are max + 1 rings per target.
std::vector<std::size_t> source_rings(const FlowSpec& spec);

// The bytes of one target's rings (every ring of source_rings, its words included), checked
// before anything is allocated: throws dfi::Error(invalid_argument) naming the flow, the ring
// shape and the bytes when they exceed the flow_memory_limit_bytes setting (0: a quarter of the
// machine's physical memory) or do not fit in a size_t.
std::size_t checked_ring_bytes(const FlowSpec& spec);

// Stall timeout of a flow: its option, or the flow_timeout_ms setting.
std::chrono::milliseconds stall_timeout(const FlowSpec& spec);

// The failure model every flow endpoint shares: the first call that sees a dead peer returns
// peer_failed naming flow and rank; every later call returns flow_failed naming the same peer,
// at once (no waiting out a timeout).
class FailureLatch {
 public:
  bool failed() const noexcept { return !first_.empty(); }
  // Returns `status`, remembering it when it ends the flow: peer_failed always, any error when
  // `ends_flow` (e.g. a combiner source that may have shipped part of its table).
  Status latch(Status status, bool ends_flow = false) {
    if (!status.is_ok() && first_.empty() && (ends_flow || status.code() == Errc::peer_failed)) {
      first_ = status.message();
    }
    return status;
  }
  // flow_failed from the endpoint `label`, naming what failed first.
  Status again(const std::string& label) const {
    return {Errc::flow_failed, label + ": the flow failed earlier: " + first_};
  }

 private:
  std::string first_;  // the first flow-ending error's message; empty while healthy
};

// A flow's writer of one remote ring, and its reader of one local ring.
using RingWriter = memory::TupleWriter<memory::RemoteRing>;
using RingReader = memory::SegmentReader<memory::LocalRing>;

class SourceRings {
 public:
  // One ring this writer side feeds: the ring of source `ring` at target `target`, and the name
  // of that (flow, writer, target) in errors.
  struct Link {
    std::size_t target = 0;
    std::size_t ring = 0;
    std::string label;
  };

  // Waits (until `deadline`) for every target to publish its rings, connects, and prepares one
  // writer per target (with per-rank rings, one of the writers of the rank's ring there). The
  // targets' rings are found in their ranks' records (RingRecords::per_rank), fetched once for
  // all source threads of this process that open together. Throws dfi::Error naming the target
  // (rank) that did not open in time.
  SourceRings(cluster::Node& node, fabric::Worker& worker, FlowSpec spec, std::size_t source_index,
              const Deadline& deadline);
  // Connects to the given rings only, one writer per link, in order (replicate flows: a source
  // feeding the top of its relay tree, a target forwarding to its children); their targets
  // publish per target (RingRecords::per_target). `label` names the writer side.
  SourceRings(cluster::Node& node, fabric::Worker& worker, FlowSpec spec, std::string label,
              const std::vector<Link>& links, const Deadline& deadline);
  ~SourceRings();
  SourceRings(const SourceRings&) = delete;
  SourceRings& operator=(const SourceRings&) = delete;

  RingWriter& writer(std::size_t target) { return *writers_[target]; }
  const RingWriter& writer(std::size_t target) const { return *writers_[target]; }
  std::size_t target_count() const noexcept { return writers_.size(); }
  const FlowSpec& spec() const noexcept { return spec_; }
  const std::string& label() const noexcept { return label_; }
  // Publishes what is buffered, then end-of-stream, on every ring; first error. Idempotent.
  Status close();
  // Leaves every ring without publishing what is buffered or an end-of-stream
  // (memory::SegmentWriter::abandon). Idempotent.
  void abandon() noexcept;
  bool closed() const noexcept { return closed_; }
  std::size_t memory_bytes() const noexcept { return memory_bytes_; }
  memory::RingCounters counters() const;

  // The slots of writer `index`'s ring that its target has released and the writer has not
  // used yet, read from the ring's credit word (a load where the ring is mapped, else a get). A
  // non-zero answer means the next segment finds its slot free at once. Never call it after the
  // writer closed (the target may have freed the ring). Errors: peer_failed, timeout.
  Status free_slots(std::size_t index, std::uint64_t& free);
  // Waits until everything writer `index` published is visible at its target (a flush of its
  // endpoint, which also completes the other rings on that endpoint; the put path over TCP needs
  // it, since nothing reaches the target before the writer's worker makes progress). Never call it
  // after the writer closed. Errors: peer_failed, timeout.
  Status wait_visible(std::size_t index);

 private:
  void connect(cluster::Node& node, fabric::Worker& worker, const std::vector<Link>& links,
               const Deadline& deadline);

  FlowSpec spec_;
  std::string label_;
  std::size_t memory_bytes_ = 0;
  bool closed_ = false;
  std::vector<std::unique_ptr<fabric::Endpoint>> endpoints_;      // one per target worker
  std::vector<std::unique_ptr<fabric::RemoteMemory>> remotes_;    // one per link
  std::vector<std::unique_ptr<RingWriter>> writers_;      // one per link
  std::vector<fabric::Endpoint*> link_endpoints_;                 // one per link
  // Per-rank rings: what this rank's writers of each link's ring share (memory::RingShare), and
  // the node that keeps them (Node::attachment) while some of them have not closed.
  std::vector<std::shared_ptr<memory::RingShare>> shares_;  // one per link, or none
  cluster::Node* share_node_ = nullptr;
  bool per_rank_records_ = false;
};

// How a flow's targets publish their rings and its sources find them:
//   per_rank    one record per (flow, rank) holding every target of the rank, published by the
//               rank's last target to open: a source fetches one record per target rank, once
//               for all its process's source threads (flows whose sources reach every target);
//   per_target  a record per target (replicate flows: a relay reaches a few targets, and a
//               target must be reachable before its rank's others open).
enum class RingRecords { per_rank, per_target };

class TargetRings {
 public:
  // Allocates one ring per source (per source rank: FlowOptions::rings) in one registered region
  // and publishes it. Resolves the faults
  // this target injects (setting flow_faults, faults.hpp); `lossy`: the flow's contract allows a
  // lost segment (ordered replicate flows), so drop rules may apply to it.
  // `records`: how the rings are published (RingRecords); with per_rank, sources find them once
  // the rank's last target of the flow opened.
  TargetRings(cluster::Node& node, FlowSpec spec, std::size_t target_index, bool lossy = false,
              RingRecords records = RingRecords::per_rank);
  ~TargetRings();
  TargetRings(const TargetRings&) = delete;
  TargetRings& operator=(const TargetRings&) = delete;

  // Releases the segment returned last, then waits for the next segment with tuples from any
  // source (round robin). Ok with view.bytes > 0: a segment from `source`; ok with finished():
  // every source closed. `source` is an index into the spec's sources (per-rank rings: the
  // first source of the ring's rank). Errors: timeout, peer_failed (a source's rank died before
  // closing).
  Status next(memory::SegmentView& view, std::size_t& source, std::chrono::milliseconds timeout);
  // Like next() but returns Errc::retry (a bare code) at once when nothing is there.
  Status try_next(memory::SegmentView& view, std::size_t& source);
  bool finished() const noexcept { return open_sources_ == 0; }
  // Source `source`'s stream has ended (its end of stream was read, or a death ended it).
  bool ended(std::size_t source) const noexcept { return ended_[source]; }
  // From now on a source whose rank is declared dead ends its stream instead of failing the
  // flow: its ring is read to its last whole segment, then it counts as closed.
  void end_dead_sources() noexcept { end_dead_ = true; }
  // The sources (indices into the spec; per-rank rings: the rank's first) whose stream a death
  // ended, in the order seen.
  const std::vector<std::size_t>& dead_sources() const noexcept { return dead_; }
  // Receives segments that arrived as active messages (tcp) into the rings; next() and
  // try_next() call it. Flows that read the rings through reader() call it in their poll loop.
  // Returns the number of fabric events (0 when nothing happened or no receiver runs).
  unsigned progress() {
    if (!receiver_) return 0;
    worker_->claim();  // the progress thread serves it while nobody consumes
    const unsigned events = receiver_->progress();
    worker_->unclaim();
    idle_ = events == 0;
    // The consuming thread keeps this worker moving while it waits in its other flows.
    if (const std::thread::id me = std::this_thread::get_id(); me != consumer_) [[unlikely]] {
      consumer_ = me;
      fabric::owned_workers::add(worker_);
    }
    return events;
  }
  // One round of `backoff` for a consumer that found nothing: where segments arrive as active
  // messages, a sleep blocks on the receiving worker's events instead (and wakes at once when a
  // segment arrives). next() waits this way; flows with their own poll loop call it too.
  void pause(Backoff& backoff);
  // How a consumer of these rings backs off (short spins where each poll is a system call).
  const BackoffSettings& backoff_settings() const noexcept { return backoff_; }
  // Direct access to the ring written for source `ring`, for flows that read the rings their own
  // way (replicate flows) instead of through next(); do not mix the two on one object.
  RingReader& reader(std::size_t ring) { return readers_[ring]; }
  // The head segment of ring `ring` as reader(ring).peek() sees it, after the injected faults
  // (flow_faults): nullopt when the ring is empty or its head is held back by a delay (then
  // `held` is true: the ring is not empty, whatever its writer's fate); a dropped segment is
  // released here. Flows that read through reader() peek with this.
  std::optional<memory::SegmentView> peek(std::size_t ring, bool& held) {
    held = false;
    std::optional<memory::SegmentView> segment = readers_[ring].peek();
    if (!faults_ || !segment) [[likely]] return segment;
    return peek_faulty(ring, std::move(segment), held);
  }
  // The faults this target injects, or nullptr (no flow_faults rule matches it).
  const RingFaults* faults() const noexcept { return faults_.get(); }
  std::size_t ring_count() const noexcept { return readers_.size(); }
  const FlowSpec& spec() const noexcept { return spec_; }
  const std::string& label() const noexcept { return label_; }
  std::size_t memory_bytes() const noexcept { return region_.size(); }

 private:
  bool poll(memory::SegmentView& view, std::size_t& source);
  std::optional<memory::SegmentView> peek_faulty(std::size_t ring, std::optional<memory::SegmentView> segment,
                                                 bool& held);
  Status check_sources_alive();

  cluster::Node& node_;
  FlowSpec spec_;
  std::string label_;
  BackoffSettings backoff_;
  fabric::MemoryRegion region_;
  // The active-message path (transports without native RMA): a worker of this target's own,
  // progressed by the consuming thread, and the receiver that places segments into the rings.
  // Shared with the consuming thread's list of owned workers (fabric::owned_workers), which
  // holds it weakly.
  std::shared_ptr<fabric::Worker> worker_;
  std::unique_ptr<memory::SegmentReceiver> receiver_;
  std::thread::id consumer_;  // the thread whose owned workers include worker_
  bool idle_ = false;  // the last progress() found nothing: pause() need not progress again
  std::vector<RingReader> readers_;
  std::vector<std::size_t> ring_source_;  // per ring: the first source in the spec writing it
  std::vector<bool> ended_;
  std::vector<bool> dying_;  // end_dead_sources: declared dead, its ring not read to the end yet
  std::vector<std::size_t> dead_;
  bool end_dead_ = false;
  std::unique_ptr<RingFaults> faults_;  // null unless flow_faults matches this target
  std::size_t open_sources_ = 0;
  std::size_t cursor_ = 0;
  std::optional<std::size_t> held_;  // ring whose segment the caller holds
  FailureLatch failure_;  // next() and try_next(): after the first peer_failed, flow_failed at once
  fabric::FailureWatch failures_;
  // per_rank records: the rank's targets of this flow while they open (Node::attachment), from
  // which this one withdraws if it goes before the rank's record was published.
  std::shared_ptr<void> rank_targets_;
  std::size_t index_ = 0;
};

}  // namespace dfi::flow::detail
