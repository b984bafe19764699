// kernels::JoinTable against kernels::reference_join (a std::unordered_multimap) on random data:
// duplicates, misses, empty sides, narrow, 8-byte and wide keys.
#include "dfi/kernels/join_table.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "dfi/kernels/reference_join.hpp"

namespace dfi::kernels {
namespace {

struct Relation {
  JoinTable::Layout layout;
  std::vector<std::byte> tuples;
  std::size_t count() const { return tuples.size() / layout.tuple_bytes; }
};

// `count` tuples of `width` bytes with a key of `key_bytes` at `key_offset` drawn from
// 0 .. domain-1 (a wide key repeats the value over its bytes), the other bytes random.
Relation make(std::size_t count, JoinTable::Layout layout, std::uint64_t domain, std::mt19937_64& random) {
  Relation r{layout, std::vector<std::byte>(count * layout.tuple_bytes)};
  for (std::size_t i = 0; i < count; ++i) {
    std::byte* t = r.tuples.data() + i * layout.tuple_bytes;
    for (std::size_t b = 0; b < layout.tuple_bytes; ++b) t[b] = static_cast<std::byte>(random());
    const std::uint64_t key = random() % domain;
    for (std::size_t b = 0; b < layout.key_bytes; ++b) {
      t[layout.key_offset + b] = static_cast<std::byte>(key >> (8 * (b % 8)));
    }
  }
  return r;
}

ReferenceJoinResult with_table(const Relation& build, const Relation& probe) {
  JoinTable table(build.layout);
  // In three pieces, as batches from a flow arrive.
  const std::size_t n = build.count();
  const std::size_t cut1 = n / 3, cut2 = 2 * n / 3;
  table.add(build.tuples.data(), cut1);
  table.add(build.tuples.data() + cut1 * build.layout.tuple_bytes, cut2 - cut1);
  table.add(build.tuples.data() + cut2 * build.layout.tuple_bytes, n - cut2);
  table.build();
  EXPECT_EQ(table.size(), n);
  ReferenceJoinResult result;
  for (std::size_t i = 0; i < probe.count(); ++i) {
    const std::byte* p = probe.tuples.data() + i * probe.layout.tuple_bytes;
    const std::uint64_t probe_fold = fold_tuple(p, probe.layout.tuple_bytes);
    result.matches += table.probe(p + probe.layout.key_offset, [&](const std::byte* b, std::uint64_t build_fold) {
      EXPECT_EQ(std::memcmp(b + build.layout.key_offset, p + probe.layout.key_offset, build.layout.key_bytes), 0);
      EXPECT_EQ(build_fold, fold_tuple(b, build.layout.tuple_bytes));
      result.checksum += pair_checksum(build_fold, probe_fold);
    });
  }
  // The same pairs through probe_batch (group prefetching), in probe order.
  ReferenceJoinResult batched;
  const std::byte* last_probe = nullptr;
  bool in_order = true;
  batched.matches = table.probe_batch(
      probe.tuples.data(), probe.count(), probe.layout.tuple_bytes, probe.layout.key_offset,
      [&](const std::byte* p, const std::byte* b, std::uint64_t build_fold) {
        if (last_probe != nullptr && p < last_probe) in_order = false;
        last_probe = p;
        EXPECT_EQ(std::memcmp(b + build.layout.key_offset, p + probe.layout.key_offset, build.layout.key_bytes), 0);
        batched.checksum += pair_checksum(build_fold, fold_tuple(p, probe.layout.tuple_bytes));
      });
  EXPECT_TRUE(in_order);
  EXPECT_EQ(batched.matches, result.matches);
  EXPECT_EQ(batched.checksum, result.checksum);
  return result;
}

struct Case {
  std::size_t build, probe;
  std::uint64_t domain;
  JoinTable::Layout build_layout, probe_layout;
};

TEST(JoinTable, EqualsTheReferenceJoinOnRandomInputs) {
  std::mt19937_64 random(42);
  const std::vector<Case> cases = {
      {1000, 1000, 1000, {16, 0, 8}, {16, 0, 8}},          // foreign-key-like
      {1000, 5000, 10, {16, 0, 8}, {24, 8, 8}},            // many duplicates, key elsewhere
      {5000, 1000, 1'000'000, {16, 8, 8}, {16, 0, 8}},     // mostly misses
      {0, 1000, 10, {16, 0, 8}, {16, 0, 8}},               // empty build side
      {1000, 0, 10, {16, 0, 8}, {16, 0, 8}},               // empty probe side
      {777, 3000, 300, {12, 4, 4}, {8, 0, 4}},             // 4-byte keys
      {2000, 2000, 500, {20, 2, 12}, {16, 4, 12}},         // wide keys (folded, then compared)
      {1, 100, 1, {8, 0, 8}, {8, 0, 8}},                   // one key everywhere
      {200000, 100000, 150000, {16, 0, 8}, {16, 0, 8}},    // several staging blocks; entries of
                                                           // 4.8 MB on huge-page memory
  };
  for (const Case& c : cases) {
    const Relation build = make(c.build, c.build_layout, c.domain, random);
    const Relation probe = make(c.probe, c.probe_layout, c.domain, random);
    const ReferenceJoinResult expected = reference_join(build.tuples.data(), build.count(), build.layout,
                                                        probe.tuples.data(), probe.count(), probe.layout);
    const ReferenceJoinResult got = with_table(build, probe);
    EXPECT_EQ(got.matches, expected.matches) << c.build << " x " << c.probe << " over " << c.domain;
    EXPECT_EQ(got.checksum, expected.checksum) << c.build << " x " << c.probe << " over " << c.domain;
  }
}

TEST(JoinTable, ReferenceCountsEveryPairOfDuplicates) {
  // 3 build tuples and 4 probe tuples of one key: 12 pairs.
  std::vector<std::uint64_t> build = {7, 1, 7, 2, 7, 3}, probe = {7, 10, 7, 11, 7, 12, 7, 13, 8, 14};
  const JoinTable::Layout layout{16, 0, 8};
  auto expected = reference_join(reinterpret_cast<const std::byte*>(build.data()), 3, layout,
                                 reinterpret_cast<const std::byte*>(probe.data()), 5, layout);
  EXPECT_EQ(expected.matches, 12u);
  JoinTable table(layout);
  table.add(reinterpret_cast<const std::byte*>(build.data()), 3);
  table.build();
  std::uint64_t key = 7, missing = 8;
  EXPECT_EQ(table.probe(reinterpret_cast<const std::byte*>(&key), [](const std::byte*, std::uint64_t) {}), 3u);
  EXPECT_EQ(table.probe(reinterpret_cast<const std::byte*>(&missing), [](const std::byte*, std::uint64_t) {}), 0u);
}

TEST(JoinTable, ChecksumDependsOnWhichTuplesArePaired) {
  EXPECT_NE(pair_checksum(1, 2) + pair_checksum(3, 4), pair_checksum(1, 4) + pair_checksum(3, 2));
  EXPECT_NE(fold_tuple(reinterpret_cast<const std::byte*>("abcdefgh12345678"), 16),
            fold_tuple(reinterpret_cast<const std::byte*>("12345678abcdefgh"), 16));
}

TEST(JoinTable, RejectsAKeyOutsideTheTuple) {
  EXPECT_THROW(JoinTable({16, 12, 8}), Error);
  EXPECT_THROW(JoinTable({16, 0, 0}), Error);
}

}  // namespace
}  // namespace dfi::kernels
