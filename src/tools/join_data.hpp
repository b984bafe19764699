// The generated input of `dfi join`, the join bench scenarios and the MPI radix join baseline
// (bench/mpi/mpi_radix_join.cpp includes this file): the same bytes on every side, so their
// results must have the same matches and checksum.
//
// A relation is cut into `slices` slices (a DFI join: ranks x threads, slice = rank * threads +
// thread; MPI: one slice per process); slice s holds the global tuples
// [total * s / slices, total * (s + 1) / slices). Tuple g: key (uint64), payload g (uint64), then
// zero padding up to tuple_bytes. Build keys: g / duplicates + 1, so each key occurs `duplicates`
// times. Probe keys: uniform over 1 .. domain, domain = distinct build keys / selectivity, from a
// std::mt19937_64 seeded per slice, so a probe tuple has partners with probability
// `selectivity`. Standard headers and dfi/kernels/hash.hpp only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "dfi/kernels/hash.hpp"

namespace dfi::tools {

struct JoinDataShape {
  std::uint64_t build_tuples = 0;
  std::uint64_t probe_tuples = 0;
  std::size_t tuple_bytes = 16;  // >= 16, multiple of 8
  double selectivity = 1.0;      // (0, 1]
  std::uint64_t duplicates = 1;  // >= 1
  std::uint64_t seed = 1;
};

class JoinData {
 public:
  explicit JoinData(const JoinDataShape& shape) : shape_(shape) {
    const std::uint64_t distinct = (shape.build_tuples + shape.duplicates - 1) / shape.duplicates;
    domain_ = std::max<std::uint64_t>(
        1, static_cast<std::uint64_t>(std::llround(static_cast<double>(distinct) / shape.selectivity)));
  }

  // Slice `slice` of `slices` of the build relation.
  std::vector<std::byte> build(std::uint64_t slice, std::uint64_t slices) const {
    auto [first, last] = range(shape_.build_tuples, slice, slices);
    std::vector<std::byte> out((last - first) * shape_.tuple_bytes);
    for (std::uint64_t g = first; g < last; ++g) {
      write(out.data() + (g - first) * shape_.tuple_bytes, g / shape_.duplicates + 1, g);
    }
    return out;
  }

  // Slice `slice` of `slices` of the probe relation (its own random stream per slice).
  std::vector<std::byte> probe(std::uint64_t slice, std::uint64_t slices) const {
    auto [first, last] = range(shape_.probe_tuples, slice, slices);
    std::vector<std::byte> out((last - first) * shape_.tuple_bytes);
    std::mt19937_64 random(kernels::mix64(shape_.seed * 0x9e3779b97f4a7c15ull + slice + 1));
    std::uniform_int_distribution<std::uint64_t> keys(1, domain_);
    for (std::uint64_t g = first; g < last; ++g) {
      write(out.data() + (g - first) * shape_.tuple_bytes, keys(random), g);
    }
    return out;
  }

  // The whole probe relation as `slices` slices make it, slice after slice.
  std::vector<std::byte> probe_all(std::uint64_t slices) const {
    std::vector<std::byte> out;
    out.reserve(shape_.probe_tuples * shape_.tuple_bytes);
    for (std::uint64_t s = 0; s < slices; ++s) {
      std::vector<std::byte> slice = probe(s, slices);
      out.insert(out.end(), slice.begin(), slice.end());
    }
    return out;
  }

 private:
  static std::pair<std::uint64_t, std::uint64_t> range(std::uint64_t total, std::uint64_t slice,
                                                       std::uint64_t slices) {
    __extension__ using Wide = unsigned __int128;  // total * slice may exceed 64 bits
    auto at = [&](std::uint64_t s) {
      return static_cast<std::uint64_t>((static_cast<Wide>(total) * s) / slices);
    };
    return {at(slice), at(slice + 1)};
  }
  void write(std::byte* tuple, std::uint64_t key, std::uint64_t payload) const {
    std::memcpy(tuple, &key, 8);
    std::memcpy(tuple + 8, &payload, 8);
  }

  JoinDataShape shape_;
  std::uint64_t domain_ = 1;
};

}  // namespace dfi::tools
