// Columnar batches and the flow's row layout (flow::Schema): a key column plus payload columns
// (Arrow RecordBatch buffers, NumPy columns, an engine's vectors) written into rows and read out
// of them, chunk by chunk, so that a columnar batch reaches ShuffleSource::push_batch without an
// interleave pass over the whole batch first, and a consumed batch lands in column arrays.
//
//   std::vector<flow::ColumnRef> columns = {{keys, 8}, {values, 8}};   // schema order
//   flow::ColumnStaging staging(schema);                             // once, at setup
//   flow::push_columns(schema, columns, rows, staging,
//                      [&](const std::byte* chunk, std::size_t bytes) {
//                        return source.push_batch(chunk, bytes);
//                      }).throw_if_error();
//
// Each chunk is interleaved into a staging buffer that stays in cache (kStagingBytes), then
// handed on: per row, the work is one copy per column into the staging rows, and what the push
// does with rows. The staging is allocated once; nothing is allocated per call or per row.
// Thread-safety: the functions are pure; a ColumnStaging belongs to one thread (a source's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dfi/common/error.hpp"
#include "dfi/flow/schema.hpp"

namespace dfi::flow {

// One column of a batch: the address of its value in row 0 and the distance in bytes from one
// row's value to the next (the column's width when contiguous; any other stride, e.g. a field of
// an array of structs, or negative for a reversed view). Values are the schema column's width.
struct ColumnRef {
  const std::byte* data = nullptr;
  std::ptrdiff_t stride = 0;
};
struct MutableColumnRef {
  std::byte* data = nullptr;  // null: the column is not wanted (copy_out_columns skips it)
  std::ptrdiff_t stride = 0;
};

// Writes the values of rows [first, first + count) of `columns` (one per schema column, in
// schema order) into `rows` (count * schema.tuple_bytes() bytes) at each column's offset. Bytes
// between columns (padding) are not written: zero them once in a reused buffer.
// Throws dfi::Error(invalid_argument) unless there is one column per schema column.
void interleave_columns(const Schema& schema, std::span<const ColumnRef> columns, std::size_t first,
                        std::size_t count, std::byte* rows);
// As interleave_columns, but row first + i goes to row slot[i] of `rows` (a permutation into a
// buffer of at least max(slot) + 1 rows): how push_routed groups rows by target in one pass.
void interleave_columns_to(const Schema& schema, std::span<const ColumnRef> columns, std::size_t first,
                           std::size_t count, const std::uint32_t* slot, std::byte* rows);
// Copies the values of `count` rows at `rows` (schema layout) into `columns` (one per schema
// column, in schema order; a null data skips that column) at rows first .. first + count.
// Throws dfi::Error(invalid_argument) unless there is one column per schema column.
void copy_out_columns(const Schema& schema, const std::byte* rows, std::size_t count,
                      std::span<const MutableColumnRef> columns, std::size_t first);
// Copies `count` rows of `width` bytes: row i of `from` to row slot[i] of `to`.
void scatter_rows(const std::byte* from, std::size_t width, std::size_t count, const std::uint32_t* slot,
                  std::byte* to);

// The staging rows of push_columns: kStagingBytes (at least one row), zeroed once, so padding
// bytes go out as zeros.
class ColumnStaging {
 public:
  static constexpr std::size_t kStagingBytes = 128 * 1024;
  explicit ColumnStaging(const Schema& schema);
  std::byte* data() noexcept { return bytes_.data(); }
  std::size_t rows() const noexcept { return rows_; }  // rows per chunk

 private:
  std::vector<std::byte> bytes_;
  std::size_t rows_;
};

// Interleaves `rows` rows of `columns` chunk by chunk into `staging` and calls
// push(const std::byte* chunk, std::size_t bytes) -> Status for each chunk, in order; stops at the
// first failed push and returns it (the chunks before it were pushed, the rest not).
template <class Push>
Status push_columns(const Schema& schema, std::span<const ColumnRef> columns, std::size_t rows,
                    ColumnStaging& staging, Push&& push) {
  const std::size_t width = schema.tuple_bytes();
  for (std::size_t first = 0; first < rows; first += staging.rows()) {
    const std::size_t n = rows - first < staging.rows() ? rows - first : staging.rows();
    interleave_columns(schema, columns, first, n, staging.data());
    if (Status s = push(static_cast<const std::byte*>(staging.data()), n * width); !s) return s;
  }
  return {};
}

}  // namespace dfi::flow
