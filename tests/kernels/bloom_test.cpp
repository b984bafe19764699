// kernels::BloomFilter: no false negatives, a false-positive rate that matches the theory of a
// split-block filter, and merging by OR equals inserting every key into one filter.
#include "dfi/kernels/bloom.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <cstdint>

namespace dfi::kernels {
namespace {

// Inserted keys are the even numbers 2i, queries the odd ones (never inserted).
constexpr std::uint64_t inserted(std::uint64_t i) { return 2 * i; }
constexpr std::uint64_t absent(std::uint64_t i) { return 2 * i + 1; }

TEST(BloomFilter, NoFalseNegativesAndTheFalsePositiveRateOfTheTheory) {
  constexpr std::uint64_t kKeys = 200'000;
  constexpr std::uint64_t kQueries = 2'000'000;
  for (double bits_per_key : {4.0, 8.0, 12.0, 16.0}) {
    BloomFilter filter(BloomFilter::blocks_for(kKeys, bits_per_key));
    for (std::uint64_t i = 0; i < kKeys; ++i) filter.insert(inserted(i));
    std::uint64_t negatives = 0;
    for (std::uint64_t i = 0; i < kKeys; ++i) negatives += filter.may_contain(inserted(i)) ? 0 : 1;
    EXPECT_EQ(negatives, 0u) << bits_per_key << " bits per key";
    std::uint64_t positives = 0;
    for (std::uint64_t i = 0; i < kQueries; ++i) positives += filter.may_contain(absent(i)) ? 1 : 0;
    const double measured = static_cast<double>(positives) / kQueries;
    const double expected = filter.expected_false_positive_rate(kKeys);
    // Binomial noise of kQueries draws is below 3 % of the rate here; allow 10 % plus 5 sigma.
    const double sigma = std::sqrt(expected * (1 - expected) / kQueries);
    EXPECT_NEAR(measured, expected, 0.1 * expected + 5 * sigma)
        << bits_per_key << " bits per key: measured " << measured << ", theory " << expected;
    RecordProperty("fpr_" + std::to_string(static_cast<int>(bits_per_key)), std::to_string(measured));
    std::printf("%4.0f bits/key: false-positive rate %.5f (theory %.5f)\n", bits_per_key, measured, expected);
  }
}

TEST(BloomFilter, TheoryFallsWithMoreBitsAndIsSmallAtSixteen) {
  const BloomFilter small(BloomFilter::blocks_for(1'000'000, 8));
  const BloomFilter large(BloomFilter::blocks_for(1'000'000, 16));
  EXPECT_GT(small.expected_false_positive_rate(1'000'000), large.expected_false_positive_rate(1'000'000));
  EXPECT_LT(large.expected_false_positive_rate(1'000'000), 0.005);
  EXPECT_GT(large.expected_false_positive_rate(1'000'000), 0.0);
}

TEST(BloomFilter, MergingFiltersEqualsOneFilterOfAllKeys) {
  constexpr std::uint64_t kKeys = 50'000;
  const std::size_t blocks = BloomFilter::blocks_for(kKeys, 10);
  BloomFilter all(blocks), a(blocks), b(blocks), c(blocks);
  for (std::uint64_t i = 0; i < kKeys; ++i) {
    all.insert(inserted(i));
    (i % 3 == 0 ? a : i % 3 == 1 ? b : c).insert(inserted(i));
  }
  a.merge(b);
  for (std::size_t k = 0; k < blocks; ++k) a.merge_block(k, c.blocks()[k]);
  ASSERT_EQ(a.block_count(), all.block_count());
  for (std::size_t k = 0; k < blocks; ++k) {
    for (std::size_t w = 0; w < BloomFilter::kBlockWords; ++w) {
      ASSERT_EQ(a.blocks()[k].words[w], all.blocks()[k].words[w]) << "block " << k;
    }
  }
  for (std::uint64_t i = 0; i < kKeys; ++i) ASSERT_TRUE(a.may_contain(inserted(i)));
}

TEST(BloomFilter, AnEmptyFilterContainsNothingAndSizesMustAgree) {
  BloomFilter empty(4);
  for (std::uint64_t i = 0; i < 1000; ++i) EXPECT_FALSE(empty.may_contain(i));
  EXPECT_EQ(BloomFilter::blocks_for(0, 16), 1u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(empty.blocks().data()) % 64, 0u);
  BloomFilter other(5);
  EXPECT_THROW(empty.merge(other), Error);
  EXPECT_THROW(BloomFilter(0), Error);
}

}  // namespace
}  // namespace dfi::kernels
