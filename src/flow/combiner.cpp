// Combiner flows: their descriptor (aggregates, validation, record field), the layout of their
// aggregate table (kernels::AggregateTable: local state, combine, finalize) and result schema,
// the source that fills and ships it, and the target that merges and finalizes.
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

namespace {

std::string result_name(const AggregateSpec& a) {
  if (a.function == Aggregate::count) return "count";
  return std::string(aggregate_name(a.function)) + "_" + a.column;
}

kernels::ValueType value_type(Type type) {
  switch (type) {
    case Type::int8: return kernels::ValueType::int8;
    case Type::int16: return kernels::ValueType::int16;
    case Type::int32: return kernels::ValueType::int32;
    case Type::int64: return kernels::ValueType::int64;
    case Type::uint8: return kernels::ValueType::uint8;
    case Type::uint16: return kernels::ValueType::uint16;
    case Type::uint32: return kernels::ValueType::uint32;
    case Type::uint64: return kernels::ValueType::uint64;
    case Type::float32: return kernels::ValueType::float32;
    default: return kernels::ValueType::float64;  // chars: refused before
  }
}

Type flow_type(kernels::ValueType type) {
  switch (type) {
    case kernels::ValueType::int8: return Type::int8;
    case kernels::ValueType::int16: return Type::int16;
    case kernels::ValueType::int32: return Type::int32;
    case kernels::ValueType::int64: return Type::int64;
    case kernels::ValueType::uint8: return Type::uint8;
    case kernels::ValueType::uint16: return Type::uint16;
    case kernels::ValueType::uint32: return Type::uint32;
    case kernels::ValueType::uint64: return Type::uint64;
    case kernels::ValueType::float32: return Type::float32;
    case kernels::ValueType::float64: return Type::float64;
  }
  return Type::float64;
}

// A combiner flow's aggregate table (kernels::AggregateTable) and result schema: the key column,
// then one column per aggregate. Throws dfi::Error(invalid_argument) naming the flow when an
// aggregate's column is unknown or not numeric, or result names clash.
struct CombinerLayout {
  kernels::AggregateTable::Layout table;
  Schema result;
};

CombinerLayout combiner_layout(const FlowSpec& spec) {
  const Schema& schema = spec.schema;
  const std::size_t key = schema.index_of(spec.key_column);
  CombinerLayout out;
  out.table.tuple_bytes = schema.tuple_bytes();
  out.table.key_offset = schema.offset(key);
  out.table.key_bytes = schema.column_bytes(key);
  std::vector<Column> columns{schema.column(key)};
  for (const AggregateSpec& a : spec.type_options.get<CombinerOptions>().aggregates) {
    kernels::AggregateTable::Column c;
    c.function = a.function;
    if (a.function != Aggregate::count) {
      const std::size_t column = schema.index_of(a.column);
      if (schema.column(column).type == Type::chars) {
        throw spec.invalid(describe(a) + ": column '" + a.column + "' is not numeric");
      }
      c.type = value_type(schema.column(column).type);
      c.offset = schema.offset(column);
    }
    columns.push_back({result_name(a), flow_type(kernels::AggregateTable::result_type(c.function, c.type)), 1});
    out.table.aggregates.push_back(c);
  }
  try {
    out.result = Schema(columns);
  } catch (const Error& e) {
    throw spec.invalid(std::string("result columns clash: ") + e.what());
  }
  for (std::size_t i = 0; i < out.table.aggregates.size(); ++i) {
    out.table.aggregates[i].result_offset = out.result.offset(i + 1);
  }
  out.table.result_bytes = out.result.tuple_bytes();
  return out;
}

// Pass-through rows are made this many at a time (CombinerSource::pass_through).
constexpr std::size_t kPassBatch = 256;

kernels::AggregateTable make_table(const FlowSpec& spec) { return kernels::AggregateTable(combiner_layout(spec).table); }

}  // namespace

Schema combiner_result_schema(const FlowSpec& spec) { return combiner_layout(spec).result; }
std::size_t combiner_row_bytes(const FlowSpec& spec) {
  return kernels::AggregateTable::row_bytes_of(combiner_layout(spec).table);
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
      table_(make_table(rings_.spec())),
      tuple_bytes_(rings_.spec().schema.tuple_bytes()),
      local_groups_(std::max<std::size_t>(1, options.local_groups)),
      ship_tuples_(options.ship_tuples),
      pass_through_below_(options.pass_through_below),
      pass_through_tuples_(options.pass_through_tuples != 0 ? options.pass_through_tuples
                                                             : 16 * local_groups_),
      before_first_write_(std::move(options.before_first_write)) {
  if (pass_through_below_ > 0) scratch_.resize(kPassBatch * table_.row_bytes());
}

CombinerSource::~CombinerSource() {
  if (closed_) return;
  if (Status s = close(); !s)
    std::fprintf(stderr, "dfi: closing on destruction: %s\n", s.message().c_str());
}

std::size_t CombinerSource::memory_bytes() const noexcept {
  return rings_.memory_bytes() + table_.memory_bytes();
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
  return push_bulk(tuple, 1);
}

Status CombinerSource::push_error() const {
  if (failure_.failed()) return failure_.again(rings_.label());
  return {Errc::flow_failed, rings_.label() + ": push after close"};
}

// Adds the tuples to the table in runs that cannot overfill it: a run of n tuples adds at most n
// keys, so a run is no longer than the room left (and than what is left before ship_tuples). A
// table that filled with a hit rate below pass_through_below starts a pass-through window.
Status CombinerSource::push_bulk(const void* tuples, std::size_t count) {
  if (closed_ || failure_.failed()) [[unlikely]] {
    return push_error();
  }
  const auto* p = static_cast<const std::byte*>(tuples);
  while (count > 0) {
    if (passing_ > 0) {
      const std::size_t n = std::min(count, passing_);
      if (Status s = pass_through(p, n); !s) return s;
      p += n * tuple_bytes_;
      count -= n;
      passing_ -= n;
      continue;
    }
    std::size_t n = std::min(count, local_groups_ - table_.size());
    if (ship_tuples_ != 0) n = std::min(n, ship_tuples_ - since_ship_);
    table_.add(p, n);
    p += n * tuple_bytes_;
    count -= n;
    counters_.tuples += n;
    since_ship_ += n;
    if (table_.size() >= local_groups_ || since_ship_ == ship_tuples_) [[unlikely]] {
      // Hit rate of the full table: 1 - keys / tuples it took.
      if (table_.size() >= local_groups_ && pass_through_below_ > 0 &&
          static_cast<double>(since_ship_ - table_.size()) < pass_through_below_ * static_cast<double>(since_ship_)) {
        passing_ = pass_through_tuples_;
      }
      if (Status s = ship(); !s) return s;
    }
  }
  return {};
}

// Ships each tuple as the partial row it makes on its own, routed as ship() routes rows, through
// the scratch rows kPassBatch at a time.
Status CombinerSource::pass_through(const std::byte* tuples, std::size_t count) {
  before_writing();
  const std::size_t width = table_.row_bytes();
  const std::size_t key_bytes = table_.key_bytes();
  const std::size_t targets = rings_.target_count();
  while (count > 0) {
    const std::size_t n = std::min(count, kPassBatch);
    table_.make_rows(tuples, n, scratch_.data());
    const std::byte* row = scratch_.data();
    for (std::size_t i = 0; i < n; ++i, row += width) {
      const std::size_t t = targets == 1 ? 0 : kernels::route(kernels::load_key(row, key_bytes), targets);
      if (Status s = rings_.writer(t).append(row, width); !s) return failure_.latch(std::move(s), /*ends_flow=*/true);
    }
    counters_.tuples += n;
    counters_.rows += n;
    counters_.passed += n;
    tuples += n * tuple_bytes_;
    count -= n;
  }
  const memory::RingCounters rc = rings_.counters();
  counters_.segments = rc.segments;
  counters_.bytes = rc.bytes;
  return {};
}

// Sends the local table as partial rows and empties it. An error can leave part of the table sent,
// so a retry could count rows twice: after any error here the source is failed for good.
Status CombinerSource::ship() {
  if (failure_.failed()) return failure_.again(rings_.label());
  since_ship_ = 0;
  const std::size_t rows = table_.size();
  if (rows == 0) return {};
  before_writing();
  const std::size_t width = table_.row_bytes();
  const std::byte* row = table_.rows();
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
    const std::size_t key_bytes = table_.key_bytes();
    for (std::size_t i = 0; i < rows; ++i, row += width) {
      const std::size_t t = kernels::route(kernels::load_key(row, key_bytes), targets);
      if (Status s = rings_.writer(t).append(row, width); !s) return failure_.latch(std::move(s), /*ends_flow=*/true);
    }
  }
  counters_.rows += rows;
  const memory::RingCounters rc = rings_.counters();
  counters_.segments = rc.segments;
  counters_.bytes = rc.bytes;
  table_.clear();
  return {};
}

void CombinerSource::before_writing() {
  if (!before_first_write_) [[likely]] {
    return;
  }
  const std::function<void()> call = std::move(before_first_write_);
  before_first_write_ = nullptr;
  call();
}

Status CombinerSource::flush() {
  if (closed_) return {};
  before_writing();
  if (Status s = ship(); !s) return s;
  for (std::size_t t = 0; t < rings_.target_count(); ++t) {
    if (Status s = rings_.writer(t).flush(); !s) return failure_.latch(std::move(s), /*ends_flow=*/true);
    if (Status s = rings_.wait_visible(t); !s) return s;
  }
  return {};
}

Status CombinerSource::close() {
  if (closed_) return {};
  before_writing();
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
      table_(make_table(rings_.spec())),
      result_schema_(combiner_result_schema(rings_.spec())),
      stall_timeout_(detail::stall_timeout(rings_.spec())),
      arrived_(rings_.ring_count(), 0) {}

CombinerTarget::~CombinerTarget() = default;

std::size_t CombinerTarget::memory_bytes() const noexcept {
  return rings_.memory_bytes() + table_.memory_bytes() + results_.capacity() + partial_.capacity();
}

void CombinerTarget::merge(const memory::SegmentView& view) {
  const std::size_t rows = view.bytes / table_.row_bytes();
  table_.merge(view.data, rows);
  counters_.tuples = table_.tuples_merged();
  counters_.rows += rows;
  ++counters_.segments;
  counters_.bytes += view.bytes;
  counters_.groups = table_.size();
}

void CombinerTarget::finalize(std::vector<std::byte>& out) const {
  out.resize(table_.size() * result_schema_.tuple_bytes());
  table_.finalize(out.data());
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
      finalize(results_);
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

Status CombinerTarget::merge_arrived() {
  if (finalized_) return {};
  Status s;
  for (;;) {
    memory::SegmentView view;
    std::size_t source = 0;
    s = rings_.try_next(view, source);
    if (!s) break;
    if (view.bytes > 0) {
      merge(view);
      arrived_[source] = 1;
      continue;
    }
    if (rings_.finished()) break;
  }
  // Sources whose rows came in this call and whose stream is still open ship while aggregating.
  for (std::size_t i = 0; i < arrived_.size(); ++i) {
    if (arrived_[i] == 0) continue;
    arrived_[i] = 0;
    if (!rings_.ended(i)) streaming_ = true;
  }
  if (s.code() == Errc::retry) return {};
  return s;
}

Status CombinerTarget::read_partial(TupleBatch& batch) {
  batch = TupleBatch{};
  batch.tuple_bytes = result_schema_.tuple_bytes();
  if (Status s = merge_arrived(); !s) return s;
  finalize(partial_);
  batch.data = partial_.data();
  batch.count = partial_.size() / batch.tuple_bytes;
  return {};
}

}  // namespace dfi::flow
