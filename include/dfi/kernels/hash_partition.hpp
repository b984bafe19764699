// dfi::kernels::hash_partition — cuts a run of tuples into partitions by key hash, each partition
// contiguous (the local partitioning pass of a grace hash join, 001 §5).
//
//   std::vector<std::byte> out(count * layout.tuple_bytes);
//   auto offsets = kernels::hash_partition(tuples, count, layout, 64, out.data());
//   // partition p: tuples offsets[p] .. offsets[p+1]-1 of out
//
// Two passes (histogram, then scatter into exact places), no reallocation. The partition of a
// key uses bits 32.. of mix64(key word): independent of the high bits kernels::route uses to
// pick a flow target and of the low bits a kernels::JoinTable uses to pick a bucket, so a
// target's tuples spread over all partitions and a partition's over all buckets.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dfi/common/error.hpp"
#include "dfi/kernels/hash.hpp"
#include "dfi/kernels/join_table.hpp"

namespace dfi::kernels {

// The partition (0 .. partitions-1; partitions a power of two) of key word `word`.
constexpr std::size_t partition_of(std::uint64_t word, std::size_t partitions) noexcept {
  return static_cast<std::size_t>(mix64(word) >> 32) & (partitions - 1);
}

// Copies the `count` tuples at `tuples` (layout.tuple_bytes each, key as in `layout`) to `out`
// (room for count tuples, not overlapping), grouped by partition_of their key word; returns the
// partitions' first tuple indices and, last, count (partitions + 1 entries). Within a partition
// the tuples keep their order. Throws dfi::Error(invalid_argument) unless partitions is a power
// of two no larger than 2^32.
inline std::vector<std::size_t> hash_partition(const std::byte* tuples, std::size_t count,
                                               const JoinTable::Layout& layout, std::size_t partitions,
                                               std::byte* out) {
  if (partitions == 0 || (partitions & (partitions - 1)) != 0 || partitions > (std::size_t{1} << 32)) {
    throw Error(Errc::invalid_argument, "hash partition: " + std::to_string(partitions) +
                                            " partitions (a power of two up to 2^32)");
  }
  const std::size_t width = layout.tuple_bytes;
  std::vector<std::uint32_t> part(count);
  std::vector<std::size_t> offsets(partitions + 1, 0);
  for (std::size_t i = 0; i < count; ++i) {
    part[i] = static_cast<std::uint32_t>(
        partition_of(load_key(tuples + i * width + layout.key_offset, layout.key_bytes), partitions));
    ++offsets[part[i] + 1];
  }
  for (std::size_t p = 0; p < partitions; ++p) offsets[p + 1] += offsets[p];
  std::vector<std::size_t> next(offsets.begin(), offsets.end() - 1);
  for (std::size_t i = 0; i < count; ++i) {
    std::memcpy(out + next[part[i]]++ * width, tuples + i * width, width);
  }
  return offsets;
}

}  // namespace dfi::kernels
