#include "replies.hpp"

#include <string>

#include "dfi/cluster/node.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/fabric/worker.hpp"
#include "names.hpp"

namespace dfi::apps::kv::detail {

ReplyFlows::ReplyFlows(cluster::Node& node, fabric::Worker& worker, const ServiceOptions& options, std::uint64_t view)
    : node_(node),
      worker_(worker),
      o_(options),
      view_(view),
      clients_(client_threads(options, node.size())),
      flows_(clients_.size()),
      gone_(clients_.size(), 0),
      dirty_(clients_.size(), 0) {
  pushed_.reserve(clients_.size());
}

ReplyFlows::~ReplyFlows() {
  if (closed_) return;
  for (auto& f : flows_) {
    if (f) f->abandon();
  }
}

std::string ReplyFlows::flow(std::size_t client) const { return Names(o_.name, view_).replies_to(client); }

bool ReplyFlows::client_dead(std::size_t client) const {
  return !node_.fabric().peer_failure(clients_[client].rank).empty();
}

Status ReplyFlows::open(std::size_t client) {
  if (gone_[client]) return {};
  try {
    flow::SourceOptions options;
    options.expected_schema = reply_schema(o_.value_bytes);
    options.open_timeout = o_.timeout;
    flows_[client] = std::make_unique<flow::ShuffleSource>(node_, worker_, flow(client), 0, options);
    // A client that dies later is its own loss too: its replies are dropped.
    flows_[client]->drop_for_dead_targets();
    return {};
  } catch (const Error& e) {
    // The client died after it sent (its rank is declared dead, or the open found it gone).
    if (e.code() == Errc::peer_failed || client_dead(client)) {
      gone_[client] = 1;
      return {};
    }
    return Status(e.code(), e.what());
  }
}

Status ReplyFlows::flush() {
  Status first;
  for (std::size_t c : pushed_) {
    dirty_[c] = 0;
    if (Status s = flows_[c]->flush(); !s && first) {
      first = std::move(s);
      failed_ = c;
    }
  }
  pushed_.clear();
  return first;
}

Status ReplyFlows::close() {
  for (std::size_t c = 0; c < flows_.size(); ++c) {
    // A client that never sent in this view but lives closed its requests here (its stream
    // ended): it created its flow and waits for the end of it.
    if (flows_[c] == nullptr && !gone_[c] && !client_dead(c)) {
      if (Status s = open(c); !s) {
        failed_ = c;
        return s;
      }
    }
    if (flows_[c] == nullptr) continue;
    if (Status s = flows_[c]->close(); !s) {
      failed_ = c;
      return s;
    }
  }
  closed_ = true;
  pushed_.clear();
  return {};
}

}  // namespace dfi::apps::kv::detail
