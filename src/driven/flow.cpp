// The driven flow type's descriptor: its options, validation and record fields.
#include "dfi/driven/flow.hpp"

#include <string>

namespace dfi::driven {
namespace {

void validate_driven(const flow::FlowSpec& spec) {
  const DrivenOptions& options = spec.type_options.get<DrivenOptions>();
  if (spec.options.mode != flow::Mode::bandwidth) throw spec.invalid("a driven flow runs in bandwidth mode");
  if (spec.routing == flow::Routing::function) {
    throw spec.invalid("a driven flow routes by key hash or explicitly (push_to), not by a function");
  }
  if (options.poll_interval.count() < 0) throw spec.invalid("the poll interval must not be negative");
  if (options.batch_bytes == 0) throw spec.invalid("the mover's batch must hold at least one segment");
}

void write_driven(const flow::FlowSpec& spec, flow::SpecFields& record) {
  const DrivenOptions& options = spec.type_options.get<DrivenOptions>();
  record.set_int("poll_interval_us", options.poll_interval.count());
  record.set_int("batch_bytes", static_cast<std::int64_t>(options.batch_bytes));
}

void read_driven(const flow::SpecFields& record, flow::FlowSpec& spec) {
  DrivenOptions& options = spec.type_options.get<DrivenOptions>();
  options.poll_interval = std::chrono::microseconds(record.get_int("poll_interval_us"));
  const std::int64_t batch = record.get_int("batch_bytes");
  if (batch <= 0) {
    throw Error(Errc::protocol, "flow '" + record.flow() + "': spec record: batch_bytes " + std::to_string(batch));
  }
  options.batch_bytes = static_cast<std::uint64_t>(batch);
}

}  // namespace

constinit const flow::FlowTypeTraits kDrivenTraits{.name = "driven",
                                                   .key_column = flow::KeyColumn::for_key_hash,
                                                   .options = &typeid(DrivenOptions),
                                                   .validate = validate_driven,
                                                   .write = write_driven,
                                                   .read = read_driven};

}  // namespace dfi::driven
