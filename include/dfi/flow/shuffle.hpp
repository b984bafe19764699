// Shuffle flows (003 §4.2.1): N sources to M targets, each tuple to one target.
//
//   // once, anywhere:
//   flow::FlowSpec spec{.name = "orders", .sources = {{0, 0}, {1, 0}}, .targets = {{0, 0}, {1, 0}},
//                       .schema = Schema({{"key", Type::int64}, {"value", Type::int64}}),
//                       .key_column = "key"};
//   flow::create_flow(node, spec);
//   // in a source thread:
//   flow::ShuffleSource src(node, worker, "orders", 0);
//   src.push(&tuple, sizeof tuple).throw_if_error();  // or handle peer_failed / timeout / ...
//   src.close().throw_if_error();
//   // in a target thread:
//   flow::ShuffleTarget dst(node, "orders", 0);
//   flow::TupleBatch batch;
//   for (;;) {
//     dst.consume(batch).throw_if_error();  // peer_failed: a source died before closing
//     if (batch.empty()) break;              // every source closed
//     ...
//   }
//
// Routing: the key column's hash (default), a routing function given to the source, or an
// explicit target per push (push_to). Each (source, target) pair has its own ring, so per-pair
// order is preserved and nothing is lost or duplicated while both sides are alive.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "dfi/flow/detail/rings.hpp"
#include "dfi/flow/spec.hpp"
#include "dfi/kernels/hash.hpp"

namespace dfi::fabric {
class Worker;
}

namespace dfi::flow {

// Returns the target index (0 .. targets-1) for a tuple.
using RouteFunction = std::function<std::size_t(const std::byte* tuple)>;

struct SourceOptions {
  RouteFunction route;                   // required for Routing::function flows
  std::optional<Schema> expected_schema;  // if set, opening fails unless the flow's schema equals it
  // Longest wait of the open for the flow's creation and its targets' rings (0: the
  // registry_timeout_ms setting).
  std::chrono::milliseconds open_timeout{0};
};

struct FlowCounters {
  std::uint64_t tuples = 0;
  std::uint64_t bytes = 0;
  std::uint64_t segments = 0;
  std::uint64_t stalls = 0;  // sources: times a ring was full when a segment had to go out
};

// Tuples a consume call hands out: a view into the ring, valid until the next consume.
struct TupleBatch {
  const std::byte* data = nullptr;
  std::size_t count = 0;
  std::size_t tuple_bytes = 0;
  std::size_t source = 0;  // index of the source in the flow spec

  bool empty() const noexcept { return count == 0; }
  const std::byte* tuple(std::size_t i) const noexcept { return data + i * tuple_bytes; }
  // The tuples as T; throws dfi::Error(invalid_argument) unless sizeof(T) equals the tuple width.
  template <class T>
  std::span<const T> as() const {
    static_assert(std::is_trivially_copyable_v<T>);
    if (sizeof(T) != tuple_bytes) throw_width_mismatch(sizeof(T));
    return {reinterpret_cast<const T*>(data), count};
  }

 private:
  [[noreturn]] void throw_width_mismatch(std::size_t width) const;
};

class ShuffleSource {
 public:
  // Opens source `thread` of this rank in flow `name`: waits until the flow and all its targets
  // exist, then connects. `worker` must be the calling thread's own. Throws dfi::Error:
  // not_found (no such flow), invalid_argument (not a shuffle flow, no such source, schema
  // mismatch, function routing without a function), timeout, peer_failed.
  ShuffleSource(cluster::Node& node, fabric::Worker& worker, std::string_view name, int thread,
                SourceOptions options = {});
  // Closes the flow if close() was not called (errors are printed to stderr).
  ~ShuffleSource();
  ShuffleSource(const ShuffleSource&) = delete;
  ShuffleSource& operator=(const ShuffleSource&) = delete;

  // Routes and appends one tuple of exactly the schema's width. Errors: invalid_argument (wrong
  // width, explicit-target flow, routing function out of range), peer_failed (a target died:
  // the first call that sees it), flow_failed (after close, and every call after a
  // peer_failed, at once, naming the same peer), timeout (a target stopped consuming).
  [[gnu::always_inline]] Status push(const void* tuple, std::size_t bytes) {
    if (bytes != push_width_) [[unlikely]] return push_error(bytes);
    std::size_t target = 0;
    if (routing_ == Routing::key_hash) [[likely]] {
      // One target needs no hash (N:1 flows); the hash is the largest per-tuple cost of a push.
      if (target_count_ > 1) target = hash_route(static_cast<const std::byte*>(tuple));
    } else if (Status s = route_slow(static_cast<const std::byte*>(tuple), target); !s) {
      return s;
    }
    Status s = rings_.writer(target).append(tuple, bytes);
    if (!s) [[unlikely]] return push_failed(target, std::move(s));
    return s;
  }
  template <class T>
  Status push(const T& tuple) {
    static_assert(std::is_trivially_copyable_v<T>);
    return push(&tuple, sizeof(T));
  }
  // Appends one tuple to target `target` (index into the spec's targets); any routing.
  Status push_to(std::size_t target, const void* tuple, std::size_t bytes);
  // Routes and appends a batch of rows: `bytes` bytes of contiguous tuples of the schema's width
  // (0 is a batch of none). Owned by the source's thread, like push(). Per target, the tuples
  // keep their order in the batch and come after everything pushed before; what push(), push_to()
  // and push_batch() send is one stream per target.
  //  - One target by key hash (1:1, N:1): whole runs are copied into the current segment with one
  //    memcpy per segment (straight into the mapped ring where direct()).
  //  - Key hash over several targets: the key column of each chunk of 256 rows is hashed in a
  //    loop of its own (no dependence between rows; eight keys at a time with AVX-512), then each
  //    row is copied straight into its target's segment; beyond 64 targets (kLineTargets) rows
  //    of up to half a cache line go into per-target write-combine lines of a cache line first,
  //    which go into the targets' segments whole (not in latency mode).
  //  - Routing function: called once per tuple, then scattered the same way.
  // Full segments are published whole (a run publishes each segment it fills at once); the last,
  // partly filled one waits for more tuples, flush() or close(), as after push(). With
  // drop_for_dead_targets, the rows for a dead target are dropped and counted as with push().
  // No allocation, lock or system call per row. Completion: when it returns ok, `rows`
  // may be reused and every tuple is in a segment of its target (mapped ring or staging), not
  // necessarily visible there yet.
  // Errors: invalid_argument (`bytes` not a multiple of the tuple width, an explicit-target
  // flow: use push_batch_to, a routing function out of range), peer_failed, flow_failed,
  // timeout: as push(). After an error other than invalid_argument for the width, a part of the
  // batch may have been pushed (per target a prefix of its tuples) and the rest not; retrying
  // the whole batch would push that part twice.
  Status push_batch(const void* rows, std::size_t bytes);
  // Appends a batch of rows (as push_batch) all to target `target`, as whole runs; any routing.
  // Errors: as push_batch, and invalid_argument for a target that does not exist.
  Status push_batch_to(std::size_t target, const void* rows, std::size_t bytes);
  // push_batch of `count` contiguous tuples of the schema's width.
  Status push_bulk(const void* tuples, std::size_t count) { return push_batch(tuples, count * tuple_bytes_); }
  // Publishes every partly filled segment (bandwidth mode batches tuples until a segment is
  // full) and waits until everything pushed so far has left this process, so that it reaches its
  // targets without more pushes, progress of this source's worker, or close(). Does not wait
  // for the targets to see it. Call it before waiting for a reply on another flow, in either
  // mode: over TCP a latency-mode push may also stay in UCX until the worker is progressed.
  // Each call costs a segment per target that had tuples buffered. Errors: as push.
  Status flush();
  // Sends what is buffered and marks end of stream at every target. Idempotent.
  Status close();
  // Leaves the flow without an end of stream: what is buffered is dropped, the targets see the
  // tuples published so far and then nothing (they learn of the end some other way — a replicated
  // service's view change, apps/kv). Later calls fail with flow_failed; the destructor does not
  // close. Waits only for sends already in flight. Idempotent; never throws.
  void abandon() noexcept;

  // From now on a target whose rank dies no longer fails the flow: the tuples pushed to it
  // after its death is seen are dropped (counted by dropped()), and flush() and close() leave it
  // out. For services whose targets come and go, such as a server's replies to its clients. A
  // target counts as dead when a call towards it fails with peer_failed, or with timeout while
  // the failure detector has declared its rank dead. Default: a dead target fails the flow.
  void drop_for_dead_targets() noexcept { drop_for_dead_ = true; }
  // Tuples dropped for dead targets (drop_for_dead_targets), and the targets declared dead.
  std::uint64_t dropped() const noexcept { return dropped_; }
  std::size_t dead_targets() const noexcept { return dead_count_; }

  std::size_t target_count() const noexcept { return rings_.target_count(); }
  std::size_t memory_bytes() const noexcept { return rings_.memory_bytes(); }
  FlowCounters counters() const;
  // True when tuples are written straight into mapped target rings (shm).
  bool direct() const;

 private:
  std::size_t hash_route(const std::byte* tuple) const noexcept {
    return kernels::route(kernels::load_key(tuple + key_offset_, key_bytes_), target_count_);
  }
  Status route_slow(const std::byte* tuple, std::size_t& target);
  // push_batch over several targets: routes `count` rows chunk by chunk, scatters them.
  Status scatter_batch(const std::byte* rows, std::size_t count);
  // Routes rows[0 .. count) (count <= kRouteChunk) into route_chunk_.
  Status route_chunk(const std::byte* rows, std::size_t count);
  // One chunk of routed rows into the lines or the segments (Width: the tuple width where it is
  // a common one, else 0), compiled twice: for baseline x86-64 and for AVX-512, where a 64-byte
  // row is one store; scatter_chunk_any picks one by wide_ (rows that go straight only).
  template <std::size_t Width>
  Status scatter_chunk(const std::byte* rows, std::size_t count);
  template <std::size_t Width>
  Status scatter_chunk_baseline(const std::byte* rows, std::size_t count);
#if defined(__x86_64__)
  template <std::size_t Width>
  [[gnu::target("avx512f")]] Status scatter_chunk_wide(const std::byte* rows, std::size_t count);
#endif
  template <std::size_t Width>
  Status scatter_chunk_any(const std::byte* rows, std::size_t count);
  Status append_line(std::size_t target, std::size_t bytes);
  Status flush_lines();
  // A run of `bytes` to `target` (push_batch_to, 1:1).
  Status append_run(std::size_t target, const std::byte* rows, std::size_t bytes);
  Status batch_error(std::size_t bytes) const;
  Status width_error(std::size_t bytes) const;
  Status push_error(std::size_t bytes) const;  // wrong width, or the flow failed earlier
  // failure_.latch(), and push() refuses every tuple once the flow failed.
  Status latch(Status status);
  // A call towards `target` failed: with drop_for_dead_targets and a dead target, the target is
  // left out from now on and the call counts as done (a push: its tuple dropped); else latch().
  Status push_failed(std::size_t target, Status status) { return run_failed(target, std::move(status), 1); }
  // As push_failed, for `tuples` tuples towards `target` that a failed call did not append.
  Status run_failed(std::size_t target, Status status, std::uint64_t tuples);
  // With drop_for_dead_targets: whether `target` is dead, given that a call towards it failed
  // with `status`; the first time, it is abandoned and left out from then on.
  bool leave_out_dead(std::size_t target, const Status& status);
  bool target_dead(std::size_t target, const Status& status) const;

  detail::SourceRings rings_;
  RouteFunction route_;
  Routing routing_;
  std::size_t tuple_bytes_;
  std::size_t key_offset_ = 0;
  std::size_t key_bytes_ = 0;
  std::size_t target_count_;
  // The width push() accepts: the schema's while the flow is healthy, none (SIZE_MAX) once it
  // failed, so that the hot path makes one comparison for both.
  std::size_t push_width_;
  detail::FailureLatch failure_;
  bool abandoned_ = false;
  bool drop_for_dead_ = false;
  const fabric::Context* fabric_;  // asked whether a target's rank was declared dead
  std::vector<bool> dead_;  // per target, once drop_for_dead_targets saw it die
  std::size_t dead_count_ = 0;
  std::uint64_t dropped_ = 0;

  // push_batch over several targets, sized when the flow opens: the targets of one chunk of rows,
  // and a write-combine line per target (kLineBytes, aligned to it) with its fill in bytes.
  static constexpr std::size_t kRouteChunk = 256;
  static constexpr std::size_t kLineBytes = 64;
  // Lines only beyond this many targets: up to it, rows stored straight into the targets'
  // segments were 1.4x and 1.5x faster than lines at 4 and 64 targets (medians of 3 interleaved
  // rounds, bench/notes/partition.md);
  // lines pay off where the targets' current segments outgrow the TLB (Balkesen et al.).
  static constexpr std::size_t kLineTargets = 64;
  std::vector<std::uint32_t> route_chunk_;
  kernels::RouteRows route_rows_ = nullptr;  // route_rows_kernel(), chosen when the source opens
  bool wide_ = false;                         // kernels::avx512_available(): scatter_chunk_wide
  std::vector<std::byte> line_storage_;
  std::byte* lines_ = nullptr;
  std::vector<std::uint32_t> line_fill_;
  std::size_t line_bytes_ = 0;  // whole tuples per line times the width; 0: no lines (rows go straight)
};

class ShuffleTarget {
 public:
  // Opens target `id` of this rank in flow `name` and publishes its rings. Throws dfi::Error:
  // not_found, invalid_argument (not a shuffle flow, no such target, schema mismatch),
  // already_exists (target opened twice).
  ShuffleTarget(cluster::Node& node, std::string_view name, int id,
                std::optional<Schema> expected_schema = std::nullopt,
                std::chrono::milliseconds open_timeout = std::chrono::milliseconds(0));
  ShuffleTarget(const ShuffleTarget&) = delete;
  ShuffleTarget& operator=(const ShuffleTarget&) = delete;

  // Gives back the previous batch's segment, then waits for the next batch. Returns ok with a
  // non-empty batch, or ok with an empty batch once every source has closed (then end() is
  // true). Errors: timeout (nothing within `timeout`; 0 = the flow_timeout_ms setting),
  // peer_failed (a source died before closing: the first call that sees it), flow_failed (every
  // call after that, at once, naming the same source).
  Status consume(TupleBatch& batch, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Like consume() but never waits: Errc::retry (a bare code, no message) when no batch is
  // there yet.
  Status try_consume(TupleBatch& batch);
  // Copies whole tuples into `buffer` (`capacity` bytes, at least one tuple): waits like
  // consume() for the first segment, then copies segment after segment while the buffer has
  // room and more segments are there without waiting. A segment that does not fit is copied in
  // part (whole tuples); the rest comes first in the next call (also of consume()). Sets `bytes`
  // to the bytes copied, a multiple of the tuple width: 0 with ok only once every source closed
  // (end() is true). Per source, tuples keep their order; the sources' segments interleave as in
  // consume(). Owned by the target's thread, like consume(). Errors: invalid_argument (a
  // capacity smaller than one tuple), and as consume(); an error that arrives after some tuples
  // were copied is returned by the next call, so the copied tuples are never lost.
  Status consume_into(void* buffer, std::size_t capacity, std::size_t& bytes,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  bool end() const noexcept { return rings_.finished(); }
  // From now on a source whose rank dies ends its stream instead of failing the flow: the
  // tuples that reached this target's ring are still consumed, then the source counts as
  // closed and consume() goes on with the others. For services whose sources come and go, such
  // as a server's clients. Default: consume() returns peer_failed.
  void end_dead_sources() noexcept { rings_.end_dead_sources(); }
  // The sources (indices into the flow spec's sources) whose stream a death ended, in order.
  const std::vector<std::size_t>& dead_sources() const noexcept { return rings_.dead_sources(); }

  std::size_t memory_bytes() const noexcept { return rings_.memory_bytes(); }
  const FlowCounters& counters() const noexcept { return counters_; }

 private:
  Status finish(Status status, const memory::SegmentView& view, std::size_t source, TupleBatch& batch);
  // Hands out what consume_into() left of a segment as a batch (consume, try_consume).
  Status rest_of_segment(TupleBatch& batch);

  detail::TargetRings rings_;
  std::size_t tuple_bytes_;
  std::chrono::milliseconds stall_timeout_;  // consume()'s default, resolved at open
  FlowCounters counters_;
  // consume_into: the tuples of the held segment not copied yet, and an error to return next.
  const std::byte* rest_ = nullptr;
  std::size_t rest_bytes_ = 0;
  std::size_t rest_source_ = 0;
  Status deferred_;
};

}  // namespace dfi::flow
