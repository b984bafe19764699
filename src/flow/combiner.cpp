// Combiner flows: their descriptor (aggregates, validation, record field), the aggregate table
// (local state, combine, finalize), the source that fills and ships it, and the target that
// merges and finalizes.
#include "dfi/flow/combiner.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "dfi/cluster/node.hpp"
#include "dfi/kernels/hash.hpp"

namespace dfi::flow {
namespace {

constexpr std::array<std::pair<std::string_view, Aggregate>, 5> kAggregateNames{
    {{"sum", Aggregate::sum},
     {"count", Aggregate::count},
     {"min", Aggregate::min},
     {"max", Aggregate::max},
     {"avg", Aggregate::avg}}};

// "sum(a)", "count(*)"
std::string describe(const AggregateSpec& a) {
  return std::string(aggregate_name(a.function)) + "(" + (a.column.empty() ? "*" : a.column) + ")";
}

}  // namespace

std::string_view aggregate_name(Aggregate aggregate) {
  for (const auto& [name, value] : kAggregateNames) {
    if (value == aggregate) return name;
  }
  return "?";
}

std::string describe_aggregates(const std::vector<AggregateSpec>& aggregates) {
  std::string text;
  for (const AggregateSpec& a : aggregates) {
    if (!text.empty()) text += ',';
    text += describe(a);
  }
  return text;
}

std::vector<AggregateSpec> parse_aggregates(std::string_view text) {
  std::vector<AggregateSpec> aggregates;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const std::size_t open = item.find('(');
    if (open == std::string_view::npos || item.size() < open + 2 || item.back() != ')') {
      throw Error(Errc::invalid_argument,
                  "aggregate '" + std::string(item) + "' is not function(column)");
    }
    const std::string name(item.substr(0, open));
    std::string column(item.substr(open + 1, item.size() - open - 2));
    AggregateSpec a;
    bool known = false;
    for (const auto& [n, value] : kAggregateNames) {
      if (n == name) {
        a.function = value;
        known = true;
      }
    }
    if (!known) {
      throw Error(Errc::invalid_argument,
                  "aggregate '" + std::string(item) + "': unknown function '" + name + "'");
    }
    if (column == "*") column.clear();
    a.column = std::move(column);
    aggregates.push_back(std::move(a));
  }
  return aggregates;
}

namespace detail {
namespace {

// AVG of integers sums exactly in 128 bits (a GCC/Clang extension on 64-bit targets).
__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;

enum class Kind : std::uint8_t { signed_int, unsigned_int, floating };

Kind kind_of(Type type) {
  switch (type) {
    case Type::int8:
    case Type::int16:
    case Type::int32:
    case Type::int64:
      return Kind::signed_int;
    case Type::uint8:
    case Type::uint16:
    case Type::uint32:
    case Type::uint64:
      return Kind::unsigned_int;
    default:
      return Kind::floating;
  }
}

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

std::int64_t load_signed(const std::byte* p, Type type) {
  switch (type) {
    case Type::int8:
      return load<std::int8_t>(p);
    case Type::int16:
      return load<std::int16_t>(p);
    case Type::int32:
      return load<std::int32_t>(p);
    default:
      return load<std::int64_t>(p);
  }
}
std::uint64_t load_unsigned(const std::byte* p, Type type) {
  switch (type) {
    case Type::uint8:
      return load<std::uint8_t>(p);
    case Type::uint16:
      return load<std::uint16_t>(p);
    case Type::uint32:
      return load<std::uint32_t>(p);
    default:
      return load<std::uint64_t>(p);
  }
}
double load_float(const std::byte* p, Type type) {
  return type == Type::float32 ? static_cast<double>(load<float>(p)) : load<double>(p);
}

// Writes a MIN/MAX state back in the column's own type (the value came from that type).
void store_as(std::byte* p, Type type, const std::byte* state) {
  switch (type) {
    case Type::int8:
      return store(p, static_cast<std::int8_t>(load<std::int64_t>(state)));
    case Type::int16:
      return store(p, static_cast<std::int16_t>(load<std::int64_t>(state)));
    case Type::int32:
      return store(p, static_cast<std::int32_t>(load<std::int64_t>(state)));
    case Type::int64:
      return store(p, load<std::int64_t>(state));
    case Type::uint8:
      return store(p, static_cast<std::uint8_t>(load<std::uint64_t>(state)));
    case Type::uint16:
      return store(p, static_cast<std::uint16_t>(load<std::uint64_t>(state)));
    case Type::uint32:
      return store(p, static_cast<std::uint32_t>(load<std::uint64_t>(state)));
    case Type::uint64:
      return store(p, load<std::uint64_t>(state));
    case Type::float32:
      return store(p, static_cast<float>(load<double>(state)));
    default:
      return store(p, load<double>(state));
  }
}

std::string result_name(const AggregateSpec& a) {
  if (a.function == Aggregate::count) return "count";
  return std::string(aggregate_name(a.function)) + "_" + a.column;
}

}  // namespace

// The per-key table of a combiner flow. A row is [key slot: key bytes padded to 8][count: u64]
// [one state per aggregate], which is also the partial row shipped from sources to the target.
// States: sum: u64 (integers, wrapping) or f64; min/max: i64, u64 or f64 (the value widened);
// avg: i128/u128 (integers, exact) or f64; count: none (the row count serves).
class AggregateTable {
 public:
  explicit AggregateTable(const FlowSpec& spec) {
    const Schema& schema = spec.schema;
    const std::size_t key = schema.index_of(spec.key_column);
    key_type_ = schema.column(key);
    key_offset_ = schema.offset(key);
    key_bytes_ = schema.column_bytes(key);
    key_slot_ = (key_bytes_ + 7) / 8 * 8;
    std::size_t state = key_slot_ + 8;  // after the count
    std::vector<Column> out{key_type_};
    for (const AggregateSpec& a : spec.type_options.get<CombinerOptions>().aggregates) {
      Op op;
      op.function = a.function;
      if (a.function != Aggregate::count) {
        const std::size_t column = schema.index_of(a.column);
        op.type = schema.column(column).type;
        if (op.type == Type::chars) {
          throw spec.invalid(describe(a) + ": column '" + a.column + "' is not numeric");
        }
        op.kind = kind_of(op.type);
        op.in_offset = schema.offset(column);
        op.state_offset = state;
        state += (a.function == Aggregate::avg && op.kind != Kind::floating) ? 16 : 8;
      }
      Type out_type = Type::float64;
      switch (a.function) {
        case Aggregate::sum:
          out_type = op.kind == Kind::signed_int     ? Type::int64
                     : op.kind == Kind::unsigned_int ? Type::uint64
                                                     : Type::float64;
          break;
        case Aggregate::count:
          out_type = Type::uint64;
          break;
        case Aggregate::min:
        case Aggregate::max:
          out_type = op.type;
          break;
        case Aggregate::avg:
          out_type = Type::float64;
          break;
      }
      out.push_back({result_name(a), out_type, 1});
      ops_.push_back(op);
    }
    row_bytes_ = state;
    try {
      result_ = Schema(out);
    } catch (const Error& e) {
      throw spec.invalid(std::string("result columns clash: ") + e.what());
    }
    for (std::size_t i = 0; i < ops_.size(); ++i) ops_[i].out_offset = result_.offset(i + 1);
    wide_key_ = key_bytes_ > 8;
  }

  std::size_t row_bytes() const noexcept { return row_bytes_; }
  // Bytes of the key column, at the start of every row.
  std::size_t key_bytes() const noexcept { return key_bytes_; }
  const Schema& result_schema() const noexcept { return result_; }
  std::size_t size() const noexcept { return count_; }
  const std::byte* rows() const noexcept { return rows_.data(); }
  std::size_t memory_bytes() const noexcept {
    return rows_.capacity() + slots_.capacity() * sizeof(std::uint32_t);
  }
  // Tuples that the partial rows merged so far stand for.
  std::uint64_t tuples_merged() const noexcept { return tuples_merged_; }

  void clear() {
    rows_.clear();
    count_ = 0;
    std::fill(slots_.begin(), slots_.end(), 0);
  }

  // Local state: one input tuple.
  void add(const std::byte* tuple) {
    std::byte* row = find_or_insert(tuple + key_offset_);
    const std::uint64_t count = load<std::uint64_t>(row + key_slot_);
    store(row + key_slot_, count + 1);
    for (const Op& op : ops_) {
      if (op.function == Aggregate::count) continue;
      std::byte* s = row + op.state_offset;
      const std::byte* in = tuple + op.in_offset;
      switch (op.kind) {
        case Kind::signed_int:
          update_int<std::int64_t, Int128>(op.function, s, load_signed(in, op.type), count == 0);
          break;
        case Kind::unsigned_int:
          update_int<std::uint64_t, UInt128>(op.function, s, load_unsigned(in, op.type),
                                             count == 0);
          break;
        case Kind::floating:
          update_float(op.function, s, load_float(in, op.type), count == 0);
          break;
      }
    }
  }

  // Combine: one partial row (same layout as ours).
  void merge(const std::byte* partial) {
    std::byte* row = find_or_insert(partial);
    const std::uint64_t count = load<std::uint64_t>(row + key_slot_);
    const std::uint64_t more = load<std::uint64_t>(partial + key_slot_);
    store(row + key_slot_, count + more);
    tuples_merged_ += more;
    for (const Op& op : ops_) {
      if (op.function == Aggregate::count) continue;
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
          merge_float(op.function, s, p, count == 0);
          break;
      }
    }
  }

  // Finalize: one result tuple per row into `out` (resized).
  void finalize(std::vector<std::byte>& out) const {
    const std::size_t width = result_.tuple_bytes();
    const std::size_t n = size();
    out.assign(n * width, std::byte{0});
    for (std::size_t i = 0; i < n; ++i) {
      const std::byte* row = rows_.data() + i * row_bytes_;
      std::byte* t = out.data() + i * width;
      std::memcpy(t, row, key_bytes_);
      const std::uint64_t count = load<std::uint64_t>(row + key_slot_);
      for (const Op& op : ops_) {
        std::byte* o = t + op.out_offset;
        const std::byte* s = row + op.state_offset;
        switch (op.function) {
          case Aggregate::count:
            store(o, count);
            break;
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
              store(o, static_cast<double>(avg_exact(op.kind, s, count)));
            }
            break;
        }
      }
    }
  }

 private:
  struct Op {
    Aggregate function = Aggregate::count;
    Type type = Type::int64;
    Kind kind = Kind::signed_int;
    std::size_t in_offset = 0;
    std::size_t state_offset = 0;
    std::size_t out_offset = 0;
  };

  static long double avg_exact(Kind kind, const std::byte* s, std::uint64_t count) {
    if (kind == Kind::signed_int)
      return static_cast<long double>(load<Int128>(s)) / static_cast<long double>(count);
    return static_cast<long double>(load<UInt128>(s)) / static_cast<long double>(count);
  }

  template <class T, class Wide>
  static void update_int(Aggregate function, std::byte* s, T v, bool first) {
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
  static void merge_int(Aggregate function, std::byte* s, const std::byte* p, bool first) {
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
  static void update_float(Aggregate function, std::byte* s, double v, bool first) {
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
  static void merge_float(Aggregate function, std::byte* s, const std::byte* p, bool first) {
    update_float(function, s, load<double>(p), first);
  }

  // The hash of the key at `key` (key_bytes_ bytes).
  std::uint64_t hash(const std::byte* key) const noexcept {
    if (!wide_key_) [[likely]] {
      std::uint64_t k = 0;
      std::memcpy(&k, key, key_bytes_);
      return kernels::mix64(k);
    }
    return kernels::mix64(kernels::fold_bytes(key, key_bytes_));
  }


  // The row for the key at `key` (key_bytes_ bytes), created zeroed with the key if new. The index
  // is open addressing over the rows themselves (a row starts with its key, zero-padded to 8 B):
  // once the slots and rows have grown to a cycle's number of keys, clear() keeps them, and
  // later cycles allocate nothing.
  std::byte* find_or_insert(const std::byte* key) {
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
        std::memcpy(row, key, key_bytes_);
        ++count_;
        return row;
      }
      std::byte* row = rows_.data() + std::size_t{slot - 1} * row_bytes_;
      if (std::memcmp(row, key, key_bytes_) == 0) return row;
    }
  }

  // Doubles the slots (at least 1024) and indexes every row again; the rows stay where they are.
  void grow() {
    slots_.assign(std::max<std::size_t>(1024, slots_.size() * 2), 0);
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t r = 0; r < count_; ++r) {
      std::size_t i = hash(rows_.data() + r * row_bytes_) & mask;
      while (slots_[i] != 0) i = (i + 1) & mask;
      slots_[i] = static_cast<std::uint32_t>(r + 1);
    }
  }

  Column key_type_;
  std::size_t key_offset_ = 0;
  std::size_t key_bytes_ = 0;
  std::size_t key_slot_ = 0;
  bool wide_key_ = false;
  std::vector<Op> ops_;
  std::size_t row_bytes_ = 0;
  Schema result_;
  std::vector<std::byte> rows_;
  std::size_t count_ = 0;             // rows
  std::vector<std::uint32_t> slots_;  // row index + 1, or 0 when free; a power of two
  std::uint64_t tuples_merged_ = 0;
};

}  // namespace detail

Schema combiner_result_schema(const FlowSpec& spec) {
  return detail::AggregateTable(spec).result_schema();
}
std::size_t combiner_row_bytes(const FlowSpec& spec) {
  return detail::AggregateTable(spec).row_bytes();
}

// ---------------------------------------------------------------------------------------------
// The combiner's descriptor

namespace {

void validate_combiner(const FlowSpec& spec) {
  const auto& aggregates = spec.type_options.get<CombinerOptions>().aggregates;
  if (spec.targets.empty()) throw spec.invalid("a combiner flow needs at least one target");
  if (spec.options.mode != Mode::bandwidth) {
    throw spec.invalid("a combiner flow runs in bandwidth mode");
  }
  if (aggregates.empty()) {
    throw spec.invalid("a combiner flow needs at least one aggregate (sum, count, min, max, avg)");
  }
  for (std::size_t i = 0; i < aggregates.size(); ++i) {
    const AggregateSpec& a = aggregates[i];
    const std::string what = describe(a);
    if (a.column.empty()) {
      if (a.function != Aggregate::count) throw spec.invalid(what + " needs a value column");
    } else {
      std::size_t column = 0;
      try {
        column = spec.schema.index_of(a.column);
      } catch (const Error&) {
        throw spec.invalid(what + ": the schema {" + spec.schema.describe() + "} has no column '" +
                           a.column + "'");
      }
      if (spec.schema.column(column).type == Type::chars) {
        throw spec.invalid(what + ": column '" + a.column + "' is not numeric");
      }
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (aggregates[j] == a) throw spec.invalid(what + " is listed twice");
    }
  }
  const std::size_t row = combiner_row_bytes(spec);
  const std::size_t capacity = spec.layout().payload_capacity();
  if (row > capacity) {
    throw spec.invalid("a partial-aggregate row of " + std::to_string(row) +
                       " B does not fit a segment payload of " + std::to_string(capacity) + " B");
  }
}

void write_combiner(const FlowSpec& spec, SpecFields& record) {
  const auto& aggregates = spec.type_options.get<CombinerOptions>().aggregates;
  if (!aggregates.empty()) record.set_string("aggregates", describe_aggregates(aggregates));
}

void read_combiner(const SpecFields& record, FlowSpec& spec) {
  CombinerOptions& options = spec.type_options.get<CombinerOptions>();
  if (!record.has("aggregates")) return;
  try {
    options.aggregates = parse_aggregates(record.get_string("aggregates"));
  } catch (const Error& e) {
    if (e.code() == Errc::protocol) throw;
    throw Error(Errc::protocol, "flow '" + record.flow() + "': spec record: " + e.what());
  }
}

}  // namespace

// Segments carry partial-aggregate rows (checked by validate_combiner), grouped by the key column.
constinit const FlowTypeTraits detail::kCombinerTraits{.name = "combiner",
                                                       .key_column = KeyColumn::required,
                                                       .carries_tuples = false,
                                                       .options = &typeid(CombinerOptions),
                                                       .validate = validate_combiner,
                                                       .write = write_combiner,
                                                       .read = read_combiner};

// ---------------------------------------------------------------------------------------------

namespace {
detail::SourceRings open_source(cluster::Node& node, fabric::Worker& worker, std::string_view name,
                                int thread, const CombinerSourceOptions& options) {
  const Deadline deadline = detail::open_deadline(options.open_timeout);
  FlowSpec spec = detail::open_spec(node, name, FlowType::combiner, options.expected_schema, deadline);
  const std::size_t index = detail::source_index(spec, node.rank(), thread);
  return detail::SourceRings(node, worker, std::move(spec), index, deadline);
}
}  // namespace

CombinerSource::CombinerSource(cluster::Node& node, fabric::Worker& worker, std::string_view name,
                               int thread, CombinerSourceOptions options)
    : rings_(open_source(node, worker, name, thread, options)),
      table_(std::make_unique<detail::AggregateTable>(rings_.spec())),
      tuple_bytes_(rings_.spec().schema.tuple_bytes()),
      local_groups_(std::max<std::size_t>(1, options.local_groups)),
      ship_tuples_(options.ship_tuples) {}

CombinerSource::~CombinerSource() {
  if (closed_) return;
  if (Status s = close(); !s)
    std::fprintf(stderr, "dfi: closing on destruction: %s\n", s.message().c_str());
}

std::size_t CombinerSource::memory_bytes() const noexcept {
  return rings_.memory_bytes() + table_->memory_bytes();
}

Status CombinerSource::width_error(std::size_t bytes) const {
  return {Errc::invalid_argument, rings_.label() + ": tuple of " + std::to_string(bytes) +
                                      " B does not match the schema's " +
                                      std::to_string(tuple_bytes_) + " B {" +
                                      rings_.spec().schema.describe() + "}"};
}

Status CombinerSource::push(const void* tuple, std::size_t bytes) {
  if (bytes != tuple_bytes_) [[unlikely]] {
    return width_error(bytes);
  }
  if (closed_ || failure_.failed()) [[unlikely]] {
    if (failure_.failed()) return failure_.again(rings_.label());
    return {Errc::flow_failed, rings_.label() + ": push after close"};
  }
  table_->add(static_cast<const std::byte*>(tuple));
  ++counters_.tuples;
  ++since_ship_;
  if (table_->size() >= local_groups_ || since_ship_ == ship_tuples_) [[unlikely]] {
    return ship();
  }
  return {};
}

Status CombinerSource::push_bulk(const void* tuples, std::size_t count) {
  const auto* p = static_cast<const std::byte*>(tuples);
  for (std::size_t i = 0; i < count; ++i, p += tuple_bytes_) {
    if (Status s = push(p, tuple_bytes_); !s) return s;
  }
  return {};
}

// Sends the local table as partial rows and empties it. An error can leave part of the table sent,
// so a retry could count rows twice: after any error here the source is failed for good.
Status CombinerSource::ship() {
  if (failure_.failed()) return failure_.again(rings_.label());
  since_ship_ = 0;
  const std::size_t rows = table_->size();
  if (rows == 0) return {};
  const std::size_t width = table_->row_bytes();
  const std::byte* row = table_->rows();
  const std::size_t targets = rings_.target_count();
  if (targets == 1) {
    // The table's rows are contiguous: whole segments of them go out with one copy each.
    detail::RingWriter& writer = rings_.writer(0);
    const std::size_t per_segment = rings_.spec().layout().payload_capacity() / width;
    for (std::size_t left = rows; left > 0;) {
      const std::size_t n = std::min(left, per_segment);
      if (Status s = writer.publish_from(row, n * width); !s) return failure_.latch(std::move(s), /*ends_flow=*/true);
      row += n * width;
      left -= n;
    }
  } else {
    // Each row to the target its key routes to, batched into that target's segment.
    const std::size_t key_bytes = table_->key_bytes();
    for (std::size_t i = 0; i < rows; ++i, row += width) {
      const std::size_t t = kernels::route(kernels::load_key(row, key_bytes), targets);
      if (Status s = rings_.writer(t).append(row, width); !s) return failure_.latch(std::move(s), /*ends_flow=*/true);
    }
  }
  counters_.rows += rows;
  const memory::RingCounters rc = rings_.counters();
  counters_.segments = rc.segments;
  counters_.bytes = rc.bytes;
  table_->clear();
  return {};
}

Status CombinerSource::flush() {
  if (closed_) return {};
  if (Status s = ship(); !s) return s;
  for (std::size_t t = 0; t < rings_.target_count(); ++t) {
    if (Status s = rings_.writer(t).flush(); !s) return failure_.latch(std::move(s), /*ends_flow=*/true);
    if (Status s = rings_.wait_visible(t); !s) return s;
  }
  return {};
}

Status CombinerSource::close() {
  if (closed_) return {};
  if (Status s = ship(); !s) return s;
  Status s = rings_.close();
  closed_ = true;
  const memory::RingCounters rc = rings_.counters();
  counters_.segments = rc.segments;
  counters_.bytes = rc.bytes;
  return s;
}

// ---------------------------------------------------------------------------------------------

namespace {
detail::TargetRings open_target(cluster::Node& node, std::string_view name, int id,
                                const std::optional<Schema>& expected_schema, std::chrono::milliseconds timeout) {
  FlowSpec spec = detail::open_spec(node, name, FlowType::combiner, expected_schema, detail::open_deadline(timeout));
  const std::size_t index = detail::target_index(spec, node.rank(), id);
  return detail::TargetRings(node, std::move(spec), index);
}
}  // namespace

CombinerTarget::CombinerTarget(cluster::Node& node, std::string_view name, int id,
                               std::optional<Schema> expected_schema, std::chrono::milliseconds open_timeout)
    : rings_(open_target(node, name, id, expected_schema, open_timeout)),
      table_(std::make_unique<detail::AggregateTable>(rings_.spec())),
      result_schema_(table_->result_schema()),
      stall_timeout_(detail::stall_timeout(rings_.spec())) {}

CombinerTarget::~CombinerTarget() = default;

std::size_t CombinerTarget::memory_bytes() const noexcept {
  return rings_.memory_bytes() + table_->memory_bytes() + results_.capacity() + partial_.capacity();
}

void CombinerTarget::merge(const memory::SegmentView& view) {
  const std::size_t width = table_->row_bytes();
  const std::size_t rows = view.bytes / width;
  const std::byte* row = view.data;
  for (std::size_t i = 0; i < rows; ++i, row += width) {
    table_->merge(row);
  }
  counters_.tuples = table_->tuples_merged();
  counters_.rows += rows;
  ++counters_.segments;
  counters_.bytes += view.bytes;
  counters_.groups = table_->size();
}

Status CombinerTarget::consume(TupleBatch& batch, std::chrono::milliseconds timeout) {
  batch = TupleBatch{};
  batch.tuple_bytes = result_schema_.tuple_bytes();
  if (timeout.count() == 0) timeout = stall_timeout_;
  while (!finalized_) {
    memory::SegmentView view;
    std::size_t source = 0;
    if (Status s = rings_.next(view, source, timeout); !s) return s;
    if (view.bytes > 0) {
      merge(view);
      continue;
    }
    if (rings_.finished()) {
      table_->finalize(results_);
      finalized_ = true;
    }
  }
  const std::size_t width = result_schema_.tuple_bytes();
  const std::size_t total = results_.size() / width;
  const std::size_t n = std::min(kResultBatchRows, total - handed_out_);
  if (n == 0) {
    ended_ = true;
    return {};
  }
  batch.data = results_.data() + handed_out_ * width;
  batch.count = n;
  handed_out_ += n;
  return {};
}

Status CombinerTarget::read_partial(TupleBatch& batch) {
  batch = TupleBatch{};
  batch.tuple_bytes = result_schema_.tuple_bytes();
  if (!finalized_) {
    for (;;) {
      memory::SegmentView view;
      std::size_t source = 0;
      Status s = rings_.try_next(view, source);
      if (s.code() == Errc::retry) break;
      if (!s) return s;
      if (view.bytes > 0) {
        merge(view);
        continue;
      }
      if (rings_.finished()) break;
    }
  }
  table_->finalize(partial_);
  batch.data = partial_.data();
  batch.count = partial_.size() / batch.tuple_bytes;
  return {};
}

}  // namespace dfi::flow
