// The driven flow type's descriptor: its options, validation and record fields.
#include "dfi/driven/flow.hpp"

#include <algorithm>
#include <iterator>
#include <string>

#include "dfi/cluster/node.hpp"
#include "dfi/flow/detail/rings.hpp"
#include "dfi/registry/client.hpp"
#include "names.hpp"
#include "share.hpp"

namespace dfi::driven {

std::string share_problem(std::int64_t share) {
  if (share >= 1 && share <= kMaxShare) return {};
  return "share " + std::to_string(share) + " is outside 1.." + std::to_string(kMaxShare);
}

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
  if (options.safety_poll.count() <= 0) throw spec.invalid("the doorbell safety poll interval must be positive");
  if (std::string problem = share_problem(options.share); !problem.empty()) throw spec.invalid(problem);
}

void write_driven(const flow::FlowSpec& spec, flow::SpecFields& record) {
  const DrivenOptions& options = spec.type_options.get<DrivenOptions>();
  record.set_string("pattern", pattern_name(options.pattern));
  record.set_int("poll_interval_us", options.poll_interval.count());
  record.set_int("batch_bytes", static_cast<std::int64_t>(options.batch_bytes));
  record.set_int("share", options.share);
  record.set_int("doorbell", options.doorbell ? 1 : 0);
  record.set_int("safety_poll_us", options.safety_poll.count());
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
  options.share = record.get_int("share");
  options.doorbell = record.get_int("doorbell") != 0;
  options.safety_poll = std::chrono::microseconds(record.get_int("safety_poll_us"));
  if (options.safety_poll.count() <= 0) {
    throw Error(Errc::protocol, "flow '" + record.flow() + "': spec record: safety_poll_us " +
                                    std::to_string(options.safety_poll.count()));
  }
  if (std::string problem = share_problem(options.share); !problem.empty()) {
    throw Error(Errc::protocol, "flow '" + record.flow() + "': spec record: " + problem);
  }
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

void set_share(cluster::Node& node, std::string_view name, std::int64_t share, std::chrono::milliseconds timeout) {
  const std::string flow(name);
  if (std::string problem = share_problem(share); !problem.empty()) {
    throw Error(Errc::invalid_argument, "driven flow '" + flow + "': set_share: " + problem);
  }
  // The flow must exist and be driven: a share record of another flow would never be read.
  (void)flow::detail::open_spec(node, flow, kDriven, std::nullopt, flow::detail::open_deadline(timeout));
  try {
    node.registry().publish(detail::share_record(flow), std::to_string(share), /*replace=*/true);
  } catch (const Error& e) {
    throw Error(e.code(), "driven flow '" + flow + "': set_share: " + e.what());
  }
}

constinit const flow::FlowTypeTraits kDrivenTraits{.name = "driven",
                                                   .key_column = flow::KeyColumn::unused,  // the shuffle pattern checks it
                                                   .options = &typeid(DrivenOptions),
                                                   .validate = validate_driven,
                                                   .write = write_driven,
                                                   .read = read_driven};

}  // namespace dfi::driven
