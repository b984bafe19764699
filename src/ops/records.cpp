#include "records.hpp"

#include "dfi/common/error.hpp"

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

}  // namespace dfi::ops::detail
