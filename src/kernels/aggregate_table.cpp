// kernels::AggregateTable: local aggregation, combination of partial rows and finalization (see
// aggregate_table.hpp).
#include "dfi/kernels/aggregate_table.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "dfi/common/error.hpp"
#include "dfi/kernels/hash.hpp"

namespace dfi::kernels {
namespace {

// AVG of integers sums exactly in 128 bits (a GCC/Clang extension on 64-bit targets).
__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;

template <class T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

std::size_t value_bytes(ValueType type) {
  switch (type) {
    case ValueType::int8:
    case ValueType::uint8:
      return 1;
    case ValueType::int16:
    case ValueType::uint16:
      return 2;
    case ValueType::int32:
    case ValueType::uint32:
    case ValueType::float32:
      return 4;
    default:
      return 8;
  }
}

bool is_signed(ValueType type) {
  return type == ValueType::int8 || type == ValueType::int16 || type == ValueType::int32 || type == ValueType::int64;
}
bool is_float(ValueType type) { return type == ValueType::float32 || type == ValueType::float64; }

std::int64_t load_signed(const std::byte* p, ValueType type) {
  switch (type) {
    case ValueType::int8:
      return load<std::int8_t>(p);
    case ValueType::int16:
      return load<std::int16_t>(p);
    case ValueType::int32:
      return load<std::int32_t>(p);
    default:
      return load<std::int64_t>(p);
  }
}
std::uint64_t load_unsigned(const std::byte* p, ValueType type) {
  switch (type) {
    case ValueType::uint8:
      return load<std::uint8_t>(p);
    case ValueType::uint16:
      return load<std::uint16_t>(p);
    case ValueType::uint32:
      return load<std::uint32_t>(p);
    default:
      return load<std::uint64_t>(p);
  }
}
double load_float(const std::byte* p, ValueType type) {
  return type == ValueType::float32 ? static_cast<double>(load<float>(p)) : load<double>(p);
}

// Writes a MIN/MAX state back in the column's own type (the value came from that type).
void store_as(std::byte* p, ValueType type, const std::byte* state) {
  switch (type) {
    case ValueType::int8:
      return store(p, static_cast<std::int8_t>(load<std::int64_t>(state)));
    case ValueType::int16:
      return store(p, static_cast<std::int16_t>(load<std::int64_t>(state)));
    case ValueType::int32:
      return store(p, static_cast<std::int32_t>(load<std::int64_t>(state)));
    case ValueType::int64:
      return store(p, load<std::int64_t>(state));
    case ValueType::uint8:
      return store(p, static_cast<std::uint8_t>(load<std::uint64_t>(state)));
    case ValueType::uint16:
      return store(p, static_cast<std::uint16_t>(load<std::uint64_t>(state)));
    case ValueType::uint32:
      return store(p, static_cast<std::uint32_t>(load<std::uint64_t>(state)));
    case ValueType::uint64:
      return store(p, load<std::uint64_t>(state));
    case ValueType::float32:
      return store(p, static_cast<float>(load<double>(state)));
    case ValueType::float64:
      return store(p, load<double>(state));
  }
}

template <class T, class Wide>
void update_int(Aggregate function, std::byte* s, T v, bool first) {
  switch (function) {
    case Aggregate::sum:  // modulo 2^64: unsigned arithmetic, no undefined behaviour
      store(s, load<std::uint64_t>(s) + static_cast<std::uint64_t>(v));
      break;
    case Aggregate::min:
      if (first || v < load<T>(s)) store(s, v);
      break;
    case Aggregate::max:
      if (first || v > load<T>(s)) store(s, v);
      break;
    case Aggregate::avg:
      store(s, static_cast<Wide>(load<Wide>(s) + static_cast<Wide>(v)));
      break;
    case Aggregate::count:
      break;
  }
}
template <class T, class Wide>
void merge_int(Aggregate function, std::byte* s, const std::byte* p, bool first) {
  switch (function) {
    case Aggregate::sum:
      store(s, load<std::uint64_t>(s) + load<std::uint64_t>(p));
      break;
    case Aggregate::min:
      if (first || load<T>(p) < load<T>(s)) std::memcpy(s, p, 8);
      break;
    case Aggregate::max:
      if (first || load<T>(p) > load<T>(s)) std::memcpy(s, p, 8);
      break;
    case Aggregate::avg:
      store(s, static_cast<Wide>(load<Wide>(s) + load<Wide>(p)));
      break;
    case Aggregate::count:
      break;
  }
}
void update_float(Aggregate function, std::byte* s, double v, bool first) {
  switch (function) {
    case Aggregate::sum:
    case Aggregate::avg:
      store(s, load<double>(s) + v);
      break;
    case Aggregate::min:
      if (first || v < load<double>(s)) store(s, v);
      break;
    case Aggregate::max:
      if (first || v > load<double>(s)) store(s, v);
      break;
    case Aggregate::count:
      break;
  }
}

const char* function_name(Aggregate function) {
  switch (function) {
    case Aggregate::sum: return "sum";
    case Aggregate::count: return "count";
    case Aggregate::min: return "min";
    case Aggregate::max: return "max";
    case Aggregate::avg: return "avg";
  }
  return "?";
}

}  // namespace

ValueType AggregateTable::result_type(Aggregate function, ValueType input) noexcept {
  switch (function) {
    case Aggregate::sum:
      return is_float(input) ? ValueType::float64 : is_signed(input) ? ValueType::int64 : ValueType::uint64;
    case Aggregate::count:
      return ValueType::uint64;
    case Aggregate::min:
    case Aggregate::max:
      return input;
    case Aggregate::avg:
      return ValueType::float64;
  }
  return ValueType::float64;
}

std::size_t AggregateTable::row_bytes_of(const Layout& layout) {
  std::size_t bytes = (layout.key_bytes + 7) / 8 * 8 + 8;  // key slot, count
  for (const Column& c : layout.aggregates) {
    if (c.function == Aggregate::count) continue;
    bytes += (c.function == Aggregate::avg && !is_float(c.type)) ? 16 : 8;
  }
  return bytes;
}

AggregateTable::AggregateTable(Layout layout) : layout_(std::move(layout)) {
  auto bad = [](const std::string& what) { return Error(Errc::invalid_argument, "aggregate table: " + what); };
  const Layout& l = layout_;
  if (l.key_bytes == 0 || l.key_offset + l.key_bytes > l.tuple_bytes) {
    throw bad("key of " + std::to_string(l.key_bytes) + " B at offset " + std::to_string(l.key_offset) +
              " does not fit a tuple of " + std::to_string(l.tuple_bytes) + " B");
  }
  if (l.aggregates.empty()) throw bad("no aggregate");
  if (l.result_bytes < l.key_bytes) {
    throw bad("a result tuple of " + std::to_string(l.result_bytes) + " B does not hold the key of " +
              std::to_string(l.key_bytes) + " B");
  }
  key_slot_ = (l.key_bytes + 7) / 8 * 8;
  std::size_t state = key_slot_ + 8;  // after the count
  for (std::size_t i = 0; i < l.aggregates.size(); ++i) {
    const Column& c = l.aggregates[i];
    const std::string what = "aggregate " + std::to_string(i) + " (" + function_name(c.function) + ")";
    const std::size_t out = value_bytes(result_type(c.function, c.type));
    if (c.result_offset < l.key_bytes || c.result_offset + out > l.result_bytes) {
      throw bad(what + ": its result of " + std::to_string(out) + " B at offset " + std::to_string(c.result_offset) +
                " is not inside the result tuple of " + std::to_string(l.result_bytes) + " B after the key");
    }
    if (c.function == Aggregate::count) continue;
    if (c.offset + value_bytes(c.type) > l.tuple_bytes) {
      throw bad(what + ": column at offset " + std::to_string(c.offset) + " does not fit a tuple of " +
                std::to_string(l.tuple_bytes) + " B");
    }
    Op op;
    op.function = c.function;
    op.type = c.type;
    op.kind = is_float(c.type) ? Kind::floating : is_signed(c.type) ? Kind::signed_int : Kind::unsigned_int;
    op.in_offset = c.offset;
    op.state_offset = state;
    state += (c.function == Aggregate::avg && op.kind != Kind::floating) ? 16 : 8;
    ops_.push_back(op);
  }
  row_bytes_ = state;
}

std::size_t AggregateTable::memory_bytes() const noexcept {
  return rows_.capacity() + slots_.capacity() * sizeof(std::uint32_t);
}

void AggregateTable::clear() noexcept {
  rows_.clear();
  count_ = 0;
  std::fill(slots_.begin(), slots_.end(), 0);
}

void AggregateTable::add(const std::byte* tuples, std::size_t count) {
  const std::byte* tuple = tuples;
  for (std::size_t i = 0; i < count; ++i, tuple += layout_.tuple_bytes) {
    update(find_or_insert(tuple + layout_.key_offset), tuple);
  }
}

void AggregateTable::merge(const std::byte* rows, std::size_t count) {
  const std::byte* row = rows;
  for (std::size_t i = 0; i < count; ++i, row += row_bytes_) {
    combine(find_or_insert(row), row);
    tuples_merged_ += load<std::uint64_t>(row + key_slot_);
  }
}

void AggregateTable::update(std::byte* row, const std::byte* tuple) const noexcept {
  const std::uint64_t count = load<std::uint64_t>(row + key_slot_);
  store(row + key_slot_, count + 1);
  for (const Op& op : ops_) {
    std::byte* s = row + op.state_offset;
    const std::byte* in = tuple + op.in_offset;
    switch (op.kind) {
      case Kind::signed_int:
        update_int<std::int64_t, Int128>(op.function, s, load_signed(in, op.type), count == 0);
        break;
      case Kind::unsigned_int:
        update_int<std::uint64_t, UInt128>(op.function, s, load_unsigned(in, op.type), count == 0);
        break;
      case Kind::floating:
        update_float(op.function, s, load_float(in, op.type), count == 0);
        break;
    }
  }
}

void AggregateTable::combine(std::byte* row, const std::byte* partial) const noexcept {
  const std::uint64_t count = load<std::uint64_t>(row + key_slot_);
  const std::uint64_t more = load<std::uint64_t>(partial + key_slot_);
  store(row + key_slot_, count + more);
  for (const Op& op : ops_) {
    std::byte* s = row + op.state_offset;
    const std::byte* p = partial + op.state_offset;
    switch (op.kind) {
      case Kind::signed_int:
        merge_int<std::int64_t, Int128>(op.function, s, p, count == 0);
        break;
      case Kind::unsigned_int:
        merge_int<std::uint64_t, UInt128>(op.function, s, p, count == 0);
        break;
      case Kind::floating:
        update_float(op.function, s, load<double>(p), count == 0);
        break;
    }
  }
}

void AggregateTable::finalize(std::byte* out) const {
  const std::size_t width = layout_.result_bytes;
  std::memset(out, 0, count_ * width);
  for (std::size_t i = 0; i < count_; ++i) {
    const std::byte* row = rows_.data() + i * row_bytes_;
    std::byte* t = out + i * width;
    std::memcpy(t, row, layout_.key_bytes);
    const std::uint64_t count = load<std::uint64_t>(row + key_slot_);
    std::size_t next_op = 0;
    for (const Column& c : layout_.aggregates) {
      std::byte* o = t + c.result_offset;
      if (c.function == Aggregate::count) {
        store(o, count);
        continue;
      }
      const Op& op = ops_[next_op++];
      const std::byte* s = row + op.state_offset;
      switch (op.function) {
        case Aggregate::sum:
          std::memcpy(o, s, 8);  // u64 bits of the wrapped sum, or the f64 sum
          break;
        case Aggregate::min:
        case Aggregate::max:
          store_as(o, op.type, s);
          break;
        case Aggregate::avg:
          if (op.kind == Kind::floating) {
            store(o, load<double>(s) / static_cast<double>(count));
          } else {  // the exact sum, divided in long double, rounded to double once
            const long double sum = op.kind == Kind::signed_int ? static_cast<long double>(load<Int128>(s))
                                                                : static_cast<long double>(load<UInt128>(s));
            store(o, static_cast<double>(sum / static_cast<long double>(count)));
          }
          break;
        case Aggregate::count:
          break;
      }
    }
  }
}

std::uint64_t AggregateTable::hash(const std::byte* key) const noexcept {
  if (layout_.key_bytes <= 8) [[likely]] {
    std::uint64_t k = 0;
    std::memcpy(&k, key, layout_.key_bytes);
    return mix64(k);
  }
  return mix64(fold_bytes(key, layout_.key_bytes));
}

// The row for the key at `key` (key_bytes bytes), created zeroed with the key if new.
std::byte* AggregateTable::find_or_insert(const std::byte* key) {
  if ((count_ + 1) * 2 > slots_.size()) [[unlikely]] {
    grow();
  }
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = hash(key) & mask;; i = (i + 1) & mask) {
    const std::uint32_t slot = slots_[i];
    if (slot == 0) {
      slots_[i] = static_cast<std::uint32_t>(count_ + 1);
      rows_.resize(rows_.size() + row_bytes_, std::byte{0});
      std::byte* row = rows_.data() + count_ * row_bytes_;
      std::memcpy(row, key, layout_.key_bytes);
      ++count_;
      return row;
    }
    std::byte* row = rows_.data() + std::size_t{slot - 1} * row_bytes_;
    if (std::memcmp(row, key, layout_.key_bytes) == 0) return row;
  }
}

// Doubles the slots (at least 1024) and indexes every row again; the rows stay where they are.
void AggregateTable::grow() {
  slots_.assign(std::max<std::size_t>(1024, slots_.size() * 2), 0);
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t r = 0; r < count_; ++r) {
    std::size_t i = hash(rows_.data() + r * row_bytes_) & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = static_cast<std::uint32_t>(r + 1);
  }
}

}  // namespace dfi::kernels
