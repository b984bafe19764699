#include "txn.hpp"

#include "dfi/cluster/node.hpp"

namespace dfi::tools {

int run_txn(const apps::rsi::BankOptions& options, std::ostream& out, std::ostream& err) {
  cluster::Node node;
  return apps::rsi::run_bank(node, options, out, err);
}

}  // namespace dfi::tools
