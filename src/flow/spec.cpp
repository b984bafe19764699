#include "dfi/flow/spec.hpp"

#include <cxxabi.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include "dfi/cluster/node.hpp"
#include "dfi/common/config.hpp"
#include "dfi/common/error.hpp"
#include "dfi/flow/detail/rings.hpp"
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

}  // namespace

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
                : static_cast<std::uint32_t>((schema.tuple_bytes() + 7) / 8 * 8 + type.traits().header_bytes +
                                             memory::kFooterBytes);
  }
  return memory::RingLayout::make(options.segments == 0 ? kDefaultSegments : options.segments, bytes);
}

Error FlowSpec::invalid(const std::string& what) const {
  return Error(Errc::invalid_argument, "flow '" + name + "': " + what);
}

void FlowSpec::check_key_column() const {
  if (key_column.empty()) throw invalid("needs a key column");
  try {
    (void)schema.index_of(key_column);
  } catch (const Error&) {
    throw invalid("the key column '" + key_column + "' is not in the schema {" + schema.describe() + "}");
  }
}

void FlowSpec::validate(int cluster_size) const {
  const FlowTypeTraits& traits = type.traits();
  auto bad = [&](const std::string& what) { throw invalid(what); };
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
  if (type_options.has_value() &&
      (traits.options == nullptr || type_options.type() != *traits.options)) {
    bad("its type options are not those of a " + std::string(traits.name) + " flow");
  }
  if (traits.key_column == KeyColumn::required ||
      (traits.key_column == KeyColumn::for_key_hash && routing == Routing::key_hash)) {
    check_key_column();
  }
  memory::RingLayout ring;
  try {
    ring = layout();
  } catch (const Error& e) {
    bad(e.what());
  }
  const std::size_t header = traits.header_bytes;
  if (traits.carries_tuples && schema.tuple_bytes() + header > ring.payload_capacity()) {
    bad("a tuple of " + std::to_string(schema.tuple_bytes()) + " B does not fit a segment payload of " +
        std::to_string(ring.payload_capacity() - std::min(header, ring.payload_capacity())) + " B" +
        (header > 0 ? " (after the " + std::to_string(header) + " B segment header)" : ""));
  }
  (void)detail::checked_ring_bytes(*this);  // absurd ring shapes, before any target allocates
  if (options.rings == RingSharing::per_rank && !(type == FlowType::shuffle)) {
    bad("per-rank rings (options.rings) are for shuffle flows; a " + std::string(traits.name) +
        " flow has a ring per source thread");
  }
  if (traits.validate != nullptr) traits.validate(*this);
}

// ---------------------------------------------------------------------------------------------
// The record

namespace {
// "dfi::flow::ReplicateOptions" rather than the mangled name.
std::string readable_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(type.name());
}
}  // namespace

void TypeOptions::throw_mismatch(const std::type_info& wanted) const {
  throw Error(Errc::invalid_argument, "flow type options: asked for " + readable_name(wanted) +
                                          " but holding " + readable_name(value_.type()));
}

struct SpecFields::Record {
  json& object;

  // A new field's slot; a field of that name must not exist yet.
  json& fresh(std::string_view field, const std::string& flow) {
    json& slot = object[std::string(field)];
    if (!slot.is_null()) {
      throw Error(Errc::invalid_argument, "flow '" + flow + "': spec record: field '" +
                                              std::string(field) + "' written twice");
    }
    return slot;
  }
  // An existing field holding a `kind` value (`is` tells).
  const json& existing(std::string_view field, bool (json::*is)() const noexcept,
                       std::string_view kind, const std::string& flow) const {
    const auto it = object.find(field);
    if (it == object.end() || !((*it).*is)()) {
      throw Error(Errc::protocol, "flow '" + flow + "': spec record: field '" + std::string(field) +
                                      (it == object.end() ? "' is missing" : "' is not " + std::string(kind)));
    }
    return *it;
  }
};

void SpecFields::set_string(std::string_view field, std::string_view value) {
  record_.fresh(field, flow_) = value;
}
void SpecFields::set_int(std::string_view field, std::int64_t value) {
  record_.fresh(field, flow_) = value;
}
void SpecFields::set_bool(std::string_view field, bool value) {
  record_.fresh(field, flow_) = value;
}

bool SpecFields::has(std::string_view field) const { return record_.object.contains(field); }

std::string SpecFields::get_string(std::string_view field) const {
  return record_.existing(field, &json::is_string, "a string", flow_).get<std::string>();
}
std::int64_t SpecFields::get_int(std::string_view field) const {
  return record_.existing(field, &json::is_number_integer, "an integer", flow_).get<std::int64_t>();
}
bool SpecFields::get_bool(std::string_view field) const {
  return record_.existing(field, &json::is_boolean, "a boolean", flow_).get<bool>();
}

std::string FlowSpec::to_json() const {
  json j;
  j["name"] = name;
  j["type"] = type.name();
  j["schema"] = schema.describe();
  j["routing"] = routing_name(routing);
  j["key"] = key_column;
  j["mode"] = mode_name(options.mode);
  j["segments"] = options.segments;
  j["segment_bytes"] = options.segment_bytes;
  j["direct_write"] = options.direct_write;
  if (options.rings == RingSharing::per_rank) j["rings"] = "per_rank";  // per_thread: no field (earlier records)
  j["stall_timeout_ms"] = options.stall_timeout.count();
  j["sources"] = json::array();
  j["targets"] = json::array();
  for (const SourceRef& s : sources) j["sources"].push_back({s.rank, s.thread});
  for (const TargetRef& t : targets) j["targets"].push_back({t.rank, t.id});
  if (type.traits().write != nullptr) {
    SpecFields::Record record{j};
    SpecFields fields(record, name);
    type.traits().write(*this, fields);
  }
  return j.dump();
}

FlowSpec FlowSpec::from_json(std::string_view text) {
  try {
    json j = json::parse(text);
    FlowSpec spec;
    spec.name = j.at("name").get<std::string>();
    const std::string type = j.at("type").get<std::string>();
    const std::optional<FlowType> found = find_flow_type(type);
    if (!found) {
      throw Error(Errc::protocol, "flow '" + spec.name + "': its type '" + type +
                                      "' is not registered in this process (flow::register_flow_type)");
    }
    spec.type = *found;
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
    if (j.contains("rings")) {  // records of earlier versions have none: per thread
      spec.options.rings = parse_enum(j.at("rings").get<std::string>(),
                                      std::array<std::pair<std::string_view, RingSharing>, 2>{
                                          {{"per_thread", RingSharing::per_thread}, {"per_rank", RingSharing::per_rank}}},
                                      "rings");
    }
    spec.options.stall_timeout = std::chrono::milliseconds(j.at("stall_timeout_ms").get<long long>());
    for (const auto& s : j.at("sources")) spec.sources.push_back({s.at(0).get<int>(), s.at(1).get<int>()});
    for (const auto& t : j.at("targets")) spec.targets.push_back({t.at(0).get<int>(), t.at(1).get<int>()});
    if (spec.type.traits().read != nullptr) {
      SpecFields::Record record{j};
      const SpecFields fields(record, spec.name);
      spec.type.traits().read(fields, spec);
    }
    return spec;
  } catch (const json::exception& e) {
    throw Error(Errc::protocol, std::string("flow spec: malformed record: ") + e.what());
  }
}

void create_flow(cluster::Node& node, const FlowSpec& requested) {
  register_flow_type(requested.type);
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
