// Relay trees of replicate flows; the source and target live in replicate_source.cpp and
// replicate_target.cpp.
#include "dfi/flow/replicate.hpp"

#include <algorithm>

#include "replicate_detail.hpp"

namespace dfi::flow {
namespace {

// Children per tree node: naive flows are the tree where the source's children are all targets.
std::size_t fanout(const FlowSpec& spec) {
  return spec.options.replication == Replication::naive ? spec.targets.size() : spec.options.fanout;
}

// Node k (1..M) of source s's tree holds target (k - 1 + s) mod M.
std::size_t target_at(std::size_t node, std::size_t source, std::size_t targets) {
  return (node - 1 + source) % targets;
}
std::size_t node_of(std::size_t target, std::size_t source, std::size_t targets) {
  return (target + targets - source % targets) % targets + 1;
}

}  // namespace

std::vector<std::size_t> relay_children(const FlowSpec& spec, std::size_t source,
                                        std::optional<std::size_t> from) {
  const std::size_t m = spec.targets.size();
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
