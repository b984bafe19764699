// `dfi commtier`: 002's throughput or consuming test between a storage unit (SU) and a compute
// unit (CU) rank of a cluster, through a commtier tier (apps/commtier) or, for comparison, DFI
// shuffle flows, as every rank of it (under dfi cluster run). The SU prints a line per transfer
// size while it runs and a table at the end; --json prints the result as one JSON line too.
//
//   dfi cluster run --nodes 2 -- dfi commtier --test consuming --buffers 4 --buffer-bytes 256KiB
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

#include "dfi/apps/commtier/test.hpp"

namespace dfi::tools {

// "64", "8KiB", "1MiB", "1GiB" (also KB/MB/GB as powers of 2, K/M/G): bytes. Throws
// dfi::Error(invalid_argument) naming the text.
std::uint64_t parse_bytes(std::string_view text);

// Joins the cluster, runs apps::commtier::run_test, prints the SU's results, leaves. Returns 0, or
// 1 with the error on `err`.
int run_commtier(const apps::commtier::TestOptions& options, bool json, std::ostream& out, std::ostream& err);

}  // namespace dfi::tools
