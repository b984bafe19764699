#include "dfi/flow/spec.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <mutex>
#include <set>
#include <unordered_map>

#include "dfi/cluster/node.hpp"
#include "dfi/common/config.hpp"
#include "dfi/common/error.hpp"
#include "dfi/flow/combiner.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/registry/client.hpp"
#include "names.hpp"

namespace dfi::flow {
namespace {

using nlohmann::json;

constexpr std::uint32_t kDefaultBandwidthSegment = 8192 + 16;  // an unresolved spec's (shm's) defaults
constexpr std::uint32_t kDefaultSegments = 32;

std::string_view mode_name(Mode mode) { return mode == Mode::bandwidth ? "bandwidth" : "latency"; }

std::string_view routing_name(Routing routing) {
  switch (routing) {
    case Routing::key_hash: return "key_hash";
    case Routing::function: return "function";
    case Routing::explicit_target: return "explicit_target";
  }
  return "?";
}

template <class Enum, std::size_t N>
Enum parse_enum(const std::string& text, const std::array<std::pair<std::string_view, Enum>, N>& names,
                std::string_view what) {
  for (const auto& [name, value] : names) {
    if (name == text) return value;
  }
  throw Error(Errc::protocol, "flow spec: unknown " + std::string(what) + " '" + text + "'");
}

constexpr std::array<std::pair<std::string_view, Aggregate>, 5> kAggregateNames{
    {{"sum", Aggregate::sum}, {"count", Aggregate::count}, {"min", Aggregate::min}, {"max", Aggregate::max},
     {"avg", Aggregate::avg}}};

// Bytes in front of the tuples of every segment: replicate flows carry a sequence word there.
std::size_t header_bytes(const FlowSpec& spec) {
  return spec.type == FlowType::replicate ? kReplicateHeaderBytes : 0;
}

void validate_combiner(const FlowSpec& spec, const std::function<void(const std::string&)>& bad) {
  if (spec.targets.size() != 1) {
    bad("a combiner flow has exactly one target (N:1), not " + std::to_string(spec.targets.size()));
  }
  if (spec.options.mode != Mode::bandwidth) bad("a combiner flow runs in bandwidth mode");
  if (spec.aggregates.empty()) bad("a combiner flow needs at least one aggregate (sum, count, min, max, avg)");
  for (std::size_t i = 0; i < spec.aggregates.size(); ++i) {
    const AggregateSpec& a = spec.aggregates[i];
    const std::string what = std::string(aggregate_name(a.function)) + "(" + (a.column.empty() ? "*" : a.column) + ")";
    if (a.column.empty()) {
      if (a.function != Aggregate::count) bad(what + " needs a value column");
    } else {
      std::size_t column = 0;
      try {
        column = spec.schema.index_of(a.column);
      } catch (const Error&) {
        bad(what + ": the schema {" + spec.schema.describe() + "} has no column '" + a.column + "'");
      }
      if (spec.schema.column(column).type == Type::chars) bad(what + ": column '" + a.column + "' is not numeric");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (spec.aggregates[j].function == a.function && spec.aggregates[j].column == a.column) bad(what + " is listed twice");
    }
  }
  const std::size_t row = combiner_row_bytes(spec);
  const std::size_t capacity = spec.layout().payload_capacity();
  if (row > capacity) {
    bad("a partial-aggregate row of " + std::to_string(row) + " B does not fit a segment payload of " +
        std::to_string(capacity) + " B");
  }
}

}  // namespace

std::string_view replication_name(Replication replication) {
  return replication == Replication::naive ? "naive" : "relay";
}

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
    text += std::string(aggregate_name(a.function)) + "(" + (a.column.empty() ? "*" : a.column) + ")";
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
      throw Error(Errc::invalid_argument, "aggregate '" + std::string(item) + "' is not function(column)");
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
    if (!known) throw Error(Errc::invalid_argument, "aggregate '" + std::string(item) + "': unknown function '" + name + "'");
    if (column == "*") column.clear();
    a.column = std::move(column);
    aggregates.push_back(std::move(a));
  }
  return aggregates;
}

std::string_view flow_type_name(FlowType type) {
  switch (type) {
    case FlowType::shuffle: return "shuffle";
    case FlowType::replicate: return "replicate";
    case FlowType::combiner: return "combiner";
  }
  return "?";
}

FlowSpec FlowSpec::resolved(bool native_rma) const {
  FlowSpec spec = *this;
  if (options.mode == Mode::latency) {
    if (spec.options.segments == 0) spec.options.segments = kDefaultSegments;
    return spec;
  }
  const char* const segments = native_rma ? "segments_shm" : "segments_tcp";
  const char* const bytes = native_rma ? "segment_bytes_shm" : "segment_bytes_tcp";
  if (spec.options.segments == 0) spec.options.segments = static_cast<std::uint32_t>(config::get_int(segments));
  if (spec.options.segment_bytes == 0) {
    spec.options.segment_bytes = static_cast<std::uint32_t>(config::get_int(bytes));
  }
  return spec;
}

memory::RingLayout FlowSpec::layout() const {
  std::uint32_t bytes = options.segment_bytes;
  if (bytes == 0) {
    bytes = options.mode == Mode::bandwidth
                ? kDefaultBandwidthSegment
                : static_cast<std::uint32_t>((schema.tuple_bytes() + 7) / 8 * 8 + header_bytes(*this) +
                                             memory::kFooterBytes);
  }
  return memory::RingLayout::make(options.segments == 0 ? kDefaultSegments : options.segments, bytes);
}

void FlowSpec::validate(int cluster_size) const {
  const std::string flow = "flow '" + name + "'";
  auto bad = [&](const std::string& what) { throw Error(Errc::invalid_argument, flow + ": " + what); };
  if (name.empty() || name.find('/') != std::string::npos) bad("the name must be non-empty and contain no '/'");
  if (sources.empty()) bad("needs at least one source");
  if (targets.empty()) bad("needs at least one target");
  if (schema.column_count() == 0) bad("needs a schema");
  std::set<std::pair<int, int>> seen;
  for (const SourceRef& s : sources) {
    if (s.rank < 0 || s.rank >= cluster_size) bad("source on rank " + std::to_string(s.rank) + " outside the cluster of " + std::to_string(cluster_size));
    if (s.thread < 0) bad("source thread " + std::to_string(s.thread) + " is negative");
    if (!seen.insert({s.rank, s.thread}).second) bad("source (rank " + std::to_string(s.rank) + ", thread " + std::to_string(s.thread) + ") listed twice");
  }
  seen.clear();
  for (const TargetRef& t : targets) {
    if (t.rank < 0 || t.rank >= cluster_size) bad("target on rank " + std::to_string(t.rank) + " outside the cluster of " + std::to_string(cluster_size));
    if (t.id < 0) bad("target id " + std::to_string(t.id) + " is negative");
    if (!seen.insert({t.rank, t.id}).second) bad("target (rank " + std::to_string(t.rank) + ", id " + std::to_string(t.id) + ") listed twice");
  }
  if ((type == FlowType::shuffle && routing == Routing::key_hash) || type == FlowType::combiner) {
    if (key_column.empty()) bad("needs a key column");
    try {
      (void)schema.index_of(key_column);
    } catch (const Error&) {
      bad("the key column '" + key_column + "' is not in the schema {" + schema.describe() + "}");
    }
  }
  memory::RingLayout ring;
  try {
    ring = layout();
  } catch (const Error& e) {
    bad(e.what());
  }
  const std::size_t header = header_bytes(*this);
  // (Combiner segments carry partial-aggregate rows, checked below, not tuples.)
  if (type != FlowType::combiner && schema.tuple_bytes() + header > ring.payload_capacity()) {
    bad("a tuple of " + std::to_string(schema.tuple_bytes()) + " B does not fit a segment payload of " +
        std::to_string(ring.payload_capacity() - std::min(header, ring.payload_capacity())) + " B" +
        (header > 0 ? " (after the " + std::to_string(header) + " B segment header)" : ""));
  }
  if (type == FlowType::replicate) {
    if (options.fanout == 0) bad("the relay fan-out must be at least 1");
    if (options.ordered && options.gap_timeout.count() <= 0) bad("an ordered flow needs a positive gap timeout");
  }
  if (type == FlowType::combiner) validate_combiner(*this, bad);
}

std::string FlowSpec::to_json() const {
  json j;
  j["name"] = name;
  j["type"] = flow_type_name(type);
  j["schema"] = schema.describe();
  j["routing"] = routing_name(routing);
  j["key"] = key_column;
  j["mode"] = mode_name(options.mode);
  j["segments"] = options.segments;
  j["segment_bytes"] = options.segment_bytes;
  j["direct_write"] = options.direct_write;
  j["stall_timeout_ms"] = options.stall_timeout.count();
  if (type == FlowType::replicate) {
    j["replication"] = replication_name(options.replication);
    j["fanout"] = options.fanout;
    j["ordered"] = options.ordered;
    j["gap_timeout_ms"] = options.gap_timeout.count();
  }
  if (!aggregates.empty()) j["aggregates"] = describe_aggregates(aggregates);
  for (const SourceRef& s : sources) j["sources"].push_back({s.rank, s.thread});
  for (const TargetRef& t : targets) j["targets"].push_back({t.rank, t.id});
  return j.dump();
}

FlowSpec FlowSpec::from_json(std::string_view text) {
  try {
    json j = json::parse(text);
    FlowSpec spec;
    spec.name = j.at("name").get<std::string>();
    spec.type = parse_enum(j.at("type").get<std::string>(),
                           std::array<std::pair<std::string_view, FlowType>, 3>{
                               {{"shuffle", FlowType::shuffle}, {"replicate", FlowType::replicate}, {"combiner", FlowType::combiner}}},
                           "flow type");
    spec.schema = Schema::parse(j.at("schema").get<std::string>());
    spec.routing = parse_enum(j.at("routing").get<std::string>(),
                              std::array<std::pair<std::string_view, Routing>, 3>{{{"key_hash", Routing::key_hash},
                                                                                   {"function", Routing::function},
                                                                                   {"explicit_target", Routing::explicit_target}}},
                              "routing");
    spec.key_column = j.at("key").get<std::string>();
    spec.options.mode = j.at("mode").get<std::string>() == "latency" ? Mode::latency : Mode::bandwidth;
    spec.options.segments = j.at("segments").get<std::uint32_t>();
    spec.options.segment_bytes = j.at("segment_bytes").get<std::uint32_t>();
    spec.options.direct_write = j.at("direct_write").get<bool>();
    spec.options.stall_timeout = std::chrono::milliseconds(j.at("stall_timeout_ms").get<long long>());
    if (j.contains("replication")) {
      spec.options.replication = parse_enum(j.at("replication").get<std::string>(),
                                            std::array<std::pair<std::string_view, Replication>, 2>{
                                                {{"naive", Replication::naive}, {"relay", Replication::relay}}},
                                            "replication");
      spec.options.fanout = j.at("fanout").get<std::uint32_t>();
      spec.options.ordered = j.at("ordered").get<bool>();
      spec.options.gap_timeout = std::chrono::milliseconds(j.at("gap_timeout_ms").get<long long>());
    }
    if (j.contains("aggregates")) {
      try {
        spec.aggregates = parse_aggregates(j.at("aggregates").get<std::string>());
      } catch (const Error& e) {
        throw Error(Errc::protocol, std::string("flow spec: ") + e.what());
      }
    }
    for (const auto& s : j.at("sources")) spec.sources.push_back({s.at(0).get<int>(), s.at(1).get<int>()});
    for (const auto& t : j.at("targets")) spec.targets.push_back({t.at(0).get<int>(), t.at(1).get<int>()});
    return spec;
  } catch (const json::exception& e) {
    throw Error(Errc::protocol, std::string("flow spec: malformed record: ") + e.what());
  }
}

void create_flow(cluster::Node& node, const FlowSpec& requested) {
  const FlowSpec spec = requested.resolved(node.fabric().capabilities().native_one_sided);
  spec.validate(node.size());
  try {
    node.registry().publish(detail::spec_record(spec.name), spec.to_json());
  } catch (const Error& e) {
    if (e.code() == Errc::already_exists) {
      throw Error(Errc::already_exists, "flow '" + spec.name + "' already exists");
    }
    throw;
  }
}

namespace detail {
namespace {
std::mutex accounting_mutex;
std::unordered_map<std::string, std::size_t> accounting;  // guarded by accounting_mutex
}  // namespace

void account_memory(const std::string& flow, std::ptrdiff_t delta) {
  std::lock_guard lock(accounting_mutex);
  accounting[flow] += static_cast<std::size_t>(delta);
}
}  // namespace detail

std::size_t memory_bytes(std::string_view name) {
  std::lock_guard lock(detail::accounting_mutex);
  auto it = detail::accounting.find(std::string(name));
  return it == detail::accounting.end() ? 0 : it->second;
}

}  // namespace dfi::flow
