#include "dfi/cluster/records.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "dfi/cluster/node.hpp"
#include "dfi/common/config.hpp"
#include "dfi/fabric/context.hpp"
#include "dfi/registry/client.hpp"

namespace dfi::cluster {

void fail_call(const Status& status, const char* kind, const std::string& name, int rank,
               const char* action, const std::string& flow) {
  throw Error(status.code(), std::string(kind) + " '" + name + "' (rank " + std::to_string(rank) + "): " +
                                 action + " flow '" + flow + "': " + status.message());
}

namespace {

// The record of every rank 0 .. ranks-1 under `prefix`, in one held registry request of up to
// `timeout`; a rank that died before it published gives nullopt when `dead_ok`, else peer_failed.
std::vector<std::optional<std::string>> gather(Node& node, const std::string& prefix, int ranks,
                                               std::chrono::milliseconds timeout, bool dead_ok) {
  std::vector<std::string> names;
  std::vector<int> publishers;
  for (int r = 0; r < ranks; ++r) {
    names.push_back(prefix + std::to_string(r));
    publishers.push_back(r);
  }
  return node.wait_all(names, publishers, timeout, dead_ok);
}

}  // namespace

std::vector<std::string> exchange_records(Node& node, const std::string& prefix, int ranks, const std::string& mine) {
  node.registry().publish(prefix + std::to_string(node.rank()), mine);
  std::vector<std::string> records;
  for (std::optional<std::string>& record :
       gather(node, prefix, ranks, std::chrono::milliseconds(config::get_int("registry_timeout_ms")), false)) {
    records.push_back(std::move(*record));
  }
  return records;
}

std::vector<std::optional<std::string>> survivors_records(Node& node, const std::string& prefix, int ranks,
                                                          std::chrono::milliseconds timeout) {
  return gather(node, prefix, ranks, timeout, true);
}

}  // namespace dfi::cluster
