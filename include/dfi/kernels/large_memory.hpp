// dfi::kernels large arrays — memory for tables of many MiB (join table, aggregate table) that
// asks the system for huge pages (../shared/DESIGN.md §2).
//
//   kernels::LargeArray<std::uint32_t> heads = kernels::make_large_array<std::uint32_t>(n);  // uninitialised
//   kernels::advise_huge_pages(block, bytes);  // for memory from calloc/realloc
//
// A table probed at random loses much of its time to TLB misses and to page faults of fresh
// memory when it is backed by 4 KiB pages. Where transparent huge pages are enabled on request
// (/sys/kernel/mm/transparent_hugepage/enabled = madvise, the Debian default), advising a block
// makes the kernel back each whole 2 MiB of it with one huge page: one fault and one TLB entry
// instead of 512. The advice is a hint: where the system does not offer huge pages, small pages
// serve, with no error.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <type_traits>

namespace dfi::kernels {

// Blocks of at least this many bytes are advised to be backed by huge pages.
inline constexpr std::size_t kHugePageBytes = 2 * 1024 * 1024;

// Asks for huge pages under the block at `memory` of `bytes` (nothing below kHugePageBytes). The
// block's first page may hold the allocator's header, which is ours too: a block this large is a
// mapping of its own.
void advise_huge_pages(void* memory, std::size_t bytes) noexcept;

// Uninitialised memory for `bytes` bytes (at least one), freed with std::free. A block of
// kHugePageBytes or more starts on a 2 MiB boundary and is advised to be backed by huge pages
// (an unaligned block could not hold whole huge pages at its ends). Throws std::bad_alloc.
void* allocate_large(std::size_t bytes);

struct FreeLarge {
  void operator()(void* memory) const noexcept { std::free(memory); }
};

// An array of trivial elements in allocate_large memory, uninitialised: every element must be
// written before it is read.
template <class T>
using LargeArray = std::unique_ptr<T[], FreeLarge>;

template <class T>
LargeArray<T> make_large_array(std::size_t count) {
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T>);
  return LargeArray<T>(static_cast<T*>(allocate_large(count * sizeof(T))));
}

}  // namespace dfi::kernels
