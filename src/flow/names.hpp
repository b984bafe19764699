// Registry record names and small helpers shared by the flow implementations.
#pragma once

#include <cstddef>
#include <string>

namespace dfi::flow::detail {

inline std::string spec_record(const std::string& flow) { return "flow/" + flow + "/spec"; }
inline std::string target_record(const std::string& flow, std::size_t target_index) {
  return "flow/" + flow + "/target/" + std::to_string(target_index);
}
// The rings of every target of `rank` (RingRecords::per_rank).
inline std::string rank_record(const std::string& flow, int rank) {
  return "flow/" + flow + "/rank/" + std::to_string(rank);
}

// Adds `delta` bytes to what this process holds for `flow` (see flow::memory_bytes).
void account_memory(const std::string& flow, std::ptrdiff_t delta);

}  // namespace dfi::flow::detail
