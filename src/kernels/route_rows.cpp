// kernels::route_rows (hash.hpp): the targets of a chunk of rows, eight keys at a time
// where the CPU has AVX-512. The library is built for baseline x86-64, so the wide form is
// compiled for its own target and chosen at run time (route_rows_kernel).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12 warns falsely inside its own AVX-512 intrinsics once they are inlined (the
// undefined-vector idiom `__m512i __Y = __Y;`, GCC bug 105593); before any include, so that the
// header's lines are covered.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define DFI_ROUTE_ROWS_AVX512 1
#endif

#include <cstring>

#include "dfi/kernels/hash.hpp"

namespace dfi::kernels {

void route_rows_scalar(const std::byte* rows, std::size_t width, std::size_t key_offset, std::size_t count,
                       std::size_t targets, std::uint32_t* out) noexcept {
  const std::byte* key = rows + key_offset;
  for (std::size_t i = 0; i < count; ++i, key += width) {
    std::uint64_t word;
    std::memcpy(&word, key, 8);
    out[i] = static_cast<std::uint32_t>(route(word, targets));
  }
}

#ifdef DFI_ROUTE_ROWS_AVX512
namespace {

// mix64 and reduce of route() on eight keys. The reduction of a 64-bit value h onto n < 2^32
// targets, (h * n) >> 64, is (hi(h) * n + (lo(h) * n >> 32)) >> 32 with 32x32-bit products: the
// same value (floor of floor), no 128-bit product needed.
[[gnu::target("avx512f,avx512dq")]] inline __m256i route8(__m512i key, __m512i n) {
  key = _mm512_xor_si512(key, _mm512_srli_epi64(key, 33));
  key = _mm512_mullo_epi64(key, _mm512_set1_epi64(static_cast<long long>(0xff51afd7ed558ccdull)));
  key = _mm512_xor_si512(key, _mm512_srli_epi64(key, 33));
  key = _mm512_mullo_epi64(key, _mm512_set1_epi64(static_cast<long long>(0xc4ceb9fe1a85ec53ull)));
  key = _mm512_xor_si512(key, _mm512_srli_epi64(key, 33));
  const __m512i low = _mm512_mul_epu32(key, n);
  const __m512i high = _mm512_mul_epu32(_mm512_srli_epi64(key, 32), n);
  const __m512i target = _mm512_srli_epi64(_mm512_add_epi64(high, _mm512_srli_epi64(low, 32)), 32);
  return _mm512_cvtepi64_epi32(target);
}

[[gnu::target("avx512f,avx512dq")]] void route_rows_avx512(const std::byte* rows, std::size_t width,
                                                             std::size_t key_offset, std::size_t count,
                                                             std::size_t targets, std::uint32_t* out) {
  const __m512i n = _mm512_set1_epi64(static_cast<long long>(targets));
  std::size_t i = 0;
  if (width == 8) {
    for (; i + 8 <= count; i += 8) {
      const __m512i key = _mm512_loadu_si512(rows + i * 8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), route8(key, n));
    }
  } else if (width == 16 && key_offset % 8 == 0) {
    // Two loads of four rows each; the key is word 0 or 1 of every row.
    const long long k = static_cast<long long>(key_offset / 8);
    const __m512i pick = _mm512_set_epi64(14 + k, 12 + k, 10 + k, 8 + k, 6 + k, 4 + k, 2 + k, k);
    for (; i + 8 <= count; i += 8) {
      const __m512i a = _mm512_loadu_si512(rows + i * 16);
      const __m512i b = _mm512_loadu_si512(rows + i * 16 + 64);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), route8(_mm512_permutex2var_epi64(a, pick, b), n));
    }
  } else if (width <= (std::size_t{1} << 28)) {
    // Gather the eight keys: offsets from the chunk's first key, in bytes.
    const long long w = static_cast<long long>(width);
    const __m512i at = _mm512_set_epi64(7 * w, 6 * w, 5 * w, 4 * w, 3 * w, 2 * w, w, 0);
    const std::byte* key = rows + key_offset;
    for (; i + 8 <= count; i += 8, key += 8 * width) {
      const __m512i words = _mm512_i64gather_epi64(at, static_cast<const void*>(key), 1);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), route8(words, n));
    }
  }
  route_rows_scalar(rows + i * width, width, key_offset, count - i, targets, out + i);
}

}  // namespace
#endif

bool avx512_available() noexcept {
#ifdef DFI_ROUTE_ROWS_AVX512
  static const bool available = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return available;
#else
  return false;
#endif
}

RouteRows route_rows_kernel() noexcept {
#ifdef DFI_ROUTE_ROWS_AVX512
  if (avx512_available()) return &route_rows_avx512;
#endif
  return &route_rows_scalar;
}

}  // namespace dfi::kernels
