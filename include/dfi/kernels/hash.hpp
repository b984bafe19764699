// dfi::kernels — CPU-only building blocks shared by flows and operators (../shared/DESIGN.md §2).
// hash.hpp: the key hash that routes tuples, in one place for flows, operators and the
// benchmarks' hand-written baselines (which must route exactly as a key-hash flow does), and the
// tuple folds of the join checksum (which the MPI join baseline computes the same way).
// Standard headers only, so that the benchmarks' MPI programs can include it.
//
//   std::size_t target = dfi::kernels::route(key, targets);   // 0 .. targets-1
//
//   const kernels::RouteRows route_rows = kernels::route_rows_kernel();   // once, at set-up
//   route_rows(rows, 16, 0, 256, targets, out);   // out[i] = route(key of row i, targets)
//
// All functions are pure and thread-safe; all but the route_rows kernels (src/kernels/
// route_rows.cpp, library dfi_kernels) are inline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dfi::kernels {

// The murmur3 64-bit finaliser: spreads sequential keys over all 64 bits.
constexpr std::uint64_t mix64(std::uint64_t key) noexcept {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdull;
  key ^= key >> 33;
  key *= 0xc4ceb9fe1a85ec53ull;
  key ^= key >> 33;
  return key;
}

// Maps a well-spread 64-bit value onto 0 .. n-1 without a division (Lemire's multiply-shift
// reduction; fair because the value is spread over all 64 bits).
constexpr std::size_t reduce(std::uint64_t spread, std::size_t n) noexcept {
  __extension__ using Wide = unsigned __int128;  // GCC/Clang; __extension__: no -Wpedantic note
  return static_cast<std::size_t>((static_cast<Wide>(spread) * n) >> 64);
}

// The target of a tuple whose key is `key` among `n` targets (n >= 1).
constexpr std::size_t route(std::uint64_t key, std::size_t n) noexcept { return reduce(mix64(key), n); }

// The targets of a chunk of rows, the first pass of a partitioned push_batch and of the
// benchmarks' hand-written partitioner: out[i] = route(key word of row i, targets) for `count`
// rows of `width` bytes at `rows`, whose 8-byte key starts `key_offset` bytes into each row
// (targets 1 .. 2^32-1). Exactly the targets route() gives, in a loop with no dependence between
// rows. Reads the rows' key bytes only, except that rows of 8 and 16 bytes are read whole.
using RouteRows = void (*)(const std::byte* rows, std::size_t width, std::size_t key_offset, std::size_t count,
                           std::size_t targets, std::uint32_t* out);
// The portable RouteRows: one row after the other (the multiplies of successive rows overlap).
void route_rows_scalar(const std::byte* rows, std::size_t width, std::size_t key_offset, std::size_t count,
                       std::size_t targets, std::uint32_t* out) noexcept;
// The fastest RouteRows this CPU runs: eight keys at a time with AVX-512 (F and DQ: 64-bit
// multiplies) where the CPU has it, else route_rows_scalar. Decided once per process; call it at
// set-up and keep the pointer.
RouteRows route_rows_kernel() noexcept;
// Whether this CPU runs AVX-512 F and DQ (route_rows_kernel's wide form). Code that copies whole
// 64-byte write-combine lines compiles a second form of its loop for
// [[gnu::target("avx512f")]] (a line is one store there, four on baseline x86-64) and picks it
// with this at set-up. Decided once per process.
bool avx512_available() noexcept;

// FNV-1a over `bytes` bytes: folds a key wider than 8 bytes into one word before route().
inline std::uint64_t fold_bytes(const std::byte* data, std::size_t bytes) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < bytes; ++i) {
    h ^= static_cast<std::uint64_t>(data[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

// The routing word of a key column of `bytes` bytes at `key`: the key itself when it is at most
// 8 bytes (an 8-byte key is one load, not a copy of a run-time length), else its FNV-1a fold.
inline std::uint64_t load_key(const std::byte* key, std::size_t bytes) noexcept {
  std::uint64_t word = 0;
  if (bytes == 8) [[likely]] {
    std::memcpy(&word, key, 8);
  } else if (bytes < 8) {
    std::memcpy(&word, key, bytes);
  } else {
    word = fold_bytes(key, bytes);
  }
  return word;
}

// RouteRows for a key column of any width `key_bytes`: `route_rows` (route_rows_kernel(), kept
// by the caller) for 8-byte keys, else one row at a time through load_key. The one place a
// chunk of rows is routed by key (partitioned push_batch, the RRJ join's partitioning).
inline void route_keys(RouteRows route_rows, const std::byte* rows, std::size_t width, std::size_t key_offset,
                       std::size_t key_bytes, std::size_t count, std::size_t targets, std::uint32_t* out) noexcept {
  if (key_bytes == 8) return route_rows(rows, width, key_offset, count, targets, out);
  const std::byte* key = rows + key_offset;
  for (std::size_t i = 0; i < count; ++i, key += width) {
    out[i] = static_cast<std::uint32_t>(route(load_key(key, key_bytes), targets));
  }
}

// The 64-bit fold of a whole tuple (its bytes read as little-endian words, a short tail
// zero-extended), chained through mix64: the per-tuple half of the join checksum.
inline std::uint64_t fold_tuple(const std::byte* tuple, std::size_t bytes) noexcept {
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ bytes;
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t word;
    std::memcpy(&word, tuple + i, 8);
    h = mix64(h ^ word);
  }
  if (i < bytes) {
    std::uint64_t word = 0;
    std::memcpy(&word, tuple + i, bytes - i);
    h = mix64(h ^ word);
  }
  return h;
}

// The checksum of one joined pair from the folds of its build and probe tuples. A join's
// checksum is the sum (mod 2^64) over its pairs, so it does not depend on the order in which the
// pairs are found, and swapping which tuple matched which changes it.
constexpr std::uint64_t pair_checksum(std::uint64_t build_fold, std::uint64_t probe_fold) noexcept {
  return mix64(build_fold ^ (probe_fold * 0xc2b2ae3d27d4eb4full));
}

}  // namespace dfi::kernels
