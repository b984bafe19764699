// The mover rank of a driven scenario (driven-lat, driven-replicate, driven-fairness,
// driven-elastic): the rank that only moves, one flow per point.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/driven/mover.hpp"

namespace dfi::tools::bench {

// Takes over driven flow `flow` (waiting up to `timeout` for its PUs' buffers), meets the PUs at
// `start_barrier`, moves until the flow ended — at most `timeout` plus the `seconds` the producers
// push — and returns what it moved: {"segments", "idle_steps"}. Throws dfi::Error for a failed
// add_flow or run (naming the flow).
inline nlohmann::json run_mover_point(cluster::Node& node, const std::string& flow, const std::string& start_barrier,
                                      std::chrono::milliseconds timeout, double seconds) {
  driven::Mover mover(node);
  mover.add_flow(flow, timeout);
  node.barrier(start_barrier);
  if (Status s = mover.run(timeout + std::chrono::milliseconds(static_cast<long>(seconds * 1000))); !s) {
    throw Error(s.code(), s.message());
  }
  return {{"segments", mover.counters().segments}, {"idle_steps", mover.counters().idle_steps}};
}

}  // namespace dfi::tools::bench
