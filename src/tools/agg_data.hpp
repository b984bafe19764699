// The generated input of `dfi agg` and the agg bench scenario: tuples {key uint64, value int64}.
//
// A relation of `tuples` tuples is cut into `slices` slices (rank * threads + thread); slice s
// holds the global tuples [tuples * s / slices, tuples * (s + 1) / slices). Tuple g's key is
// drawn from a std::mt19937_64 seeded per slice: uniform over 0 .. groups-1, or Zipf-distributed
// with exponent `zipf` (> 0) over the same range (key 0 the most frequent; kernels::ZipfSampler).
// Its value is mix64(g) mod 2001 - 1000.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "dfi/kernels/hash.hpp"
#include "dfi/kernels/zipf.hpp"

namespace dfi::tools {

struct AggTuple {
  std::uint64_t key;
  std::int64_t value;
};

using kernels::ZipfSampler;

struct AggDataShape {
  std::uint64_t tuples = 0;
  std::uint64_t groups = 1;  // >= 1
  double zipf = 0;           // 0: uniform keys; > 0: Zipf exponent
  std::uint64_t seed = 1;
};

// Slice `slice` of `slices` of the generated relation.
inline std::vector<AggTuple> agg_slice(const AggDataShape& shape, std::uint64_t slice, std::uint64_t slices) {
  __extension__ using Wide = unsigned __int128;  // tuples * slice may exceed 64 bits
  const auto at = [&](std::uint64_t s) {
    return static_cast<std::uint64_t>((static_cast<Wide>(shape.tuples) * s) / slices);
  };
  const std::uint64_t first = at(slice), last = at(slice + 1);
  std::vector<AggTuple> out(last - first);
  std::mt19937_64 random(kernels::mix64(shape.seed * 0x9e3779b97f4a7c15ull + slice + 1));
  std::uniform_int_distribution<std::uint64_t> uniform(0, shape.groups - 1);
  ZipfSampler zipf(shape.groups, shape.zipf > 0 ? shape.zipf : 1.0);
  for (std::uint64_t g = first; g < last; ++g) {
    const std::uint64_t key = shape.zipf > 0 ? zipf(random) - 1 : uniform(random);
    out[g - first] = {key, static_cast<std::int64_t>(kernels::mix64(g) % 2001) - 1000};
  }
  return out;
}

}  // namespace dfi::tools
