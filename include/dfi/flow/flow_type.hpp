// flow::FlowType — which kind of flow a spec describes — and flow::FlowTypeTraits, the one
// descriptor through which each kind brings its own options, validation and segment layout to
// the generic spec (spec.hpp), so that adding a kind edits no file of the generic spec.
//
// Each flow type is one FlowTypeTraits object, defined by the code that implements the type:
// shuffle.cpp, replicate.cpp and combiner.cpp here; an upper layer (driven/, ops/) defines its
// own in its own files:
//
//   // include/dfi/ops/join_flow.hpp:
//   struct JoinOptions { std::string build_side; ... };
//   extern const flow::FlowTypeTraits kJoinTraits;
//   inline constexpr flow::FlowType kJoin{kJoinTraits};
//   // src/ops/join_flow.cpp (validate_join throws spec.invalid(...); write_join/read_join use
//   // SpecFields):
//   constinit const flow::FlowTypeTraits kJoinTraits{
//       .name = "join", .key_column = flow::KeyColumn::required, .options = &typeid(JoinOptions),
//       .validate = validate_join, .write = write_join, .read = read_join};
//   // users:
//   spec.type = ops::kJoin;
//   spec.type_options.get<ops::JoinOptions>().build_side = "left";
//
// A FlowType value points at its descriptor, so a spec built in code carries everything the
// generic spec needs (validate, layout, the record) without a lookup. A record names its type;
// FlowSpec::from_json finds the descriptor by that name among the types registered in this
// process. The built-in types are registered from the start; any other type is registered by
// create_flow (for the spec's type) and by every open (detail::open_spec registers the type it
// expects) — or, in a process that only reads records, by an explicit register_flow_type.
// Nothing registers itself from a static initializer (the linker drops unreferenced objects of
// a static library).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <typeinfo>

namespace dfi::flow {

struct FlowSpec;
class SpecFields;
struct FlowTypeTraits;

// A registered kind of flow; compares equal when it is the same descriptor. Cheap to copy.
class FlowType {
 public:
  constexpr explicit FlowType(const FlowTypeTraits& traits) noexcept : traits_(&traits) {}

  // The built-in types (their descriptors are in shuffle.cpp, replicate.cpp, combiner.cpp).
  static const FlowType shuffle;
  static const FlowType replicate;
  static const FlowType combiner;

  const FlowTypeTraits& traits() const noexcept { return *traits_; }
  std::string_view name() const noexcept;
  friend bool operator==(FlowType a, FlowType b) noexcept { return a.traits_ == b.traits_; }

 private:
  const FlowTypeTraits* traits_;
};

// When a flow type needs FlowSpec::key_column (the generic validation checks that it names a
// column of the schema).
enum class KeyColumn {
  unused,        // never (replicate)
  for_key_hash,  // when the flow routes by key hash (shuffle)
  required,      // always (the combiner groups by it)
};

// What the generic spec needs to know about a flow type. All of it is read when a spec is
// validated, laid out, written or read — when a flow is created or opened, never per tuple.
// The functions are optional (null: the type has nothing to add) and must be thread-safe.
struct FlowTypeTraits {
  // The type's name in records and messages ("shuffle", "replicate", ...); unique per process.
  std::string_view name;
  // Bytes in front of the tuples of every segment (replicate: its sequence word). Latency-mode
  // segments make room for them, and a tuple must fit a segment after them.
  std::size_t header_bytes = 0;
  KeyColumn key_column = KeyColumn::unused;
  // Whether segments carry the flow's tuples. false (the combiner's partial rows): the generic
  // check that a tuple fits a segment is skipped and `validate` checks what its segments carry.
  bool carries_tuples = true;
  // The type of the options this type keeps in FlowSpec::type_options (null: it has none).
  // A spec holding options of any other type is invalid.
  const std::type_info* options = nullptr;
  // The type's own checks, after the generic ones passed; throws spec.invalid(what).
  void (*validate)(const FlowSpec& spec) = nullptr;
  // Writes the type's options as fields of the spec's record, next to the generic ones.
  void (*write)(const FlowSpec& spec, SpecFields& record) = nullptr;
  // Reads them back into spec.type_options; throws dfi::Error(protocol) naming the flow and the
  // field for a malformed one (SpecFields' getters do).
  void (*read)(const SpecFields& record, FlowSpec& spec) = nullptr;
};

inline std::string_view FlowType::name() const noexcept { return traits_->name; }

namespace detail {
extern const FlowTypeTraits kShuffleTraits;    // shuffle.cpp
extern const FlowTypeTraits kReplicateTraits;  // replicate.cpp
extern const FlowTypeTraits kCombinerTraits;   // combiner.cpp
}  // namespace detail

inline constexpr FlowType FlowType::shuffle{detail::kShuffleTraits};
inline constexpr FlowType FlowType::replicate{detail::kReplicateTraits};
inline constexpr FlowType FlowType::combiner{detail::kCombinerTraits};

// The type's name; the same as type.name().
inline std::string_view flow_type_name(FlowType type) { return type.name(); }

// Makes `type` known to FlowSpec::from_json in this process. Idempotent; thread-safe. Throws
// dfi::Error(invalid_argument) for an empty name, already_exists when another descriptor is
// registered under the same name.
void register_flow_type(FlowType type);
// The registered type called `name`, if any. Thread-safe.
std::optional<FlowType> find_flow_type(std::string_view name);

}  // namespace dfi::flow
