#include "kv_command.hpp"

#include "dfi/cluster/node.hpp"

namespace dfi::tools {

int run_kv_bench(const apps::kv::BenchOptions& options, std::ostream& out, std::ostream& err) {
  cluster::Node node;
  const int status = apps::kv::run_bench(node, options, out, err);
  // Only a run whose ranks all reported waits for the others; a failed rank leaves at once.
  if (status == 0) node.finish();
  return status;
}

}  // namespace dfi::tools
