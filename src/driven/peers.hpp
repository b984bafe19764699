// What a driven flow's processing units share: publishing their buffers, and the liveness check: while a producer or consumer waits for
// the mover, it asks now and then whether the mover, or a PU on the other side, was declared dead
// (fabric::FailureWatch: one atomic load while nobody died).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/flow/spec.hpp"
#include "dfi/registry/client.hpp"
#include "names.hpp"

namespace dfi::driven::detail {

class PeerCheck {
 public:
  // Watches the flow's mover and its producers (`producers`) or consumers (!`producers`).
  // `spec` must outlive the check.
  PeerCheck(cluster::Node& node, const flow::FlowSpec& spec, bool producers)
      : node_(node), spec_(spec), producers_(producers), watch_(node.fabric()) {}

  // peer_failed naming the first of them declared dead since the last look, after `label` and
  // ": " (an empty label: the bare problem, for a ring that prefixes its own label). Called
  // while waiting (every few dozen rounds), never per tuple.
  Status check(const std::string& label) {
    // A mover learned just now may have died before: look at every rank then too.
    const bool learned = learn_mover();
    if (!watch_.changed() && !learned) return {};
    auto dead = [&](const std::string& who, const std::string& reason) {
      return Status(Errc::peer_failed, (label.empty() ? "" : label + ": ") + who + " failed: " + reason);
    };
    if (mover_) {
      if (std::string reason = watch_.reason(*mover_); !reason.empty()) {
        return dead("the mover (rank " + std::to_string(*mover_) + ")", reason);
      }
    }
    if (producers_) {
      for (const flow::SourceRef& s : spec_.sources) {
        if (std::string reason = watch_.reason(s.rank); !reason.empty()) {
          return dead("producer (rank " + std::to_string(s.rank) + ", thread " + std::to_string(s.thread) + ")", reason);
        }
      }
    } else {
      for (const flow::TargetRef& t : spec_.targets) {
        if (std::string reason = watch_.reason(t.rank); !reason.empty()) {
          return dead("consumer (rank " + std::to_string(t.rank) + ", id " + std::to_string(t.id) + ")", reason);
        }
      }
    }
    return {};
  }

 private:
  // The mover's rank, from its registry record: looked up at most every 100 ms until known, so
  // that it is known before anyone dies (the registry may die with them).
  // True when it learned the rank just now.
  bool learn_mover() {
    if (mover_) return false;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_lookup_) return false;
    next_lookup_ = now + std::chrono::milliseconds(100);
    try {
      if (auto record = node_.registry().try_lookup(mover_record(spec_.name))) mover_ = std::stoi(*record);
    } catch (const std::exception&) {
      // the registry is unreachable: the ranks' failures still tell
    }
    return mover_.has_value();
  }

  cluster::Node& node_;
  const flow::FlowSpec& spec_;
  bool producers_;
  fabric::FailureWatch watch_;
  std::optional<int> mover_;
  std::chrono::steady_clock::time_point next_lookup_{};
};

// Publishes a PU's buffers (`region`) under `record` for the mover; a second open of the same PU
// is already_exists naming it (`label`).
inline void publish_buffers(cluster::Node& node, const std::string& record, const fabric::MemoryRegion& region,
                            const std::string& label) {
  try {
    node.registry().publish(record, region.descriptor().serialize());
  } catch (const Error& e) {
    if (e.code() == Errc::already_exists) throw Error(Errc::already_exists, label + " is already open");
    throw;
  }
}

}  // namespace dfi::driven::detail
