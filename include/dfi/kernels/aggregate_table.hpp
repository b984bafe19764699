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
// The index is open addressing (linear probing, at most half full) over the rows, which stay
// contiguous in insertion order (rows() hands them out as they are). A slot holds its row's index
// and the high half of its key's hash, so a probe touches a row only where the hashes agree. A
// key of at most 8 bytes is hashed and compared as one word, a wider one by its FNV-1a fold and
// then bytewise. add() and merge() work through their input with the next items' slots and rows
// prefetched (while the table is larger than a cache), so the cache misses of a large table
// overlap. Once a table has grown to a cycle's number of keys, clear() keeps its memory and later
// cycles allocate nothing.
//
// Owned by one thread; const members may be called from any number of threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace dfi::kernels {

// What an aggregate computes over the tuples of a group (COUNT takes no column).
enum class Aggregate : std::uint8_t { sum, count, min, max, avg };
// The type of an aggregated column (and of a result column).
enum class ValueType : std::uint8_t { int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64 };

// Bytes of one value of `type`.
std::size_t value_bytes(ValueType type) noexcept;

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
  const std::byte* rows() const noexcept { return rows_.get(); }
  std::size_t memory_bytes() const noexcept;
  // Tuples the rows merged so far stand for (merge only; clear() keeps it).
  std::uint64_t tuples_merged() const noexcept { return tuples_merged_; }

  // Local state: aggregates `count` input tuples (tuple_bytes apart) into their keys' rows.
  void add(const std::byte* tuples, std::size_t count);
  // Combine: merges `count` rows of this layout (row_bytes() apart: another table's rows()).
  void merge(const std::byte* rows, std::size_t count);
  // Pass-through: writes the partial row each of `count` input tuples makes on its own (its key, a
  // count of 1, the states its values set; row_bytes() each) to `out`, as add() into an empty table
  // would, without touching the table. Thread-safe (const).
  void make_rows(const std::byte* tuples, std::size_t count, std::byte* out) const;
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
    std::uint8_t update_code = 0;   // what add() applies (function x column type)
    std::uint8_t combine_code = 0;  // what merge() applies (function x state type)
  };
  // A slot of the index: the row's index + 1 in the low 32 bits (0: a free slot), the high 32
  // bits of its key's hash above, so a probe compares keys only where the hashes agree.
  static std::uint64_t slot_of(std::uint64_t hash, std::size_t row) noexcept {
    return (hash >> 32 << 32) | (row + 1);
  }
  // Applies `apply(row, item)` to `count` items `stride` bytes apart whose keys are at
  // `key_offset` (`key_load` bytes of them make a key of at most 8 bytes), with the slots and rows
  // of the next items prefetched while the table is larger than a cache.
  template <bool kWide, class Apply>
  void run(const std::byte* items, std::size_t count, std::size_t stride, std::size_t key_offset,
           std::size_t key_load, Apply&& apply);
  // The row of the key at `key` with hash `hash`, created zeroed with the key if new.
  template <bool kWide>
  std::byte* find_or_insert(const std::byte* key, std::size_t key_load, std::uint64_t hash);
  void grow();
  void update(std::byte* row, const std::byte* tuple) const noexcept;
  void combine(std::byte* row, const std::byte* partial) const noexcept;

  Layout layout_;
  std::size_t key_slot_ = 0;  // the key's bytes in a row, padded to 8
  std::size_t row_bytes_ = 0;
  bool wide_ = false;    // a key of more than 8 bytes (compared bytewise; else as one word)
  std::vector<Op> ops_;  // one per aggregate other than COUNT
  // Memory of the table (malloc'd: the rows grow with realloc, which remaps a large block instead
  // of copying it); large blocks are asked to be backed by huge pages, so that a large table's
  // random accesses miss the TLB far less.
  struct Free {
    void operator()(void* memory) const noexcept;
  };
  std::unique_ptr<std::byte[], Free> rows_;        // room for slot_count_ / 2 rows
  std::size_t count_ = 0;                          // rows
  std::unique_ptr<std::uint64_t[], Free> slots_;  // slot_of(), or 0 when free; at most half used
  std::size_t slot_count_ = 0;                     // a power of two (or 0 before the first key)
  std::size_t mask_ = 0;                           // slot_count_ - 1
  std::uint64_t tuples_merged_ = 0;
};

}  // namespace dfi::kernels
