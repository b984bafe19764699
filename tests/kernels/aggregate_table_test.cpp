// kernels::AggregateTable against a std::map reference on random data: every aggregate and value
// type, narrow, 8-byte and wide keys, local tables shipped and merged in pieces, growth and reuse
// after clear(), wrapping sums and exact averages, layout errors.
#include "dfi/kernels/aggregate_table.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "dfi/common/error.hpp"

namespace dfi::kernels {
namespace {

using Table = AggregateTable;

// A layout whose result tuple is the key followed by each aggregate's result, each aligned to its
// own size (as flow::Schema lays out a C struct).
Table::Layout layout(std::size_t tuple_bytes, std::size_t key_offset, std::size_t key_bytes,
                     std::vector<Table::Column> aggregates) {
  Table::Layout l{tuple_bytes, key_offset, key_bytes, std::move(aggregates), 0};
  std::size_t at = key_bytes;
  for (Table::Column& c : l.aggregates) {
    const std::size_t size = value_bytes(Table::result_type(c.function, c.type));
    at = (at + size - 1) / size * size;
    c.result_offset = at;
    at += size;
  }
  l.result_bytes = (at + 7) / 8 * 8;
  return l;
}

template <class T>
T get(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void put(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// Result tuples by key bytes.
std::map<std::string, std::vector<std::byte>> results(const Table& table) {
  const Table::Layout& l = table.layout();
  std::vector<std::byte> out(table.size() * l.result_bytes);
  table.finalize(out.data());
  std::map<std::string, std::vector<std::byte>> by_key;
  for (std::size_t i = 0; i < table.size(); ++i) {
    const std::byte* t = out.data() + i * l.result_bytes;
    const std::string key(reinterpret_cast<const char*>(t), l.key_bytes);
    EXPECT_EQ(by_key.count(key), 0u) << "a key appears twice";
    by_key[key].assign(t, t + l.result_bytes);
  }
  return by_key;
}

// Tuples {u64 key; i64 value} with keys in 0 .. domain-1.
std::vector<std::byte> key_value_tuples(std::size_t count, std::uint64_t domain, std::mt19937_64& random) {
  std::vector<std::byte> tuples(count * 16);
  for (std::size_t i = 0; i < count; ++i) {
    put<std::uint64_t>(tuples.data() + 16 * i, random() % domain);
    put<std::int64_t>(tuples.data() + 16 * i + 8, static_cast<std::int64_t>(random() % 2001) - 1000);
  }
  return tuples;
}

Table::Layout key_value_layout() {
  return layout(16, 0, 8,
                {{Aggregate::sum, ValueType::int64, 8},
                 {Aggregate::count},
                 {Aggregate::min, ValueType::int64, 8},
                 {Aggregate::max, ValueType::int64, 8},
                 {Aggregate::avg, ValueType::int64, 8}});
}

// Every group's sum, count, min, max and avg of key_value_tuples, checked against a std::map.
void expect_key_value_results(const Table& table, const std::vector<std::byte>& tuples) {
  struct Expected {
    std::int64_t sum = 0, min = 0, max = 0;
    std::uint64_t count = 0;
  };
  std::map<std::uint64_t, Expected> expected;
  for (std::size_t i = 0; i < tuples.size() / 16; ++i) {
    const auto key = get<std::uint64_t>(tuples.data() + 16 * i);
    const auto value = get<std::int64_t>(tuples.data() + 16 * i + 8);
    Expected& e = expected[key];
    if (e.count == 0 || value < e.min) e.min = value;
    if (e.count == 0 || value > e.max) e.max = value;
    e.sum += value;
    ++e.count;
  }
  const auto got = results(table);
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [key, e] : expected) {
    const std::string k(reinterpret_cast<const char*>(&key), 8);
    ASSERT_EQ(got.count(k), 1u) << key;
    const std::byte* r = got.at(k).data();
    EXPECT_EQ(get<std::int64_t>(r + 8), e.sum) << key;
    EXPECT_EQ(get<std::uint64_t>(r + 16), e.count) << key;
    EXPECT_EQ(get<std::int64_t>(r + 24), e.min) << key;
    EXPECT_EQ(get<std::int64_t>(r + 32), e.max) << key;
    EXPECT_EQ(get<double>(r + 40), static_cast<double>(static_cast<long double>(e.sum) / e.count)) << key;
  }
}

TEST(AggregateTable, AddEqualsAReference) {
  std::mt19937_64 random(1);
  for (const std::uint64_t domain : {1ull, 7ull, 1000ull, 100'000ull}) {
    SCOPED_TRACE(domain);
    const std::vector<std::byte> tuples = key_value_tuples(200'000, domain, random);
    Table table(key_value_layout());
    // In pieces of different sizes, as pushes come.
    table.add(tuples.data(), 1);
    table.add(tuples.data() + 16, 999);
    table.add(tuples.data() + 16 * 1000, 200'000 - 1000);
    expect_key_value_results(table, tuples);
  }
}

// Local tables of at most `limit` keys, shipped (merged into a global table) and cleared when full,
// as a combiner source does; the global table's results are those of one table over everything.
TEST(AggregateTable, MergedPartialRowsEqualOneTable) {
  std::mt19937_64 random(2);
  const std::vector<std::byte> tuples = key_value_tuples(300'000, 50'000, random);
  Table global(key_value_layout());
  Table local(key_value_layout());
  const std::size_t limit = 512;
  std::size_t shipped = 0;
  for (std::size_t i = 0; i < tuples.size() / 16;) {
    const std::size_t n = std::min(tuples.size() / 16 - i, limit - local.size());
    local.add(tuples.data() + 16 * i, n);
    i += n;
    ASSERT_LE(local.size(), limit);
    if (local.size() == limit || i == tuples.size() / 16) {
      global.merge(local.rows(), local.size());
      shipped += local.size();
      local.clear();
    }
  }
  EXPECT_GT(shipped, 50'000u);  // keys went more than once
  EXPECT_EQ(global.tuples_merged(), 300'000u);
  expect_key_value_results(global, tuples);
  // Rows merged twice count twice; rows of a table merged into an empty one give the same results.
  Table copy(key_value_layout());
  copy.merge(global.rows(), global.size());
  EXPECT_EQ(results(copy), results(global));
}

// Pass-through: the rows make_rows() makes, one per tuple, merged into a table, give the results
// of adding the tuples; partly aggregated rows and passed-through rows mix.
TEST(AggregateTable, RowsMadeOnePerTupleMergeLikeAddedTuples) {
  std::mt19937_64 random(5);
  const std::vector<std::byte> tuples = key_value_tuples(20'000, 3'000, random);
  Table maker(key_value_layout());
  std::vector<std::byte> rows(20'000 * maker.row_bytes());
  maker.make_rows(tuples.data(), 20'000, rows.data());
  EXPECT_EQ(maker.size(), 0u);  // the table itself is untouched
  Table global(key_value_layout());
  global.merge(rows.data(), 10'000);  // the first half passed through
  Table local(key_value_layout());
  local.add(tuples.data() + 16 * 10'000, 10'000);  // the second half pre-aggregated
  global.merge(local.rows(), local.size());
  EXPECT_EQ(global.tuples_merged(), 20'000u);
  expect_key_value_results(global, tuples);
  // A wide key: its slot's padding is zero, as a row add() makes.
  const Table::Layout wide = layout(16, 0, 12, {{Aggregate::count}});
  Table wide_table(wide);
  std::vector<std::byte> tuple(16, std::byte{7});
  std::vector<std::byte> row(wide_table.row_bytes(), std::byte{0xff});
  wide_table.make_rows(tuple.data(), 1, row.data());
  wide_table.add(tuple.data(), 1);
  EXPECT_EQ(std::memcmp(row.data(), wide_table.rows(), wide_table.row_bytes()), 0);
}

TEST(AggregateTable, ClearKeepsMemoryAndForgetsKeys) {
  std::mt19937_64 random(3);
  Table table(key_value_layout());
  const std::vector<std::byte> first = key_value_tuples(100'000, 1'000'000, random);
  table.add(first.data(), 100'000);
  const std::size_t memory = table.memory_bytes();
  EXPECT_GE(memory, table.size() * table.row_bytes());
  table.clear();
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.memory_bytes(), memory);
  const std::vector<std::byte> second = key_value_tuples(100'000, 1'000'000, random);
  table.add(second.data(), 100'000);
  EXPECT_EQ(table.memory_bytes(), memory);  // the same number of keys: nothing allocated
  expect_key_value_results(table, second);
}

// A uint32 key in the middle of the tuple, narrow and unsigned and float columns.
TEST(AggregateTable, NarrowKeysAndEveryValueType) {
  // {i8 a; u8 b; i16 c; u32 key; u16 d; f32 e; f64 f} = 24 B
  const Table::Layout l = layout(24, 4, 4,
                                 {{Aggregate::min, ValueType::int8, 0},
                                  {Aggregate::max, ValueType::uint8, 1},
                                  {Aggregate::sum, ValueType::int16, 2},
                                  {Aggregate::avg, ValueType::uint16, 8},
                                  {Aggregate::max, ValueType::float32, 12},
                                  {Aggregate::min, ValueType::float64, 16},
                                  {Aggregate::avg, ValueType::float64, 16},
                                  {Aggregate::sum, ValueType::float32, 12},
                                  {Aggregate::count}});
  Table table(l);
  std::mt19937_64 random(4);
  std::vector<std::byte> tuples(24 * 5000);
  struct Expected {
    int min_a = 127, max_b = 0;
    std::int64_t sum_c = 0;
    std::uint64_t sum_d = 0, count = 0;
    float max_e = -1e30f;
    double min_f = 1e300, sum_f = 0, sum_e = 0;
  };
  std::map<std::uint32_t, Expected> expected;
  for (std::size_t i = 0; i < 5000; ++i) {
    std::byte* t = tuples.data() + 24 * i;
    const auto a = static_cast<std::int8_t>(random());
    const auto b = static_cast<std::uint8_t>(random());
    const auto c = static_cast<std::int16_t>(random());
    const auto key = static_cast<std::uint32_t>(random() % 37) * 0x01010101u;  // every byte matters
    const auto d = static_cast<std::uint16_t>(random());
    const float e = static_cast<float>(static_cast<int>(random() % 1000) - 500) / 4;
    const double f = static_cast<double>(static_cast<int>(random() % 1000) - 500) / 8;
    put(t, a), put(t + 1, b), put(t + 2, c), put(t + 4, key), put(t + 8, d), put(t + 12, e), put(t + 16, f);
    Expected& x = expected[key];
    x.min_a = std::min<int>(x.min_a, a);
    x.max_b = std::max<int>(x.max_b, b);
    x.sum_c += c;
    x.sum_d += d;
    x.max_e = std::max(x.max_e, e);
    x.min_f = std::min(x.min_f, f);
    x.sum_f += f;  // exact: multiples of 1/8 far from 2^53
    x.sum_e += e;
    ++x.count;
  }
  table.add(tuples.data(), 5000);
  const auto got = results(table);
  ASSERT_EQ(got.size(), expected.size());
  const auto& c = l.aggregates;
  for (const auto& [key, x] : expected) {
    const std::byte* r = got.at(std::string(reinterpret_cast<const char*>(&key), 4)).data();
    EXPECT_EQ(get<std::int8_t>(r + c[0].result_offset), x.min_a);
    EXPECT_EQ(get<std::uint8_t>(r + c[1].result_offset), x.max_b);
    EXPECT_EQ(get<std::int64_t>(r + c[2].result_offset), x.sum_c);
    EXPECT_EQ(get<double>(r + c[3].result_offset), static_cast<double>(static_cast<long double>(x.sum_d) / x.count));
    EXPECT_EQ(get<float>(r + c[4].result_offset), x.max_e);
    EXPECT_EQ(get<double>(r + c[5].result_offset), x.min_f);
    EXPECT_EQ(get<double>(r + c[6].result_offset), x.sum_f / static_cast<double>(x.count));
    EXPECT_EQ(get<double>(r + c[7].result_offset), x.sum_e);
    EXPECT_EQ(get<std::uint64_t>(r + c[8].result_offset), x.count);
  }
}

// A 12-byte key: keys that differ only in their last byte, or only beyond the first 8, are
// different groups.
TEST(AggregateTable, WideKeysCompareEveryByte) {
  const Table::Layout l = layout(16, 0, 12, {{Aggregate::count}, {Aggregate::sum, ValueType::int32, 12}});
  Table table(l);
  std::vector<std::byte> tuples(16 * 2000, std::byte{0});
  for (std::size_t i = 0; i < 2000; ++i) {
    std::byte* t = tuples.data() + 16 * i;
    put<std::uint64_t>(t, 42);                                      // the same first 8 bytes
    put<std::uint32_t>(t + 8, static_cast<std::uint32_t>(i % 200) << 24);  // differ in byte 11
    put<std::int32_t>(t + 12, 1);
  }
  table.add(tuples.data(), 2000);
  EXPECT_EQ(table.size(), 200u);
  for (const auto& [key, r] : results(table)) {
    EXPECT_EQ(get<std::uint64_t>(r.data() + l.aggregates[0].result_offset), 10u);
    EXPECT_EQ(get<std::int64_t>(r.data() + l.aggregates[1].result_offset), 10);
  }
}

TEST(AggregateTable, SumsWrapAndAveragesAreExact) {
  const Table::Layout l = layout(16, 0, 8,
                                 {{Aggregate::sum, ValueType::int64, 8},
                                  {Aggregate::avg, ValueType::int64, 8},
                                  {Aggregate::min, ValueType::int64, 8},
                                  {Aggregate::max, ValueType::int64, 8}});
  Table a(l), b(l), all(l);
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  std::vector<std::byte> tuples(16 * 4);
  const std::int64_t values[] = {big, big, big, std::numeric_limits<std::int64_t>::min()};
  for (std::size_t i = 0; i < 4; ++i) {
    put<std::uint64_t>(tuples.data() + 16 * i, 9);
    put(tuples.data() + 16 * i + 8, values[i]);
  }
  a.add(tuples.data(), 2);
  b.add(tuples.data() + 32, 2);
  all.merge(a.rows(), 1);
  all.merge(b.rows(), 1);
  const auto r = results(all).begin()->second;
  // big + big + big + min = 2 big - 1 (mod 2^64, as two's complement).
  EXPECT_EQ(get<std::int64_t>(r.data() + l.aggregates[0].result_offset),
            static_cast<std::int64_t>(2 * static_cast<std::uint64_t>(big) - 1));
  const long double exact = (3.0L * big + std::numeric_limits<std::int64_t>::min()) / 4;
  EXPECT_EQ(get<double>(r.data() + l.aggregates[1].result_offset), static_cast<double>(exact));
  EXPECT_EQ(get<std::int64_t>(r.data() + l.aggregates[2].result_offset), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(get<std::int64_t>(r.data() + l.aggregates[3].result_offset), big);
}

TEST(AggregateTable, BadLayoutsAreRefused) {
  auto message = [](Table::Layout l) {
    try {
      Table table(std::move(l));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_argument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(layout(16, 12, 8, {{Aggregate::count}})).find("key of 8 B at offset 12 does not fit a tuple of 16 B"),
            std::string::npos);
  EXPECT_NE(message(layout(16, 0, 8, {})).find("no aggregate"), std::string::npos);
  EXPECT_NE(message(layout(16, 0, 8, {{Aggregate::sum, ValueType::int64, 12}})).find("column at offset 12"),
            std::string::npos);
  Table::Layout over = layout(16, 0, 8, {{Aggregate::count}});
  over.aggregates[0].result_offset = 4;  // over the key
  EXPECT_NE(message(over).find("aggregate 0 (count)"), std::string::npos);
}

}  // namespace
}  // namespace dfi::kernels
