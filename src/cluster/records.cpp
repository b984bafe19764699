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

// The record of every rank 0 .. ranks-1 under `prefix`, waiting up to `timeout` in all; a rank that
// died before it published gives nullopt when `dead_ok`, else peer_failed.
std::vector<std::optional<std::string>> gather(Node& node, const std::string& prefix, int ranks,
                                               std::chrono::milliseconds timeout, bool dead_ok) {
  const auto limit = std::chrono::steady_clock::now() + timeout;
  std::vector<std::optional<std::string>> records;
  records.reserve(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const std::string name = prefix + std::to_string(r);
    // Short waits, so that a rank that died is noticed at once instead of timing out.
    for (;;) {
      try {
        records.emplace_back(node.wait_for(name, std::chrono::milliseconds(100)));
        break;
      } catch (const Error& e) {
        if (e.code() != Errc::timeout) throw;
        if (!node.fabric().peer_failure(r).empty()) {
          // It may have published just before it died: the record decides, not the order in
          // which the news arrived.
          if (std::optional<std::string> late = node.registry().try_lookup(name)) {
            records.emplace_back(std::move(late));
            break;
          }
          if (!dead_ok) {
            throw Error(Errc::peer_failed, "rank " + std::to_string(r) + " died before it reported '" + name + "'");
          }
          records.emplace_back(std::nullopt);
          break;
        }
        if (std::chrono::steady_clock::now() > limit) {
          throw Error(Errc::timeout, "rank " + std::to_string(r) + " did not report '" + name + "'");
        }
      }
    }
  }
  return records;
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
