// dfi::kernels::AggregateTable — the state of a GROUP BY: one row per key holding the key, how
// many tuples the row stands for and one partial state per aggregate (SUM, COUNT, MIN, MAX,
// AVG). Local state, combine and finalize of an aggregation (../shared/DESIGN.md §2): the
// combiner flow's sources aggregate their tuples in one and ship its rows, its targets merge
// the rows into another and finalize it (flow/combiner.hpp; ops::Aggregation runs on that flow).
//
//   kernels::AggregateTable::Layout layout;          // a tuple {u64 key; i64 value} (16 B)
//   layout.tuple_bytes = 16;  layout.key_offset = 0;  layout.key_bytes = 8;
//   layout.aggregates = {{Aggregate::sum, ValueType::int64, 8, 8}, {Aggregate::count, {}, 0, 16}};
//   layout.result_bytes = 24;                        // result {u64 key; i64 sum; u64 count}
//   kernels::AggregateTable local(layout), global(layout);
//   local.add(tuples, n);                            // local state
//   global.merge(local.rows(), local.size());        // combine (rows may cross the network)
//   std::vector<std::byte> out(global.size() * layout.result_bytes);
//   global.finalize(out.data());                     // finalize: one result tuple per key
//
// A row — also the partial row a combiner flow ships — is [key slot: the key's bytes, zero-padded
// to a multiple of 8][count: u64][one state per aggregate other than COUNT, in order]. States:
//   sum  integer column: u64, wrapping (modulo 2^64, two's complement); float: f64
//   min, max  the value widened: i64 (signed), u64 (unsigned) or f64 (float)
//   avg  integer column: the exact sum, i128 or u128 (16 B); float: the f64 sum
// Results (result_type()): sum of a signed column int64, unsigned uint64, float float64; count
// uint64; min and max the column's own type; avg float64 (integers: the exact sum divided by the
// count and rounded once, so independent of the order of combination). Keys compare bytewise
// (float keys: -0.0 and 0.0 are different groups).
//
// The index is open addressing over the rows, which stay contiguous in insertion order (rows()
// hands them out as they are); once a table has grown to a cycle's number of keys, clear() keeps
// its memory and later cycles allocate nothing.
//
// Owned by one thread; const members may be called from any number of threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dfi::kernels {

// What an aggregate computes over the tuples of a group (COUNT takes no column).
enum class Aggregate : std::uint8_t { sum, count, min, max, avg };
// The type of an aggregated column (and of a result column).
enum class ValueType : std::uint8_t { int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64 };

class AggregateTable {
 public:
  // One aggregate: its function, the input column it reads (type and offset in a tuple; ignored
  // for COUNT) and where its result goes in a result tuple.
  struct Column {
    Aggregate function = Aggregate::count;
    ValueType type = ValueType::int64;
    std::size_t offset = 0;
    std::size_t result_offset = 0;
  };
  struct Layout {
    std::size_t tuple_bytes = 0;  // of an input tuple
    std::size_t key_offset = 0;   // of the GROUP BY key in an input tuple
    std::size_t key_bytes = 0;    // the key's width; a result tuple starts with it
    std::vector<Column> aggregates;
    std::size_t result_bytes = 0;  // of a result tuple
  };

  // Throws dfi::Error(invalid_argument) naming the problem: no aggregate, a key or column outside
  // the tuple, a result column outside the result tuple or over the key.
  explicit AggregateTable(Layout layout);

  // The type of an aggregate's result over a column of type `input` (see above).
  static ValueType result_type(Aggregate function, ValueType input) noexcept;
  // The bytes of one row for `layout` (the partial row a combiner flow ships).
  static std::size_t row_bytes_of(const Layout& layout);

  const Layout& layout() const noexcept { return layout_; }
  std::size_t row_bytes() const noexcept { return row_bytes_; }
  // Bytes of the key at the start of every row (its slot is padded to 8).
  std::size_t key_bytes() const noexcept { return layout_.key_bytes; }
  // Keys (rows) in the table.
  std::size_t size() const noexcept { return count_; }
  // The rows, contiguous, size() of row_bytes() each, in the order their keys came in; valid
  // until the next add, merge or clear.
  const std::byte* rows() const noexcept { return rows_.data(); }
  std::size_t memory_bytes() const noexcept;
  // Tuples the rows merged so far stand for (merge only; clear() keeps it).
  std::uint64_t tuples_merged() const noexcept { return tuples_merged_; }

  // Local state: aggregates `count` input tuples (tuple_bytes apart) into their keys' rows.
  void add(const std::byte* tuples, std::size_t count);
  // Combine: merges `count` rows of this layout (row_bytes() apart: another table's rows()).
  void merge(const std::byte* rows, std::size_t count);
  // Finalize: writes one result tuple per row (result_bytes each, zero-padded) to `out`, in row
  // order; `out` must hold size() * result_bytes.
  void finalize(std::byte* out) const;
  // Empties the table (keeps its memory).
  void clear() noexcept;

 private:
  enum class Kind : std::uint8_t { signed_int, unsigned_int, floating };
  // An aggregate other than COUNT, as add() and merge() apply it.
  struct Op {
    Aggregate function = Aggregate::sum;
    ValueType type = ValueType::int64;
    Kind kind = Kind::signed_int;
    std::size_t in_offset = 0;     // of its column in a tuple
    std::size_t state_offset = 0;  // of its state in a row
  };
  std::byte* find_or_insert(const std::byte* key);
  std::uint64_t hash(const std::byte* key) const noexcept;
  void grow();
  void update(std::byte* row, const std::byte* tuple) const noexcept;
  void combine(std::byte* row, const std::byte* partial) const noexcept;

  Layout layout_;
  std::size_t key_slot_ = 0;  // the key's bytes in a row, padded to 8
  std::size_t row_bytes_ = 0;
  std::vector<Op> ops_;  // one per aggregate other than COUNT
  std::vector<std::byte> rows_;
  std::size_t count_ = 0;             // rows
  std::vector<std::uint32_t> slots_;  // row index + 1, or 0 when free; a power of two
  std::uint64_t tuples_merged_ = 0;
};

}  // namespace dfi::kernels
