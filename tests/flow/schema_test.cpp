#include <gtest/gtest.h>

#include <cstddef>

#include "dfi/common/error.hpp"
#include "dfi/flow/schema.hpp"

namespace dfi::flow {
namespace {

struct Mixed {
  std::int8_t a;
  std::int64_t b;
  std::int16_t c;
  char tag[3];
  double d;
};

TEST(Schema, OffsetsFollowCStructLayout) {
  Schema s({{"a", Type::int8}, {"b", Type::int64}, {"c", Type::int16}, {"tag", Type::chars, 3}, {"d", Type::float64}});
  EXPECT_EQ(s.offset(0), offsetof(Mixed, a));
  EXPECT_EQ(s.offset(1), offsetof(Mixed, b));
  EXPECT_EQ(s.offset(2), offsetof(Mixed, c));
  EXPECT_EQ(s.offset(3), offsetof(Mixed, tag));
  EXPECT_EQ(s.offset(4), offsetof(Mixed, d));
  EXPECT_EQ(s.tuple_bytes(), sizeof(Mixed));
}

TEST(Schema, DescribeAndParseRoundTrip) {
  Schema s({{"key", Type::uint64}, {"name", Type::chars, 12}, {"f", Type::float32}});
  EXPECT_EQ(s.describe(), "key:uint64,name:chars[12],f:float");
  EXPECT_EQ(Schema::parse(s.describe()), s);
  EXPECT_EQ(Schema::parse(s.describe()).tuple_bytes(), s.tuple_bytes());
}

TEST(Schema, TheEnumsTypeNamesAreAcceptedAsAliases) {
  EXPECT_EQ(Schema::parse("k:int64,v:float64,w:float32"), Schema::parse("k:int64,v:double,w:float"));
  EXPECT_EQ(Schema::parse("v:float64").describe(), "v:double");
  try {
    (void)Schema::parse("v:float128");
    ADD_FAILURE() << "float128 parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("float128"), std::string::npos) << e.what();
  }
}

TEST(Schema, BadSchemasAreRejected) {
  EXPECT_THROW(Schema(std::vector<Column>{}), Error);
  EXPECT_THROW(Schema({{"a", Type::int8}, {"a", Type::int16}}), Error);
  EXPECT_THROW(Schema({{"s", Type::chars, 0}}), Error);
  EXPECT_THROW(Schema({{"x", Type::int32, 4}}), Error);
  EXPECT_THROW(Schema::parse("key"), Error);
  EXPECT_THROW(Schema::parse("key:int128"), Error);
  EXPECT_THROW(Schema::parse("s:chars[x]"), Error);
}

TEST(Schema, UnknownColumnIsNotFound) {
  Schema s({{"key", Type::int64}});
  try {
    (void)s.index_of("value");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::not_found);
    EXPECT_NE(std::string(e.what()).find("value"), std::string::npos);
  }
}

}  // namespace
}  // namespace dfi::flow
