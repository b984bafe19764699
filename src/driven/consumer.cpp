#include "dfi/driven/consumer.hpp"

#include "dfi/cluster/node.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/driven/flow.hpp"
#include "dfi/flow/detail/rings.hpp"
#include "dfi/registry/client.hpp"
#include "bell.hpp"
#include "links.hpp"
#include "names.hpp"
#include "peers.hpp"

namespace dfi::driven {

Consumer::Consumer(cluster::Node& node, std::string_view name, int id, std::chrono::milliseconds open_timeout)
    : node_(node) {
  const Deadline deadline = flow::detail::open_deadline(open_timeout);
  spec_ = flow::detail::open_spec(node, name, kDriven, std::nullopt, deadline);
  const std::size_t index = flow::detail::target_index(spec_, node.rank(), id);
  index_ = index;
  label_ = "driven flow '" + spec_.name + "' consumer (rank " + std::to_string(node.rank()) + ", id " +
           std::to_string(id) + ")";
  const memory::RingLayout layout = spec_.layout();
  // The ring, then the mover's link words (links.hpp), which a restarted mover reads.
  region_ = fabric::MemoryRegion(node.fabric(), detail::consumer_region_bytes(layout, spec_.sources.size()));
  reader_ = memory::SegmentReader<memory::LocalRing>(static_cast<std::byte*>(region_.data()), layout);
  backoff_ = BackoffSettings::from_config();
  stall_timeout_ = flow::detail::stall_timeout(spec_);
  tuple_bytes_ = spec_.schema.tuple_bytes();
  peers_ = std::make_unique<detail::PeerCheck>(node, spec_, /*producer=*/false, index_);
  if (spec_.type_options.get<DrivenOptions>().doorbell) {  // bell.hpp: rung after a segment goes back
    auto* armed = reinterpret_cast<std::uint64_t*>(static_cast<std::byte*>(region_.data()) +
                                                   detail::consumer_armed_offset(layout, spec_.sources.size()));
    bell_ = std::make_unique<detail::Doorbell>(node, spec_.name, spec_.sources.size() + index_, armed, label_);
  }
  detail::publish_buffers(node, detail::consumer_record(spec_.name, index), region_, label_);
}

Consumer::~Consumer() = default;

std::uint64_t Consumer::doorbells() const noexcept { return bell_ ? bell_->rings() : 0; }

void Consumer::mute_doorbell() noexcept {
  if (bell_) bell_->mute();
}

bool Consumer::take(flow::TupleBatch& batch) {
  if (held_) {
    reader_.release();
    held_ = false;
    if (bell_) bell_->ring();  // room for the mover, if it waits for that
  }
  for (;;) {
    std::optional<memory::SegmentView> segment = reader_.peek();
    if (!segment) return false;
    if (segment->end_of_stream) {
      reader_.release();
      ended_ = true;
      return true;
    }
    if (segment->bytes == 0) {  // nothing in it (the mover never sends one, but harmless)
      reader_.release();
      continue;
    }
    batch.data = segment->data;
    batch.count = segment->bytes / tuple_bytes_;
    batch.tuple_bytes = tuple_bytes_;
    batch.source = 0;
    held_ = true;
    ++counters_.segments;
    counters_.bytes += segment->bytes;
    counters_.tuples += batch.count;
    return true;
  }
}

Status Consumer::leave() {
  if (spec_.type_options.get<DrivenOptions>().pattern != Pattern::balance) {
    return {Errc::invalid_argument, label_ + ": only a consumer of a balance flow can leave while it runs"};
  }
  if (left_) return {};
  try {
    node_.registry().publish(detail::leave_record(spec_.name, index_), "");
  } catch (const Error& e) {
    return {e.code(), label_ + ": leave: " + e.what()};
  }
  left_ = true;
  return {};
}

Status Consumer::confirm_end() {
  if (confirmed_) return {};
  // The ring is freed once the mover recorded that it will not touch it again (mover.hpp): a
  // mover restarted after end-of-stream would otherwise attach to freed memory.
  if (Status s = peers_->await_done(detail::consumer_done_record(spec_.name, index_), label_, stall_timeout_); !s) {
    return s;
  }
  confirmed_ = true;
  return {};
}

Status Consumer::try_consume(flow::TupleBatch& batch) {
  if (failure_.failed()) [[unlikely]] return failure_.again(label_);
  batch = {};
  batch.tuple_bytes = tuple_bytes_;
  if (ended_ || take(batch)) return ended_ ? confirm_end() : Status();
  if (Status s = peers_->check(label_); !s) return failure_.latch(std::move(s));
  return Status(Errc::retry);
}

Status Consumer::consume(flow::TupleBatch& batch, std::chrono::milliseconds timeout) {
  if (failure_.failed()) [[unlikely]] return failure_.again(label_);
  batch = {};
  batch.tuple_bytes = tuple_bytes_;
  if (ended_ || take(batch)) return ended_ ? confirm_end() : Status();
  const std::chrono::milliseconds limit = timeout.count() > 0 ? timeout : stall_timeout_;
  Deadline deadline(limit);
  Backoff backoff(backoff_, reinterpret_cast<std::uintptr_t>(this));
  for (std::uint64_t round = 1;; ++round) {
    backoff.pause();
    if (take(batch)) return ended_ ? confirm_end() : Status();
    if ((round & 63) == 0) {
      if (Status s = peers_->check(label_); !s) return failure_.latch(std::move(s));
      if (deadline.expired()) {
        return {Errc::timeout, label_ + ": no data within " + std::to_string(limit.count()) + " ms: " +
                                   peers_->mover_state()};
      }
    }
  }
}

}  // namespace dfi::driven
