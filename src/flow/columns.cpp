#include "dfi/flow/columns.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

namespace dfi::flow {
namespace {

// Copies `count` values of `width` bytes from `from` (stride `from_stride`) to `to` (stride
// `to_stride`). The common widths are copies of a width the compiler knows, not a call each.
template <std::size_t Width>
void copy_values(std::byte* to, std::ptrdiff_t to_stride, const std::byte* from, std::ptrdiff_t from_stride,
                 std::size_t count) {
  for (std::size_t i = 0; i < count; ++i, to += to_stride, from += from_stride) std::memcpy(to, from, Width);
}

void copy_values(std::size_t width, std::byte* to, std::ptrdiff_t to_stride, const std::byte* from,
                 std::ptrdiff_t from_stride, std::size_t count) {
  switch (width) {
    case 1: return copy_values<1>(to, to_stride, from, from_stride, count);
    case 2: return copy_values<2>(to, to_stride, from, from_stride, count);
    case 4: return copy_values<4>(to, to_stride, from, from_stride, count);
    case 8: return copy_values<8>(to, to_stride, from, from_stride, count);
    case 16: return copy_values<16>(to, to_stride, from, from_stride, count);
    default:
      for (std::size_t i = 0; i < count; ++i, to += to_stride, from += from_stride) std::memcpy(to, from, width);
  }
}

template <std::size_t Width>
void copy_to_slots(std::byte* to, std::size_t to_stride, const std::byte* from, std::ptrdiff_t from_stride,
                   std::size_t count, const std::uint32_t* slot) {
  for (std::size_t i = 0; i < count; ++i, from += from_stride) std::memcpy(to + slot[i] * to_stride, from, Width);
}

void copy_to_slots(std::size_t width, std::byte* to, std::size_t to_stride, const std::byte* from,
                   std::ptrdiff_t from_stride, std::size_t count, const std::uint32_t* slot) {
  switch (width) {
    case 1: return copy_to_slots<1>(to, to_stride, from, from_stride, count, slot);
    case 2: return copy_to_slots<2>(to, to_stride, from, from_stride, count, slot);
    case 4: return copy_to_slots<4>(to, to_stride, from, from_stride, count, slot);
    case 8: return copy_to_slots<8>(to, to_stride, from, from_stride, count, slot);
    case 16: return copy_to_slots<16>(to, to_stride, from, from_stride, count, slot);
    case 32: return copy_to_slots<32>(to, to_stride, from, from_stride, count, slot);
    case 64: return copy_to_slots<64>(to, to_stride, from, from_stride, count, slot);
    default:
      for (std::size_t i = 0; i < count; ++i, from += from_stride) std::memcpy(to + slot[i] * to_stride, from, width);
  }
}

void check_count(const Schema& schema, std::size_t columns) {
  if (columns == schema.column_count()) return;
  std::ostringstream message;
  message << "columns: " << columns << " columns given for a schema of " << schema.column_count() << " ("
          << schema.describe() << ")";
  throw Error(Errc::invalid_argument, message.str());
}

}  // namespace

void interleave_columns(const Schema& schema, std::span<const ColumnRef> columns, std::size_t first,
                        std::size_t count, std::byte* rows) {
  check_count(schema, columns.size());
  const auto width = static_cast<std::ptrdiff_t>(schema.tuple_bytes());
  for (std::size_t c = 0; c < columns.size(); ++c) {
    const ColumnRef& column = columns[c];
    copy_values(schema.column_bytes(c), rows + schema.offset(c), width,
                column.data + static_cast<std::ptrdiff_t>(first) * column.stride, column.stride, count);
  }
}

void interleave_columns_to(const Schema& schema, std::span<const ColumnRef> columns, std::size_t first,
                           std::size_t count, const std::uint32_t* slot, std::byte* rows) {
  check_count(schema, columns.size());
  for (std::size_t c = 0; c < columns.size(); ++c) {
    const ColumnRef& column = columns[c];
    copy_to_slots(schema.column_bytes(c), rows + schema.offset(c), schema.tuple_bytes(),
                  column.data + static_cast<std::ptrdiff_t>(first) * column.stride, column.stride, count, slot);
  }
}

void copy_out_columns(const Schema& schema, const std::byte* rows, std::size_t count,
                      std::span<const MutableColumnRef> columns, std::size_t first) {
  check_count(schema, columns.size());
  const auto width = static_cast<std::ptrdiff_t>(schema.tuple_bytes());
  for (std::size_t c = 0; c < columns.size(); ++c) {
    const MutableColumnRef& column = columns[c];
    if (column.data == nullptr) continue;
    copy_values(schema.column_bytes(c), column.data + static_cast<std::ptrdiff_t>(first) * column.stride,
                column.stride, rows + schema.offset(c), width, count);
  }
}

void scatter_rows(const std::byte* from, std::size_t width, std::size_t count, const std::uint32_t* slot,
                  std::byte* to) {
  copy_to_slots(width, to, width, from, static_cast<std::ptrdiff_t>(width), count, slot);
}

ColumnStaging::ColumnStaging(const Schema& schema)
    : rows_(std::max<std::size_t>(1, kStagingBytes / std::max<std::size_t>(1, schema.tuple_bytes()))) {
  bytes_.assign(rows_ * schema.tuple_bytes(), std::byte{0});
}

}  // namespace dfi::flow
