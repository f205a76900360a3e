// runtime/kernels/cpu/vec.h — private helpers for the CPU kernels: vectorisable math and
// fixed-order reductions. Not part of the public kernel API; include only from cpu/*.cc.
//
// Why these exist: the build has no -ffast-math (kernels stay IEEE and deterministic), so gcc
// neither vectorises `sum += x[i]` (that would reassociate) nor calls libmvec for expf/tanhf.
//  - Reductions use kLanes independent partial sums: the inner lane loop has no dependency,
//    so gcc vectorises it, and the order (lane j sums elements j, j+kLanes, ...; then lanes
//    0..kLanes-1; then the tail) is fixed by the code, never by the machine or thread timing.
//  - ExpF is a branch-free Cody–Waite range reduction + degree-6 polynomial (max relative
//    error ~2 ulp on [-87, 88]); being plain arithmetic, loops calling it vectorise.
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace tessera::cpu::vec {

inline constexpr int kLanes = 16;  // two AVX2 registers of fp32

// Rows of work below which an OpenMP region costs more than it saves (~a few µs of work).
inline constexpr int64_t kMinParallelElems = 1 << 14;

// exp(x) for fp32. Inputs are clamped to [-87.3, 88.3]: below, the result is ~1e-38 instead
// of a denormal or 0 (harmless in softmax/sigmoid, where it is added to >= 1 or multiplied by
// a probability); above, it saturates at ~2.4e38 instead of inf. NaN propagates.
// The bounds live in vec.cc on purpose: were they visible constants, gcc would thread the
// clamp into three paths (two constant-folded), and with -ftrapping-math (the default) it
// cannot if-convert them back, so no loop calling ExpF would vectorise.
extern const float kExpMinArg;  // -87.3f
extern const float kExpMaxArg;  // 88.3f

inline float ExpF(float x) {
  x = x < kExpMinArg ? kExpMinArg : x;
  x = x > kExpMaxArg ? kExpMaxArg : x;
  // n = round(x / ln2) via the 1.5*2^23 trick (exact under round-to-nearest, vectorisable).
  constexpr float kShifter = 12582912.0f;
  const float t = x * 1.44269504088896341f + kShifter;
  const float n = t - kShifter;
  // r = x - n*ln2, ln2 split in two so n*ln2_hi is exact (Cody–Waite).
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  // e^r on |r| <= ln2/2: 1 + r + r^2 * P(r), P a minimax fit (Cephes coefficients).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * (r * r) + r + 1.0f;
  // 2^n built from its exponent bits; the clamp keeps n in [-126, 127], a normal float. n is
  // read from t's low mantissa bits (t = 1.5*2^23 + n exactly), in unsigned arithmetic, rather
  // than by a float->int cast, which would be undefined behaviour for a NaN input.
  uint32_t t_bits;
  std::memcpy(&t_bits, &t, sizeof(t_bits));
  const uint32_t bits = (t_bits - 0x4B400000u + 127u) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return er * scale;
}

// 1 / (1 + exp(-x)), stable at both ends (exp(-x) saturates to a huge finite value or ~0).
inline float SigmoidF(float x) { return 1.0f / (1.0f + ExpF(-x)); }

// Sum of x[0..n) in the fixed lane order described above.
inline float Sum(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j];
  float s = 0.0f;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  for (; i < n; ++i) s += x[i];
  return s;
}

// Sum of x[i]*y[i], same order.
inline float Dot(const float* x, const float* y, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j] * y[i + j];
  float s = 0.0f;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

// Sum of (x[i]-c)^2, same order.
inline float SumSqDiff(const float* x, float c, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float d = x[i + j] - c;
      acc[j] += d * d;
    }
  float s = 0.0f;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  for (; i < n; ++i) s += (x[i] - c) * (x[i] - c);
  return s;
}

// Max of x[0..n), n >= 1. Max is exact, so the order does not matter for the result.
// gcc leaves the lane loop scalar (16 vmaxss per 16 elements: with -ftrapping-math it does not
// turn the select into vmaxps), so AVX builds use vmaxps(x, acc) = x > acc ? x : acc per lane,
// the same select with the same NaN and signed-zero outcome, hence the same bits.
inline float Max(const float* x, int64_t n) {
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = x[0];
  int64_t i = 0;
#if defined(__AVX__)
  static_assert(kLanes == 16, "two 8-float registers");
  __m256 lo = _mm256_set1_ps(x[0]), hi = lo;
  for (; i + kLanes <= n; i += kLanes) {
    lo = _mm256_max_ps(_mm256_loadu_ps(x + i), lo);
    hi = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), hi);
  }
  _mm256_storeu_ps(acc, lo);
  _mm256_storeu_ps(acc + 8, hi);
#else
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
#endif
  float m = acc[0];
  for (int j = 1; j < kLanes; ++j) m = acc[j] > m ? acc[j] : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// x[i] = exp(x[i] - shift) in place; returns the sum of the new values, accumulated in double
// lanes (a 50k-wide vocabulary row loses ~1e-4 relative in fp32 lanes, ~1e-13 in double).
inline double ExpShiftSum(float* x, float shift, int64_t n) {
  constexpr int kD = 8;
  double acc[kD] = {};
  int64_t i = 0;
  for (; i + kD <= n; i += kD)
    for (int j = 0; j < kD; ++j) {
      const float e = ExpF(x[i + j] - shift);
      x[i + j] = e;
      acc[j] += static_cast<double>(e);
    }
  double s = 0.0;
  for (int j = 0; j < kD; ++j) s += acc[j];
  for (; i < n; ++i) {
    const float e = ExpF(x[i] - shift);
    x[i] = e;
    s += static_cast<double>(e);
  }
  return s;
}

// sums(OC) += the column sums of x(N, OC) (a linear layer's d_bias), each column's rows added
// in index order inside its block of 64 columns, so the result is independent of the thread
// count. `widen(v)` gives the float of one element (identity for fp32, bf16 -> fp32).
template <typename T, typename Widen>
void AddColumnSums(float* sums, const T* x, int64_t N, int64_t OC, Widen widen) {
  constexpr int64_t kBlock = 64;  // 64 floats = 4 cache lines: threads never share a line
  const int64_t num_blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * OC >= kMinParallelElems)
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t width = std::min(kBlock, OC - c0);
    float acc[kBlock] = {};
    for (int64_t i = 0; i < N; ++i) {
      const T* row = x + i * OC + c0;
      for (int64_t c = 0; c < width; ++c) acc[c] += widen(row[c]);
    }
    for (int64_t c = 0; c < width; ++c) sums[c0 + c] += acc[c];
  }
}

}  // namespace tessera::cpu::vec
