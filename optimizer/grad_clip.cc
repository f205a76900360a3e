// optimizer/grad_clip.cc — blocked, thread-count-independent norm and clipping.
#include "optimizer/grad_clip.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu/cpu_features.h"

namespace tessera {
namespace {

// The order of one block's sum is part of the result's bits. It is the order gcc 12 gave the
// original `omp simd reduction` loop at -march=x86-64-v3 (8 double lanes), now written out so
// it no longer depends on the compiler's choice: lane j sums x[j], x[j+8], ... over the whole
// groups of 8; the tail (len % 8 elements) goes into lane 0 in order; then 0.0 + lane 0 + ... +
// lane 7. Squares of floats are exact in double, so fused or separate multiply-adds agree.
constexpr int kNormLanes = 8;

// The eight lanes as two halves of four doubles (GCC vector types, one ymm register each at
// -march=x86-64-v3): the lane order above is then the code itself, and gcc emits straight
// vector loads, conversions and fused multiply-adds. Written as plain loops, gcc vectorised
// across the interleaved blocks instead, gathering every lane with scalar loads: about half
// the read bandwidth.
typedef float F32x4 __attribute__((vector_size(16)));
typedef double F64x4 __attribute__((vector_size(32)));
struct Lanes {
  F64x4 lo = {}, hi = {};  // lanes 0-3 and 4-7
};

inline F64x4 Widen4(const float* x) {
  F32x4 f;
  std::memcpy(&f, x, sizeof f);  // unaligned load
  return __builtin_convertvector(f, F64x4);
}

// acc lane j += x[j]^2 for j < 8.
inline void AddSquares8(Lanes& acc, const float* x) {
  const F64x4 lo = Widen4(x), hi = Widen4(x + 4);
  acc.lo += lo * lo;
  acc.hi += hi * hi;
}

double AddLanes(const Lanes& acc) {
  double s = 0.0;
  for (int j = 0; j < 4; ++j) s += acc.lo[j];
  for (int j = 0; j < 4; ++j) s += acc.hi[j];
  return s;
}

double BlockSumOfSquares(const float* __restrict x, int64_t n) {
  Lanes acc;
  int64_t i = 0;
  for (; i + kNormLanes <= n; i += kNormLanes) AddSquares8(acc, x + i);
  for (; i < n; ++i) {
    const double xi = x[i];
    acc.lo[0] += xi * xi;
  }
  return AddLanes(acc);
}

// Blocks per interleaved group. One block's lanes form 8 dependent add chains, which on
// their own bound the loop by the add latency (~half the read bandwidth); four full blocks
// summed side by side give 32 independent chains, each still in its own block's order.
constexpr int64_t kInterleave = 4;

// partial[k] = BlockSumOfSquares(x + k * kNormBlock, kNormBlock) for k < kInterleave.
void FullBlockSumsOfSquaresAvx2(const float* __restrict x, double* partial) {
  Lanes acc[kInterleave];
  for (int64_t i = 0; i < kNormBlock; i += kNormLanes) {
    for (int64_t k = 0; k < kInterleave; ++k) AddSquares8(acc[k], x + k * kNormBlock + i);
  }
  for (int64_t k = 0; k < kInterleave; ++k) partial[k] = AddLanes(acc[k]);
}

// The same with the eight lanes in one zmm register: one conversion and one fused multiply-add
// per 8 elements instead of two each, the same additions in the same order (so the same
// bits). About 1.2x the AVX2 loop's rate on 2 threads of an AVX-512 CPU (Zen 5).
typedef float F32x8 __attribute__((vector_size(32)));
typedef double F64x8 __attribute__((vector_size(64)));  // only inside the AVX-512 function

__attribute__((target("avx512f"))) void FullBlockSumsOfSquaresAvx512(const float* __restrict x,
                                                                   double* partial) {
  F64x8 acc[kInterleave] = {};
  for (int64_t i = 0; i < kNormBlock; i += kNormLanes) {
    for (int64_t k = 0; k < kInterleave; ++k) {
      F32x8 f;
      std::memcpy(&f, x + k * kNormBlock + i, sizeof f);
      const F64x8 v = __builtin_convertvector(f, F64x8);
      acc[k] += v * v;
    }
  }
  for (int64_t k = 0; k < kInterleave; ++k) {
    double s = 0.0;
    for (int j = 0; j < kNormLanes; ++j) s += acc[k][j];
    partial[k] = s;
  }
}

}  // namespace

NormPath ActiveNormPath() {
  static const NormPath path = [] {
    const cpu::CpuFeatures f = cpu::DetectCpuFeatures();
    return f.avx512f && f.os_avx512 ? NormPath::kAvx512 : NormPath::kAvx2;
  }();
  return path;
}

const char* NormPathName(NormPath p) { return p == NormPath::kAvx512 ? "AVX-512" : "AVX2"; }

void BlockSumsOfSquares(const float* x, int64_t n, double* partial) {
  BlockSumsOfSquares(x, n, partial, ActiveNormPath());
}

void BlockSumsOfSquares(const float* x, int64_t n, double* partial, NormPath path) {
  TESSERA_CHECK(n >= 0);
  TESSERA_CHECK_MSG(path != NormPath::kAvx512 || ActiveNormPath() == NormPath::kAvx512,
                    "the AVX-512 norm on a CPU without AVX-512");
  const auto full = path == NormPath::kAvx512 ? FullBlockSumsOfSquaresAvx512
                                              : FullBlockSumsOfSquaresAvx2;
  const int64_t num_blocks = NumNormBlocks(n);
  // Groups of kInterleave blocks; the last group may hold fewer, or a partial block.
  const int64_t num_groups = (num_blocks + kInterleave - 1) / kInterleave;
#pragma omp parallel for schedule(static) if (num_groups > 1)
  for (int64_t grp = 0; grp < num_groups; ++grp) {
    const int64_t first = grp * kInterleave;
    if ((first + kInterleave) * kNormBlock <= n) {
      full(x + first * kNormBlock, partial + first);
      continue;
    }
    for (int64_t b = first; b < num_blocks; ++b) {
      const int64_t begin = b * kNormBlock;
      const int64_t len = n - begin < kNormBlock ? n - begin : kNormBlock;
      partial[b] = BlockSumOfSquares(x + begin, len);
    }
  }
}

double SumOfSquares(const float* x, int64_t n) {
  TESSERA_CHECK(n >= 0);
  std::vector<double> partial(static_cast<size_t>(NumNormBlocks(n)));
  BlockSumsOfSquares(x, n, partial.data());
  double total = 0.0;
  for (double p : partial) total += p;  // block order: independent of the thread count
  return total;
}

double GlobalL2Norm(const float* x, int64_t n) { return std::sqrt(SumOfSquares(x, n)); }

double ClipCoefficient(double norm, double max_norm) {
  if (!(max_norm > 0.0) || !std::isfinite(norm)) return 1.0;
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

float ClipScale(double norm, double max_norm) {
  const double coef = ClipCoefficient(norm, max_norm);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

void ScaleInPlace(float* x, int64_t n, float scale) {
  TESSERA_CHECK(n >= 0);
  const int64_t num_blocks = NumNormBlocks(n);
#pragma omp parallel for schedule(static) if (num_blocks > 1)
  for (int64_t b = 0; b < num_blocks; ++b) {
    float* __restrict xb = x + b * kNormBlock;
    const int64_t len = n - b * kNormBlock < kNormBlock ? n - b * kNormBlock : kNormBlock;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) xb[i] *= scale;
  }
}

void ClipToNorm(float* x, int64_t n, double norm, double max_norm) {
  const float scale = ClipScale(norm, max_norm);
  if (scale != 1.0f) ScaleInPlace(x, n, scale);
}

double ClipGradNorm(float* grads, int64_t n, double max_norm) {
  const double norm = GlobalL2Norm(grads, n);
  ClipToNorm(grads, n, norm, max_norm);
  return norm;
}

}  // namespace tessera
