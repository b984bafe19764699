// `dfi demo`: the quick-start demo. Every rank runs source and target threads of one N:M shuffle
// flow, pushes its share of a generated table, checks that every tuple arrived exactly once
// (counts and checksums across the cluster), and prints tuples/s and GB/s per rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>

namespace dfi::tools {

struct DemoOptions {
  int sources_per_rank = 2;
  int targets_per_rank = 1;
  std::uint64_t tuples_per_source = 5'000'000;
  std::size_t tuple_bytes = 16;  // key + value, padded with payload up to this width (>= 16)
};

// Runs as one rank of a cluster. Returns 0 when the cluster-wide verification passed.
int run_demo(const DemoOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dfi::tools
