// Registry record names of driven flows: where each processing unit publishes its buffers.
#pragma once

#include <cstddef>
#include <string>

namespace dfi::driven::detail {

// A producer's rings (one per consumer, ring j at j * layout.bytes()): its region's descriptor.
inline std::string producer_record(const std::string& flow, std::size_t producer) {
  return "driven/" + flow + "/producer/" + std::to_string(producer);
}
// A consumer's ring (at offset 0): its region's descriptor.
inline std::string consumer_record(const std::string& flow, std::size_t consumer) {
  return "driven/" + flow + "/consumer/" + std::to_string(consumer);
}

// Published (empty) by a consumer of a balance flow that leaves it (Consumer::leave).
inline std::string leave_record(const std::string& flow, std::size_t consumer) {
  return consumer_record(flow, consumer) + "/leave";
}

// The flow's rate share set at run time (driven::set_share; decimal), read by its mover.
inline std::string share_record(const std::string& flow) { return "driven/" + flow + "/share"; }

// The rank of the mover that serves the flow (published by Mover::add_flow; one mover per flow).
inline std::string mover_record(const std::string& flow) { return "driven/" + flow + "/mover"; }

}  // namespace dfi::driven::detail
