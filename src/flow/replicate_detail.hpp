// Pieces shared by the replicate source and target (src/flow/replicate*.cpp).
#pragma once

#include <cstddef>
#include <string>

#include "dfi/flow/spec.hpp"

namespace dfi::flow::detail {

// The sequencer of an ordered flow: shared words (cluster::SharedWords) in target 0's process.
inline std::string sequencer_record(const std::string& flow) {
  return "flow/" + flow + "/sequencer";
}
inline constexpr std::size_t kSequencerCounter = 0;  // word: sequence numbers issued so far
// Word t (1 <= t < targets): target t is done with the sequencer. Words: one per target.

// "source (rank 1, thread 0)" and "target (rank 2, id 0)", as every message names members.
std::string source_name(const FlowSpec& spec, std::size_t source);
std::string target_name(const FlowSpec& spec, std::size_t target);

}  // namespace dfi::flow::detail
