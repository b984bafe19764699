// The replies of one replica in one view of the kv service (service.cpp): its source in every
// client's replies flow, `<service>.v<view>.replies.<client>` (views.hpp: create_reply_flow).
//
// A replica opens its source of a client's flow when it first answers that client in the view.
// The client created that flow and opened its target before it sent anything in the view, so the
// open finds both at once; and a client that sends nothing in a view (an idle gateway) is never
// waited for: a view change costs the time of the clients that send, whatever the others do.
// (One flow to every client instead made each new view's repliers wait for every client to open
// its target, and an idle client never did: issue 29.)
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "dfi/apps/kv/service.hpp"
#include "dfi/common/error.hpp"
#include "dfi/flow/shuffle.hpp"

namespace dfi::fabric {
class Worker;
}

namespace dfi::apps::kv::detail {

class ReplyFlows {
 public:
  // This replica's replies in view `view`; opens nothing yet. `worker` is the calling thread's own.
  ReplyFlows(cluster::Node& node, fabric::Worker& worker, const ServiceOptions& options, std::uint64_t view);
  // A view left before its end: every open flow is abandoned (no end of stream: a client must not
  // take the silence for the service's end), unless close() ran.
  ~ReplyFlows();
  ReplyFlows(const ReplyFlows&) = delete;
  ReplyFlows& operator=(const ReplyFlows&) = delete;

  // Pushes one reply tuple to client `client` (an index below the service's client count),
  // opening its flow first if this is the first reply to it in the view. A client that died is
  // its own loss: what is pushed to it is dropped (ok). Errors: as ShuffleSource::push_to, and
  // those of the open (timeout, not_found: the client sent without creating its flow).
  Status push(std::size_t client, const void* tuple, std::size_t bytes) {
    if (flows_[client] == nullptr) [[unlikely]] {
      if (Status s = open(client); !s || flows_[client] == nullptr) return s;  // opened, or the client died
    }
    if (!dirty_[client]) {
      dirty_[client] = 1;
      pushed_.push_back(client);  // capacity: every client, reserved
    }
    return flows_[client]->push_to(0, tuple, bytes);
  }
  // Flushes every flow pushed to since the last flush. On an error, failed() names its client.
  Status flush();
  // The end of the service (every client closed its requests or died): closes the flow of every
  // client that lives, opening those it never answered in this view first (the client waits for
  // the end of its flow). On an error, failed() names its client.
  Status close();
  // The client of the last failed flush or close.
  std::size_t failed() const noexcept { return failed_; }
  // The flow of client `client`, for errors.
  std::string flow(std::size_t client) const;

 private:
  // Opens client `client`'s flow: ok with the flow, or ok without it when the client died.
  Status open(std::size_t client);
  bool client_dead(std::size_t client) const;

  cluster::Node& node_;
  fabric::Worker& worker_;
  const ServiceOptions& o_;
  std::uint64_t view_;
  std::vector<flow::SourceRef> clients_;
  std::vector<std::unique_ptr<flow::ShuffleSource>> flows_;  // null: not opened (or the client died)
  std::vector<char> gone_;     // the client died before its flow was opened
  std::vector<char> dirty_;    // pushed to since the last flush
  std::vector<std::size_t> pushed_;
  std::size_t failed_ = 0;
  bool closed_ = false;
};

}  // namespace dfi::apps::kv::detail
