// Fault injection at flow targets, for tests and the kv-jepsen bench: chosen segments of chosen
// (source, target) links are delayed or dropped as if the network had done it. Not part of the
// public API.
//
// The setting flow_faults (DFI_FLOW_FAULTS) holds rules separated by ';', each a list of
// key=value items separated by ',':
//
//   flow=kv.v*.accept,to=2,delay=150,every=10     every 10th segment to rank 2 arrives 150 ms late
//   flow=kv.v0.requests,from=3,to=1,drop,first=5,every=20,count=3
//
//   flow=PATTERN   the flows it applies to (fnmatch(3) pattern on the flow's name); required
//   from=RANK      only the links from sources on this rank (default: every source); a link is
//                  named by its source even where a relay writes it (a stamped flow's target 0)
//   to=RANK        only the targets on this rank (default: every target)
//   delay=MS       a chosen segment becomes visible MS milliseconds after it arrived; the link
//                  is FIFO, so the segments behind it wait too (a slow link, not a reordering)
//   drop           a chosen segment is released unread, as if it never arrived; only where the
//                  flow's contract has losses (ordered replicate flows: the target reports a
//                  gap) — a reliable flow never loses a segment, so a drop rule that matches one
//                  fails the open with invalid_argument
//   first=N        the first chosen segment is the link's N-th (from 1; default 1)
//   every=N        then every N-th after it (default 1: all of them)
//   count=N        at most N segments per link (default 0: no limit)
//
// Exactly one of delay and drop. The rules are read when a target opens, never per segment; a link
// that no rule matches costs its target one well-predicted branch per poll. The first rule that
// matches a link is its rule. End-of-stream segments are never delayed or dropped.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dfi/flow/spec.hpp"
#include "dfi/memory/ring.hpp"

namespace dfi::flow::detail {

struct FaultRule {
  std::string text;           // the rule as written, for messages
  std::string flow;           // fnmatch pattern
  int from = -1;              // source rank, -1: any
  int to = -1;                // target rank, -1: any
  bool drop = false;          // else delay
  std::chrono::milliseconds delay{0};
  std::uint64_t first = 1;
  std::uint64_t every = 1;
  std::uint64_t count = 0;    // 0: no limit
};

// Parses the text of the flow_faults setting. Throws dfi::Error(invalid_argument) naming the rule
// and the item that is wrong.
std::vector<FaultRule> parse_fault_rules(std::string_view text);

// The faults one target injects on its rings (one ring per source of the flow). Used by the one
// thread that reads the rings.
class RingFaults {
 public:
  enum class Verdict : std::uint8_t { deliver, hold, drop };

  // The faults of `rules` for target `target_index` of `spec` (its rings are indexed like
  // spec.sources), or nullptr when no rule matches any of its links. `lossy`: the flow's contract
  // allows a lost segment; a drop rule matching a link of a flow that is not lossy throws
  // dfi::Error(invalid_argument) naming the rule and the flow.
  static std::unique_ptr<RingFaults> resolve(const std::vector<FaultRule>& rules, const FlowSpec& spec,
                                             std::size_t target_index, bool lossy);
  // As above with the rules of the flow_faults setting.
  static std::unique_ptr<RingFaults> from_setting(const FlowSpec& spec, std::size_t target_index, bool lossy);

  // What to do with `segment`, the head of ring `ring` (peeked, not released). A segment is
  // counted the first time it is judged (by its ring sequence number), so judging it again while
  // it is held is fine. drop: the caller releases it and looks at the next one.
  Verdict judge(std::size_t ring, const memory::SegmentView& segment);

  // Segments delayed and dropped so far, over all rings.
  std::uint64_t delayed() const noexcept { return delayed_; }
  std::uint64_t dropped() const noexcept { return dropped_; }

 private:
  struct Link {
    const FaultRule* rule = nullptr;
    std::uint64_t last_sequence = 0;  // ring sequence of the last segment counted
    std::uint64_t seen = 0;           // segments counted
    std::uint64_t hits = 0;           // segments chosen
    bool holding = false;
    std::chrono::steady_clock::time_point due;
  };
  std::vector<FaultRule> rules_;  // the matching rules, which links_ point into
  std::vector<Link> links_;
  std::uint64_t delayed_ = 0;
  std::uint64_t dropped_ = 0;
};

}  // namespace dfi::flow::detail
