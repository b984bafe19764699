// flow::Barrier — "every member reached point X", between threads of many ranks.
//
//   flow::create_barrier(node, "phase", {{0, 0}, {0, 1}, {1, 0}});   // once, anywhere
//   flow::Barrier barrier(node, worker, "phase", thread);             // in each member thread
//   barrier.wait();                                                   // as often as needed
//
// One 64-bit counter at the first member's rank: each wait() adds 1 with a remote fetch-add and
// returns once the counter reaches round × members (read through a mapped pointer on shm, with
// gets elsewhere). Rounds may repeat without re-creating the barrier.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dfi/common/backoff.hpp"
#include "dfi/common/error.hpp"
#include "dfi/cluster/shared_words.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/fabric/endpoint.hpp"
#include "dfi/fabric/memory.hpp"
#include "dfi/flow/spec.hpp"

namespace dfi::fabric {
class Worker;
}

namespace dfi::flow {

// Publishes barrier `name` with `members` (rank, thread). Throws dfi::Error: already_exists,
// invalid_argument (no members, duplicates, ranks outside the cluster).
void create_barrier(cluster::Node& node, const std::string& name, const std::vector<SourceRef>& members);

class Barrier {
 public:
  // Joins barrier `name` as member `thread` of this rank; `worker` must be the caller's own.
  // Throws dfi::Error: not_found (no such barrier), invalid_argument (not a member), timeout.
  // `open_timeout` bounds the waits for the barrier's creation and its counter (0: the
  // registry_timeout_ms setting).
  Barrier(cluster::Node& node, fabric::Worker& worker, std::string_view name, int thread,
          std::chrono::milliseconds open_timeout = std::chrono::milliseconds(0));
  // Leaves; the first member's object waits (bounded) until every other member left, since the
  // counter lives in its memory.
  ~Barrier();
  Barrier(const Barrier&) = delete;
  Barrier& operator=(const Barrier&) = delete;

  // Returns once every member called wait() for this round. Errors: timeout (0 = the
  // flow_timeout_ms setting), peer_failed (a member's rank died; the message names it).
  Status wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  std::uint64_t rounds() const noexcept { return round_; }

 private:
  // A member's death, latched: FailureWatch reports a death once, and a round may still
  // complete after it (the member arrived before it died), so later rounds must see it too.
  Status check_members();
  Status dead_member() const;  // the first member declared dead, as an error naming it

  cluster::Node& node_;
  std::string name_;
  std::string label_;
  std::vector<SourceRef> members_;
  bool owner_ = false;
  std::size_t index_ = 0;  // this member's position in members_ (the owner is 0)
  cluster::SharedWords counter_;  // [arrived][departed], hosted by the owner, attached by all
  std::chrono::milliseconds timeout_;  // wait()'s default: flow_timeout_ms, read at join
  BackoffSettings backoff_ = BackoffSettings::from_config();
  std::uint64_t round_ = 0;
  fabric::FailureWatch failures_;
  Status member_failed_;  // the first member death seen; every later round fails with it
};

}  // namespace dfi::flow
