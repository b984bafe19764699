// kernels::hash_partition: every tuple lands exactly once, in the partition of its key, in order.
#include "dfi/kernels/hash_partition.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace dfi::kernels {
namespace {

TEST(HashPartition, EveryTupleOnceInItsKeysPartitionInOrder) {
  const JoinTable::Layout layout{24, 8, 8};
  std::mt19937_64 random(7);
  for (std::size_t partitions : {1u, 2u, 64u, 1024u}) {
    const std::size_t count = 20'000;
    std::vector<std::uint64_t> in(count * 3);
    for (std::size_t i = 0; i < count; ++i) in[3 * i] = i, in[3 * i + 1] = random() % 5000, in[3 * i + 2] = i * 7;
    std::vector<std::uint64_t> out(in.size());
    const auto offsets = hash_partition(reinterpret_cast<const std::byte*>(in.data()), count, layout, partitions,
                                        reinterpret_cast<std::byte*>(out.data()));
    ASSERT_EQ(offsets.size(), partitions + 1);
    EXPECT_EQ(offsets.front(), 0u);
    EXPECT_EQ(offsets.back(), count);
    std::vector<int> seen(count, 0);
    for (std::size_t p = 0; p < partitions; ++p) {
      std::uint64_t last_index = 0;
      for (std::size_t i = offsets[p]; i < offsets[p + 1]; ++i) {
        const std::uint64_t index = out[3 * i];
        ASSERT_LT(index, count);
        ++seen[index];
        EXPECT_EQ(partition_of(out[3 * i + 1], partitions), p);
        EXPECT_EQ(out[3 * i + 1], in[3 * index + 1]);
        EXPECT_EQ(out[3 * i + 2], index * 7);
        if (i > offsets[p]) {
          EXPECT_GT(index, last_index);
        }
        last_index = index;
      }
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  }
}

TEST(HashPartition, RejectsAPartitionCountThatIsNoPowerOfTwo) {
  std::byte dummy[16]{};
  EXPECT_THROW(hash_partition(dummy, 1, {16, 0, 8}, 3, dummy), Error);
  EXPECT_THROW(hash_partition(dummy, 1, {16, 0, 8}, 0, dummy), Error);
}

}  // namespace
}  // namespace dfi::kernels
