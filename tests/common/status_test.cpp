// dfi::Status: one word; ok and bare codes never allocate; messages survive copies and moves.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "counting_allocator.hpp"
#include "dfi/common/error.hpp"

namespace dfi {
namespace {

using testing::AllocCounts;
using testing::thread_allocations;

TEST(Status, IsOneWord) { EXPECT_EQ(sizeof(Status), sizeof(void*)); }

TEST(Status, OkAndBareCodesDoNotAllocate) {
  if (const char* why = testing::counting_unavailable()) GTEST_SKIP() << why;
  ASSERT_EQ(testing::counting_problem(), "");
  const AllocCounts before = thread_allocations();
  for (int i = 0; i < 1000; ++i) {
    Status ok;
    Status retry(Errc::retry);
    Status copy = retry;
    Status moved = std::move(copy);
    EXPECT_TRUE(ok.is_ok());
    EXPECT_FALSE(retry);
    EXPECT_EQ(moved.code(), Errc::retry);
    ok = moved;
    EXPECT_EQ(ok.code(), Errc::retry);
    EXPECT_EQ(Status::ok().code(), Errc::ok);
  }
  const AllocCounts used = thread_allocations() - before;
  EXPECT_EQ(used.news, 0u);
  EXPECT_EQ(used.mallocs, 0u);
}

TEST(Status, MessageOfOkIsEmptyAndOfABareCodeItsName) {
  EXPECT_EQ(Status().message(), "");
  EXPECT_EQ(Status(Errc::retry).message(), "retry");
  EXPECT_EQ(Status(Errc::gap).message(), "gap");
  EXPECT_EQ(Status(Errc::fatal).message(), "fatal");  // the last code still has its name
  EXPECT_EQ(Status(Errc::invalid_argument).message(), "invalid_argument");
  EXPECT_EQ(Status(Errc::timeout, "").message(), "timeout");  // an empty message: a bare code
  EXPECT_TRUE(Status(Errc::ok, "ignored").is_ok());
  EXPECT_EQ(Status(Errc::ok, "ignored").message(), "");
}

TEST(Status, CarriesCodeAndMessageThroughCopiesAndMoves) {
  Status error(Errc::peer_failed, "flow 'f': rank 3 died");
  EXPECT_FALSE(error.is_ok());
  EXPECT_EQ(error.code(), Errc::peer_failed);
  EXPECT_EQ(error.message(), "flow 'f': rank 3 died");

  Status copy = error;  // clones: both keep the message
  EXPECT_EQ(copy.message(), error.message());
  EXPECT_NE(&copy.message(), &error.message());

  Status moved = std::move(copy);  // steals: the moved-from status keeps its code only
  EXPECT_EQ(moved.code(), Errc::peer_failed);
  EXPECT_EQ(moved.message(), "flow 'f': rank 3 died");
  EXPECT_EQ(copy.code(), Errc::peer_failed);  // NOLINT(bugprone-use-after-move): documented
  EXPECT_EQ(copy.message(), "peer_failed");

  Status assigned(Errc::retry);
  assigned = error;
  EXPECT_EQ(assigned.message(), error.message());
  assigned = Status();
  EXPECT_TRUE(assigned.is_ok());
  assigned = std::move(moved);
  EXPECT_EQ(assigned.message(), "flow 'f': rank 3 died");
  Status& self = assigned;
  assigned = self;
  EXPECT_EQ(assigned.message(), "flow 'f': rank 3 died");
}

TEST(Status, ThrowIfErrorThrowsCodeAndMessage) {
  EXPECT_NO_THROW(Status().throw_if_error());
  try {
    Status(Errc::not_found, "flow 'x' does not exist").throw_if_error();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::not_found);
    EXPECT_STREQ(e.what(), "flow 'x' does not exist");
  }
  try {
    Status(Errc::retry).throw_if_error();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::retry);
    EXPECT_STREQ(e.what(), "retry");
  }
}

}  // namespace
}  // namespace dfi
