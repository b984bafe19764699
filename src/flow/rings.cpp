#include "dfi/flow/detail/rings.hpp"

#include <thread>

#include "dfi/cluster/node.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/config.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/registry/client.hpp"
#include "names.hpp"

namespace dfi::flow::detail {

Deadline open_deadline(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) throw Error(Errc::invalid_argument, "open timeout of " + std::to_string(timeout.count()) + " ms");
  if (timeout.count() == 0) timeout = std::chrono::milliseconds(config::get_int("registry_timeout_ms"));
  return Deadline(timeout);
}

std::chrono::milliseconds time_left(const Deadline& deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline.time_point() - Deadline::Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

FlowSpec open_spec(cluster::Node& node, std::string_view name, FlowType expected,
                   const std::optional<Schema>& expected_schema, const Deadline& deadline) {
  register_flow_type(expected);  // so that its record parses in this process
  const std::string flow(name);
  const auto waited = time_left(deadline);
  std::string record;
  try {
    record = node.wait_for(spec_record(flow), waited);
  } catch (const Error& e) {
    if (e.code() == Errc::timeout) {
      throw Error(Errc::not_found, "flow '" + flow + "' does not exist (not created within " +
                                       std::to_string(waited.count()) + " ms)");
    }
    throw;
  }
  FlowSpec spec = FlowSpec::from_json(record);
  if (spec.type != expected) {
    throw Error(Errc::invalid_argument, "flow '" + flow + "' is a " + std::string(spec.type.name()) +
                                            " flow, not a " + std::string(expected.name()) + " flow");
  }
  if (expected_schema && !(*expected_schema == spec.schema)) {
    throw Error(Errc::invalid_argument, "flow '" + flow + "' has schema {" + spec.schema.describe() +
                                            "} but the opener expects {" + expected_schema->describe() + "}");
  }
  return spec;
}

std::size_t source_index(const FlowSpec& spec, int rank, int thread) {
  for (std::size_t i = 0; i < spec.sources.size(); ++i) {
    if (spec.sources[i] == SourceRef{rank, thread}) return i;
  }
  throw Error(Errc::invalid_argument, "flow '" + spec.name + "' has no source (rank " + std::to_string(rank) +
                                          ", thread " + std::to_string(thread) + ")");
}

std::size_t target_index(const FlowSpec& spec, int rank, int id) {
  for (std::size_t i = 0; i < spec.targets.size(); ++i) {
    if (spec.targets[i] == TargetRef{rank, id}) return i;
  }
  throw Error(Errc::invalid_argument, "flow '" + spec.name + "' has no target (rank " + std::to_string(rank) +
                                          ", id " + std::to_string(id) + ")");
}

std::chrono::milliseconds stall_timeout(const FlowSpec& spec) {
  if (spec.options.stall_timeout.count() > 0) return spec.options.stall_timeout;
  return std::chrono::milliseconds(config::get_int("flow_timeout_ms"));
}

// ---------------------------------------------------------------------------------------------

SourceRings::SourceRings(cluster::Node& node, fabric::Worker& worker, FlowSpec spec, std::size_t index,
                         const Deadline& deadline)
    : spec_(std::move(spec)) {
  const SourceRef me = spec_.sources.at(index);
  label_ = "flow '" + spec_.name + "' source (rank " + std::to_string(me.rank) + ", thread " +
           std::to_string(me.thread) + ")";
  std::vector<Link> links;
  for (std::size_t t = 0; t < spec_.targets.size(); ++t) {
    const TargetRef target = spec_.targets[t];
    links.push_back({t, index, label_ + " -> target (rank " + std::to_string(target.rank) + ", id " +
                                   std::to_string(target.id) + ")"});
  }
  connect(node, worker, links, deadline);
}

SourceRings::SourceRings(cluster::Node& node, fabric::Worker& worker, FlowSpec spec, std::string label,
                         const std::vector<Link>& links, const Deadline& deadline)
    : spec_(std::move(spec)), label_(std::move(label)) {
  connect(node, worker, links, deadline);
}

void SourceRings::connect(cluster::Node& node, fabric::Worker& worker, const std::vector<Link>& links,
                          const Deadline& deadline) {
  const memory::RingLayout layout = spec_.layout();
  memory::SegmentWriterOptions options;
  options.stall_timeout = stall_timeout(spec_);
  memory::RemoteRingOptions access;
  access.allow_mapped = spec_.options.direct_write;

  // Targets that receive segments as active messages do so on a worker of their own: one
  // endpoint per such target. Others are reached through their rank's service worker.
  std::unordered_map<int, fabric::Endpoint*> by_rank;
  std::unordered_map<std::size_t, fabric::Endpoint*> by_target;
  for (const Link& link : links) {
    const TargetRef target = spec_.targets.at(link.target);
    std::string record;
    try {
      record = node.wait_for_from(target_record(spec_.name, link.target), target.rank, time_left(deadline));
    } catch (const Error& e) {
      throw Error(e.code(), label_ + ": target (rank " + std::to_string(target.rank) + ", id " +
                                std::to_string(target.id) + ") did not open the flow: " + e.what());
    }
    // Published before the region record, so it is there now if the target offers it.
    std::optional<std::string> address = node.registry().try_lookup(target_address_record(spec_.name, link.target));
    access.allow_am = address.has_value();
    fabric::Endpoint*& ep = address ? by_target[link.target] : by_rank[target.rank];
    if (ep == nullptr) {
      endpoints_.push_back(std::make_unique<fabric::Endpoint>(address ? worker.connect(target.rank, *address)
                                                                      : node.connect(worker, target.rank)));
      ep = endpoints_.back().get();
    }
    // Attaching to a dead shm peer fails (its segment is gone): ask the kernel first, which
    // knows before the failure detector does, and name the target.
    if (node.process_gone(target.rank)) {
      throw Error(Errc::peer_failed, label_ + ": target (rank " + std::to_string(target.rank) + ", id " +
                                         std::to_string(target.id) + ") died before this source attached to its ring");
    }
    try {
      remotes_.push_back(std::make_unique<fabric::RemoteMemory>(ep->attach(fabric::RegionDescriptor::parse(record))));
    } catch (const Error& e) {
      throw Error(e.code(), label_ + ": target (rank " + std::to_string(target.rank) + ", id " +
                                std::to_string(target.id) + "): " + e.what());
    }
    writers_.push_back(std::make_unique<RingWriter>(spec_.options.mode, options, worker, *ep, *remotes_.back(),
                                                    link.ring * layout.bytes(), layout, access, link.label));
    link_endpoints_.push_back(ep);
    memory_bytes_ += writers_.back()->memory_bytes();
  }
  account_memory(spec_.name, static_cast<std::ptrdiff_t>(memory_bytes_));
}

Status SourceRings::wait_visible(std::size_t index) {
  switch (writers_[index]->segments().access().path()) {
    case memory::RemoteRing::Path::mapped: return link_endpoints_[index]->status();
    case memory::RemoteRing::Path::active_message: return writers_[index]->drain();
    case memory::RemoteRing::Path::put: break;
  }
  return link_endpoints_[index]->flush();
}

Status SourceRings::free_slots(std::size_t index, std::uint64_t& free) { return writers_[index]->free_slots(free); }

SourceRings::~SourceRings() { account_memory(spec_.name, -static_cast<std::ptrdiff_t>(memory_bytes_)); }

Status SourceRings::close() {
  Status first;
  for (auto& writer : writers_) {
    Status s = writer->close();
    if (first.is_ok() && !s.is_ok()) first = s;
  }
  closed_ = true;
  return first;
}

void SourceRings::abandon() noexcept {
  for (auto& writer : writers_) writer->abandon();
  closed_ = true;
}

memory::RingCounters SourceRings::counters() const {
  memory::RingCounters sum;
  for (const auto& writer : writers_) {
    sum.segments += writer->counters().segments;
    sum.bytes += writer->counters().bytes;
    sum.stalls += writer->counters().stalls;
  }
  return sum;
}

// ---------------------------------------------------------------------------------------------

TargetRings::TargetRings(cluster::Node& node, FlowSpec spec, std::size_t index, bool lossy)
    : node_(node), spec_(std::move(spec)), failures_(node.fabric()) {
  faults_ = RingFaults::from_setting(spec_, index, lossy);
  backoff_ = BackoffSettings::from_config();
  const TargetRef me = spec_.targets.at(index);
  label_ = "flow '" + spec_.name + "' target (rank " + std::to_string(me.rank) + ", id " + std::to_string(me.id) + ")";
  const memory::RingLayout layout = spec_.layout();
  region_ = fabric::MemoryRegion(node.fabric(), spec_.sources.size() * layout.bytes());
  auto* base = static_cast<std::byte*>(region_.data());
  for (std::size_t s = 0; s < spec_.sources.size(); ++s) readers_.emplace_back(base + s * layout.bytes(), layout);
  if (!node.fabric().capabilities().native_one_sided && config::get_string("data_path") != "rma") {
    worker_ = std::make_shared<fabric::Worker>(node.fabric(), label_);
    backoff_ = BackoffSettings::from_config(/*polls_are_syscalls=*/true);
    receiver_ = std::make_unique<memory::SegmentReceiver>(*worker_, base, spec_.sources.size(), layout, label_);
    node.adopt_progress(*worker_);
  }
  ended_.assign(spec_.sources.size(), false);
  dying_.assign(spec_.sources.size(), false);
  open_sources_ = spec_.sources.size();
  account_memory(spec_.name, static_cast<std::ptrdiff_t>(region_.size()));
  try {
    if (worker_) node.registry().publish(target_address_record(spec_.name, index), worker_->address());
    node.registry().publish(target_record(spec_.name, index), region_.descriptor().serialize());
  } catch (const Error& e) {
    if (worker_) node.abandon_progress(*worker_);
    account_memory(spec_.name, -static_cast<std::ptrdiff_t>(region_.size()));
    if (e.code() == Errc::already_exists) throw Error(Errc::already_exists, label_ + " is already open");
    throw;
  }
}

TargetRings::~TargetRings() {
  if (worker_) {
    node_.abandon_progress(*worker_);
    fabric::owned_workers::remove(worker_.get());
    // A consumer progressing it from another flow's wait (owned_workers) finishes first; then
    // late messages find the receiver's no-op handlers.
    worker_->claim();
    receiver_.reset();
    worker_->unclaim();
  }
  account_memory(spec_.name, -static_cast<std::ptrdiff_t>(region_.size()));
}

bool TargetRings::poll(memory::SegmentView& view, std::size_t& source) {
  const std::size_t n = readers_.size();
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = cursor_ + k < n ? cursor_ + k : cursor_ + k - n;
    if (ended_[i]) continue;
    bool held = false;
    std::optional<memory::SegmentView> segment = peek(i, held);
    if (held) [[unlikely]] continue;
    if (!segment) {
      if (dying_[i]) [[unlikely]] {  // a dead source's ring read to its end: its stream ends
        ended_[i] = true;
        --open_sources_;
        dead_.push_back(i);
      }
      continue;
    }
    if (segment->end_of_stream) {
      readers_[i].release();
      ended_[i] = true;
      --open_sources_;
      continue;
    }
    if (segment->bytes == 0) {  // nothing in it (cannot happen from our writers, but harmless)
      readers_[i].release();
      continue;
    }
    view = *segment;
    source = i;
    held_ = i;
    cursor_ = i + 1 == n ? 0 : i + 1;
    return true;
  }
  return false;
}

std::optional<memory::SegmentView> TargetRings::peek_faulty(std::size_t ring,
                                                           std::optional<memory::SegmentView> segment, bool& held) {
  for (;;) {
    switch (faults_->judge(ring, *segment)) {
      case RingFaults::Verdict::deliver:
        return segment;
      case RingFaults::Verdict::hold:
        held = true;
        return std::nullopt;
      case RingFaults::Verdict::drop:
        readers_[ring].release();
        segment = readers_[ring].peek();
        if (!segment) return segment;
        break;
    }
  }
}

Status TargetRings::check_sources_alive() {
  if (!failures_.changed()) return {};
  for (std::size_t i = 0; i < spec_.sources.size(); ++i) {
    if (ended_[i]) continue;
    const SourceRef s = spec_.sources[i];
    std::string reason = failures_.reason(s.rank);
    if (!reason.empty() && end_dead_) {
      dying_[i] = true;  // poll() ends its stream once its ring is empty
      continue;
    }
    if (!reason.empty()) {
      return {Errc::peer_failed, label_ + ": source (rank " + std::to_string(s.rank) + ", thread " +
                                     std::to_string(s.thread) + ") failed before closing the flow: " + reason};
    }
  }
  return {};
}

Status TargetRings::try_next(memory::SegmentView& view, std::size_t& source) {
  if (failure_.failed()) [[unlikely]] return failure_.again(label_);
  if (held_) {
    readers_[*held_].release();
    held_.reset();
  }
  view = {};
  // Segments the last progress() placed come first; the worker is progressed (over tcp a system
  // call) only when the rings hold nothing, so a busy consumer pays one per burst of arrivals.
  if (poll(view, source)) return {};
  progress();
  if (poll(view, source) || finished()) return {};
  if (Status s = check_sources_alive(); !s) return failure_.latch(std::move(s));
  return Status(Errc::retry);
}

Status TargetRings::next(memory::SegmentView& view, std::size_t& source, std::chrono::milliseconds timeout) {
  Status s = try_next(view, source);
  if (s.code() != Errc::retry) return s;
  Deadline deadline(timeout.count() > 0 ? std::chrono::nanoseconds(timeout) : std::chrono::hours(24 * 365));
  Backoff backoff(backoff_, reinterpret_cast<std::uintptr_t>(this));
  for (std::uint64_t round = 1;; ++round) {
    if (progress() != 0) backoff.reset();  // a fabric event: data is likely close behind
    if (poll(view, source) || finished()) return {};
    if ((round & 63) == 0) {
      if (Status alive = check_sources_alive(); !alive) return failure_.latch(std::move(alive));
      if (deadline.expired()) {
        return {Errc::timeout, label_ + ": no data within " + std::to_string(timeout.count()) + " ms (" +
                                   std::to_string(open_sources_) + " of " + std::to_string(readers_.size()) +
                                   " sources still open)"};
      }
    }
    pause(backoff);
  }
}

void TargetRings::pause(Backoff& backoff) {
  backoff.pause([this](std::chrono::microseconds pause) {
    if (!worker_) return std::this_thread::sleep_for(pause);
    // This thread's other targets first: their writers may be what ours waits for.
    if (fabric::owned_workers::progress(worker_.get()) != 0) return;
    worker_->claim();
    worker_->wait_for_event(pause, idle_);  // wakes at once when a segment arrives
    worker_->unclaim();
    idle_ = false;
  });
}

}  // namespace dfi::flow::detail
