#include "dfi/flow/shuffle.hpp"

#include <cstdio>

#include "dfi/cluster/node.hpp"

namespace dfi::flow {

// Shuffle flows have no options of their own; they need a key column when they route by key hash.
constinit const FlowTypeTraits detail::kShuffleTraits{.name = "shuffle",
                                                      .key_column = KeyColumn::for_key_hash};

void TupleBatch::throw_width_mismatch(std::size_t width) const {
  throw Error(Errc::invalid_argument, "tuple batch: type of " + std::to_string(width) +
                                          " B does not match tuples of " + std::to_string(tuple_bytes) + " B");
}

// ---------------------------------------------------------------------------------------------

namespace {
// Checks everything that can be checked locally before waiting for the targets.
detail::SourceRings open_source(cluster::Node& node, fabric::Worker& worker, std::string_view name,
                                int thread, const SourceOptions& options) {
  const Deadline deadline = detail::open_deadline(options.open_timeout);
  FlowSpec spec = detail::open_spec(node, name, FlowType::shuffle, options.expected_schema, deadline);
  const std::size_t index = detail::source_index(spec, node.rank(), thread);
  if (spec.routing == Routing::function && !options.route) {
    const SourceRef me = spec.sources[index];
    throw Error(Errc::invalid_argument, "flow '" + spec.name + "' source (rank " + std::to_string(me.rank) +
                                            ", thread " + std::to_string(me.thread) +
                                            "): the flow routes by function but the source gave none");
  }
  return detail::SourceRings(node, worker, std::move(spec), index, deadline);
}
}  // namespace

ShuffleSource::ShuffleSource(cluster::Node& node, fabric::Worker& worker, std::string_view name,
                             int thread, SourceOptions options)
    : rings_(open_source(node, worker, name, thread, options)),
      route_(std::move(options.route)),
      routing_(rings_.spec().routing),
      tuple_bytes_(rings_.spec().schema.tuple_bytes()),
      target_count_(rings_.target_count()),
      push_width_(tuple_bytes_),
      fabric_(&node.fabric()),
      dead_(target_count_, false) {
  const FlowSpec& spec = rings_.spec();
  if (routing_ == Routing::key_hash) {
    const std::size_t key = spec.schema.index_of(spec.key_column);
    key_offset_ = spec.schema.offset(key);
    key_bytes_ = spec.schema.column_bytes(key);
  }
}

ShuffleSource::~ShuffleSource() {
  if (rings_.closed()) return;
  if (Status s = close(); !s) std::fprintf(stderr, "dfi: closing on destruction: %s\n", s.message().c_str());
}

Status ShuffleSource::width_error(std::size_t bytes) const {
  return {Errc::invalid_argument, rings_.label() + ": tuple of " + std::to_string(bytes) +
                                      " B does not match the schema's " + std::to_string(tuple_bytes_) +
                                      " B {" + rings_.spec().schema.describe() + "}"};
}

Status ShuffleSource::latch(Status status) {
  status = failure_.latch(std::move(status));
  if (failure_.failed()) push_width_ = SIZE_MAX;
  return status;
}

bool ShuffleSource::target_dead(std::size_t target, const Status& status) const {
  if (status.code() == Errc::peer_failed) return true;
  return status.code() == Errc::timeout && !fabric_->peer_failure(rings_.spec().targets[target].rank).empty();
}

bool ShuffleSource::leave_out_dead(std::size_t target, const Status& status) {
  if (!drop_for_dead_ || failure_.failed()) return false;
  if (!dead_[target]) {
    if (!target_dead(target, status)) return false;
    dead_[target] = true;
    ++dead_count_;
    rings_.writer(target).abandon();  // later appends fail at once and come back here
  }
  return true;
}

Status ShuffleSource::push_failed(std::size_t target, Status status) {
  if (!leave_out_dead(target, status)) return latch(std::move(status));
  ++dropped_;
  return {};
}

Status ShuffleSource::push_error(std::size_t bytes) const {
  if (failure_.failed()) return failure_.again(rings_.label());
  return width_error(bytes);
}

Status ShuffleSource::route_slow(const std::byte* tuple, std::size_t& target) {
  if (routing_ == Routing::explicit_target) {
    return {Errc::invalid_argument, rings_.label() + ": the flow routes by explicit target; use push_to()"};
  }
  target = route_(tuple);
  if (target >= target_count_) {
    return {Errc::invalid_argument, rings_.label() + ": routing function returned target " + std::to_string(target) +
                                        " but the flow has " + std::to_string(target_count_) + " targets"};
  }
  return {};
}

Status ShuffleSource::push_to(std::size_t target, const void* tuple, std::size_t bytes) {
  if (bytes != push_width_) [[unlikely]] return push_error(bytes);
  if (target >= target_count_) {
    return {Errc::invalid_argument, rings_.label() + ": target " + std::to_string(target) +
                                        " does not exist (the flow has " + std::to_string(target_count_) + ")"};
  }
  Status s = rings_.writer(target).append(tuple, bytes);
  if (!s) [[unlikely]] return push_failed(target, std::move(s));
  return s;
}

Status ShuffleSource::push_bulk(const void* tuples, std::size_t count) {
  const auto* p = static_cast<const std::byte*>(tuples);
  for (std::size_t i = 0; i < count; ++i, p += tuple_bytes_) {
    if (Status s = push(p, tuple_bytes_); !s) return s;
  }
  return {};
}

Status ShuffleSource::flush() {
  if (failure_.failed()) return push_error(tuple_bytes_);
  for (std::size_t t = 0; t < target_count_; ++t) {
    if (dead_[t]) continue;
    if (Status s = rings_.writer(t).flush(); !s && !leave_out_dead(t, s)) return latch(std::move(s));
  }
  for (std::size_t t = 0; t < target_count_; ++t) {
    if (dead_[t]) continue;
    if (Status s = rings_.writer(t).drain(); !s && !leave_out_dead(t, s)) return latch(std::move(s));
  }
  return {};
}

Status ShuffleSource::close() {
  if (abandoned_) return failure_.again(rings_.label());
  if (failure_.failed() && !rings_.closed()) {
    (void)rings_.close();  // end-of-stream to the targets that are still alive
    return push_error(tuple_bytes_);
  }
  if (drop_for_dead_) {  // close target by target: one that died is left out
    for (std::size_t t = 0; t < target_count_; ++t) {
      if (dead_[t]) continue;
      if (Status s = rings_.writer(t).close(); !s && !leave_out_dead(t, s)) {
        (void)rings_.close();  // end-of-stream to the targets that are still alive
        return latch(std::move(s));
      }
    }
  }
  return latch(rings_.close());
}

void ShuffleSource::abandon() noexcept {
  if (abandoned_) return;
  abandoned_ = true;
  rings_.abandon();
  (void)failure_.latch({Errc::flow_failed, "this source abandoned it"}, /*ends_flow=*/true);
  push_width_ = SIZE_MAX;
}

FlowCounters ShuffleSource::counters() const {
  memory::RingCounters rings = rings_.counters();
  // Tuples pushed: published ones and those still batched (a push that failed added none).
  std::uint64_t bytes = rings.bytes;
  for (std::size_t t = 0; t < target_count_; ++t) bytes += rings_.writer(t).batched_bytes();
  return {bytes / tuple_bytes_, rings.bytes, rings.segments, rings.stalls};
}

bool ShuffleSource::direct() const {
  return target_count_ > 0 && rings_.writer(0).segments().in_place();
}

// ---------------------------------------------------------------------------------------------

namespace {
detail::TargetRings open_target(cluster::Node& node, std::string_view name, int id,
                                const std::optional<Schema>& expected_schema, std::chrono::milliseconds timeout) {
  FlowSpec spec = detail::open_spec(node, name, FlowType::shuffle, expected_schema, detail::open_deadline(timeout));
  const std::size_t index = detail::target_index(spec, node.rank(), id);
  return detail::TargetRings(node, std::move(spec), index);
}
}  // namespace

ShuffleTarget::ShuffleTarget(cluster::Node& node, std::string_view name, int id,
                             std::optional<Schema> expected_schema, std::chrono::milliseconds open_timeout)
    : rings_(open_target(node, name, id, expected_schema, open_timeout)),
      tuple_bytes_(rings_.spec().schema.tuple_bytes()),
      stall_timeout_(detail::stall_timeout(rings_.spec())) {}

Status ShuffleTarget::finish(Status status, const memory::SegmentView& view, std::size_t source,
                             TupleBatch& batch) {
  batch = TupleBatch{};
  batch.tuple_bytes = tuple_bytes_;
  if (!status || view.bytes == 0) return status;
  batch.data = view.data;
  batch.count = view.bytes / tuple_bytes_;
  batch.source = source;
  counters_.tuples += batch.count;
  counters_.bytes += view.bytes;
  ++counters_.segments;
  return status;
}

Status ShuffleTarget::consume(TupleBatch& batch, std::chrono::milliseconds timeout) {
  memory::SegmentView view;
  std::size_t source = 0;
  if (timeout.count() == 0) timeout = stall_timeout_;
  Status status = rings_.next(view, source, timeout);
  return finish(std::move(status), view, source, batch);
}

Status ShuffleTarget::try_consume(TupleBatch& batch) {
  memory::SegmentView view;
  std::size_t source = 0;
  Status status = rings_.try_next(view, source);
  return finish(std::move(status), view, source, batch);
}

}  // namespace dfi::flow
