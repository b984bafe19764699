#include "dfi/driven/producer.hpp"

#include <cstdio>

#include "dfi/cluster/node.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/driven/flow.hpp"
#include "dfi/flow/detail/rings.hpp"
#include "dfi/registry/client.hpp"
#include "bell.hpp"
#include "names.hpp"
#include "peers.hpp"

namespace dfi::driven {

Producer::Producer(cluster::Node& node, std::string_view name, int thread, std::chrono::milliseconds open_timeout)
    : node_(node) {
  const Deadline deadline = flow::detail::open_deadline(open_timeout);
  spec_ = flow::detail::open_spec(node, name, kDriven, std::nullopt, deadline);
  const std::size_t index = flow::detail::source_index(spec_, node.rank(), thread);
  index_ = index;
  label_ = "driven flow '" + spec_.name + "' producer (rank " + std::to_string(node.rank()) + ", thread " +
           std::to_string(thread) + ")";
  const memory::RingLayout layout = spec_.layout();
  stall_timeout_ = flow::detail::stall_timeout(spec_);
  // A shuffle producer routes: one ring per consumer. Balance and replicate producers have one
  // ring; the mover decides which consumers get its segments.
  const DrivenOptions& options = spec_.type_options.get<DrivenOptions>();
  pattern_ = options.pattern;
  const std::size_t rings = pattern_ == Pattern::shuffle ? spec_.targets.size() : 1;
  region_ = fabric::MemoryRegion(node.fabric(), detail::producer_region_bytes(layout, rings));
  peers_ = std::make_unique<detail::PeerCheck>(node, spec_, /*producer=*/true, index_);
  peer_status_ = [this] { return peers_->check(""); };  // the ring prefixes its label
  memory::LocalRing::PublishHook hook;
  if (options.doorbell) {  // every publication asks whether the mover wants a bell (bell.hpp)
    auto* armed = reinterpret_cast<std::uint64_t*>(static_cast<std::byte*>(region_.data()) +
                                                   detail::producer_armed_offset(layout, rings));
    bell_ = std::make_unique<detail::Doorbell>(node, spec_.name, index_, armed, label_);
    hook = {&detail::Doorbell::ring_hook, bell_.get()};
  }
  memory::SegmentWriterOptions writer_options;
  writer_options.stall_timeout = stall_timeout_;
  auto* base = static_cast<std::byte*>(region_.data());
  for (std::size_t t = 0; t < rings; ++t) {
    const flow::TargetRef target = spec_.targets[t];
    std::string ring = pattern_ == Pattern::shuffle ? " -> consumer (rank " + std::to_string(target.rank) + ", id " +
                                                          std::to_string(target.id) + ")"
                                                    : std::string(" (") + pattern_name(pattern_) + ")";
    rings_.push_back(std::make_unique<Ring>(memory::RingMode::bandwidth, writer_options, base + t * layout.bytes(),
                                            layout, label_ + ring, &peer_status_, hook));
  }
  tuple_bytes_ = spec_.schema.tuple_bytes();
  if (pattern_ != Pattern::shuffle) {
    push_width_ = tuple_bytes_;
  } else if (spec_.routing == flow::Routing::key_hash) {
    const std::size_t key = spec_.schema.index_of(spec_.key_column);
    key_offset_ = spec_.schema.offset(key);
    key_bytes_ = spec_.schema.column_bytes(key);
    push_width_ = tuple_bytes_;
  }
  detail::publish_buffers(node, detail::producer_record(spec_.name, index), region_, label_);
}

Producer::~Producer() {
  if (closed_) return;
  if (Status s = close(); !s) std::fprintf(stderr, "dfi: %s\n", s.message().c_str());
}

std::uint64_t Producer::doorbells() const noexcept { return bell_ ? bell_->rings() : 0; }

void Producer::mute_doorbell() noexcept {
  if (bell_) bell_->mute();
}

Status Producer::latch(Status status) {
  // A ring that stayed full: the mover is gone or stuck (its death alone is a pause, peers.hpp).
  if (status.code() == Errc::timeout) status = Status(Errc::timeout, status.message() + ": " + peers_->mover_state());
  status = failure_.latch(std::move(status));
  if (failure_.failed()) push_width_ = std::numeric_limits<std::size_t>::max();
  return status;
}

Status Producer::push_error(std::size_t bytes) const {
  if (failure_.failed()) return failure_.again(label_);
  if (closed_) return {Errc::flow_failed, label_ + ": push after close"};
  if (pattern_ == Pattern::shuffle && spec_.routing != flow::Routing::key_hash) {
    return {Errc::invalid_argument, label_ + ": the flow routes explicitly; use push_to(target, ...)"};
  }
  return {Errc::invalid_argument, label_ + ": tuple of " + std::to_string(bytes) + " B does not match the schema's " +
                                      std::to_string(tuple_bytes_) + " B {" + spec_.schema.describe() + "}"};
}

Status Producer::push_to(std::size_t target, const void* tuple, std::size_t bytes) {
  if (failure_.failed()) return failure_.again(label_);
  if (closed_) return {Errc::flow_failed, label_ + ": push after close"};
  if (pattern_ != Pattern::shuffle) {
    return {Errc::invalid_argument, label_ + ": a " + pattern_name(pattern_) +
                                        " flow does not route (the mover chooses the consumers); use push()"};
  }
  if (bytes != tuple_bytes_) [[unlikely]] {
    return {Errc::invalid_argument, label_ + ": tuple of " + std::to_string(bytes) +
                                        " B does not match the schema's " + std::to_string(tuple_bytes_) + " B"};
  }
  if (target >= rings_.size()) [[unlikely]] {
    return {Errc::invalid_argument, label_ + ": consumer " + std::to_string(target) + " out of range (the flow has " +
                                        std::to_string(rings_.size()) + ")"};
  }
  Status s = rings_[target]->append(tuple, bytes);
  if (!s) [[unlikely]] return latch(std::move(s));
  return s;
}

Status Producer::flush() {
  if (failure_.failed()) return failure_.again(label_);
  if (closed_) return {Errc::flow_failed, label_ + ": flush after close"};
  for (auto& ring : rings_) {
    if (Status s = ring->flush(); !s) return latch(std::move(s));
  }
  return {};
}

Status Producer::close() {
  if (closed_) return {};
  closed_ = true;
  push_width_ = std::numeric_limits<std::size_t>::max();
  if (failure_.failed()) return failure_.again(label_);
  for (auto& ring : rings_) {
    if (Status s = ring->close(); !s) return latch(std::move(s));
  }
  // The rings live in this process: they must outlive the mover's last read of them, which is
  // its release of the end-of-stream segment (the tail reaches the last sequence).
  Deadline deadline(stall_timeout_);
  Backoff backoff(BackoffSettings::from_config(), reinterpret_cast<std::uintptr_t>(this));
  for (std::size_t t = 0, round = 1; t < rings_.size(); ++round) {
    const memory::SegmentWriter<memory::LocalRing>& writer = rings_[t]->segments();
    const std::uint64_t last = writer.next_sequence() - 1;
    if (memory::load_acquire(writer.access().base() + writer.layout().tail_offset()) >= last) {
      ++t;
      continue;
    }
    if ((round & 63) == 0) {
      if (Status s = peers_->check(label_); !s) return latch(std::move(s));
      if (deadline.expired()) {
        return latch({Errc::timeout, rings_[t]->segments().label() + ": the mover did not take the last segments within " +
                                         std::to_string(stall_timeout_.count()) + " ms"});
      }
    }
    backoff.pause();
  }
  // The mover released everything; the rings are freed once it recorded that it will not read
  // them again (a mover restarted now would otherwise attach to freed memory: mover.hpp).
  return latch(peers_->await_done(detail::producer_done_record(spec_.name, index_), label_, stall_timeout_));
}

flow::FlowCounters Producer::counters() const {
  flow::FlowCounters c;
  for (const auto& ring : rings_) {
    c.segments += ring->counters().segments;
    c.bytes += ring->counters().bytes;
    c.stalls += ring->counters().stalls;
  }
  c.tuples = tuple_bytes_ > 0 ? c.bytes / tuple_bytes_ : 0;
  return c;
}

}  // namespace dfi::driven
