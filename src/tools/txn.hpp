// `dfi txn`: a transactional workload (apps/rsi: bank transfers or checkouts) on a cluster, with RSI
// or the 2PC baseline, as every rank of it (under dfi cluster run). Rank 0 prints progress once a
// second and the summary: commits/s, aborts/s, whether the workload's checks held and no record
// stayed locked.
//
//   dfi cluster run --nodes 6 --transport shm -- dfi txn --protocol rsi --servers 2 --threads 2
#pragma once

#include <iosfwd>

#include "dfi/apps/rsi/workload.hpp"

namespace dfi::tools {

// Joins the cluster, runs apps::rsi::run_workload with `options`, leaves. Returns its exit status
// (0: the run completed and every check held).
int run_txn(const apps::rsi::TxnOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dfi::tools
