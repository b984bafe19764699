// What a driven flow's processing units share: publishing their buffers, the liveness check, and
// what they say about the mover when it keeps them waiting.
//
// The PUs are oblivious of the mover's deaths (mover.hpp, Recovery): a mover killed and restarted
// continues from the PUs' buffers, so a dead mover is a pause, not an error. While a producer or
// consumer waits, it asks now and then whether another PU of the flow was declared dead
// (fabric::FailureWatch: one atomic load while nobody died); a PU killed mid-flow stops the flow
// with an error naming it at every PU (the mover gives the flow up and serves its other flows).
// Only when a PU has waited its stall timeout does it look at the mover, and its timeout error
// says what became of it (or that it gave the flow up, and why).
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
  // Watches every other PU of the flow (`spec`, which must outlive the check): producers and
  // consumers alike, so a PU killed mid-flow stops its whole flow with an error naming it, on
  // either side. `producer` says which side the watching PU is on and `index` its position there
  // (it does not watch itself).
  PeerCheck(cluster::Node& node, const flow::FlowSpec& spec, bool producer, std::size_t index)
      : node_(node), spec_(spec), producer_(producer), index_(index), watch_(node.fabric()) {}

  // peer_failed naming the first PU of the flow declared dead since the last look, after `label`
  // and ": " (an empty label: the bare problem, for a ring that prefixes its own label). A PU the
  // mover let go of (its done record: it finished) may end its process: that is no failure. The
  // mover is not watched: its death is a pause (see above). Called while waiting (every few dozen
  // rounds), never per tuple; one atomic load while nobody died, registry lookups only after a
  // death.
  Status check(const std::string& label) {
    if (!watch_.changed()) return {};
    auto dead = [&](const std::string& who, const std::string& reason) {
      return Status(Errc::peer_failed, (label.empty() ? "" : label + ": ") + who + " failed: " + reason);
    };
    for (std::size_t p = 0; p < spec_.sources.size(); ++p) {
      const flow::SourceRef& s = spec_.sources[p];
      if (producer_ && p == index_) continue;
      if (std::string reason = watch_.reason(s.rank); !reason.empty() && !finished(producer_done_record(spec_.name, p))) {
        return dead("producer (rank " + std::to_string(s.rank) + ", thread " + std::to_string(s.thread) + ")", reason);
      }
    }
    for (std::size_t c = 0; c < spec_.targets.size(); ++c) {
      const flow::TargetRef& t = spec_.targets[c];
      if (!producer_ && c == index_) continue;
      if (std::string reason = watch_.reason(t.rank); !reason.empty() && !finished(consumer_done_record(spec_.name, c))) {
        return dead("consumer (rank " + std::to_string(t.rank) + ", id " + std::to_string(t.id) + ")", reason);
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
    try {
      if (std::optional<std::string> failed = node_.registry().try_lookup(failed_record(spec_.name))) {
        return "the mover gave the flow up: " + *failed;
      }
    } catch (const std::exception&) {
      // the registry is gone: say what else is known
    }
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
  // Whether the mover published done `record`: the PU finished and may be gone (slow path).
  bool finished(const std::string& record) {
    try {
      return node_.registry().try_lookup(record).has_value();
    } catch (const std::exception&) {
      return false;  // unknown: report the death
    }
  }

  cluster::Node& node_;
  const flow::FlowSpec& spec_;
  bool producer_;
  std::size_t index_;
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
