// Unit tests of combiner specs: aggregate lists, result schemas, partial-row sizes, validation.
#include <gtest/gtest.h>

#include "dfi/common/error.hpp"
#include "dfi/flow/combiner.hpp"

namespace dfi::flow {
namespace {

FlowSpec combiner(const std::string& aggregates) {
  FlowSpec spec;
  spec.name = "agg";
  spec.type = FlowType::combiner;
  spec.sources = {{0, 0}, {1, 0}};
  spec.targets = {{0, 0}};
  spec.schema =
      Schema({{"key", Type::int32}, {"a", Type::int16}, {"b", Type::uint64}, {"c", Type::float32}});
  spec.key_column = "key";
  spec.type_options = CombinerOptions{.aggregates = parse_aggregates(aggregates)};
  return spec;
}

TEST(CombinerSpec, AggregatesParseAndPrintBack) {
  const auto list = parse_aggregates("sum(a),count(*),min(b),max(c),avg(a)");
  ASSERT_EQ(list.size(), 5u);
  EXPECT_EQ(list[1].function, Aggregate::count);
  EXPECT_TRUE(list[1].column.empty());
  EXPECT_EQ(list[4].function, Aggregate::avg);
  EXPECT_EQ(describe_aggregates(list), "sum(a),count(*),min(b),max(c),avg(a)");
  EXPECT_THROW(parse_aggregates("sum"), Error);
  EXPECT_THROW(parse_aggregates("total(a)"), Error);
  EXPECT_TRUE(parse_aggregates("").empty());
}

TEST(CombinerSpec, ResultSchemaHasDocumentedTypes) {
  const FlowSpec spec = combiner("sum(a),sum(b),sum(c),count(*),min(a),max(c),avg(a),avg(c)");
  spec.validate(2);
  EXPECT_EQ(combiner_result_schema(spec).describe(),
            "key:int32,sum_a:int64,sum_b:uint64,sum_c:double,count:uint64,min_a:int16,max_c:float,"
            "avg_a:double,avg_c:double");
}

TEST(CombinerSpec, PartialRowsCarryKeyCountAndStates) {
  // key 4 B -> 8, count 8, sum(a) 8, avg(a) 16 (exact 128-bit sum), min(c) 8.
  EXPECT_EQ(combiner_row_bytes(combiner("sum(a),avg(a),min(c),count(*)")), 48u);
  EXPECT_EQ(combiner_row_bytes(combiner("avg(c)")), 24u);  // float sums are 8 B
}

TEST(CombinerSpec, RecordRoundTrip) {
  const FlowSpec spec = combiner("max(b),count(*)");
  const FlowSpec back = FlowSpec::from_json(spec.to_json());
  EXPECT_EQ(back.type_options.get<CombinerOptions>().aggregates,
            spec.type_options.get<CombinerOptions>().aggregates);
}

TEST(CombinerSpec, ValidationNamesTheProblem) {
  auto message = [](const FlowSpec& spec) {
    try {
      spec.validate(2);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  FlowSpec spec = combiner("sum(a)");
  spec.options.segment_bytes = 16 + 16;  // a 24 B partial row does not fit 16 B
  EXPECT_NE(
      message(spec).find("partial-aggregate row of 24 B does not fit a segment payload of 16 B"),
      std::string::npos);
  spec = combiner("avg(zz)");
  EXPECT_NE(message(spec).find("has no column 'zz'"), std::string::npos);
  spec = combiner("min(*)");
  EXPECT_NE(message(spec).find("min(*) needs a value column"), std::string::npos);
  spec = combiner("count(*)");
  spec.key_column = "nokey";  // the documented code (invalid_argument), naming the flow
  EXPECT_NE(message(spec).find("flow '"), std::string::npos) << message(spec);
  EXPECT_NE(message(spec).find("the key column 'nokey' is not in the schema"), std::string::npos) << message(spec);
  try {
    spec.validate(2);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
  }
  spec = combiner("count(*)");
  spec.targets.clear();
  EXPECT_NE(message(spec).find("needs at least one target"), std::string::npos);
  spec = combiner("count(*)");
  spec.targets.push_back({1, 0});  // N:M is fine: the targets partition the keys
  EXPECT_NO_THROW(spec.validate(2));
}

}  // namespace
}  // namespace dfi::flow
