// Views of the Multi-Paxos kv service (service.hpp): which replicas take part and who leads.
//
// View 0 is every replica, led by rank 0. A view ends when one of its members is declared dead
// (the registry's failure detector: its connection closed). Every surviving replica then enters
// the next view: it publishes the length of its log (the last slot it holds) under the view's
// state records, and every replica and client decides the view the same way from the same
// records (decide_view): the members are the replicas that published, the leader the member
// with the longest log (ties: the lowest rank). The leader creates the view's flows and publishes
// the view record; the others wait for it (wait_view_open), or for the leader's death, which
// sends everyone on to the following view. Clients join a view when they next send: each creates
// its own replies flow of the view then (create_reply_flow), so a view change waits for none.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dfi/apps/kv/service.hpp"
#include "dfi/flow/spec.hpp"

namespace dfi::cluster {
class Node;
}

namespace dfi::apps::kv::detail {

struct View {
  std::uint64_t number = 0;
  int leader = 0;
  std::vector<int> members;    // ranks, ascending, the leader among them
  std::vector<int> followers;  // members without the leader, ascending: follower index i is followers[i]
  // decide_view: every replica's record for this view (by rank; none: dead or not a member).
  std::vector<std::optional<std::string>> states;
};

// View 0: ranks 0 .. replicas-1, rank 0 leads.
View first_view(const ServiceOptions& options);

// Publishes this replica's record for view `number` (a replica calls it as it enters the view;
// clients do not): its log length first (a decimal number, which decide_view compares), then
// whatever the protocol adds after a space (NOPaxos: its NO-OPs).
void publish_view_state(cluster::Node& node, const ServiceOptions& options, std::uint64_t number,
                        const std::string& state);

// Decides view `number` > 0 from the replicas' state records (see above), waiting up to
// options.timeout for every live replica's. Throws dfi::Error: peer_failed when fewer than a
// majority of the replicas published (naming the service and the view), timeout.
View decide_view(cluster::Node& node, const ServiceOptions& options, std::uint64_t number);

// Whether a member of `view` other than this rank has been declared dead.
bool view_broken(cluster::Node& node, const View& view);

// Waits until a member of `view` other than this rank is declared dead, up to `limit`; true when
// one is. Used after a flow call failed with peer_failed, to tell a broken view (a member died)
// from a failure that a new view does not mend (a client died).
bool view_breaks_within(cluster::Node& node, const View& view, std::chrono::milliseconds limit);

// The leader of `view`: creates its flows (requests, accept, accepted), then publishes the view
// record.
void open_view(cluster::Node& node, const ServiceOptions& options, const View& view);

// Client `client` (its index `index`) joining `view`: creates its own replies flow of the view,
// `<service>.v<view>.replies.<index>`, from the view's repliers (the leader; NOPaxos: every
// member, the leader first, so source 0 is the leader) to the client. The client creates it, and
// opens its target, before it sends anything in the view; a replica opens its source when it
// first answers the client (ReplyFlows, replies.hpp). So a view needs nothing from a client that
// does not send in it: no replica waits for an idle client, and one that never comes back costs
// no flow.
void create_reply_flow(cluster::Node& node, const ServiceOptions& options, const View& view,
                       const flow::SourceRef& client, std::size_t index);

// Waits for the view record of `view` (its flows exist then). False when the leader died first.
// Throws dfi::Error(timeout) after options.timeout.
bool wait_view_open(cluster::Node& node, const ServiceOptions& options, const View& view);

// A view's ranks as text: "view 2 (leader rank 1, members 1 2 3)".
std::string describe(const View& view);

}  // namespace dfi::apps::kv::detail
