// kernels::route_rows_kernel / route_rows_scalar: the same target as kernels::route for every row,
// whatever the row width, key offset, chunk length and target count.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "dfi/kernels/hash.hpp"

namespace dfi::kernels {
namespace {

void expect_routes_as_route(RouteRows route_rows, const char* which) {
  std::mt19937_64 random(11);
  struct Shape {
    std::size_t width, key_offset;
  };
  for (const Shape shape : {Shape{8, 0}, Shape{16, 0}, Shape{16, 8}, Shape{24, 8}, Shape{64, 0}, Shape{20, 4},
                            Shape{4096, 16}}) {
    for (std::size_t targets : {1ul, 2ul, 3ul, 4ul, 7ul, 16ul, 64ul, 1000ul, (1ul << 31) + 5, (1ul << 32) - 1}) {
      for (std::size_t count : {0ul, 1ul, 7ul, 8ul, 9ul, 255ul, 256ul}) {
        // Exactly count rows: a read past them shows under ASan.
        std::vector<std::byte> rows(count * shape.width);
        std::vector<std::uint64_t> keys(count);
        for (std::size_t i = 0; i < count; ++i) {
          keys[i] = i % 3 == 0 ? i : random();
          std::memcpy(rows.data() + i * shape.width + shape.key_offset, &keys[i], 8);
        }
        std::vector<std::uint32_t> out(count + 1, 0xdeadbeef);
        route_rows(rows.data(), shape.width, shape.key_offset, count, targets, out.data());
        for (std::size_t i = 0; i < count; ++i) {
          ASSERT_EQ(out[i], route(keys[i], targets))
              << which << ": row " << i << " of " << count << ", width " << shape.width << ", key at "
              << shape.key_offset << ", " << targets << " targets";
        }
        EXPECT_EQ(out[count], 0xdeadbeef) << which << ": wrote past the chunk";
      }
    }
  }
}

TEST(RouteRows, ScalarRoutesEveryRowAsRoute) { expect_routes_as_route(&route_rows_scalar, "scalar"); }

TEST(RouteRows, ChosenKernelRoutesEveryRowAsRoute) {
  // On a CPU with AVX-512 this is the eight-keys-at-a-time kernel.
  expect_routes_as_route(route_rows_kernel(), "route_rows_kernel()");
  EXPECT_EQ(route_rows_kernel(), route_rows_kernel());
}

}  // namespace
}  // namespace dfi::kernels
