// Replicate flows' descriptor (options, validation, record fields) and relay trees; the source
// and target live in replicate_source.cpp and replicate_target.cpp.
#include "dfi/flow/replicate.hpp"

#include <algorithm>

#include "replicate_detail.hpp"

namespace dfi::flow {
namespace {

void validate_replicate(const FlowSpec& spec) {
  const ReplicateOptions& options = spec.type_options.get<ReplicateOptions>();
  if (options.fanout == 0) throw spec.invalid("the relay fan-out must be at least 1");
  if (options.ordered && options.gap_timeout.count() <= 0) {
    throw spec.invalid("an ordered flow needs a positive gap timeout");
  }
  if (options.sequencer == Sequencer::stamp) {
    if (!options.ordered) throw spec.invalid("the stamp sequencer numbers segments: set ordered too");
    if (options.replication != Replication::naive) {
      throw spec.invalid("the stamp sequencer forwards from target 0 to every other target itself: "
                         "relay replication does not apply (use naive)");
    }
  }
}

bool stamped(const FlowSpec& spec) {
  const ReplicateOptions& options = spec.type_options.get<ReplicateOptions>();
  return options.ordered && options.sequencer == Sequencer::stamp;
}

void write_replicate(const FlowSpec& spec, SpecFields& record) {
  const ReplicateOptions& options = spec.type_options.get<ReplicateOptions>();
  record.set_string("replication", replication_name(options.replication));
  record.set_int("fanout", options.fanout);
  record.set_bool("ordered", options.ordered);
  record.set_int("gap_timeout_ms", options.gap_timeout.count());
  // Only where it is not the counter: a counter flow's record stays what older builds read.
  if (options.sequencer != Sequencer::counter) record.set_string("sequencer", sequencer_name(options.sequencer));
}

void read_replicate(const SpecFields& record, FlowSpec& spec) {
  ReplicateOptions& options = spec.type_options.get<ReplicateOptions>();
  if (!record.has("replication")) return;  // the defaults
  const std::string replication = record.get_string("replication");
  if (replication != "naive" && replication != "relay") {
    throw Error(Errc::protocol, "flow '" + record.flow() + "': spec record: unknown replication '" +
                                    replication + "'");
  }
  options.replication = replication == "naive" ? Replication::naive : Replication::relay;
  options.fanout = static_cast<std::uint32_t>(record.get_int("fanout"));
  options.ordered = record.get_bool("ordered");
  options.gap_timeout = std::chrono::milliseconds(record.get_int("gap_timeout_ms"));
  if (!record.has("sequencer")) return;  // written before there was a choice: the counter
  try {
    options.sequencer = parse_sequencer(record.get_string("sequencer"));
  } catch (const Error& e) {
    throw Error(Errc::protocol, "flow '" + record.flow() + "': spec record: " + e.what());
  }
}

// Children per tree node: naive flows are the tree where the source's children are all targets.
std::size_t fanout(const FlowSpec& spec) {
  const ReplicateOptions& options = spec.type_options.get<ReplicateOptions>();
  return options.replication == Replication::naive ? spec.targets.size() : options.fanout;
}

// Node k (1..M) of source s's tree holds target (k - 1 + s) mod M.
std::size_t target_at(std::size_t node, std::size_t source, std::size_t targets) {
  return (node - 1 + source) % targets;
}
std::size_t node_of(std::size_t target, std::size_t source, std::size_t targets) {
  return (target + targets - source % targets) % targets + 1;
}

}  // namespace

// Every segment starts with the sequence word; no key column.
constinit const FlowTypeTraits detail::kReplicateTraits{.name = "replicate",
                                                        .header_bytes = kReplicateHeaderBytes,
                                                        .options = &typeid(ReplicateOptions),
                                                        .validate = validate_replicate,
                                                        .write = write_replicate,
                                                        .read = read_replicate};

std::string_view replication_name(Replication replication) {
  return replication == Replication::naive ? "naive" : "relay";
}

std::string_view sequencer_name(Sequencer sequencer) {
  return sequencer == Sequencer::counter ? "counter" : "stamp";
}

Sequencer parse_sequencer(std::string_view name) {
  if (name == "counter") return Sequencer::counter;
  if (name == "stamp") return Sequencer::stamp;
  throw Error(Errc::invalid_argument, "unknown sequencer '" + std::string(name) + "' (counter or stamp)");
}

std::vector<std::size_t> relay_children(const FlowSpec& spec, std::size_t source,
                                        std::optional<std::size_t> from) {
  const std::size_t m = spec.targets.size();
  if (stamped(spec)) {  // source -> target 0 -> every other target
    if (!from) return {0};
    std::vector<std::size_t> children;
    if (*from == 0) {
      for (std::size_t t = 1; t < m; ++t) children.push_back(t);
    }
    return children;
  }
  const std::size_t f = fanout(spec);
  const std::size_t node = from ? node_of(*from, source, m) : 0;
  std::vector<std::size_t> children;
  if (f == 0 || node > (m - 1) / f) return children;  // a leaf (avoids overflow of node * f)
  const std::size_t first = node * f + 1;
  for (std::size_t k = first; k < first + f && k <= m; ++k)
    children.push_back(target_at(k, source, m));
  return children;
}

std::optional<std::size_t> relay_parent(const FlowSpec& spec, std::size_t source,
                                        std::size_t target) {
  if (stamped(spec)) return target == 0 ? std::nullopt : std::optional<std::size_t>(0);
  const std::size_t m = spec.targets.size();
  const std::size_t node = node_of(target, source, m);
  const std::size_t parent = (node - 1) / fanout(spec);
  if (parent == 0) return std::nullopt;
  return target_at(parent, source, m);
}

namespace detail {

std::string source_name(const FlowSpec& spec, std::size_t source) {
  const SourceRef s = spec.sources.at(source);
  return "source (rank " + std::to_string(s.rank) + ", thread " + std::to_string(s.thread) + ")";
}

std::string target_name(const FlowSpec& spec, std::size_t target) {
  const TargetRef t = spec.targets.at(target);
  return "target (rank " + std::to_string(t.rank) + ", id " + std::to_string(t.id) + ")";
}

}  // namespace detail
}  // namespace dfi::flow
