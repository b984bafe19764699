#include "dfi/flow/shuffle.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "dfi/cluster/node.hpp"
#include "dfi/kernels/hash.hpp"

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
  // push_batch's routing of a chunk of rows (all but explicit routing), and its scatter over
  // more than kLineTargets targets: a line holds as many whole tuples as fit both a
  // cache line and a segment; tuples wider than half a line, latency mode (a segment per
  // tuple) and flows with fewer targets go straight to their target.
  if (routing_ != Routing::explicit_target) route_chunk_.resize(kRouteChunk);
  route_rows_ = kernels::route_rows_kernel();
  wide_ = kernels::avx512_available();
  if (target_count_ > 1 && routing_ != Routing::explicit_target) {
    const std::size_t capacity = rings_.writer(0).segments().layout().payload_capacity();
    const std::size_t per_line = std::min(kLineBytes, capacity) / tuple_bytes_;
    if (spec.options.mode == Mode::bandwidth && per_line >= 2 && target_count_ > kLineTargets) {
      line_bytes_ = per_line * tuple_bytes_;
      line_storage_.resize(target_count_ * kLineBytes + kLineBytes);
      const auto address = reinterpret_cast<std::uintptr_t>(line_storage_.data());
      lines_ = line_storage_.data() + ((kLineBytes - address % kLineBytes) % kLineBytes);
      line_fill_.assign(target_count_, 0);
    }
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

Status ShuffleSource::run_failed(std::size_t target, Status status, std::uint64_t tuples) {
  if (!leave_out_dead(target, status)) return latch(std::move(status));
  dropped_ += tuples;
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

// ---------------------------------------------------------------------------------------------
// push_batch

Status ShuffleSource::batch_error(std::size_t bytes) const {
  if (failure_.failed()) return failure_.again(rings_.label());
  return {Errc::invalid_argument, rings_.label() + ": a batch of " + std::to_string(bytes) +
                                      " B is not a whole number of the schema's " + std::to_string(tuple_bytes_) +
                                      " B tuples {" + rings_.spec().schema.describe() + "}"};
}

Status ShuffleSource::append_run(std::size_t target, const std::byte* rows, std::size_t bytes) {
  std::size_t appended = 0;
  Status s = rings_.writer(target).append_run(rows, bytes, tuple_bytes_, appended);
  if (!s) [[unlikely]] return run_failed(target, std::move(s), (bytes - appended) / tuple_bytes_);
  return s;
}

Status ShuffleSource::push_batch(const void* rows, std::size_t bytes) {
  // A failed flow accepts no width (push_width_), so one check covers both.
  if (bytes % push_width_ != 0 || push_width_ == SIZE_MAX) [[unlikely]] return batch_error(bytes);
  const auto* p = static_cast<const std::byte*>(rows);
  if (routing_ == Routing::key_hash && target_count_ == 1) return append_run(0, p, bytes);
  if (routing_ == Routing::explicit_target) {
    return {Errc::invalid_argument, rings_.label() + ": the flow routes by explicit target; use push_batch_to()"};
  }
  return scatter_batch(p, bytes / tuple_bytes_);
}

Status ShuffleSource::push_batch_to(std::size_t target, const void* rows, std::size_t bytes) {
  if (bytes % push_width_ != 0 || push_width_ == SIZE_MAX) [[unlikely]] return batch_error(bytes);
  if (target >= target_count_) {
    return {Errc::invalid_argument, rings_.label() + ": target " + std::to_string(target) +
                                        " does not exist (the flow has " + std::to_string(target_count_) + ")"};
  }
  return append_run(target, static_cast<const std::byte*>(rows), bytes);
}

Status ShuffleSource::route_chunk(const std::byte* rows, std::size_t count) {
  std::uint32_t* const out = route_chunk_.data();
  const std::size_t width = tuple_bytes_;
  if (routing_ == Routing::key_hash) {
    // No dependence between iterations: the multiplies of successive keys overlap (eight keys
    // at a time with AVX-512).
    kernels::route_keys(route_rows_, rows, width, key_offset_, key_bytes_, count, target_count_, out);
    return {};
  }
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t target = 0;
    if (Status s = route_slow(rows + i * width, target); !s) return s;
    out[i] = static_cast<std::uint32_t>(target);
  }
  return {};
}

// Inline (it is the hot path of the scatter), so that the wide form of the scatter copies the
// line with one store; the failure path is out of line (run_failed).
[[gnu::always_inline]] inline Status ShuffleSource::append_line(std::size_t target, std::size_t bytes) {
  line_fill_[target] = 0;
  Status s = rings_.writer(target).append(lines_ + target * kLineBytes, bytes);
  if (!s) [[unlikely]] return run_failed(target, std::move(s), bytes / tuple_bytes_);
  return s;
}

Status ShuffleSource::flush_lines() {
  for (std::size_t t = 0; t < target_count_; ++t) {
    if (line_fill_[t] == 0) continue;
    if (Status s = append_line(t, line_fill_[t]); !s) return s;
  }
  return {};
}

// One chunk of routed rows into the lines (or, without lines, straight into the segments).
// Width is the tuple width where it is one of the common ones (a copy the compiler sees whole),
// else 0 (the run-time width).
template <std::size_t Width>
[[gnu::always_inline]] inline Status ShuffleSource::scatter_chunk(const std::byte* rows, std::size_t count) {
  const std::size_t width = Width != 0 ? Width : tuple_bytes_;
  const std::uint32_t* const targets = route_chunk_.data();
  if (line_bytes_ == 0) {
    for (std::size_t i = 0; i < count; ++i, rows += width) {
      const std::size_t t = targets[i];
      Status s = rings_.writer(t).append(rows, width);
      if (!s) [[unlikely]] {
        if (s = push_failed(t, std::move(s)); !s) return s;
      }
    }
    return {};
  }
  std::uint32_t* const fill = line_fill_.data();
  const std::size_t line_bytes = line_bytes_;
  for (std::size_t i = 0; i < count; ++i, rows += width) {
    const std::size_t t = targets[i];
    std::memcpy(lines_ + t * kLineBytes + fill[t], rows, width);
    fill[t] += static_cast<std::uint32_t>(width);
    if (fill[t] == line_bytes) [[unlikely]] {
      if (Status s = append_line(t, line_bytes); !s) return s;
    }
  }
  return {};
}

// The scatter loop compiled for baseline x86-64 and, where the CPU has it, for AVX-512: there a
// row of 64 bytes goes into its segment with one load and one store instead of four. Only rows
// that go straight take it: a line written by row-sized stores and read back with one 64-byte
// load waits until those stores, and every store to the ring before them, left the store buffer
// (store forwarding needs a load inside one store); the baseline copy reads it in 16-byte pieces.
template <std::size_t Width>
Status ShuffleSource::scatter_chunk_baseline(const std::byte* rows, std::size_t count) {
  return scatter_chunk<Width>(rows, count);
}
#if defined(__x86_64__)
template <std::size_t Width>
[[gnu::target("avx512f")]] Status ShuffleSource::scatter_chunk_wide(const std::byte* rows, std::size_t count) {
  return scatter_chunk<Width>(rows, count);
}
#endif
template <std::size_t Width>
Status ShuffleSource::scatter_chunk_any(const std::byte* rows, std::size_t count) {
#if defined(__x86_64__)
  if (wide_ && line_bytes_ == 0) return scatter_chunk_wide<Width>(rows, count);
#endif
  return scatter_chunk_baseline<Width>(rows, count);
}

Status ShuffleSource::scatter_batch(const std::byte* rows, std::size_t count) {
  Status status;
  for (std::size_t done = 0; done < count && status;) {
    const std::size_t n = std::min(kRouteChunk, count - done);
    const std::byte* chunk = rows + done * tuple_bytes_;
    if (status = route_chunk(chunk, n); !status) break;
    switch (tuple_bytes_) {
      case 8: status = scatter_chunk_any<8>(chunk, n); break;
      case 16: status = scatter_chunk_any<16>(chunk, n); break;
      case 24: status = scatter_chunk_any<24>(chunk, n); break;
      case 32: status = scatter_chunk_any<32>(chunk, n); break;
      case 48: status = scatter_chunk_any<48>(chunk, n); break;
      case 64: status = scatter_chunk_any<64>(chunk, n); break;
      default: status = scatter_chunk_any<0>(chunk, n); break;
    }
    done += n;
  }
  if (line_bytes_ == 0) return status;
  if (status) return flush_lines();
  std::fill(line_fill_.begin(), line_fill_.end(), 0);  // the rest of the batch is not pushed
  return status;
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

Status ShuffleTarget::rest_of_segment(TupleBatch& batch) {
  batch = TupleBatch{};
  batch.tuple_bytes = tuple_bytes_;
  batch.data = rest_;
  batch.count = rest_bytes_ / tuple_bytes_;
  batch.source = rest_source_;
  rest_bytes_ = 0;
  return {};
}

Status ShuffleTarget::consume(TupleBatch& batch, std::chrono::milliseconds timeout) {
  if (rest_bytes_ != 0) [[unlikely]] return rest_of_segment(batch);
  if (!deferred_.is_ok()) [[unlikely]] return std::exchange(deferred_, Status());
  memory::SegmentView view;
  std::size_t source = 0;
  if (timeout.count() == 0) timeout = stall_timeout_;
  Status status = rings_.next(view, source, timeout);
  return finish(std::move(status), view, source, batch);
}

Status ShuffleTarget::try_consume(TupleBatch& batch) {
  if (rest_bytes_ != 0) [[unlikely]] return rest_of_segment(batch);
  if (!deferred_.is_ok()) [[unlikely]] return std::exchange(deferred_, Status());
  memory::SegmentView view;
  std::size_t source = 0;
  Status status = rings_.try_next(view, source);
  return finish(std::move(status), view, source, batch);
}

Status ShuffleTarget::consume_into(void* buffer, std::size_t capacity, std::size_t& bytes,
                                   std::chrono::milliseconds timeout) {
  bytes = 0;
  const std::size_t room = capacity / tuple_bytes_ * tuple_bytes_;
  if (room == 0) {
    return {Errc::invalid_argument, rings_.label() + ": consume_into a buffer of " + std::to_string(capacity) +
                                        " B, smaller than one tuple of " + std::to_string(tuple_bytes_) + " B"};
  }
  if (!deferred_.is_ok()) [[unlikely]] return std::exchange(deferred_, Status());
  if (timeout.count() == 0) timeout = stall_timeout_;
  auto* out = static_cast<std::byte*>(buffer);
  while (bytes < room) {
    if (rest_bytes_ == 0) {
      memory::SegmentView view;
      std::size_t source = 0;
      // Wait only while nothing was copied; after that, take only what is there.
      Status status = bytes == 0 ? rings_.next(view, source, timeout) : rings_.try_next(view, source);
      if (status.code() == Errc::retry && bytes > 0) break;
      if (!status) {
        if (bytes == 0) return status;
        deferred_ = std::move(status);  // returned by the next call: these tuples go out first
        break;
      }
      if (view.bytes == 0) break;  // every source closed
      rest_ = view.data;
      rest_bytes_ = view.bytes;
      rest_source_ = source;
      counters_.tuples += view.bytes / tuple_bytes_;
      counters_.bytes += view.bytes;
      ++counters_.segments;
    }
    const std::size_t n = std::min(rest_bytes_, room - bytes);
    std::memcpy(out + bytes, rest_, n);
    bytes += n;
    rest_ += n;
    rest_bytes_ -= n;
  }
  return {};
}

}  // namespace dfi::flow
