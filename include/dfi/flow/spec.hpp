// flow::FlowSpec — what a flow is: its name, type, members, schema, routing and options.
//
// A flow is created once, by any one process (create_flow), which publishes the spec in the
// registry; every source and target then opens it by name. The spec is immutable afterwards.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dfi/flow/schema.hpp"
#include "dfi/memory/ring.hpp"
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

enum class FlowType { shuffle, replicate, combiner };
std::string_view flow_type_name(FlowType type);

using Mode = memory::RingMode;  // bandwidth (batched segments) or latency (one tuple per segment)

enum class Routing {
  key_hash,         // hash of the key column (default)
  function,         // a routing function given when the source is opened (radix, range, ...)
  explicit_target,  // the caller names the target on every push
};

// How a replicate flow reaches its targets (003 §4.2.2, §5.4).
enum class Replication {
  naive,  // each source writes every segment to every target
  relay,  // each source writes to `fanout` targets, which forward along a tree (replicate.hpp)
};
std::string_view replication_name(Replication replication);

// Combiner flows: one aggregate over a value column (COUNT counts rows and takes no column).
enum class Aggregate { sum, count, min, max, avg };
std::string_view aggregate_name(Aggregate aggregate);
struct AggregateSpec {
  Aggregate function = Aggregate::sum;
  std::string column;  // empty for count
  bool operator==(const AggregateSpec&) const = default;
};
// "sum(value),count(*),avg(price)" and back; parse throws dfi::Error(invalid_argument).
std::string describe_aggregates(const std::vector<AggregateSpec>& aggregates);
std::vector<AggregateSpec> parse_aggregates(std::string_view text);

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
  std::chrono::milliseconds stall_timeout{0};  // longest wait for ring space or data; 0: setting
                                               // flow_timeout_ms

  // Replicate flows only (see replicate.hpp).
  Replication replication = Replication::naive;
  std::uint32_t fanout = 2;       // relay: children per node of the tree; the source is its root
  bool ordered = false;           // one global order at every target, from a sequencer
  std::chrono::milliseconds gap_timeout{1000};  // ordered: how long a sequence number may be
                                                // missing before a gap event reports it
};

struct FlowSpec {
  std::string name;
  FlowType type = FlowType::shuffle;
  std::vector<SourceRef> sources;
  std::vector<TargetRef> targets;
  Schema schema;
  Routing routing = Routing::key_hash;
  std::string key_column;  // key_hash routing (and the combiner's group-by key)
  FlowOptions options;
  std::vector<AggregateSpec> aggregates;  // combiner flows: what to compute per key

  // The ring every (source, target) pair uses, derived from options and schema.
  memory::RingLayout layout() const;
  // This spec with segments and segment_bytes of 0 replaced by the defaults for a cluster whose
  // one-sided operations are native (`native_rma`) or emulated (see FlowOptions).
  FlowSpec resolved(bool native_rma) const;
  // Checks the spec against itself and a cluster of `cluster_size` ranks; throws
  // dfi::Error(invalid_argument) naming the flow and the problem.
  void validate(int cluster_size) const;

  std::string to_json() const;
  // Throws dfi::Error(protocol) for a malformed record.
  static FlowSpec from_json(std::string_view json);
};

// Validates and publishes `spec`. Throws dfi::Error(already_exists) if a flow of that name
// exists, invalid_argument for a bad spec. Call once per flow, from any one process.
void create_flow(cluster::Node& node, const FlowSpec& spec);

// Bytes of flow buffers this process holds for flow `name` (rings it hosts as a target plus its
// sources' staging segments). Thread-safe.
std::size_t memory_bytes(std::string_view name);

}  // namespace dfi::flow
