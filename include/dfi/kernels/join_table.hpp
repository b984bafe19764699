// dfi::kernels::JoinTable — the build side of an equi-join: tuples grouped by the hash of their
// key, probed one key at a time (../shared/DESIGN.md §2; used by ops/join).
//
//   kernels::JoinTable table({.tuple_bytes = 16, .key_offset = 0, .key_bytes = 8});
//   table.add(batch.data, batch.count);          // as build tuples arrive (copied)
//   table.build();                               // once, after the last add
//   table.probe(probe_tuple + key_offset, [&](const std::byte* build_tuple, std::uint64_t fold) {...});
//
// Layout (bucket chaining as in Balkesen et al.'s and Barthels et al.'s radix joins, with
// indices instead of pointers): add() copies arriving tuples into fixed-size blocks (no
// reallocation, no copy of what arrived before); the tuples stay there. build() makes one
// sequential pass over them that writes an entry per tuple (key word, tuple fold, next index)
// and links it in front of its bucket's chain (heads[bucket]): one random access per tuple.
// There are as many buckets as the next power of two at or above the tuple count (a chain holds
// one entry on average); duplicate keys share a chain. A probe hashes the key, follows the chain
// and compares key words; it touches a build tuple only when its key word matches.
// probe_batch() does that for a whole batch with group prefetching (Chen et al.): it prefetches
// the heads of a group of keys, then their first entries, then walks the chains, so the cache
// misses of a group overlap instead of following each other. The low hash bits are independent
// of the high bits that kernels::route uses, so a flow target's partition still spreads over all
// buckets. Arrays are allocated without zero-filling where every element is written anyway, and
// the two a probe reads at random (entries, bucket heads) ask for huge pages once they reach 2 MiB
// (large_memory.hpp): fewer page faults while the table is built, fewer TLB misses while it is
// probed. (The tuple blocks are read in order by build(), and by a probe only for a match.)
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
#include <memory>
#include <string>
#include <vector>

#include "dfi/common/error.hpp"
#include "dfi/kernels/hash.hpp"
#include "dfi/kernels/large_memory.hpp"

namespace dfi::kernels {

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
    block_tuples_ = std::bit_floor(std::max<std::size_t>(1, kBlockBytes / layout.tuple_bytes));
    block_shift_ = static_cast<unsigned>(std::countr_zero(block_tuples_));
  }

  // Copies `count` build tuples (contiguous, tuple_bytes each). Only before build(). Allocates
  // one block per kBlockBytes of tuples, never per tuple.
  void add(const std::byte* tuples, std::size_t count) {
    const std::size_t width = layout_.tuple_bytes;
    while (count > 0) {
      if (blocks_.empty() || last_fill_ == block_tuples_) {
        blocks_.emplace_back(new std::byte[block_tuples_ * width]);
        last_fill_ = 0;
      }
      const std::size_t n = std::min(count, block_tuples_ - last_fill_);
      std::memcpy(blocks_.back().get() + last_fill_ * width, tuples, n * width);
      last_fill_ += n;
      staged_ += n;
      tuples += n * width;
      count -= n;
    }
  }

  // Links every added tuple into its bucket's chain. Throws dfi::Error(invalid_argument) past
  // 2^32 - 2 tuples (indices are 32-bit: a flow target's partition, not a whole relation).
  void build() {
    const std::size_t width = layout_.tuple_bytes;
    const std::size_t n = staged_;
    if (n >= std::numeric_limits<std::uint32_t>::max()) {
      throw Error(Errc::invalid_argument, "join table: " + std::to_string(n) +
                                              " build tuples in one table (at most 2^32 - 2)");
    }
    const std::size_t buckets = std::bit_ceil(std::max<std::size_t>(n, 1));
    mask_ = buckets - 1;
    heads_ = make_large_array<std::uint32_t>(buckets);
    std::fill_n(heads_.get(), buckets, kEnd);
    entries_ = make_large_array<Entry>(std::max<std::size_t>(n, 1));
    std::uint32_t index = 0;
    for (std::size_t k = 0; k < blocks_.size(); ++k) {
      const std::size_t fill = k + 1 == blocks_.size() ? last_fill_ : block_tuples_;
      const std::byte* block = blocks_[k].get();
      for (std::size_t i = 0; i < fill; ++i, ++index) {
        const std::byte* tuple = block + i * width;
        const std::uint64_t word = load_key(tuple + layout_.key_offset, layout_.key_bytes);
        std::uint32_t& head = heads_[bucket(word)];
        entries_[index] = {word, fold_tuple(tuple, width), head};
        head = index;
      }
    }
    built_ = true;
  }

  // Calls on_match(build_tuple, build_fold) for every build tuple whose key equals the key at
  // `key` (key_bytes bytes, the probe tuple's key column); returns how many matched. Only after
  // build().
  template <class OnMatch>
  std::size_t probe(const std::byte* key, OnMatch&& on_match) const {
    const std::uint64_t word = load_key(key, layout_.key_bytes);
    return walk(heads_[bucket(word)], word, key, on_match);
  }

  // Probes `count` tuples of `tuple_bytes` at `tuples` whose keys are at `key_offset`: calls
  // on_match(probe_tuple, build_tuple, build_fold) for every pair, probe tuples in order; returns
  // the number of pairs. Group prefetching hides most cache misses of a table larger than the
  // caches. Only after build().
  template <class OnMatch>
  std::size_t probe_batch(const std::byte* tuples, std::size_t count, std::size_t tuple_bytes,
                          std::size_t key_offset, OnMatch&& on_match) const {
    std::size_t matches = 0;
    std::uint64_t words[kGroup];
    std::uint32_t first_entry[kGroup];
    for (std::size_t first = 0; first < count; first += kGroup) {
      const std::size_t group = std::min(kGroup, count - first);
      const std::byte* base = tuples + first * tuple_bytes;
      for (std::size_t i = 0; i < group; ++i) {
        words[i] = load_key(base + i * tuple_bytes + key_offset, layout_.key_bytes);
        __builtin_prefetch(&heads_[bucket(words[i])]);
      }
      for (std::size_t i = 0; i < group; ++i) {
        first_entry[i] = heads_[bucket(words[i])];
        if (first_entry[i] != kEnd) __builtin_prefetch(&entries_[first_entry[i]]);
      }
      for (std::size_t i = 0; i < group; ++i) {
        const std::byte* probe = base + i * tuple_bytes;
        matches += walk(first_entry[i], words[i], probe + key_offset,
                        [&](const std::byte* build, std::uint64_t fold) { on_match(probe, build, fold); });
      }
    }
    return matches;
  }

  bool built() const noexcept { return built_; }
  // Build tuples added so far.
  std::size_t size() const noexcept { return staged_; }
  const Layout& layout() const noexcept { return layout_; }
  std::size_t memory_bytes() const noexcept {
    std::size_t bytes = blocks_.size() * block_tuples_ * layout_.tuple_bytes;
    if (built_) bytes += staged_ * sizeof(Entry) + (mask_ + 1) * sizeof(std::uint32_t);
    return bytes;
  }

  static constexpr std::size_t kBlockBytes = 1 << 20;  // a block of tuples as they arrive
  static constexpr std::size_t kGroup = 16;            // keys per prefetch group

 private:
  static constexpr std::uint32_t kEnd = std::numeric_limits<std::uint32_t>::max();  // chain end

  struct Entry {
    std::uint64_t key;   // key word (load_key)
    std::uint64_t fold;  // fold_tuple of the whole tuple, for the checksum
    std::uint32_t next;  // next entry of the chain, or kEnd
  };

  std::size_t bucket(std::uint64_t word) const noexcept { return mix64(word) & mask_; }
  const std::byte* tuple_at(std::uint32_t index) const noexcept {
    return blocks_[index >> block_shift_].get() + (index & (block_tuples_ - 1)) * layout_.tuple_bytes;
  }

  template <class OnMatch>
  std::size_t walk(std::uint32_t at, std::uint64_t word, const std::byte* key, OnMatch&& on_match) const {
    std::size_t matches = 0;
    for (; at != kEnd; at = entries_[at].next) {
      if (entries_[at].key != word) continue;
      const std::byte* tuple = tuple_at(at);
      if (layout_.key_bytes > 8 &&
          std::memcmp(tuple + layout_.key_offset, key, layout_.key_bytes) != 0) {
        continue;  // a fold collision of two wide keys
      }
      on_match(tuple, entries_[at].fold);
      ++matches;
    }
    return matches;
  }

  Layout layout_;
  std::size_t block_tuples_ = 1;  // a power of two, so an index splits into block and slot
  unsigned block_shift_ = 0;
  std::vector<std::unique_ptr<std::byte[]>> blocks_;  // the tuples, in arrival order
  std::size_t last_fill_ = 0;                        // tuples in the last block
  std::size_t staged_ = 0;                           // tuples in the blocks
  LargeArray<Entry> entries_;                        // per tuple: key word, fold, chain link
  LargeArray<std::uint32_t> heads_;                  // per bucket: its chain's first entry
  std::size_t mask_ = 0;
  bool built_ = false;
};

}  // namespace dfi::kernels
