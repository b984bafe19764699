#include "dfi/flow/barrier.hpp"

#include <nlohmann/json.hpp>

#include <set>
#include <thread>

#include "dfi/cluster/node.hpp"
#include "dfi/common/backoff.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/flow/detail/rings.hpp"
#include "dfi/memory/ring.hpp"
#include "dfi/registry/client.hpp"

namespace dfi::flow {
namespace {

constexpr std::size_t kArrived = 0;   // words of the barrier's shared counter; then, from word
constexpr std::size_t kDeparted = 1;  // 1, one departure word per member after the owner

std::string spec_record(const std::string& name) { return "barrier/" + name + "/spec"; }
std::string counter_record(const std::string& name) { return "barrier/" + name + "/counter"; }

}  // namespace

void create_barrier(cluster::Node& node, const std::string& name, const std::vector<SourceRef>& members) {
  const std::string label = "barrier '" + name + "'";
  if (members.empty()) throw Error(Errc::invalid_argument, label + ": needs at least one member");
  std::set<std::pair<int, int>> seen;
  nlohmann::json j = nlohmann::json::array();
  for (const SourceRef& m : members) {
    if (m.rank < 0 || m.rank >= node.size()) {
      throw Error(Errc::invalid_argument, label + ": member on rank " + std::to_string(m.rank) + " outside the cluster");
    }
    if (!seen.insert({m.rank, m.thread}).second) {
      throw Error(Errc::invalid_argument, label + ": member (rank " + std::to_string(m.rank) + ", thread " +
                                              std::to_string(m.thread) + ") listed twice");
    }
    j.push_back({m.rank, m.thread});
  }
  try {
    node.registry().publish(spec_record(name), j.dump());
  } catch (const Error& e) {
    if (e.code() == Errc::already_exists) throw Error(Errc::already_exists, label + " already exists");
    throw;
  }
}

Barrier::Barrier(cluster::Node& node, fabric::Worker& worker, std::string_view name, int thread,
                 std::chrono::milliseconds open_timeout)
    : node_(node), name_(name), timeout_(detail::stall_timeout(FlowSpec{})), failures_(node.fabric()) {
  const Deadline deadline = detail::open_deadline(open_timeout);
  backoff_ = node.poll_backoff();
  label_ = "barrier '" + name_ + "' member (rank " + std::to_string(node.rank()) + ", thread " + std::to_string(thread) + ")";
  std::string record;
  try {
    record = node.wait_for(spec_record(name_), detail::time_left(deadline));
  } catch (const Error& e) {
    if (e.code() == Errc::timeout) throw Error(Errc::not_found, "barrier '" + name_ + "' does not exist");
    throw;
  }
  try {
    for (const auto& m : nlohmann::json::parse(record)) members_.push_back({m.at(0).get<int>(), m.at(1).get<int>()});
  } catch (const nlohmann::json::exception& e) {
    throw Error(Errc::protocol, "barrier '" + name_ + "': malformed record: " + e.what());
  }
  bool member = false;
  for (const SourceRef& m : members_) member = member || (m == SourceRef{node.rank(), thread});
  if (!member) throw Error(Errc::invalid_argument, label_ + ": not a member of the barrier");
  owner_ = members_.front() == SourceRef{node.rank(), thread};
  for (std::size_t m = 0; m < members_.size(); ++m) {
    if (members_[m] == SourceRef{node.rank(), thread}) index_ = m;
  }
  if (owner_) counter_.host(node, counter_record(name_), kDeparted + members_.size() - 1);
  counter_.attach(node, worker, counter_record(name_), members_.front().rank, detail::time_left(deadline));
  member_failed_ = dead_member();  // one declared dead before this object watched
}

Barrier::~Barrier() {
  if (!owner_) {
    (void)counter_.fetch_add(kDeparted + index_ - 1, 1);  // applied when it returns
    return;
  }
  // Others may still read the counter: keep it until they left (or died, or time ran out).
  std::vector<int> others;
  for (std::size_t m = 1; m < members_.size(); ++m) others.push_back(members_[m].rank);
  counter_.wait_for_departures(node_, kDeparted, others, Deadline(timeout_), backoff_);
}

Status Barrier::check_members() {
  if (member_failed_.is_ok() && failures_.changed()) member_failed_ = dead_member();
  return member_failed_;
}

Status Barrier::dead_member() const {
  for (const SourceRef& m : members_) {
    if (std::string reason = failures_.reason(m.rank); !reason.empty()) {
      return {Errc::peer_failed, label_ + ": member (rank " + std::to_string(m.rank) + ", thread " +
                                     std::to_string(m.thread) + ") failed: " + reason};
    }
  }
  return {};
}

Status Barrier::wait(std::chrono::milliseconds timeout) {
  if (timeout.count() == 0) timeout = timeout_;
  ++round_;
  const std::uint64_t target = round_ * members_.size();
  std::uint64_t arrived = 0;
  if (Status s = counter_.fetch_add(kArrived, 1, &arrived); !s) return {s.code(), label_ + ": " + s.message()};
  ++arrived;
  Deadline deadline(timeout.count() > 0 ? std::chrono::nanoseconds(timeout) : std::chrono::hours(24 * 365));
  Backoff backoff(backoff_, reinterpret_cast<std::uintptr_t>(this) ^ round_);
  while (arrived < target) {
    if (Status s = counter_.load(kArrived, arrived); !s) return {s.code(), label_ + ": " + s.message()};
    if (arrived >= target) break;
    if (Status s = check_members(); !s) {
      // A member may complete the round (it saw every arrival) and die before this member's
      // next look at the counter: the round is complete all the same, so look once more.
      if (counter_.load(kArrived, arrived).is_ok() && arrived >= target) break;
      return s;
    }
    if (deadline.expired()) {
      return {Errc::timeout, label_ + ": round " + std::to_string(round_) + " incomplete after " +
                                 std::to_string(timeout.count()) + " ms (" +
                                 std::to_string(arrived - (round_ - 1) * members_.size()) + " of " +
                                 std::to_string(members_.size()) + " arrived)"};
    }
    backoff.pause();
  }
  return {};
}

}  // namespace dfi::flow
