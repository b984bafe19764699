// The generated input of `dfi agg` and the agg bench scenario: tuples {key uint64, value int64}.
//
// A relation of `tuples` tuples is cut into `slices` slices (rank * threads + thread); slice s
// holds the global tuples [tuples * s / slices, tuples * (s + 1) / slices). Tuple g's key is
// drawn from a std::mt19937_64 seeded per slice: uniform over 0 .. groups-1, or Zipf-distributed
// with exponent `zipf` (> 0) over the same range (key 0 the most frequent), sampled by
// rejection-inversion (Hörmann and Derflinger, "Rejection-inversion to generate variates from
// monotone discrete distributions", 1996; O(1) memory, so tens of millions of groups are fine).
// Its value is mix64(g) mod 2001 - 1000.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "dfi/kernels/hash.hpp"

namespace dfi::tools {

struct AggTuple {
  std::uint64_t key;
  std::int64_t value;
};

// Zipf(s) over 1 .. n by rejection-inversion (the algorithm as in Apache Commons RNG's
// RejectionInversionZipfSampler). Thread-compatible: one per generator.
class ZipfSampler {
 public:
  ZipfSampler(std::uint64_t n, double exponent) : n_(static_cast<double>(n)), s_(exponent) {
    h_integral_x1_ = h_integral(1.5) - 1.0;
    h_integral_n_ = h_integral(n_ + 0.5);
    s_div_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
  }
  template <class Random>
  std::uint64_t operator()(Random& random) {
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (;;) {
      const double u = h_integral_n_ + uniform(random) * (h_integral_x1_ - h_integral_n_);
      const double x = h_integral_inverse(u);
      double k = std::floor(x + 0.5);
      if (k < 1) k = 1;
      if (k > n_) k = n_;
      if (k - x <= s_div_ || u >= h_integral(k + 0.5) - h(k)) return static_cast<std::uint64_t>(k);
    }
  }

 private:
  double h(double x) const { return std::exp(-s_ * std::log(x)); }
  double h_integral(double x) const {
    const double log_x = std::log(x);
    return helper2((1.0 - s_) * log_x) * log_x;
  }
  double h_integral_inverse(double x) const {
    double t = x * (1.0 - s_);
    if (t < -1.0) t = -1.0;
    return std::exp(helper1(t) * x);
  }
  static double helper1(double x) {  // log1p(x) / x, continuous at 0
    return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  static double helper2(double x) {  // expm1(x) / x, continuous at 0
    return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
  }

  double n_, s_;
  double h_integral_x1_ = 0, h_integral_n_ = 0, s_div_ = 0;
};

struct AggDataShape {
  std::uint64_t tuples = 0;
  std::uint64_t groups = 1;  // >= 1
  double zipf = 0;           // 0: uniform keys; > 0: Zipf exponent
  std::uint64_t seed = 1;
};

// Slice `slice` of `slices` of the generated relation.
inline std::vector<AggTuple> agg_slice(const AggDataShape& shape, std::uint64_t slice, std::uint64_t slices) {
  __extension__ using Wide = unsigned __int128;  // tuples * slice may exceed 64 bits
  const auto at = [&](std::uint64_t s) {
    return static_cast<std::uint64_t>((static_cast<Wide>(shape.tuples) * s) / slices);
  };
  const std::uint64_t first = at(slice), last = at(slice + 1);
  std::vector<AggTuple> out(last - first);
  std::mt19937_64 random(kernels::mix64(shape.seed * 0x9e3779b97f4a7c15ull + slice + 1));
  std::uniform_int_distribution<std::uint64_t> uniform(0, shape.groups - 1);
  ZipfSampler zipf(shape.groups, shape.zipf > 0 ? shape.zipf : 1.0);
  for (std::uint64_t g = first; g < last; ++g) {
    const std::uint64_t key = shape.zipf > 0 ? zipf(random) - 1 : uniform(random);
    out[g - first] = {key, static_cast<std::int64_t>(kernels::mix64(g) % 2001) - 1000};
  }
  return out;
}

}  // namespace dfi::tools
