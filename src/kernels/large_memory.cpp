#include "dfi/kernels/large_memory.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <new>

namespace dfi::kernels {

void advise_huge_pages(void* memory, std::size_t bytes) noexcept {
  if (bytes < kHugePageBytes) return;
  const auto first = reinterpret_cast<std::uintptr_t>(memory) & ~std::uintptr_t{4095};
  ::madvise(reinterpret_cast<void*>(first), reinterpret_cast<std::uintptr_t>(memory) + bytes - first, MADV_HUGEPAGE);
}

void* allocate_large(std::size_t bytes) {
  bytes = std::max<std::size_t>(bytes, 1);
  void* memory = nullptr;
  if (bytes >= kHugePageBytes) {
    // aligned_alloc wants a multiple of the alignment.
    memory = std::aligned_alloc(kHugePageBytes, (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
    if (memory != nullptr) advise_huge_pages(memory, bytes);
  } else {
    memory = std::malloc(bytes);
  }
  if (memory == nullptr) throw std::bad_alloc();
  return memory;
}

}  // namespace dfi::kernels
