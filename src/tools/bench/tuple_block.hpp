// The tuples a bandwidth scenario streams: a 64 KiB block of pre-built tuples that a sender
// cycles through, tuple j carrying the 8-byte key j (native byte order) and a payload of the
// byte j & 0xff. DFI's shuffle sources and the hand-written stream baselines (stream_baseline.hpp)
// send the same tuples, so a receiver's key sum checks both the same way.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace dfi::tools::bench {

inline constexpr std::size_t kTupleBlockBytes = 64 * 1024;

// Tuples in one block of `tuple_bytes`-byte tuples (at least 1).
inline std::size_t block_tuples(std::size_t tuple_bytes) {
  return std::max<std::size_t>(1, kTupleBlockBytes / tuple_bytes);
}

// Fills `block` (block_tuples(tuple_bytes) * tuple_bytes bytes; tuple_bytes >= 8) with the tuples.
inline void fill_tuple_block(std::span<std::byte> block, std::size_t tuple_bytes) {
  const std::size_t count = block.size() / tuple_bytes;
  for (std::size_t j = 0; j < count; ++j) {
    const std::uint64_t key = j;
    std::byte* tuple = block.data() + j * tuple_bytes;
    std::memcpy(tuple, &key, sizeof key);
    std::memset(tuple + sizeof key, static_cast<int>(j & 0xff), tuple_bytes - sizeof key);
  }
}

// Sum of the keys of the first `tuples` tuples a sender cycling through a block of `block` tuples
// sends (tuple i carries key i % block).
inline std::uint64_t expected_key_sum(std::uint64_t tuples, std::uint64_t block) {
  const std::uint64_t laps = tuples / block;
  const std::uint64_t rest = tuples % block;
  return laps * (block * (block - 1) / 2) + (rest == 0 ? 0 : rest * (rest - 1) / 2);
}

}  // namespace dfi::tools::bench
