// tests/kernels/gradcheck.h — helpers for kernel tests: seeded random tensors, naive
// reductions, finite-difference gradient checks and bitwise comparison.
//
// Gradient check: for a scalar loss L(x) (usually sum(out * r) in double over a kernel's fp32
// output, r random), the numeric gradient is the central difference
//   (L(x + e) - L(x - e)) / (actual step), actual step = fl(x+e) - fl(x-e),
// so fp32 rounding of the perturbed input does not bias it. Analytic and numeric gradients
// are compared as vectors: ||a - n|| / max(||n||, floor) < tol (elementwise comparisons are
// too noisy in fp32 where a gradient entry is near zero).
// Thread-safety: test-only, single-threaded use.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace tessera::testing {

inline std::vector<float> RandomVector(size_t n, uint32_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// sum(out * r) accumulated in double.
inline double Project(const float* out, const std::vector<float>& r) {
  double s = 0.0;
  for (size_t i = 0; i < r.size(); ++i) s += static_cast<double>(out[i]) * r[i];
  return s;
}

inline bool BitEqual(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}
inline bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && BitEqual(a.data(), b.data(), a.size());
}

// ||a - b|| / max(||b||, 1e-12).
inline double RelativeError(const float* a, const float* b, size_t n) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    ref += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-12);
}

// Compares `analytic` (n = x.size() entries) with central differences of `loss` with respect
// to `x`, which is perturbed in place and restored. Checks at most `max_checks` entries,
// spread evenly, to keep big parameter tensors fast.
inline void ExpectGradMatches(const std::string& name, std::vector<float>& x,
                              const std::function<double()>& loss, const float* analytic,
                              double tol = 1e-2, float eps = 1e-3f, size_t max_checks = 400) {
  const size_t n = x.size();
  ASSERT_GT(n, 0u);
  const size_t stride = std::max<size_t>(1, n / max_checks);
  double diff2 = 0.0, ref2 = 0.0, worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < n; i += stride) {
    const float orig = x[i];
    const float up = orig + eps, down = orig - eps;
    x[i] = up;
    const double l_up = loss();
    x[i] = down;
    const double l_down = loss();
    x[i] = orig;
    const double numeric = (l_up - l_down) / (static_cast<double>(up) - down);
    const double d = analytic[i] - numeric;
    diff2 += d * d;
    ref2 += numeric * numeric;
    if (std::fabs(d) > worst) {
      worst = std::fabs(d);
      worst_i = i;
    }
  }
  const double rel = std::sqrt(diff2) / std::max(std::sqrt(ref2), 1e-9);
  EXPECT_LT(rel, tol) << name << ": relative error " << rel << ", worst entry " << worst_i
                      << " off by " << worst << " (analytic " << analytic[worst_i] << ")";
  EXPECT_GT(ref2, 0.0) << name << ": numeric gradient is all zero; the check proves nothing";
}

}  // namespace tessera::testing
