// The mover rank of a driven scenario (driven-lat, driven-replicate, driven-fairness,
// driven-elastic): the rank that only moves, one flow per point.
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/driven/mover.hpp"

namespace dfi::tools::bench {

// Takes over driven flow `flow` (waiting up to `timeout` for its PUs' buffers), meets the PUs at
// `start_barrier`, calls `started` (if given: right after the barrier, e.g. to start a CPU
// clock), moves until the flow ended — at most `timeout` plus the `seconds` the producers push —
// and returns what it moved: {"segments", "idle_steps", "bells", "arms", "safety_polls",
// "safety_finds"}. Throws
// dfi::Error for a failed add_flow or run (naming the flow).
inline nlohmann::json run_mover_point(cluster::Node& node, const std::string& flow, const std::string& start_barrier,
                                      std::chrono::milliseconds timeout, double seconds,
                                      const std::function<void()>& started = {}) {
  driven::Mover mover(node);
  mover.add_flow(flow, timeout);
  node.barrier(start_barrier);
  if (started) started();
  if (Status s = mover.run(timeout + std::chrono::milliseconds(static_cast<long>(seconds * 1000))); !s) {
    throw Error(s.code(), s.message());
  }
  const driven::MoverCounters& c = mover.counters();
  return {{"segments", c.segments}, {"idle_steps", c.idle_steps}, {"bells", c.bells}, {"arms", c.arms},
          {"safety_polls", c.safety_polls}, {"safety_finds", c.safety_finds}};
}

}  // namespace dfi::tools::bench
