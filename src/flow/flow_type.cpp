// The registry of flow types: the descriptors FlowSpec::from_json finds by name.
#include "dfi/flow/flow_type.hpp"

#include <mutex>
#include <string>
#include <vector>

#include "dfi/common/error.hpp"

namespace dfi::flow {
namespace {

// Registered descriptors; the built-in types from the start, so that every process reads their
// records whatever it linked.
class Registry {
 public:
  Registry()
      : types_{&FlowType::shuffle.traits(), &FlowType::replicate.traits(),
               &FlowType::combiner.traits()} {}

  void add(const FlowTypeTraits& traits) {
    if (traits.name.empty()) {
      throw Error(Errc::invalid_argument, "flow type: a flow type needs a name");
    }
    std::lock_guard lock(mutex_);
    for (const FlowTypeTraits* known : types_) {
      if (known == &traits) return;
      if (known->name == traits.name) {
        throw Error(Errc::already_exists, "flow type '" + std::string(traits.name) +
                                              "': another type of that name is registered");
      }
    }
    types_.push_back(&traits);
  }

  const FlowTypeTraits* find(std::string_view name) {
    std::lock_guard lock(mutex_);
    for (const FlowTypeTraits* known : types_) {
      if (known->name == name) return known;
    }
    return nullptr;
  }

 private:
  std::mutex mutex_;
  std::vector<const FlowTypeTraits*> types_;  // guarded by mutex_
};

Registry& registry() {
  static Registry types;
  return types;
}

}  // namespace

void register_flow_type(FlowType type) { registry().add(type.traits()); }

std::optional<FlowType> find_flow_type(std::string_view name) {
  const FlowTypeTraits* traits = registry().find(name);
  if (traits == nullptr) return std::nullopt;
  return FlowType(*traits);
}

}  // namespace dfi::flow
