// The registry and flow names of one kv service. Every view of the service has flows of its own
// (`<service>.v<view>.requests`, ...): a view's flows end with the view. The replies go on a flow
// per client and view, `<service>.v<view>.replies.<client index>` (replies.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dfi::apps::kv {

struct Names {
  explicit Names(const std::string& service, std::uint64_t view = 0)
      : requests(flow(service, view, "requests")),
        replies(flow(service, view, "replies") + "."),
        accept(flow(service, view, "accept")),
        accepted(flow(service, view, "accepted")),
        reports("kv/" + service + "/report/"),
        serving("kv/" + service + "/serving/"),
        view_record("kv/" + service + "/view/" + std::to_string(view)),
        view_states(view_record + "/state/"),
        value_bytes("kv/" + service + "/value_bytes") {}

  std::string requests;
  std::string replies;       // + client index: the replies to that client
  std::string accept;
  std::string accepted;
  std::string reports;      // + rank: what a rank reports after the run (cluster::exchange_records)
  std::string serving;      // + client index: published by a bench client at its first completion
  std::string view_record;  // the view's leader and members, published once its flows exist
  std::string view_states;  // + rank: a replica's log length as it enters the view
  std::string value_bytes;  // "<value bytes> <rank>": the service's value width, and who created it

  // The flow of the replies to client `client` (its index) in this view.
  std::string replies_to(std::size_t client) const { return replies + std::to_string(client); }

 private:
  static std::string flow(const std::string& service, std::uint64_t view, const char* what) {
    std::string name = service;
    name += ".v";
    name += std::to_string(view);
    name += '.';
    name += what;
    return name;
  }
};

}  // namespace dfi::apps::kv
