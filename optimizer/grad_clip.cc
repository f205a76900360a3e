// optimizer/grad_clip.cc — blocked, thread-count-independent norm and clipping.
#include "optimizer/grad_clip.h"

#include <cmath>
#include <vector>

#include "runtime/core/check.h"

namespace tessera {
namespace {

// One block's sum of squares. The simd reduction's lane order is fixed at compile time, so a
// block always sums the same way whichever thread runs it.
double BlockSumOfSquares(const float* __restrict x, int64_t n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    const double xi = x[i];
    s += xi * xi;
  }
  return s;
}

}  // namespace

void BlockSumsOfSquares(const float* x, int64_t n, double* partial) {
  TESSERA_CHECK(n >= 0);
  const int64_t num_blocks = NumNormBlocks(n);
#pragma omp parallel for schedule(static) if (num_blocks > 1)
  for (int64_t b = 0; b < num_blocks; ++b) {
    const int64_t begin = b * kNormBlock;
    const int64_t len = n - begin < kNormBlock ? n - begin : kNormBlock;
    partial[b] = BlockSumOfSquares(x + begin, len);
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
  const double coef = ClipCoefficient(norm, max_norm);
  if (coef < 1.0) ScaleInPlace(x, n, static_cast<float>(coef));
}

double ClipGradNorm(float* grads, int64_t n, double max_norm) {
  const double norm = GlobalL2Norm(grads, n);
  ClipToNorm(grads, n, norm, max_norm);
  return norm;
}

}  // namespace tessera
