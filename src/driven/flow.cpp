// The driven flow type's descriptor: its options, validation and record fields.
#include "dfi/driven/flow.hpp"

#include <algorithm>
#include <iterator>
#include <string>

namespace dfi::driven {
namespace {

constexpr Pattern kPatterns[] = {Pattern::shuffle, Pattern::balance, Pattern::replicate};

void validate_driven(const flow::FlowSpec& spec) {
  const DrivenOptions& options = spec.type_options.get<DrivenOptions>();
  if (spec.options.mode != flow::Mode::bandwidth) throw spec.invalid("a driven flow runs in bandwidth mode");
  if (options.pattern == Pattern::shuffle) {
    if (spec.routing == flow::Routing::function) {
      throw spec.invalid("a driven flow routes by key hash or explicitly (push_to), not by a function");
    }
    if (spec.routing == flow::Routing::key_hash) spec.check_key_column();
  }
  if (options.poll_interval.count() < 0) throw spec.invalid("the poll interval must not be negative");
  if (options.batch_bytes == 0) throw spec.invalid("the mover's batch must hold at least one segment");
}

void write_driven(const flow::FlowSpec& spec, flow::SpecFields& record) {
  const DrivenOptions& options = spec.type_options.get<DrivenOptions>();
  record.set_string("pattern", pattern_name(options.pattern));
  record.set_int("poll_interval_us", options.poll_interval.count());
  record.set_int("batch_bytes", static_cast<std::int64_t>(options.batch_bytes));
}

void read_driven(const flow::SpecFields& record, flow::FlowSpec& spec) {
  DrivenOptions& options = spec.type_options.get<DrivenOptions>();
  const std::string pattern = record.get_string("pattern");
  const Pattern* known = std::find_if(std::begin(kPatterns), std::end(kPatterns),
                                      [&](Pattern p) { return pattern == pattern_name(p); });
  if (known == std::end(kPatterns)) {
    throw Error(Errc::protocol, "flow '" + record.flow() + "': spec record: unknown driven pattern '" + pattern + "'");
  }
  options.pattern = *known;
  options.poll_interval = std::chrono::microseconds(record.get_int("poll_interval_us"));
  const std::int64_t batch = record.get_int("batch_bytes");
  if (batch <= 0) {
    throw Error(Errc::protocol, "flow '" + record.flow() + "': spec record: batch_bytes " + std::to_string(batch));
  }
  options.batch_bytes = static_cast<std::uint64_t>(batch);
}

}  // namespace

const char* pattern_name(Pattern pattern) noexcept {
  switch (pattern) {
    case Pattern::shuffle: return "shuffle";
    case Pattern::balance: return "balance";
    case Pattern::replicate: return "replicate";
  }
  return "?";
}

constinit const flow::FlowTypeTraits kDrivenTraits{.name = "driven",
                                                   .key_column = flow::KeyColumn::unused,  // the shuffle pattern checks it
                                                   .options = &typeid(DrivenOptions),
                                                   .validate = validate_driven,
                                                   .write = write_driven,
                                                   .read = read_driven};

}  // namespace dfi::driven
