// `dfi txn`: the bank-transfer workload (apps/rsi) on a cluster, with RSI or the 2PC baseline, as
// every rank of it (under dfi cluster run). Rank 0 prints progress once a second and the summary:
// commits/s, aborts/s, whether the bank's total held and no record stayed locked.
//
//   dfi cluster run --nodes 6 --transport shm -- dfi txn --protocol rsi --servers 2 --threads 2
#pragma once

#include <iosfwd>

#include "dfi/apps/rsi/bank.hpp"

namespace dfi::tools {

// Joins the cluster, runs apps::rsi::run_bank with `options`, leaves. Returns its exit status (0:
// the run completed and the invariant held).
int run_txn(const apps::rsi::BankOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dfi::tools
