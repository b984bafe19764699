// dfi::kernels::reference_join — the single-node equi-join that distributed joins are checked
// against: a std::unordered_multimap from key bytes to build tuples, nothing clever, so that it
// shares no code with kernels::JoinTable but the checksum definition.
//
//   auto expected = kernels::reference_join(r.data(), r_count, r_layout, s.data(), s_count, s_layout);
//   // expected.matches, expected.checksum (as ops::JoinResult defines them)
//
// Pure function; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "dfi/common/error.hpp"
#include "dfi/kernels/join_table.hpp"

namespace dfi::kernels {

struct ReferenceJoinResult {
  std::uint64_t matches = 0;
  std::uint64_t checksum = 0;  // sum of pair_checksum over the pairs, mod 2^64
};

// Joins `build_count` tuples at `build` with `probe_count` tuples at `probe` on equal key bytes.
// Throws dfi::Error(invalid_argument) when the key widths differ.
inline ReferenceJoinResult reference_join(const std::byte* build, std::size_t build_count,
                                          const JoinTable::Layout& build_layout,
                                          const std::byte* probe, std::size_t probe_count,
                                          const JoinTable::Layout& probe_layout) {
  if (build_layout.key_bytes != probe_layout.key_bytes) {
    throw Error(Errc::invalid_argument, "reference join: key widths differ");
  }
  auto key_of = [](const std::byte* tuple, const JoinTable::Layout& layout) {
    return std::string_view(reinterpret_cast<const char*>(tuple + layout.key_offset),
                            layout.key_bytes);
  };
  std::unordered_multimap<std::string_view, const std::byte*> table;
  table.reserve(build_count);
  for (std::size_t i = 0; i < build_count; ++i) {
    const std::byte* tuple = build + i * build_layout.tuple_bytes;
    table.emplace(key_of(tuple, build_layout), tuple);
  }
  ReferenceJoinResult result;
  for (std::size_t i = 0; i < probe_count; ++i) {
    const std::byte* tuple = probe + i * probe_layout.tuple_bytes;
    const std::uint64_t probe_fold = fold_tuple(tuple, probe_layout.tuple_bytes);
    auto [first, last] = table.equal_range(key_of(tuple, probe_layout));
    for (auto it = first; it != last; ++it) {
      ++result.matches;
      result.checksum += pair_checksum(fold_tuple(it->second, build_layout.tuple_bytes), probe_fold);
    }
  }
  return result;
}

}  // namespace dfi::kernels
