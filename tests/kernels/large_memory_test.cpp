// kernels::allocate_large / make_large_array: usable memory of every size, 2 MiB-aligned from
// kHugePageBytes on (so that huge pages can back it), freed by LargeArray.
#include "dfi/kernels/large_memory.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>

namespace dfi::kernels {
namespace {

TEST(LargeMemory, LargeBlocksStartOnAHugePageBoundary) {
  for (std::size_t bytes : {kHugePageBytes, kHugePageBytes + 1, 5 * kHugePageBytes + 12345}) {
    void* memory = allocate_large(bytes);
    ASSERT_NE(memory, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(memory) % kHugePageBytes, 0u) << bytes << " B";
    std::memset(memory, 0xab, bytes);  // every byte is ours
    EXPECT_EQ(static_cast<unsigned char*>(memory)[bytes - 1], 0xab);
    std::free(memory);
  }
}

TEST(LargeMemory, SmallBlocksAndZeroBytesAreUsable) {
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, kHugePageBytes - 1}) {
    void* memory = allocate_large(bytes);
    ASSERT_NE(memory, nullptr) << bytes << " B";
    std::memset(memory, 1, bytes);
    std::free(memory);
  }
}

TEST(LargeMemory, LargeArrayHoldsWhatIsWritten) {
  const std::size_t count = 3 * kHugePageBytes / sizeof(std::uint64_t) + 7;
  LargeArray<std::uint64_t> values = make_large_array<std::uint64_t>(count);
  std::iota(values.get(), values.get() + count, std::uint64_t{1});
  EXPECT_EQ(std::accumulate(values.get(), values.get() + count, std::uint64_t{0}),
            static_cast<std::uint64_t>(count) * (count + 1) / 2);
}

}  // namespace
}  // namespace dfi::kernels
