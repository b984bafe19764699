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

// Published (empty) by the flow's mover once it will never touch the PU's buffers again: a
// producer's after the mover released the end-of-stream segment of every ring of it, a
// consumer's after its end-of-stream segment was published. The PU waits for it before it frees
// its buffers (Producer::close, Consumer's end), so that a mover restarted in between does not
// attach to freed memory (mover.hpp, Recovery).
inline std::string producer_done_record(const std::string& flow, std::size_t producer) {
  return producer_record(flow, producer) + "/done";
}
inline std::string consumer_done_record(const std::string& flow, std::size_t consumer) {
  return consumer_record(flow, consumer) + "/done";
}

// Published by the flow's mover when it gives the flow up (Mover::step: a PU died, a remote
// operation failed): why, for the PUs' timeout errors.
inline std::string failed_record(const std::string& flow) { return "driven/" + flow + "/failed"; }

// The flow's rate share set at run time (driven::set_share; decimal), read by its mover.
inline std::string share_record(const std::string& flow) { return "driven/" + flow + "/share"; }

// The rank of the mover that serves the flow (published by Mover::add_flow; one mover per flow;
// a mover restarted on the same rank, or on another rank after the first one died, takes it over).
inline std::string mover_record(const std::string& flow) { return "driven/" + flow + "/mover"; }

}  // namespace dfi::driven::detail
