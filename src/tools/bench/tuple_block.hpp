// The tuples a bandwidth scenario streams: a 64 KiB block of pre-built tuples that a sender
// cycles through, tuple j carrying the 8-byte key j (native byte order) and a payload of the
// byte j & 0xff. DFI's shuffle sources and the hand-written stream baselines (stream_baseline.hpp)
// send the same tuples, so a receiver's key sum checks both the same way.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "dfi/common/error.hpp"
#include "dfi/flow/schema.hpp"
#include "dfi/kernels/hash.hpp"

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

// What a receiver of a key-hash partitioning over `targets` targets checks (its routed sum: per
// target, the sum of its keys times target index + 1, summed): the same for the first `tuples`
// tuples a sender cycling through a block of `block` tuples sends, every tuple at the target
// kernels::route gives its key. Equals expected_key_sum for one target.
inline std::uint64_t expected_routed_sum(std::uint64_t tuples, std::uint64_t block, std::size_t targets) {
  const std::uint64_t laps = tuples / block;
  const std::uint64_t rest = tuples % block;
  std::uint64_t sum = 0;
  for (std::uint64_t key = 0; key < block; ++key) {
    const std::uint64_t times = laps + (key < rest ? 1 : 0);
    sum += times * key * (kernels::route(key, targets) + 1);
  }
  return sum;
}

// The flow schema of these tuples: the 8-byte key, then tuple_bytes - 8 bytes of payload
// (tuple_bytes >= 16).
inline flow::Schema tuple_block_schema(std::size_t tuple_bytes) {
  return flow::Schema({{"key", flow::Type::uint64, 1},
                       {"payload", flow::Type::chars, static_cast<std::uint32_t>(tuple_bytes - 8)}});
}

// Sum (mod 2^64) of the keys of the `count` tuples of `tuple_bytes` at `data`: what a receiver
// checks against expected_key_sum().
inline std::uint64_t sum_tuple_keys(const std::byte* data, std::size_t count, std::size_t tuple_bytes) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < count; ++i, data += tuple_bytes) {
    std::uint64_t key;
    std::memcpy(&key, data, sizeof key);
    sum += key;
  }
  return sum;
}

// Pushes the tuples of `block` (a filled tuple block) round and round into `out` (anything with
// Status push(const void*, std::size_t)) until `duration` has passed, writing key `tag | n` into
// tuple n first: producers of one flow tag their keys apart (tag = producer << some bits), and a
// receiver can check every producer's numbers. The clock is read every 256 tuples. Returns the
// tuples pushed; throws dfi::Error for a push that fails.
template <class Out>
std::uint64_t push_tagged_for(Out& out, std::span<std::byte> block, std::size_t tuple_bytes, std::uint64_t tag,
                              std::chrono::steady_clock::duration duration) {
  const auto end = std::chrono::steady_clock::now() + duration;
  std::byte* tuple = block.data();
  std::byte* const last = block.data() + block.size() / tuple_bytes * tuple_bytes;
  std::uint64_t n = 0;
  for (bool running = true; running; running = std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 256; ++i, ++n) {
      const std::uint64_t key = tag | n;
      std::memcpy(tuple, &key, sizeof key);
      if (Status s = out.push(tuple, tuple_bytes); !s) [[unlikely]]
        throw Error(s.code(), s.message());
      tuple += tuple_bytes;
      if (tuple == last) tuple = block.data();
    }
  }
  return n;
}

}  // namespace dfi::tools::bench
