// flow::FlowSpec — what a flow is: its name, type, members, schema, routing and options.
//
// A flow is created once, by any one process (create_flow), which publishes the spec in the
// registry; every source and target then opens it by name. The spec is immutable afterwards.
//
// The spec is generic: what only one kind of flow has — replicate's relay and ordering options,
// the combiner's aggregates, the options of types of upper layers — it carries in `type_options`
// without knowing it, and the type's descriptor (flow_type.hpp) validates it and writes it into
// and reads it from the record:
//
//   flow::FlowSpec spec{.name = "log", .type = flow::FlowType::replicate, ...};
//   spec.type_options.get<flow::ReplicateOptions>().fanout = 3;   // replicate.hpp
#pragma once

#include <any>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "dfi/common/error.hpp"
#include "dfi/flow/flow_type.hpp"
#include "dfi/flow/schema.hpp"
#include "dfi/memory/ring.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::flow {

// A source is a thread of a rank; a target is a consumer id on a rank.
struct SourceRef {
  int rank = 0;
  int thread = 0;
  bool operator==(const SourceRef&) const = default;
};
struct TargetRef {
  int rank = 0;
  int id = 0;
  bool operator==(const TargetRef&) const = default;
};

using Mode = memory::RingMode;  // bandwidth (batched segments) or latency (one tuple per segment)

enum class Routing {
  key_hash,         // hash of the key column (default)
  function,         // a routing function given when the source is opened (radix, range, ...)
  explicit_target,  // the caller names the target on every push
};

// Which rings a flow's sources write into at each target.
enum class RingSharing {
  // One ring per (source thread, target): each source writes its own, in place where the ring is
  // mapped. A target holds a ring per source thread of the whole flow.
  per_thread,
  // One ring per (source rank, target), shared by the rank's source threads (shuffle flows only):
  // a target holds a ring per source rank, so memory grows with ranks, not with ranks × threads.
  // Each thread fills a segment of its own and takes the ring's next slot, without a lock, when
  // the segment is full (memory::RingShare): one copy more per segment where the ring is mapped.
  // Per source thread, tuples keep their order; a consumer sees the rank's first source as the
  // source of every segment of the ring (TupleBatch::source, ShuffleTarget::dead_sources).
  per_rank,
};

struct FlowOptions {
  Mode mode = Mode::bandwidth;
  // Ring shape. 0 = the default for the transport of the rank that creates the flow, resolved by
  // create_flow (settings segments_shm / segment_bytes_shm where RMA is native, segments_tcp /
  // segment_bytes_tcp where segments travel as active messages: fewer, larger segments there,
  // since each costs a send and a receive system call). Latency mode: 32 segments of one tuple
  // plus footer. An unresolved spec's layout() uses the shm defaults.
  std::uint32_t segments = 0;        // per (source, target) ring
  std::uint32_t segment_bytes = 0;   // including the 16 B footer
  bool direct_write = true;          // on shm, write straight into the mapped remote ring
  RingSharing rings = RingSharing::per_thread;  // a ring per source thread, or per source rank
  std::chrono::milliseconds stall_timeout{0};  // longest wait for ring space or data; 0: setting
                                               // flow_timeout_ms
};

// The options of one flow type (ReplicateOptions, CombinerOptions, an upper layer's own) inside
// the generic spec: a copyable value holding at most one options object, of any type. Not
// synchronized (a spec is a value; share it const).
class TypeOptions {
 public:
  TypeOptions() = default;
  // Holds `options` (so `.type_options = CombinerOptions{...}` works in a designated initializer).
  template <class T>
    requires(!std::same_as<std::decay_t<T>, TypeOptions>)
  TypeOptions(T options) : value_(std::move(options)) {}  // NOLINT(google-explicit-constructor)

  // The options as T, created with T's defaults when none are held. Throws
  // dfi::Error(invalid_argument) when options of another type are held.
  template <class T>
  T& get() {
    if (!value_.has_value()) value_.emplace<T>();
    if (T* options = std::any_cast<T>(&value_)) return *options;
    throw_mismatch(typeid(T));
  }
  // The options as T, or T's defaults when none are held; throws like get().
  template <class T>
  const T& get() const {
    static const T defaults{};
    if (!value_.has_value()) return defaults;
    if (const T* options = std::any_cast<T>(&value_)) return *options;
    throw_mismatch(typeid(T));
  }

  bool has_value() const noexcept { return value_.has_value(); }
  // typeid(void) when none are held.
  const std::type_info& type() const noexcept { return value_.type(); }
  void reset() noexcept { value_.reset(); }

 private:
  [[noreturn]] void throw_mismatch(const std::type_info& wanted) const;

  std::any value_;
};

// A spec record as a flow type's descriptor sees it (FlowTypeTraits::write and read): a flat set
// of named fields, in which the type keeps its options next to the generic fields (name, type,
// schema, routing, key, mode, segments, segment_bytes, direct_write, rings, stall_timeout_ms, sources,
// targets). Only FlowSpec::to_json and from_json make one; used by one thread at a time.
class SpecFields {
 public:
  // Adds a field. Throws dfi::Error(invalid_argument) when the record has a field of that name
  // (a generic one, or one the type wrote already).
  void set_string(std::string_view field, std::string_view value);
  void set_int(std::string_view field, std::int64_t value);
  void set_bool(std::string_view field, bool value);

  bool has(std::string_view field) const;
  // A field's value. Throws dfi::Error(protocol) naming the flow and the field when it is missing
  // or holds another kind of value.
  std::string get_string(std::string_view field) const;
  std::int64_t get_int(std::string_view field) const;
  bool get_bool(std::string_view field) const;

  // The flow's name, for the type's own messages.
  const std::string& flow() const noexcept { return flow_; }

 private:
  friend struct FlowSpec;
  struct Record;  // the record's JSON object (spec.cpp)
  SpecFields(Record& record, const std::string& flow) : record_(record), flow_(flow) {}

  Record& record_;
  const std::string& flow_;
};

// A plain value: copy it freely; its const members may be called from several threads at once.
struct FlowSpec {
  std::string name;
  FlowType type = FlowType::shuffle;
  std::vector<SourceRef> sources;
  std::vector<TargetRef> targets;
  Schema schema;
  Routing routing = Routing::key_hash;
  std::string key_column;    // where the type needs one (FlowTypeTraits::key_column): a shuffle's
                             // key_hash routing, the combiner's group-by key
  FlowOptions options;       // what every flow type has
  TypeOptions type_options;  // what only this type has: its FlowTypeTraits::options, or none

  // The ring every (source, target) pair uses, derived from options, schema and the type's
  // segment header. Throws dfi::Error(invalid_argument) for a bad ring shape.
  memory::RingLayout layout() const;
  // This spec with segments and segment_bytes of 0 replaced by the defaults for a cluster whose
  // one-sided operations are native (`native_rma`) or emulated (see FlowOptions).
  FlowSpec resolved(bool native_rma) const;
  // Checks the spec against itself and a cluster of `cluster_size` ranks: the generic checks,
  // then its type's (FlowTypeTraits::validate). Throws dfi::Error(invalid_argument) naming the
  // flow and the problem.
  void validate(int cluster_size) const;
  // dfi::Error(invalid_argument, "flow '<name>': <what>"), for validation code to throw.
  Error invalid(const std::string& what) const;
  // Throws invalid() unless key_column names a column of the schema. validate() calls it where
  // the type's FlowTypeTraits::key_column asks; a type whose need depends on its own options
  // (driven flows) calls it from its validate.
  void check_key_column() const;

  // The registry record: a JSON object of the generic fields and the type's own
  // (FlowTypeTraits::write). Throws dfi::Error(invalid_argument) when the type writes a field
  // that exists already.
  std::string to_json() const;
  // Parses a record. Throws dfi::Error(protocol) for a malformed record, naming the flow and the
  // type when the type is not registered in this process (see flow_type.hpp).
  static FlowSpec from_json(std::string_view json);
};

// Validates and publishes `spec` (resolved for this cluster's transport) and registers its type
// in this process. Throws dfi::Error(already_exists) if a flow of that name exists,
// invalid_argument for a bad spec, and what the registry client throws (timeout,
// peer_failed). Call once per flow, from any one process; thread-safe.
void create_flow(cluster::Node& node, const FlowSpec& spec);

// Bytes of flow buffers this process holds for flow `name` (rings it hosts as a target plus its
// sources' staging segments and, with per-rank rings, the segment each source thread fills per
// target before it takes a slot of the shared ring). Thread-safe.
std::size_t memory_bytes(std::string_view name);

}  // namespace dfi::flow
