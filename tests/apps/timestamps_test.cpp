// The read-timestamp scan of the bit-vector timestamp service (apps/rsi/timestamps.hpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dfi/apps/rsi/timestamps.hpp"

namespace dfi::apps::rsi {
namespace {

TEST(ConsecutiveFinished, StopsAtTheFirstUnfinishedTimestamp) {
  const std::uint64_t retired[3] = {0, 0, 0};
  std::vector<std::uint64_t> words = {0b1011, 0};  // timestamps 1, 2 and 4 finished
  EXPECT_EQ(consecutive_finished(0, retired, 3, words.data(), 0, 2), 2u);
  words[0] = 0b1111;
  EXPECT_EQ(consecutive_finished(2, retired, 3, words.data(), 0, 2), 4u);
}

TEST(ConsecutiveFinished, CrossesWordsAndStopsAtTheWindowEnd) {
  const std::uint64_t retired[1] = {0};
  std::vector<std::uint64_t> words = {~std::uint64_t{0}, 0b1};
  EXPECT_EQ(consecutive_finished(0, retired, 1, words.data(), 0, 2), 65u);
  // Only word 1 of the vector in the window: starts at timestamp 65, which is in it.
  EXPECT_EQ(consecutive_finished(64, retired, 1, words.data() + 1, 1, 1), 65u);
  // All of the window finished: stops at its end.
  words[1] = ~std::uint64_t{0};
  EXPECT_EQ(consecutive_finished(0, retired, 1, words.data(), 0, 2), 128u);
}

TEST(ConsecutiveFinished, ARetiredClientsLaterTimestampsCountAsFinished) {
  // Client 1 of 2 owns the even timestamps; it retired with 4 as its next one.
  const std::uint64_t retired[2] = {0, 4};
  std::vector<std::uint64_t> words = {0b10111};  // 1, 2, 3, 5 finished; 4 and 6 never will be
  EXPECT_EQ(consecutive_finished(0, retired, 2, words.data(), 0, 1), 6u);  // 7 (client 0's) is not
  const std::uint64_t none[2] = {0, 0};
  EXPECT_EQ(consecutive_finished(0, none, 2, words.data(), 0, 1), 3u);
}

}  // namespace
}  // namespace dfi::apps::rsi
