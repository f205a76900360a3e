// optimizer/grad_clip.cc — blocked, thread-count-independent norm and clipping.
#include "optimizer/grad_clip.h"

#include <cmath>
#include <vector>

#include "runtime/core/check.h"

namespace tessera {
namespace {

// The order of one block's sum is part of the result's bits. It is the order gcc 12 gave the
// original `omp simd reduction` loop at -march=x86-64-v3 (8 double lanes), now written out so
// it no longer depends on the compiler's choice: lane j sums x[j], x[j+8], ... over the whole
// groups of 8; the tail (len % 8 elements) goes into lane 0 in order; then 0.0 + lane 0 + ... +
// lane 7. Squares of floats are exact in double, so fused or separate multiply-adds agree.
constexpr int kNormLanes = 8;

double AddLanes(const double* acc) {
  double s = 0.0;
  for (int j = 0; j < kNormLanes; ++j) s += acc[j];
  return s;
}

double BlockSumOfSquares(const float* __restrict x, int64_t n) {
  double acc[kNormLanes] = {};
  int64_t i = 0;
  for (; i + kNormLanes <= n; i += kNormLanes)
    for (int j = 0; j < kNormLanes; ++j) {
      const double xi = x[i + j];
      acc[j] += xi * xi;
    }
  for (; i < n; ++i) {
    const double xi = x[i];
    acc[0] += xi * xi;
  }
  return AddLanes(acc);
}

// Blocks per interleaved group. One block's lanes form 8 dependent add chains, which on
// their own bound the loop by the add latency (~half the read bandwidth); four full blocks
// summed side by side give 32 independent chains, each still in its own block's order.
constexpr int64_t kInterleave = 4;

// partial[k] = BlockSumOfSquares(x + k * kNormBlock, kNormBlock) for k < kInterleave.
void FullBlockSumsOfSquares(const float* __restrict x, double* partial) {
  double acc[kInterleave][kNormLanes] = {};
  for (int64_t i = 0; i < kNormBlock; i += kNormLanes)
    for (int64_t k = 0; k < kInterleave; ++k)
      for (int j = 0; j < kNormLanes; ++j) {
        const double xi = x[k * kNormBlock + i + j];
        acc[k][j] += xi * xi;
      }
  for (int64_t k = 0; k < kInterleave; ++k) partial[k] = AddLanes(acc[k]);
}

}  // namespace

void BlockSumsOfSquares(const float* x, int64_t n, double* partial) {
  TESSERA_CHECK(n >= 0);
  const int64_t num_blocks = NumNormBlocks(n);
  // Groups of kInterleave blocks; the last group may hold fewer, or a partial block.
  const int64_t num_groups = (num_blocks + kInterleave - 1) / kInterleave;
#pragma omp parallel for schedule(static) if (num_groups > 1)
  for (int64_t grp = 0; grp < num_groups; ++grp) {
    const int64_t first = grp * kInterleave;
    if ((first + kInterleave) * kNormBlock <= n) {
      FullBlockSumsOfSquares(x + first * kNormBlock, partial + first);
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
