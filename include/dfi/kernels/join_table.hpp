// dfi::kernels::JoinTable — the build side of an equi-join: tuples grouped by the hash of their
// key, probed one key at a time (../shared/DESIGN.md §2; used by ops/join).
//
//   kernels::JoinTable table({.tuple_bytes = 16, .key_offset = 0, .key_bytes = 8});
//   table.add(batch.data, batch.count);          // as build tuples arrive (copied)
//   table.build();                               // once, after the last add
//   table.probe(probe_tuple + key_offset, [&](const std::byte* build_tuple, std::uint64_t fold) {...});
//
// Layout (the bucket-sorted array of Balkesen et al.'s radix join, "bucket chaining" without
// pointers): build() sorts the tuples by the low bits of their key hash with one histogram pass and
// one scatter pass, so bucket b is the contiguous range [offsets[b], offsets[b+1]) of a tuple
// array and of a parallel array of key words. There are as many buckets as the next power of two
// at or above the tuple count (a bucket holds one tuple on average), and duplicate keys simply
// share a bucket. A probe hashes the key, reads two offsets and compares key words; it touches a
// build tuple only when its key word matches. The low hash bits are independent of the high bits
// that kernels::route uses, so a flow target's partition still spreads over all buckets.
//
// Keys: a key column of at most 8 bytes is compared as one zero-extended word; a wider key
// (chars[n] with n > 8) by its FNV-1a fold first and then byte for byte. Both sides of a join must
// use a key column of the same type and width (ops/join checks).
//
// Owned by one thread while it adds and builds; after build(), probe() may be called from any
// number of threads at once (it only reads).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "dfi/common/error.hpp"
#include "dfi/kernels/hash.hpp"

namespace dfi::kernels {

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

class JoinTable {
 public:
  struct Layout {
    std::size_t tuple_bytes = 0;
    std::size_t key_offset = 0;
    std::size_t key_bytes = 0;
  };

  // Throws dfi::Error(invalid_argument) when the key does not lie inside the tuple.
  explicit JoinTable(Layout layout) : layout_(layout) {
    if (layout.tuple_bytes == 0 || layout.key_bytes == 0 ||
        layout.key_offset + layout.key_bytes > layout.tuple_bytes) {
      throw Error(Errc::invalid_argument,
                  "join table: key of " + std::to_string(layout.key_bytes) + " B at offset " +
                      std::to_string(layout.key_offset) + " does not fit a tuple of " +
                      std::to_string(layout.tuple_bytes) + " B");
    }
  }

  // Room for `tuples` build tuples without growing (a size hint; add() grows past it).
  void reserve(std::size_t tuples) { staged_.reserve(tuples * layout_.tuple_bytes); }

  // Copies `count` build tuples (contiguous, tuple_bytes each). Only before build().
  void add(const std::byte* tuples, std::size_t count) {
    staged_.insert(staged_.end(), tuples, tuples + count * layout_.tuple_bytes);
  }

  // Groups the added tuples by bucket. Throws dfi::Error(invalid_argument) past 2^32 - 1 tuples
  // (offsets are 32-bit: a flow target's partition, not a whole relation).
  void build() {
    const std::size_t width = layout_.tuple_bytes;
    const std::size_t n = staged_.size() / width;
    if (n > std::numeric_limits<std::uint32_t>::max()) {
      throw Error(Errc::invalid_argument, "join table: " + std::to_string(n) +
                                              " build tuples in one table (at most 2^32 - 1)");
    }
    const std::size_t buckets = std::bit_ceil(std::max<std::size_t>(n, 1));
    mask_ = buckets - 1;
    offsets_.assign(buckets + 1, 0);
    std::vector<std::uint64_t> words(n);
    for (std::size_t i = 0; i < n; ++i) {
      words[i] = load_key(staged_.data() + i * width + layout_.key_offset, layout_.key_bytes);
      ++offsets_[bucket(words[i]) + 1];
    }
    for (std::size_t b = 0; b < buckets; ++b) offsets_[b + 1] += offsets_[b];
    // Scatter: `next` is each bucket's fill position, starting at its offset.
    std::vector<std::uint32_t> next(offsets_.begin(), offsets_.end() - 1);
    tuples_.resize(n * width);
    keys_.resize(n);
    folds_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t at = next[bucket(words[i])]++;
      const std::byte* tuple = staged_.data() + i * width;
      std::memcpy(tuples_.data() + std::size_t{at} * width, tuple, width);
      keys_[at] = words[i];
      folds_[at] = fold_tuple(tuple, width);
    }
    staged_.clear();
    staged_.shrink_to_fit();
    built_ = true;
  }

  // Calls on_match(build_tuple, build_fold) for every build tuple whose key equals the key at
  // `key` (key_bytes bytes, the probe tuple's key column); returns how many matched. Only after
  // build().
  template <class OnMatch>
  std::size_t probe(const std::byte* key, OnMatch&& on_match) const {
    const std::uint64_t word = load_key(key, layout_.key_bytes);
    const std::size_t b = bucket(word);
    const std::size_t end = offsets_[b + 1];
    std::size_t matches = 0;
    for (std::size_t i = offsets_[b]; i < end; ++i) {
      if (keys_[i] != word) continue;
      const std::byte* tuple = tuples_.data() + i * layout_.tuple_bytes;
      if (layout_.key_bytes > 8 &&
          std::memcmp(tuple + layout_.key_offset, key, layout_.key_bytes) != 0) {
        continue;  // a fold collision of two wide keys
      }
      on_match(tuple, folds_[i]);
      ++matches;
    }
    return matches;
  }

  bool built() const noexcept { return built_; }
  // Build tuples added (before build()) or held (after).
  std::size_t size() const noexcept {
    return (built_ ? tuples_.size() : staged_.size()) / layout_.tuple_bytes;
  }
  const Layout& layout() const noexcept { return layout_; }
  std::size_t memory_bytes() const noexcept {
    return staged_.capacity() + tuples_.capacity() + keys_.capacity() * 8 + folds_.capacity() * 8 +
           offsets_.capacity() * 4;
  }

 private:
  std::size_t bucket(std::uint64_t word) const noexcept { return mix64(word) & mask_; }

  Layout layout_;
  std::vector<std::byte> staged_;        // added tuples in arrival order, until build()
  std::vector<std::byte> tuples_;        // bucket-sorted tuples
  std::vector<std::uint64_t> keys_;      // their key words
  std::vector<std::uint64_t> folds_;     // their fold_tuple, for the checksum
  std::vector<std::uint32_t> offsets_;   // bucket b: [offsets_[b], offsets_[b + 1])
  std::size_t mask_ = 0;
  bool built_ = false;
};

}  // namespace dfi::kernels
