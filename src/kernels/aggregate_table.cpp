// kernels::AggregateTable: local aggregation, combination of partial rows and finalization (see
// aggregate_table.hpp).
#include "dfi/kernels/aggregate_table.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "dfi/common/error.hpp"
#include "dfi/kernels/hash.hpp"
#include "dfi/kernels/large_memory.hpp"

namespace dfi::kernels {
namespace {

// AVG of integers sums exactly in 128 bits (a GCC/Clang extension on 64-bit targets).
__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;
static_assert(std::endian::native == std::endian::little, "add_wide writes an __int128 low word first");

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

bool is_signed(ValueType type) {
  return type == ValueType::int8 || type == ValueType::int16 || type == ValueType::int32 || type == ValueType::int64;
}
bool is_float(ValueType type) { return type == ValueType::float32 || type == ValueType::float64; }

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

// Adds the 128-bit value hi:lo to the 128-bit state at `s` (the low word first, as a little-endian
// __int128 lies; wrapping, so signed and unsigned sums are the same operation), or sets it.
// Word by word: a 16-byte load after two 8-byte stores would stall on store forwarding.
[[gnu::always_inline]] inline void add_wide(std::byte* s, std::uint64_t lo, std::uint64_t hi, bool set) {
  if (set) {
    store(s, lo);
    store(s + 8, hi);
    return;
  }
  const std::uint64_t old_lo = load<std::uint64_t>(s);
  const std::uint64_t sum_lo = old_lo + lo;
  store(s, sum_lo);
  store(s + 8, load<std::uint64_t>(s + 8) + hi + (sum_lo < old_lo ? 1 : 0));
}

// One input value into its state (`first`: the row's first tuple, whose value the state becomes).
// C: the column's C type. States: see aggregate_table.hpp.
template <Aggregate F, class C>
[[gnu::always_inline]] inline void update_one(std::byte* s, const std::byte* in, bool first) {
  const C value = load<C>(in);
  if constexpr (std::is_floating_point_v<C>) {
    const double v = value;
    if constexpr (F == Aggregate::sum || F == Aggregate::avg) {
      store(s, first ? v : load<double>(s) + v);
    } else if constexpr (F == Aggregate::min) {
      if (first || v < load<double>(s)) store(s, v);
    } else {
      if (first || v > load<double>(s)) store(s, v);
    }
  } else {
    using Word = std::conditional_t<std::is_signed_v<C>, std::int64_t, std::uint64_t>;
    const Word v = value;
    if constexpr (F == Aggregate::sum) {  // modulo 2^64: unsigned arithmetic, no undefined behaviour
      store(s, first ? static_cast<std::uint64_t>(v) : load<std::uint64_t>(s) + static_cast<std::uint64_t>(v));
    } else if constexpr (F == Aggregate::avg) {
      add_wide(s, static_cast<std::uint64_t>(v), std::is_signed_v<C> && v < 0 ? ~std::uint64_t{0} : 0, first);
    } else if constexpr (F == Aggregate::min) {
      if (first || v < load<Word>(s)) store(s, v);
    } else {
      if (first || v > load<Word>(s)) store(s, v);
    }
  }
}

// One partial state into a row's state (both of a row that already stands for tuples).
template <Aggregate F, class Word>
[[gnu::always_inline]] inline void combine_one(std::byte* s, const std::byte* p) {
  if constexpr (F == Aggregate::sum && std::is_integral_v<Word>) {
    store(s, load<std::uint64_t>(s) + load<std::uint64_t>(p));
  } else if constexpr (F == Aggregate::sum || (F == Aggregate::avg && std::is_floating_point_v<Word>)) {
    store(s, load<double>(s) + load<double>(p));
  } else if constexpr (F == Aggregate::avg) {
    add_wide(s, load<std::uint64_t>(p), load<std::uint64_t>(p + 8), false);
  } else if constexpr (F == Aggregate::min) {
    if (load<Word>(p) < load<Word>(s)) std::memcpy(s, p, 8);
  } else {
    if (load<Word>(p) > load<Word>(s)) std::memcpy(s, p, 8);
  }
}

// An op's code: which update_one (function x column type) and which combine_one (function x
// state type) it applies, decided once, so that the per-tuple work is one switch per aggregate.
constexpr std::uint8_t update_code(Aggregate f, ValueType t) {
  return static_cast<std::uint8_t>(static_cast<unsigned>(f) * 10 + static_cast<unsigned>(t));
}
constexpr std::uint8_t combine_code(Aggregate f, int kind) {  // kind: 0 signed, 1 unsigned, 2 float
  return static_cast<std::uint8_t>(static_cast<unsigned>(f) * 3 + static_cast<unsigned>(kind));
}

#define DFI_UPDATE_CASES(F)                                                                         \
  case update_code(Aggregate::F, ValueType::int8): update_one<Aggregate::F, std::int8_t>(s, in, first); break;     \
  case update_code(Aggregate::F, ValueType::int16): update_one<Aggregate::F, std::int16_t>(s, in, first); break;   \
  case update_code(Aggregate::F, ValueType::int32): update_one<Aggregate::F, std::int32_t>(s, in, first); break;   \
  case update_code(Aggregate::F, ValueType::int64): update_one<Aggregate::F, std::int64_t>(s, in, first); break;   \
  case update_code(Aggregate::F, ValueType::uint8): update_one<Aggregate::F, std::uint8_t>(s, in, first); break;   \
  case update_code(Aggregate::F, ValueType::uint16): update_one<Aggregate::F, std::uint16_t>(s, in, first); break; \
  case update_code(Aggregate::F, ValueType::uint32): update_one<Aggregate::F, std::uint32_t>(s, in, first); break; \
  case update_code(Aggregate::F, ValueType::uint64): update_one<Aggregate::F, std::uint64_t>(s, in, first); break; \
  case update_code(Aggregate::F, ValueType::float32): update_one<Aggregate::F, float>(s, in, first); break;        \
  case update_code(Aggregate::F, ValueType::float64): update_one<Aggregate::F, double>(s, in, first); break;

[[gnu::always_inline]] inline void apply_update(std::uint8_t code, std::byte* s, const std::byte* in, bool first) {
  switch (code) {
    DFI_UPDATE_CASES(sum)
    DFI_UPDATE_CASES(min)
    DFI_UPDATE_CASES(max)
    DFI_UPDATE_CASES(avg)
    default: break;
  }
}
#undef DFI_UPDATE_CASES

#define DFI_COMBINE_CASES(F)                                                                 \
  case combine_code(Aggregate::F, 0): combine_one<Aggregate::F, std::int64_t>(s, p); break;  \
  case combine_code(Aggregate::F, 1): combine_one<Aggregate::F, std::uint64_t>(s, p); break; \
  case combine_code(Aggregate::F, 2): combine_one<Aggregate::F, double>(s, p); break;

[[gnu::always_inline]] inline void apply_combine(std::uint8_t code, std::byte* s, const std::byte* p) {
  switch (code) {
    DFI_COMBINE_CASES(sum)
    DFI_COMBINE_CASES(min)
    DFI_COMBINE_CASES(max)
    DFI_COMBINE_CASES(avg)
    default: break;
  }
}
#undef DFI_COMBINE_CASES

// The word of a key of `bytes` (1 .. 8) bytes: the bytes zero-extended, one load at the usual
// widths.
std::uint64_t key_word(const std::byte* key, std::size_t bytes) noexcept {
  switch (bytes) {
    case 8:
      return load<std::uint64_t>(key);
    case 4:
      return load<std::uint32_t>(key);
    case 2:
      return load<std::uint16_t>(key);
    case 1:
      return load<std::uint8_t>(key);
    default: {
      std::uint64_t word = 0;
      for (std::size_t b = 0; b < bytes; ++b) word |= static_cast<std::uint64_t>(key[b]) << (8 * b);
      return word;
    }
  }
}

// add() and merge() prefetch while the table (slots and rows) holds at least this many bytes.
constexpr std::size_t kPrefetchBytes = 256 * 1024;

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

std::size_t value_bytes(ValueType type) noexcept {
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
    op.update_code = update_code(c.function, c.type);
    op.combine_code = combine_code(c.function, static_cast<int>(op.kind));
    state += (c.function == Aggregate::avg && op.kind != Kind::floating) ? 16 : 8;
    ops_.push_back(op);
  }
  row_bytes_ = state;
  wide_ = l.key_bytes > 8;
}

// A tuple into its row; the row's first tuple sets the states.
[[gnu::always_inline]] inline void AggregateTable::update(std::byte* row, const std::byte* tuple) const noexcept {
  const std::uint64_t count = load<std::uint64_t>(row + key_slot_);
  store(row + key_slot_, count + 1);
  for (const Op& op : ops_) apply_update(op.update_code, row + op.state_offset, tuple + op.in_offset, count == 0);
}

// A partial row into its row; into a new row (count 0) it is copied as it is.
[[gnu::always_inline]] inline void AggregateTable::combine(std::byte* row, const std::byte* partial) const noexcept {
  const std::uint64_t count = load<std::uint64_t>(row + key_slot_);
  if (count == 0) {
    std::memcpy(row + key_slot_, partial + key_slot_, row_bytes_ - key_slot_);
    return;
  }
  store(row + key_slot_, count + load<std::uint64_t>(partial + key_slot_));
  for (const Op& op : ops_) apply_combine(op.combine_code, row + op.state_offset, partial + op.state_offset);
}

template <bool kWide, class Apply>
void AggregateTable::run(const std::byte* items, std::size_t count, std::size_t stride, std::size_t key_offset,
                         std::size_t key_load, Apply&& apply) {
  constexpr std::size_t kAhead = 16;    // an item's slot is prefetched this many items ahead,
  constexpr std::size_t kRowAhead = 8;  // the row its slot names this many
  const auto hash_at = [&](std::size_t i) {
    const std::byte* key = items + i * stride + key_offset;
    if constexpr (kWide) {
      return mix64(fold_bytes(key, layout_.key_bytes));
    } else {
      return mix64(key_word(key, key_load));
    }
  };
  std::uint64_t hashes[kAhead];  // of items i .. i + kAhead - 1, at their index % kAhead
  for (std::size_t i = 0; i < std::min(count, kAhead); ++i) hashes[i] = hash_at(i);
  bool prefetch = false;
  for (std::size_t i = 0; i < count; ++i) {
    if (i % 64 == 0) prefetch = memory_bytes() >= kPrefetchBytes;  // the table grows as it goes
    const std::uint64_t hash = hashes[i % kAhead];
    if (i + kAhead < count) {
      const std::uint64_t next = hash_at(i + kAhead);
      hashes[i % kAhead] = next;
      if (prefetch) __builtin_prefetch(slots_.get() + (next & mask_));
    }
    if (prefetch && i + kRowAhead < count) {
      const std::uint64_t slot = slots_[hashes[(i + kRowAhead) % kAhead] & mask_];
      if (slot != 0) __builtin_prefetch(rows_.get() + ((slot & 0xffffffffu) - 1) * row_bytes_);
    }
    const std::byte* item = items + i * stride;
    apply(find_or_insert<kWide>(item + key_offset, key_load, hash), item);
  }
}

template <bool kWide>
[[gnu::always_inline]] inline std::byte* AggregateTable::find_or_insert(const std::byte* key, std::size_t key_load, std::uint64_t hash) {
  if ((count_ + 1) * 2 > slot_count_) [[unlikely]] {
    grow();
  }
  const std::uint64_t word = kWide ? 0 : key_word(key, key_load);
  const std::uint64_t tag = hash >> 32;
  for (std::size_t i = hash & mask_;; i = (i + 1) & mask_) {
    const std::uint64_t slot = slots_[i];
    if (slot == 0) {  // a new row: its key and a count of 0 (update and combine set the states)
      slots_[i] = slot_of(hash, count_);
      std::byte* row = rows_.get() + count_ * row_bytes_;
      if constexpr (kWide) {
        std::memcpy(row, key, layout_.key_bytes);
        for (std::size_t b = layout_.key_bytes; b < key_slot_; ++b) row[b] = std::byte{0};
      } else {
        store(row, word);
      }
      store<std::uint64_t>(row + key_slot_, 0);
      ++count_;
      return row;
    }
    if ((slot >> 32) == tag) {
      std::byte* row = rows_.get() + ((slot & 0xffffffffu) - 1) * row_bytes_;
      if constexpr (kWide) {
        if (std::memcmp(row, key, layout_.key_bytes) == 0) return row;
      } else {
        if (load<std::uint64_t>(row) == word) return row;
      }
    }
  }
}

std::size_t AggregateTable::memory_bytes() const noexcept {
  return slot_count_ / 2 * row_bytes_ + slot_count_ * sizeof(std::uint64_t);
}

void AggregateTable::clear() noexcept {
  count_ = 0;
  if (slot_count_ > 0) std::memset(slots_.get(), 0, slot_count_ * sizeof(std::uint64_t));
}

void AggregateTable::add(const std::byte* tuples, std::size_t count) {
  const auto update_row = [this](std::byte* row, const std::byte* tuple) { update(row, tuple); };
  if (wide_) {
    run<true>(tuples, count, layout_.tuple_bytes, layout_.key_offset, layout_.key_bytes, update_row);
  } else {
    run<false>(tuples, count, layout_.tuple_bytes, layout_.key_offset, layout_.key_bytes, update_row);
  }
}

void AggregateTable::merge(const std::byte* rows, std::size_t count) {
  std::uint64_t tuples = 0;
  const auto combine_row = [this, &tuples](std::byte* row, const std::byte* partial) {
    tuples += load<std::uint64_t>(partial + key_slot_);
    combine(row, partial);
  };
  // A row's key slot is zero-padded to 8 bytes: a key of at most 8 bytes is one 8-byte word.
  if (wide_) {
    run<true>(rows, count, row_bytes_, 0, layout_.key_bytes, combine_row);
  } else {
    run<false>(rows, count, row_bytes_, 0, 8, combine_row);
  }
  tuples_merged_ += tuples;
}

void AggregateTable::make_rows(const std::byte* tuples, std::size_t count, std::byte* out) const {
  for (std::size_t i = 0; i < count; ++i, tuples += layout_.tuple_bytes, out += row_bytes_) {
    const std::byte* key = tuples + layout_.key_offset;
    if (wide_) {
      std::memcpy(out, key, layout_.key_bytes);
      for (std::size_t b = layout_.key_bytes; b < key_slot_; ++b) out[b] = std::byte{0};
    } else {
      store(out, key_word(key, layout_.key_bytes));
    }
    store<std::uint64_t>(out + key_slot_, 0);
    update(out, tuples);
  }
}

void AggregateTable::finalize(std::byte* out) const {
  if (count_ == 0) return;  // `out` may be null
  const std::size_t width = layout_.result_bytes;
  std::memset(out, 0, count_ * width);
  for (std::size_t i = 0; i < count_; ++i) {
    const std::byte* row = rows_.get() + i * row_bytes_;
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

// Doubles the slots (at least 1024), makes room for as many rows as they index (half of them),
// and indexes every row again; the rows stay where they are.
void AggregateTable::grow() {
  const std::size_t slots = std::max<std::size_t>(1024, slot_count_ * 2);
  // Fresh zeroed slots (calloc: a large block comes zeroed from the system, no second pass).
  std::unique_ptr<std::uint64_t[], Free> fresh(static_cast<std::uint64_t*>(std::calloc(slots, sizeof(std::uint64_t))));
  if (!fresh) throw std::bad_alloc();
  advise_huge_pages(fresh.get(), slots * sizeof(std::uint64_t));
  // The rows grow in place where they can (a large block is remapped, not copied); the new room is
  // not zero-filled: a row is written when its key comes in.
  const std::size_t row_room = slots / 2 * row_bytes_;
  void* rows = std::realloc(rows_.get(), row_room);
  if (rows == nullptr) throw std::bad_alloc();
  (void)rows_.release();
  rows_.reset(static_cast<std::byte*>(rows));
  advise_huge_pages(rows, row_room);
  slots_ = std::move(fresh);
  slot_count_ = slots;
  mask_ = slots - 1;
  for (std::size_t r = 0; r < count_; ++r) {
    const std::byte* row = rows_.get() + r * row_bytes_;
    const std::uint64_t h = wide_ ? mix64(fold_bytes(row, layout_.key_bytes)) : mix64(load<std::uint64_t>(row));
    std::size_t i = h & mask_;
    while (slots_[i] != 0) i = (i + 1) & mask_;
    slots_[i] = slot_of(h, r);
  }
}

void AggregateTable::Free::operator()(void* memory) const noexcept { std::free(memory); }

}  // namespace dfi::kernels
