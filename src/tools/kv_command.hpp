// `dfi kv bench`: the replicated key-value store (apps/kv) under a YCSB-style load, as every rank
// of a cluster (under dfi cluster run). Rank 0 prints throughput, latency percentiles and whether
// the replicas agree; --history DIR records every client's history for tests/porcupine/kvcheck.
//
//   dfi cluster run --nodes 6 --transport shm -- dfi kv bench --protocol paxos --replicas 3 --threads 2
#pragma once

#include <iosfwd>

#include "dfi/apps/kv/bench.hpp"

namespace dfi::tools {

// Joins the cluster, runs apps::kv::run_bench with `options`, leaves. Returns its exit status.
int run_kv_bench(const apps::kv::BenchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dfi::tools
