// ReplicateSource: batches tuples into one segment, gives it a header (ordered by the counter
// sequencer: a sequence number from it; otherwise 0), then writes it to every target the source
// feeds directly (stamped flows: target 0 alone, which numbers it).
#include <cstdio>
#include <optional>
#include <thread>
#include <utility>

#include "dfi/cluster/node.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/flow/replicate.hpp"
#include "replicate_detail.hpp"

namespace dfi::flow {
namespace {

detail::SourceRings open_source(cluster::Node& node, fabric::Worker& worker, FlowSpec spec,
                                int thread, const Deadline& deadline) {
  const std::size_t index = detail::source_index(spec, node.rank(), thread);
  const std::string label = "flow '" + spec.name + "' " + detail::source_name(spec, index);
  std::vector<detail::SourceRings::Link> links;
  for (std::size_t target : relay_children(spec, index, std::nullopt)) {
    links.push_back({target, index, label + " -> " + detail::target_name(spec, target)});
  }
  return detail::SourceRings(node, worker, std::move(spec), label, links, deadline);
}

}  // namespace

ReplicateSource::ReplicateSource(cluster::Node& node, fabric::Worker& worker, std::string_view name,
                                 int thread, ReplicateSourceOptions options)
    : ReplicateSource(node, worker, name, thread, options, detail::open_deadline(options.open_timeout)) {}

ReplicateSource::ReplicateSource(cluster::Node& node, fabric::Worker& worker, std::string_view name,
                                 int thread, ReplicateSourceOptions options, const Deadline& deadline)
    : rings_(open_source(node, worker,
                         detail::open_spec(node, name, FlowType::replicate, options.expected_schema, deadline),
                         thread, deadline)),
      tuple_bytes_(rings_.spec().schema.tuple_bytes()),
      latency_(rings_.spec().options.mode == Mode::latency),
      takes_numbers_(rings_.spec().type_options.get<ReplicateOptions>().ordered &&
                     rings_.spec().type_options.get<ReplicateOptions>().sequencer == Sequencer::counter),
      worker_(worker),
      on_sequence_(std::move(options.on_sequence)) {
  const FlowSpec& spec = rings_.spec();
  const std::size_t payload = spec.layout().payload_capacity();
  capacity_ = (payload - kReplicateHeaderBytes) / tuple_bytes_ * tuple_bytes_;
  if (latency_) capacity_ = tuple_bytes_;
  limit_ = capacity_;
  segment_.assign(kReplicateHeaderBytes + capacity_, std::byte{0});
  done_.assign(rings_.target_count(), 0);
  dead_.assign(rings_.target_count(), 0);
  link_free_.assign(rings_.target_count(), 0);
  links_ = relay_children(spec, detail::source_index(spec, node.rank(), thread), std::nullopt);
  stall_timeout_ = detail::stall_timeout(spec);
  backoff_ = node.poll_backoff();
  if (stall_timeout_.count() == 0) stall_timeout_ = std::chrono::hours(24 * 365);
  if (takes_numbers_) {
    sequencer_name_ = "the sequencer at " + detail::target_name(spec, 0);
    try {
      sequencer_.attach(node, worker, detail::sequencer_record(spec.name), spec.targets[0].rank,
                        detail::time_left(deadline));
    } catch (const Error& e) {
      throw Error(e.code(), rings_.label() + ": " + sequencer_name_ + " was not published: " + e.what());
    }
  }
}

ReplicateSource::~ReplicateSource() {
  if (closed_) return;
  if (Status s = close(); !s)
    std::fprintf(stderr, "dfi: closing on destruction: %s\n", s.message().c_str());
}

Status ReplicateSource::width_error(std::size_t bytes) const {
  return {Errc::invalid_argument, rings_.label() + ": tuple of " + std::to_string(bytes) +
                                      " B does not match the schema's " +
                                      std::to_string(tuple_bytes_) + " B {" +
                                      rings_.spec().schema.describe() + "}"};
}

void ReplicateSource::abandon() noexcept {
  if (closed_) return;
  rings_.abandon();
  closed_ = true;
  abandoned_ = true;
  limit_ = 0;  // every later push takes the slow path, which refuses it
}

Status ReplicateSource::make_room() {
  if (closed_) return {Errc::flow_failed, rings_.label() + (abandoned_ ? ": push after abandon()" : ": push after close")};
  return emit();
}

Status ReplicateSource::take_sequence(std::uint64_t& sequence) {
  std::uint64_t old = 0;
  if (Status s = sequencer_.fetch_add(detail::kSequencerCounter, 1, &old);
      !s) {
    return {s.code(), rings_.label() + ": " + sequencer_name_ + ": " + s.message()};
  }
  sequence = old + 1;
  return {};
}

// Publishes the current segment on every live link that does not have it yet. A peer failure
// retires that link (reported once); any other error leaves the segment sealed, so the next call
// resumes with the links still missing it and nothing is written twice.
Status ReplicateSource::emit() {
  if (!sealed_) {
    if (fill_ == 0) return {};
    std::uint64_t header = 0;
    if (takes_numbers_) {
      if (Status s = take_sequence(header); !s) return s;
    }
    std::memcpy(segment_.data(), &header, sizeof header);
    sealed_ = true;
    limit_ = 0;
    std::fill(done_.begin(), done_.end(), 0);
    if (takes_numbers_ && on_sequence_) on_sequence_(header);
  }
  if (Status s = write_links(); !s && s.code() != Errc::peer_failed) return s;
  sealed_ = false;
  fill_ = 0;
  limit_ = capacity_;
  if (!failure_.is_ok()) return std::exchange(failure_, Status());
  if (dead_links_ == dead_.size() && !dead_.empty()) {
    return {Errc::flow_failed, rings_.label() + ": every target it writes to has failed"};
  }
  return {};
}

// Writes the sealed segment to every live link without it. With several links it never waits for
// one target while another has room: a slow target must not hold a segment back from the fast
// ones (in ordered flows that would look like a gap to them). It polls each ring's credit word
// and writes wherever a slot is free. A dead target retires its link (the failure is kept in
// failure_ for the caller); any other error leaves the segment sealed for a retry.
Status ReplicateSource::write_links() {
  const std::size_t bytes = kReplicateHeaderBytes + fill_;
  auto write = [&](std::size_t i) {
    return rings_.writer(i).publish_from(segment_.data(), bytes);
  };
  auto retire = [&](std::size_t i, Status s) {
    dead_[i] = 1;
    ++dead_links_;
    if (failure_.is_ok()) failure_ = std::move(s);
  };
  if (done_.size() == 1) {  // one link: the ring writer's own wait is all we need
    if (done_[0] != 0 || dead_[0] != 0) return {};
    Status s = write(0);
    if (s) {
      done_[0] = 1;
      return {};
    }
    if (s.code() == Errc::peer_failed) retire(0, s);
    return s;
  }
  std::optional<Deadline> deadline;
  Backoff backoff(backoff_, reinterpret_cast<std::uintptr_t>(this));
  for (;;) {
    bool waiting = false;
    for (std::size_t i = 0; i < done_.size(); ++i) {
      if (done_[i] != 0 || dead_[i] != 0) continue;
      if (link_free_[i] == 0) {
        std::uint64_t free = 0;
        if (Status s = rings_.free_slots(i, free); !s) {
          if (s.code() != Errc::peer_failed) return {s.code(), rings_.label() + ": " + s.message()};
          retire(i, {s.code(), rings_.label() + ": " + s.message()});
          continue;
        }
        link_free_[i] = free;
        if (free == 0) {
          waiting = true;
          continue;
        }
      }
      Status s = write(i);
      if (!s) {
        if (s.code() != Errc::peer_failed) return s;
        retire(i, std::move(s));
        continue;
      }
      done_[i] = 1;
      --link_free_[i];
    }
    if (!waiting) return {};
    if (!deadline) deadline.emplace(stall_timeout_);
    if (deadline->expired()) {
      std::string stuck;
      for (std::size_t i = 0; i < done_.size(); ++i) {
        if (done_[i] == 0 && dead_[i] == 0)
          stuck += (stuck.empty() ? "" : ", ") + detail::target_name(rings_.spec(), links_[i]);
      }
      return {Errc::timeout, rings_.label() + ": no free segment within " +
                                 std::to_string(stall_timeout_.count()) + " ms at " + stuck +
                                 " (is it consuming?)"};
    }
    worker_.progress();
    backoff.pause();
  }
}

Status ReplicateSource::push_bulk(const void* tuples, std::size_t count) {
  const auto* p = static_cast<const std::byte*>(tuples);
  for (std::size_t i = 0; i < count; ++i, p += tuple_bytes_) {
    if (Status s = push(p, tuple_bytes_); !s) return s;
  }
  return {};
}

Status ReplicateSource::flush() {
  if (closed_) return {};
  Status first = emit();
  if (!first && first.code() != Errc::peer_failed) return first;
  for (std::size_t i = 0; i < dead_.size(); ++i) {
    if (dead_[i] != 0) continue;
    Status s = rings_.wait_visible(i);
    if (s) continue;
    if (s.code() != Errc::peer_failed) return {s.code(), rings_.label() + ": " + s.message()};
    dead_[i] = 1;
    ++dead_links_;
    if (first.is_ok()) first = {s.code(), rings_.label() + ": " + s.message()};
  }
  return first;
}

Status ReplicateSource::close() {
  if (abandoned_) return {Errc::flow_failed, rings_.label() + ": close after abandon()"};
  if (closed_) return {};
  Status first = emit();
  if (!first.is_ok() && first.code() != Errc::peer_failed && first.code() != Errc::flow_failed)
    return first;
  for (std::size_t i = 0; i < dead_.size(); ++i) {
    if (dead_[i] != 0) continue;
    Status s = rings_.writer(i).close();
    if (s) continue;
    if (s.code() != Errc::peer_failed) return s;
    dead_[i] = 1;
    ++dead_links_;
    if (first.is_ok()) first = std::move(s);
  }
  closed_ = true;
  limit_ = 0;  // every later push takes the slow path, which refuses it
  if (takes_numbers_) {
    sequencer_.detach();
  }
  return first;
}

FlowCounters ReplicateSource::counters() const {
  memory::RingCounters rings = rings_.counters();
  return {tuples_, rings.bytes, rings.segments, rings.stalls};
}

}  // namespace dfi::flow
