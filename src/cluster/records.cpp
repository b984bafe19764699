#include "dfi/cluster/records.hpp"

#include <algorithm>
#include <chrono>

#include "dfi/cluster/node.hpp"
#include "dfi/common/config.hpp"
#include "dfi/registry/client.hpp"

namespace dfi::cluster {

void fail_call(const Status& status, const char* kind, const std::string& name, int rank,
               const char* action, const std::string& flow) {
  throw Error(status.code(), std::string(kind) + " '" + name + "' (rank " + std::to_string(rank) + "): " +
                                 action + " flow '" + flow + "': " + status.message());
}

std::vector<std::string> exchange_records(cluster::Node& node, const std::string& prefix, int ranks,
                                          const std::string& mine) {
  node.registry().publish(prefix + std::to_string(node.rank()), mine);
  const auto limit = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(config::get_int("registry_timeout_ms"));
  std::vector<std::string> records;
  records.reserve(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const std::string name = prefix + std::to_string(r);
    // Short waits, so that a rank that died is named at once instead of timing out.
    for (;;) {
      try {
        records.push_back(node.wait_for(name, std::chrono::milliseconds(100)));
        break;
      } catch (const Error& e) {
        if (e.code() != Errc::timeout) throw;
        const std::vector<int> failed = node.failed_ranks();
        if (std::find(failed.begin(), failed.end(), r) != failed.end()) {
          throw Error(Errc::peer_failed, "rank " + std::to_string(r) + " died before it reported '" + name + "'");
        }
        if (std::chrono::steady_clock::now() > limit) {
          throw Error(Errc::timeout, "rank " + std::to_string(r) + " did not report '" + name + "'");
        }
      }
    }
  }
  return records;
}

}  // namespace dfi::cluster
