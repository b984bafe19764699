// Combiner flows (003 §4.2.3, §5.4): N sources to M targets (usually one), aggregated per key on
// the way.
//
//   // once, anywhere:
//   flow::FlowSpec spec{.name = "revenue", .type = flow::FlowType::combiner,
//                       .sources = {{0, 0}, {1, 0}, {2, 0}}, .targets = {{0, 0}},
//                       .schema = Schema({{"region", Type::int32}, {"amount", Type::int64}}),
//                       .key_column = "region",
//                       .type_options = flow::CombinerOptions{
//                           .aggregates = flow::parse_aggregates("sum(amount),count(*),avg(amount)")}};
//   flow::create_flow(node, spec);
//   // in each source thread:
//   flow::CombinerSource src(node, worker, "revenue", 0);
//   src.push(row);
//   src.close();
//   // in the target thread (result rows have result_schema()):
//   flow::CombinerTarget dst(node, "revenue");
//   flow::TupleBatch batch;
//   while (dst.consume(batch) && !batch.empty()) { ... }
//
// Local state -> combine -> finalize. A source aggregates what it pushes in a local hash table
// (kernels::AggregateTable: one row per key, its count and one partial state per aggregate). It ships the table as
// partial rows (key, count, states) through its ring to the target and empties it when the
// table holds `local_groups` keys, after `ship_tuples` pushed tuples, on flush() and on close().
// With M > 1 targets, each row goes to target kernels::route(key, M) (the key-hash routing of
// shuffle flows), so the targets partition the keys: each one's results are the groups of its
// own keys, and together they are the whole result (the distributed post-aggregation of 001
// §5.3). Rows for M > 1 targets are batched per target until a segment is full, flush() or
// close().
// The target merges partial rows into its own table as they arrive (combine) and computes the
// final values when asked (finalize): all of them once every source closed (consume), or a
// snapshot of what arrived so far at any time (read_partial).
//
// Results: one row per key that occurred in at least one pushed tuple — a key never pushed has
// no row, so MIN/MAX/AVG never see an empty group and there is no NULL. Rows come in no
// particular order. Columns (result_schema()): the key column, then per aggregate:
//   sum(c)   integer c: int64 (signed c) or uint64 (unsigned c), computed modulo 2^64: overflow
//            WRAPS (two's complement), never saturates or traps. Wrapping addition is
//            associative, so the result does not depend on how partials were combined; it
//            equals the exact sum whenever that fits. float c: float64 (rounding depends on
//            the order partials are combined).
//   count(*) uint64: number of tuples with the key.
//   min(c), max(c)  c's own type.
//   avg(c)   float64. Integer c: the exact sum (128-bit, cannot overflow) divided by the count,
//            rounded once, so it is independent of combination order. float c: float64 sum / count.
// Names: "sum_c", "count", "min_c", "max_c", "avg_c". Keys compare bytewise (float keys: -0.0
// and 0.0 are different groups).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "dfi/flow/detail/rings.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/flow/spec.hpp"
#include "dfi/kernels/aggregate_table.hpp"

namespace dfi::fabric {
class Worker;
}

namespace dfi::flow {

// One aggregate over a value column (COUNT counts rows and takes no column): the kernel's.
using Aggregate = kernels::Aggregate;
std::string_view aggregate_name(Aggregate aggregate);
struct AggregateSpec {
  Aggregate function = Aggregate::sum;
  std::string column;  // empty for count
  bool operator==(const AggregateSpec&) const = default;
};
// "sum(value),count(*),avg(price)" and back; parse throws dfi::Error(invalid_argument) naming the
// item. Thread-safe.
std::string describe_aggregates(const std::vector<AggregateSpec>& aggregates);
std::vector<AggregateSpec> parse_aggregates(std::string_view text);

// A combiner flow's own options, kept in FlowSpec::type_options (FlowType::combiner's descriptor,
// in combiner.cpp, validates them and carries them in the record as the field aggregates).
struct CombinerOptions {
  std::vector<AggregateSpec> aggregates;  // what to compute per key; at least one
};

// The schema of a combiner flow's results; throws dfi::Error(invalid_argument) when the spec's
// aggregates do not fit its schema (unknown or non-numeric column, clashing result names).
Schema combiner_result_schema(const FlowSpec& spec);
// Bytes of one partial-aggregate row on the wire (key padded to 8 B, count, states).
std::size_t combiner_row_bytes(const FlowSpec& spec);

struct CombinerSourceOptions {
  // If set, opening fails unless the flow's schema equals it.
  std::optional<Schema> expected_schema;
  // Longest wait of the open for the flow's creation and its target's ring (0: the
  // registry_timeout_ms setting).
  std::chrono::milliseconds open_timeout{0};
  std::size_t local_groups = 65536;    // ship the local table when it holds this many keys
  std::size_t ship_tuples = 1u << 20;  // ... or after this many pushed tuples (0: only when full)
  // Adaptive pre-aggregation (Müller et al., "Cache-efficient aggregation: hashing is sorting",
  // SIGMOD 2015): when the table filled up to local_groups keys with a hit rate (the share of its
  // tuples whose key was there already) below `pass_through_below`, aggregating does not pay: the
  // next `pass_through_tuples` tuples skip the table and each goes out at once as the partial row
  // it makes on its own (count 1). Then the table fills again and the hit rate is measured afresh.
  // 0: always aggregate (the default); 1: a window after every table that filled.
  double pass_through_below = 0;
  std::size_t pass_through_tuples = 0;  // 0: 16 x local_groups
  // Called once, on the pushing thread, just before the source first writes to its rings: its
  // first shipment of rows (a full table, or after ship_tuples), flush() or close() (also the
  // close on destruction); a pass-through window only starts with a shipment. Until then the
  // source waits for no target, so an operator can let a target's thread sleep until its own
  // rank's source gets there (ops::Aggregation). Must not throw.
  std::function<void()> before_first_write;
};

struct CombinerCounters {
  std::uint64_t tuples = 0;    // source: tuples pushed; target: tuples the merged rows stand for
  std::uint64_t rows = 0;      // partial rows shipped (source) or merged (target)
  std::uint64_t segments = 0;  // segments published (source) or consumed (target)
  std::uint64_t bytes = 0;     // payload bytes of those segments
  std::uint64_t groups = 0;    // target: keys in its table
  std::uint64_t passed = 0;    // source: tuples shipped unaggregated (pass-through), among `tuples`
};

class CombinerSource {
 public:
  // Opens source `thread` of this rank in combiner flow `name`; `worker` must be the calling
  // thread's own. Throws dfi::Error: not_found, invalid_argument (not a combiner flow, no such
  // source, schema mismatch), timeout, peer_failed.
  CombinerSource(cluster::Node& node, fabric::Worker& worker, std::string_view name, int thread,
                 CombinerSourceOptions options = {});
  // Closes the flow if close() was not called (errors are printed to stderr).
  ~CombinerSource();
  CombinerSource(const CombinerSource&) = delete;
  CombinerSource& operator=(const CombinerSource&) = delete;

  // Aggregates one tuple of the schema's width into the local table; ships the table when it is
  // full (in a pass-through window, ships the tuple's own partial row instead: see
  // CombinerSourceOptions::pass_through_below). Owned by one thread. Errors: invalid_argument
  // (wrong width), flow_failed (after close), peer_failed, timeout (the target stopped consuming).
  Status push(const void* tuple, std::size_t bytes);
  template <class T>
  Status push(const T& tuple) {
    static_assert(std::is_trivially_copyable_v<T>);
    return push(&tuple, sizeof(T));
  }
  // push() of `count` contiguous tuples of the schema's width; the same errors.
  Status push_bulk(const void* tuples, std::size_t count);
  // Ships the local table now and waits until it is visible at the target, so the target's
  // partial results include everything pushed so far.
  Status flush();
  // Ships the local table, then end-of-stream. Idempotent.
  Status close();

  std::size_t memory_bytes() const noexcept;
  const CombinerCounters& counters() const noexcept { return counters_; }

 private:
  Status ship();
  Status pass_through(const std::byte* tuples, std::size_t count);
  Status width_error(std::size_t bytes) const;
  Status push_error() const;  // after close or a failed shipment
  void before_writing();      // runs before_first_write once

  detail::SourceRings rings_;
  kernels::AggregateTable table_;
  std::size_t tuple_bytes_;
  std::size_t local_groups_;
  std::size_t ship_tuples_;
  std::size_t since_ship_ = 0;
  double pass_through_below_;
  std::size_t pass_through_tuples_;
  std::size_t passing_ = 0;          // tuples still to pass through before the table fills again
  std::vector<std::byte> scratch_;   // pass-through rows before they are appended
  std::function<void()> before_first_write_;  // emptied once called
  bool closed_ = false;
  detail::FailureLatch failure_;  // a shipment failed half-way: nothing more may be sent
  CombinerCounters counters_;
};

class CombinerTarget {
 public:
  // Opens the target (id `id` of this rank) of combiner flow `name` and publishes its rings.
  // Throws dfi::Error: not_found, invalid_argument (not a combiner flow, not its target, schema
  // mismatch), already_exists.
  CombinerTarget(cluster::Node& node, std::string_view name, int id = 0,
                 std::optional<Schema> expected_schema = std::nullopt,
                 std::chrono::milliseconds open_timeout = std::chrono::milliseconds(0));
  ~CombinerTarget();
  CombinerTarget(const CombinerTarget&) = delete;
  CombinerTarget& operator=(const CombinerTarget&) = delete;

  // The first call merges partial rows until every source closed; then each call hands out the
  // next result rows (result_schema(), at most kResultBatchRows per batch, valid until the next
  // call): ok with a non-empty batch, ok with an empty batch after the last (end() is then
  // true). Owned by one thread. Errors: timeout (no data within `timeout`; 0 = the flow's stall
  // timeout), peer_failed (a source died before closing: the results would be incomplete, so
  // none are handed out).
  Status consume(TupleBatch& batch,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Streaming read: merges whatever has arrived (never waits) and returns every key's aggregates
  // over the partial rows merged so far (valid until the next call). Errors: peer_failed.
  Status read_partial(TupleBatch& batch);
  // Merges whatever partial rows have arrived, never waits (read_partial without the results;
  // counters() tells what was merged). Errors: peer_failed.
  Status merge_arrived();
  // Every source closed and everything is merged (consume() hands out final results).
  bool sources_closed() const noexcept { return rings_.finished(); }
  // Some merge_arrived() merged rows from a source whose stream was still open when it
  // returned: that source ships while it aggregates (a full table, pass-through rows), so rows
  // keep coming, unlike a source whose only shipment is its table at close (rows and end of
  // stream back to back). A consumer that polls lazily (ops::Aggregation's idle targets) switches
  // to consume() then, so that such a source is not held up waiting for credits.
  bool streaming() const noexcept { return streaming_; }
  // consume()'s default timeout: the flow's stall timeout, resolved at open.
  std::chrono::milliseconds stall_timeout() const noexcept { return stall_timeout_; }
  bool end() const noexcept { return ended_; }

  const Schema& result_schema() const noexcept { return result_schema_; }
  std::size_t memory_bytes() const noexcept;
  const CombinerCounters& counters() const noexcept { return counters_; }

  static constexpr std::size_t kResultBatchRows = 4096;

 private:
  void merge(const memory::SegmentView& view);
  void finalize(std::vector<std::byte>& out) const;  // every row's result tuple into `out`

  detail::TargetRings rings_;
  kernels::AggregateTable table_;
  Schema result_schema_;
  std::chrono::milliseconds stall_timeout_;  // consume()'s default, resolved at open
  std::vector<std::byte> results_;  // finalized rows
  std::vector<std::byte> partial_;  // read_partial snapshot
  bool finalized_ = false;
  bool ended_ = false;
  std::size_t handed_out_ = 0;  // result rows handed out
  std::vector<std::uint8_t> arrived_;  // per source: merge_arrived() merged rows of it this call
  bool streaming_ = false;
  CombinerCounters counters_;
};

}  // namespace dfi::flow
