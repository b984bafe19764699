// flow/columns.hpp: columns written into the schema's rows equal the rows a struct array holds,
// byte for byte (padding zero), through every path (interleave, to slots, push_columns in
// chunks), and copied back out of them.
#include "dfi/flow/columns.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

namespace dfi::flow {
namespace {

// key:int64, value:double, tag:chars[3], small:int16, f:float: offsets 0, 8, 16, 20, 24; 32 bytes.
Schema test_schema() { return Schema::parse("key:int64,value:double,tag:chars[3],small:int16,f:float"); }

struct Expected {
  std::int64_t key;
  double value;
  std::array<char, 3> tag;
  char pad1;
  std::int16_t small;
  char pad2[2];
  float f;
  char pad3[4];
};
static_assert(sizeof(Expected) == 32);

struct Columns {
  std::vector<std::int64_t> key;
  std::vector<double> value;
  std::vector<std::array<char, 3>> tag;
  std::vector<std::int16_t> small;
  std::vector<float> f;

  explicit Columns(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      key.push_back(static_cast<std::int64_t>(i * 7919));
      value.push_back(static_cast<double>(i) * 0.5);
      tag.push_back({static_cast<char>('a' + i % 26), 'x', static_cast<char>(i % 128)});
      small.push_back(static_cast<std::int16_t>(i % 30000));
      f.push_back(static_cast<float>(i) * 0.25f);
    }
  }
  std::vector<ColumnRef> refs() const {
    auto ref = [](const auto& v) {
      return ColumnRef{reinterpret_cast<const std::byte*>(v.data()), static_cast<std::ptrdiff_t>(sizeof(v[0]))};
    };
    return {ref(key), ref(value), ref(tag), ref(small), ref(f)};
  }
  Expected row(std::size_t i) const {
    Expected e{};
    std::memset(&e, 0, sizeof e);
    e.key = key[i];
    e.value = value[i];
    e.tag = tag[i];
    e.small = small[i];
    e.f = f[i];
    return e;
  }
};

TEST(Columns, InterleaveEqualsTheStructRowsByteForByte) {
  const Schema schema = test_schema();
  ASSERT_EQ(schema.tuple_bytes(), sizeof(Expected));
  const Columns columns(1000);
  std::vector<Expected> rows(990);
  std::memset(rows.data(), 0, rows.size() * sizeof(Expected));
  interleave_columns(schema, columns.refs(), 10, rows.size(), reinterpret_cast<std::byte*>(rows.data()));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Expected want = columns.row(10 + i);
    ASSERT_EQ(std::memcmp(&rows[i], &want, sizeof want), 0) << "row " << i;
  }
}

TEST(Columns, StridedColumnsAndCopyOutRoundTrip) {
  const Schema schema = test_schema();
  const Columns columns(300);
  // The same values as the fields of an array of structs (strided columns).
  std::vector<Expected> structs(300);
  for (std::size_t i = 0; i < structs.size(); ++i) structs[i] = columns.row(i);
  auto field = [&](std::size_t offset) {
    return ColumnRef{reinterpret_cast<const std::byte*>(structs.data()) + offset, sizeof(Expected)};
  };
  const std::vector<ColumnRef> strided = {field(0), field(8), field(16), field(20), field(24)};
  std::vector<Expected> rows(300);
  std::memset(rows.data(), 0, rows.size() * sizeof(Expected));
  interleave_columns(schema, strided, 0, rows.size(), reinterpret_cast<std::byte*>(rows.data()));
  ASSERT_EQ(std::memcmp(rows.data(), structs.data(), rows.size() * sizeof(Expected)), 0);

  // Out again, into contiguous columns from row 5 on, one column skipped.
  Columns back(305);
  std::vector<MutableColumnRef> out = {
      {reinterpret_cast<std::byte*>(back.key.data()), 8}, {reinterpret_cast<std::byte*>(back.value.data()), 8},
      {nullptr, 0}, {reinterpret_cast<std::byte*>(back.small.data()), 2}, {reinterpret_cast<std::byte*>(back.f.data()), 4}};
  const std::array<char, 3> untouched = back.tag[7];
  copy_out_columns(schema, reinterpret_cast<const std::byte*>(rows.data()), rows.size(), out, 5);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(back.key[5 + i], columns.key[i]);
    EXPECT_EQ(back.value[5 + i], columns.value[i]);
    EXPECT_EQ(back.small[5 + i], columns.small[i]);
    EXPECT_EQ(back.f[5 + i], columns.f[i]);
  }
  EXPECT_EQ(back.tag[7], untouched) << "a skipped column is not written";
}

TEST(Columns, ToSlotsAndScatterRowsPermute) {
  const Schema schema = test_schema();
  const Columns columns(64);
  std::vector<std::uint32_t> slot(64);
  for (std::uint32_t i = 0; i < 64; ++i) slot[i] = 63 - i;
  std::vector<Expected> rows(64), scattered(64);
  std::memset(rows.data(), 0, 64 * sizeof(Expected));
  interleave_columns_to(schema, columns.refs(), 0, 64, slot.data(), reinterpret_cast<std::byte*>(rows.data()));
  for (std::size_t i = 0; i < 64; ++i) {
    const Expected want = columns.row(i);
    ASSERT_EQ(std::memcmp(&rows[63 - i], &want, sizeof want), 0) << i;
  }
  scatter_rows(reinterpret_cast<const std::byte*>(rows.data()), sizeof(Expected), 64, slot.data(),
               reinterpret_cast<std::byte*>(scattered.data()));
  for (std::size_t i = 0; i < 64; ++i) {
    const Expected want = columns.row(i);
    ASSERT_EQ(std::memcmp(&scattered[i], &want, sizeof want), 0) << i;
  }
}

TEST(Columns, PushColumnsHandsOnChunksInOrderAndStopsAtAFailure) {
  const Schema schema = test_schema();
  ColumnStaging staging(schema);
  const std::size_t n = staging.rows() * 2 + 17;  // two full chunks and a part
  const Columns columns(n);
  std::vector<Expected> pushed;
  ASSERT_TRUE(push_columns(schema, columns.refs(), n, staging, [&](const std::byte* chunk, std::size_t bytes) {
    EXPECT_EQ(bytes % sizeof(Expected), 0u);
    const std::size_t at = pushed.size();
    pushed.resize(at + bytes / sizeof(Expected));
    std::memcpy(pushed.data() + at, chunk, bytes);
    return Status();
  }));
  ASSERT_EQ(pushed.size(), n);
  for (std::size_t i = 0; i < n; ++i) {
    const Expected want = columns.row(i);
    ASSERT_EQ(std::memcmp(&pushed[i], &want, sizeof want), 0) << "row " << i;
  }
  int calls = 0;
  const Status failed = push_columns(schema, columns.refs(), n, staging, [&](const std::byte*, std::size_t) {
    ++calls;
    return Status(Errc::peer_failed, "gone");
  });
  EXPECT_EQ(failed.code(), Errc::peer_failed);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(push_columns(schema, columns.refs(), 0, staging, [](const std::byte*, std::size_t) {
    ADD_FAILURE() << "no chunk for no rows";
    return Status();
  }));
}

TEST(Columns, WrongColumnCountIsInvalidArgument) {
  const Schema schema = test_schema();
  const Columns columns(4);
  std::vector<ColumnRef> refs = columns.refs();
  refs.pop_back();
  std::vector<std::byte> rows(4 * schema.tuple_bytes());
  try {
    interleave_columns(schema, refs, 0, 4, rows.data());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("4 columns given for a schema of 5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dfi::flow
