// kernels::ZipfSampler — Zipf-distributed integers for generated workloads (the agg and join
// data, the kv bench's keys): Zipf(s) over 1 .. n by rejection-inversion (Hörmann and Derflinger,
// "Rejection-inversion to generate variates from monotone discrete distributions", 1996; the
// algorithm as in Apache Commons RNG's RejectionInversionZipfSampler). O(1) memory and time per
// sample, so tens of millions of values are fine; no allocation.
//
//   kernels::ZipfSampler zipf(1'000'000, 0.99);
//   std::mt19937_64 random(seed);
//   std::uint64_t k = zipf(random);   // 1 .. n, 1 the most frequent
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace dfi::kernels {

// Zipf(`exponent`) over 1 .. n (n >= 1, exponent > 0). Thread-compatible: one per generator.
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

}  // namespace dfi::kernels
