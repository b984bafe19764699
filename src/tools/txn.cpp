#include "txn.hpp"

#include "dfi/cluster/node.hpp"

namespace dfi::tools {

int run_txn(const apps::rsi::TxnOptions& options, std::ostream& out, std::ostream& err) {
  cluster::Node node;
  return apps::rsi::run_workload(node, options, out, err).code;
}

}  // namespace dfi::tools
