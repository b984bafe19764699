// What a driven flow's processing units share: publishing their buffers, the liveness check, and
// what they say about the mover when it keeps them waiting.
//
// The PUs are oblivious of the mover's deaths (mover.hpp, Recovery): a mover killed and restarted
// continues from the PUs' buffers, so a dead mover is a pause, not an error. While a producer or
// consumer waits, it asks now and then whether a PU on the other side was declared dead
// (fabric::FailureWatch: one atomic load while nobody died); only when it has waited its stall
// timeout does it look at the mover, and its timeout error says what became of it.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <thread>

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
  // Watches the flow's producers (`producers`) or consumers (!`producers`).
  // `spec` must outlive the check.
  PeerCheck(cluster::Node& node, const flow::FlowSpec& spec, bool producers)
      : node_(node), spec_(spec), producers_(producers), watch_(node.fabric()) {}

  // peer_failed naming the first producer (`producers`) or consumer declared dead since the last
  // look, after `label` and ": " (an empty label: the bare problem, for a ring that prefixes its
  // own label). The mover is not watched: its death is a pause (see above). Called while
  // waiting (every few dozen rounds), never per tuple.
  Status check(const std::string& label) {
    if (!watch_.changed()) return {};
    auto dead = [&](const std::string& who, const std::string& reason) {
      return Status(Errc::peer_failed, (label.empty() ? "" : label + ": ") + who + " failed: " + reason);
    };
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

  // What became of the flow's mover, for a timeout error (a registry lookup or two: slow path):
  // no mover took the flow; it runs (and moved nothing); it died and no mover resumed the flow;
  // it died and a restarted one moved nothing since.
  std::string mover_state() {
    std::optional<std::string> record;
    try {
      record = node_.registry().try_lookup(mover_record(spec_.name));
    } catch (const std::exception& e) {
      return std::string("the mover is unknown (the registry is unreachable: ") + e.what() + ")";
    }
    if (!record) return "no mover has taken the flow (dfi mover " + spec_.name + ")";
    int rank = -1;  // the record is "<rank> <pid>"
    try {
      rank = std::stoi(*record);
    } catch (const std::exception&) {
      return "the mover is unknown (mover record '" + *record + "')";
    }
    const std::string mover = "the mover (rank " + std::to_string(rank) + ")";
    const std::string reason = watch_.reason(rank);
    if (reason.empty()) return mover + " runs but moved nothing for it";
    bool back = false;
    try {
      back = node_.registry().members().contains(rank);
    } catch (const std::exception&) {
      // the registry is gone: say what is known
    }
    return back ? mover + " failed (" + reason + "); the restarted mover moved nothing for it since"
                : mover + " failed (" + reason + ") and no mover has resumed the flow";
  }

  // Waits (up to `timeout`) until the mover published `record` (a done record: it will not touch
  // this PU's buffers again). Errors: timeout naming the mover's state.
  Status await_done(const std::string& record, const std::string& label, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::microseconds(100);
    for (;;) {
      try {
        if (node_.registry().try_lookup(record)) return {};
      } catch (const Error& e) {
        return {e.code(), label + ": waiting for the mover to let go of the buffers: " + e.what()};
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return {Errc::timeout, label + ": the mover did not let go of the buffers within " +
                                   std::to_string(timeout.count()) + " ms: " + mover_state()};
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(5000));
    }
  }

 private:
  cluster::Node& node_;
  const flow::FlowSpec& spec_;
  bool producers_;
  fabric::FailureWatch watch_;
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
