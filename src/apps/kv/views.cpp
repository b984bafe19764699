#include "views.hpp"

#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "dfi/cluster/node.hpp"
#include "dfi/cluster/records.hpp"
#include "dfi/common/deadline.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/registry/client.hpp"
#include "names.hpp"

namespace dfi::apps::kv::detail {

namespace {

// Ring bytes for `tuples` tuples of `width` in one segment, with the 16 B footer.
std::uint32_t segment_for(std::size_t tuples, std::size_t width) {
  return static_cast<std::uint32_t>(tuples * width + 16);
}

// A flow of the service: shuffles route by explicit target (the leader, a client by its index).
flow::FlowSpec spec(const std::string& name, flow::FlowType type, flow::Schema schema) {
  flow::FlowSpec s;
  s.name = name;
  s.type = type;
  s.schema = std::move(schema);
  if (type == flow::FlowType::shuffle) s.routing = flow::Routing::explicit_target;
  return s;
}

void fill_followers(View& view) {
  view.followers.clear();
  for (int r : view.members) {
    if (r != view.leader) view.followers.push_back(r);
  }
}

// Every ring holds what may be outstanding on it, so no push ever waits for ring space while its
// peer is alive: a client's window of requests (one segment per flush in the worst case), the
// leader's replies to one client, max_rounds_in_flight rounds to a follower, and a follower's
// answers (one per consumed segment) to everything it may consume between two drains of the
// leader. (A view's first rounds — the leader's state and its log — may be larger: the leader
// then waits for ring space while the followers consume.) NOPaxos: a request sent again (its slot
// became a NO-OP, or it was slow) may travel beside its first copy, so a client's rings hold
// twice the window.
std::uint32_t window_segments(const ServiceOptions& o) {
  return static_cast<std::uint32_t>(o.protocol == Protocol::nopaxos ? 2 * o.window + 2 : o.window + 1);
}

}  // namespace

View first_view(const ServiceOptions& options) {
  View view;
  for (int r = 0; r < options.replicas; ++r) view.members.push_back(r);
  view.leader = 0;
  fill_followers(view);
  return view;
}

void publish_view_state(cluster::Node& node, const ServiceOptions& options, std::uint64_t number,
                        const std::string& state) {
  const Names names(options.name, number);
  node.registry().publish(names.view_states + std::to_string(node.rank()), state, /*replace=*/true);
}

View decide_view(cluster::Node& node, const ServiceOptions& options, std::uint64_t number) {
  const Names names(options.name, number);
  const std::vector<std::optional<std::string>> states =
      cluster::survivors_records(node, names.view_states, options.replicas, options.timeout);
  View view;
  view.number = number;
  std::uint64_t longest = 0;
  for (int r = 0; r < options.replicas; ++r) {
    const std::optional<std::string>& state = states[static_cast<std::size_t>(r)];
    if (!state) continue;
    const std::uint64_t last_slot = std::stoull(*state);
    if (view.members.empty() || last_slot > longest) {
      longest = last_slot;
      view.leader = r;
    }
    view.members.push_back(r);
  }
  if (view.members.size() < static_cast<std::size_t>(options.replicas / 2 + 1)) {
    throw Error(Errc::peer_failed, "kv service '" + options.name + "': view " + std::to_string(number) + " has " +
                                       std::to_string(view.members.size()) + " live replica(s) of " +
                                       std::to_string(options.replicas) + ", fewer than a majority");
  }
  fill_followers(view);
  view.states = states;
  return view;
}

bool view_broken(cluster::Node& node, const View& view) {
  for (int r : view.members) {
    if (r != node.rank() && !node.fabric().peer_failure(r).empty()) return true;
  }
  return false;
}

bool view_breaks_within(cluster::Node& node, const View& view, std::chrono::milliseconds limit) {
  const Deadline deadline(limit);
  for (;;) {
    if (view_broken(node, view)) return true;
    if (deadline.expired()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void create_reply_flow(cluster::Node& node, const ServiceOptions& o, const View& view, const flow::SourceRef& client,
                       std::size_t index) {
  flow::FlowSpec replies =
      spec(Names(o.name, view.number).replies_to(index), flow::FlowType::shuffle, reply_schema(o.value_bytes));
  replies.sources = {{view.leader, 0}};
  if (o.protocol == Protocol::nopaxos) {
    for (int r : view.followers) replies.sources.push_back({r, 0});
  }
  replies.targets = {{client.rank, client.thread}};
  replies.options.segments = window_segments(o);
  replies.options.segment_bytes = segment_for(o.window, reply_bytes(o.value_bytes));
  replies.options.stall_timeout = o.timeout;
  flow::create_flow(node, replies);
}

void open_view(cluster::Node& node, const ServiceOptions& o, const View& view) {
  const std::vector<flow::SourceRef> clients = client_threads(o, node.size());
  const Names names(o.name, view.number);
  const flow::TargetRef leader_target{view.leader, 0};
  const flow::SourceRef leader_source{view.leader, 0};

  // The rings' sizes: see window_segments. The replies have a flow per client, which the client
  // creates as it joins the view (create_reply_flow).
  const bool nopaxos = o.protocol == Protocol::nopaxos;
  flow::FlowSpec requests = spec(names.requests, nopaxos ? flow::FlowType::replicate : flow::FlowType::shuffle,
                                 request_schema(o.value_bytes));
  requests.sources = clients;
  requests.targets = {leader_target};
  if (nopaxos) {
    // The ordered unreliable multicast: every replica, one global order from the sequencer (a
    // counter at the leader, or the leader stamping: ServiceOptions::sequencer).
    for (int r : view.followers) requests.targets.push_back({r, 0});
    requests.type_options.get<flow::ReplicateOptions>().ordered = true;
    requests.type_options.get<flow::ReplicateOptions>().gap_timeout = o.gap_timeout;
    requests.type_options.get<flow::ReplicateOptions>().sequencer = o.sequencer;
  }
  requests.options.segments = window_segments(o);
  requests.options.segment_bytes = segment_for(o.window, request_bytes(o.value_bytes)) + (nopaxos ? 8 : 0);  // + sequence word
  requests.options.stall_timeout = o.timeout;
  flow::create_flow(node, requests);

  // The leader -> followers replicate flow (accept) and the followers -> leader shuffle
  // (accepted). Multi-Paxos: its rounds and the followers' answers. NOPaxos: gap agreement — the
  // leader's decisions, the followers' answers and questions; a few tuples per gap and per
  // kSyncEvery sequence numbers, rare next to the requests.
  const std::size_t accept_tuples_per_segment = 64;
  std::size_t accept_segments = 64, accepted_segments = 128, accepted_tuples_per_segment = 64;
  if (o.protocol == Protocol::paxos) {
    const std::size_t round_tuples = o.round_requests + o.window + 1;  // a round, the batch over the limit, a heartbeat
    const std::size_t segments_per_round = (round_tuples + accept_tuples_per_segment - 1) / accept_tuples_per_segment + 1;
    accept_segments = o.max_rounds_in_flight * segments_per_round + 1;
    accepted_segments = 2 * accept_segments + segments_per_round + 2;
    accepted_tuples_per_segment = 1;
  }
  if (o.protocol != Protocol::unreplicated) {
    flow::FlowSpec accept = spec(names.accept, flow::FlowType::replicate, accept_schema(o.value_bytes));
    accept.sources = {leader_source};
    for (int r : view.followers) accept.targets.push_back({r, 0});
    accept.options.segments = static_cast<std::uint32_t>(accept_segments);
    // The replicate segment header (one word) comes on top of the tuples.
    accept.options.segment_bytes = segment_for(accept_tuples_per_segment, accept_bytes(o.value_bytes)) + 8;
    accept.options.stall_timeout = o.timeout;
    flow::create_flow(node, accept);

    flow::FlowSpec accepted = spec(names.accepted, flow::FlowType::shuffle, accepted_schema());
    for (int r : view.followers) accepted.sources.push_back({r, 0});
    accepted.targets = {leader_target};
    accepted.options.segments = static_cast<std::uint32_t>(accepted_segments);
    accepted.options.segment_bytes = segment_for(accepted_tuples_per_segment, sizeof(Accepted));
    accepted.options.stall_timeout = o.timeout;
    flow::create_flow(node, accepted);
  }

  std::ostringstream record;
  record << view.leader;
  for (int r : view.members) record << ' ' << r;
  node.registry().publish(names.view_record, record.str(), /*replace=*/true);
}

bool wait_view_open(cluster::Node& node, const ServiceOptions& options, const View& view) {
  const Names names(options.name, view.number);
  const Deadline deadline(options.timeout);
  for (;;) {
    try {
      (void)node.wait_for(names.view_record, std::chrono::milliseconds(50));
      return true;
    } catch (const Error& e) {
      if (e.code() != Errc::timeout) throw;
    }
    if (view.leader != node.rank() && !node.fabric().peer_failure(view.leader).empty()) {
      return node.registry().try_lookup(names.view_record).has_value();
    }
    if (deadline.expired()) {
      throw Error(Errc::timeout, "kv service '" + options.name + "': " + describe(view) + " was not opened within " +
                                     std::to_string(options.timeout.count()) + " ms");
    }
  }
}

std::string describe(const View& view) {
  std::ostringstream text;
  text << "view " << view.number << " (leader rank " << view.leader << ", members";
  for (int r : view.members) text << ' ' << r;
  text << ')';
  return text.str();
}

}  // namespace dfi::apps::kv::detail
