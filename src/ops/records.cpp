#include "records.hpp"

#include <algorithm>
#include <chrono>

#include "dfi/cluster/node.hpp"
#include "dfi/common/config.hpp"
#include "dfi/common/error.hpp"
#include "dfi/registry/client.hpp"

namespace dfi::ops::detail {

void check_common(const char* kind, const std::string& name, int threads, int ranks, int cluster_size) {
  auto bad = [&](const std::string& what) {
    return Error(Errc::invalid_argument, std::string(kind) + " '" + name + "': " + what);
  };
  if (name.empty() || name.find('/') != std::string::npos || name.find('.') != std::string::npos) {
    throw bad("the name must be non-empty and contain no '/' or '.'");
  }
  if (threads < 1) throw bad("threads must be at least 1 (got " + std::to_string(threads) + ")");
  if (ranks < 0 || ranks > cluster_size) {
    throw bad("ranks " + std::to_string(ranks) + " outside a cluster of " + std::to_string(cluster_size));
  }
}

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

}  // namespace dfi::ops::detail
