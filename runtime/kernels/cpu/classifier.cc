// runtime/kernels/cpu/classifier.cc — LM head fused with softmax cross-entropy.
//
// Owns: ClassifierForwardBackward (ops.h) and its bf16 form ClassifierForwardBackwardBf16
// (bf16_gemm.h): one chunked softmax cross-entropy over two kinds of GEMM.
// Memory: rows go through `logits_scratch` (chunk_rows, V) one chunk at a time, so the full
// (N, V) logits never exist; the same buffer holds exp values, then d_logits, in place.
// Threads: the three products per chunk (logits, d_x, d_weight) are multithreaded Gemm
// (cblas_sgemm; GemmBf16) calls made outside OpenMP regions; the per-row softmax work in between is an
// OpenMP loop over rows. Determinism: each row's statistics use vec.h's fixed order; the
// returned loss sum adds per-row losses in row order in double after the parallel loop.
// Invariant: targets are in [0, V) or negative (= ignored); anything else is a CHECK failure
// (the data layer validates ids first).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu/bf16_gemm.h"
#include "runtime/kernels/cpu/convert.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu {

namespace {

// Per row i with target y: m = max(l), s = sum exp(l - m)
//   loss_i = log(s) + m - l[y]
//   d_logits_i = loss_scale * (exp(l - m) / s - onehot(y))   (0 for ignored rows)
//   d_x = d_logits @ weight (written), d_weight += d_logits^T @ x
// One copy of the chunked softmax cross-entropy for both GEMM types: `products` computes a
// chunk's three products, Logits(r0, rows, logits) and, in backward, Grads(r0, rows,
// d_logits) for d_x and d_weight.
template <typename Products>
double Classify(float* losses, bool backward, const int32_t* targets, int64_t N, int64_t V,
                float loss_scale, float* logits_scratch, int64_t chunk_rows,
                Products& products) {
  TESSERA_CHECK(chunk_rows > 0);
  for (int64_t i = 0; i < N; ++i)
    TESSERA_CHECK_MSG(targets[i] < V, "target %d at row %lld is >= V=%lld", targets[i],
                      static_cast<long long>(i), static_cast<long long>(V));
  std::vector<double> row_loss(static_cast<size_t>(std::min(chunk_rows, N)));
  double loss_sum = 0.0;
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, N - r0);
    float* logits = logits_scratch;  // (rows, V)
    products.Logits(r0, rows, logits);
#pragma omp parallel for schedule(static) if (rows * V >= vec::kMinParallelElems)
    for (int64_t r = 0; r < rows; ++r) {
      float* row = logits + r * V;
      const int32_t target = targets[r0 + r];
      if (target < 0) {
        row_loss[r] = 0.0;
        if (backward) std::memset(row, 0, V * sizeof(float));
        continue;
      }
      const float target_logit = row[target];
      const float m = vec::Max(row, V);
      const double sum = vec::ExpShiftSum(row, m, V);  // row now holds exp(l - m)
      const double loss = std::log(sum) + static_cast<double>(m) - target_logit;
      row_loss[r] = loss;
      if (backward) {
        const float g = static_cast<float>(static_cast<double>(loss_scale) / sum);
        for (int64_t j = 0; j < V; ++j) row[j] *= g;
        row[target] -= loss_scale;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      losses[r0 + r] = static_cast<float>(row_loss[r]);
      loss_sum += row_loss[r];
    }
    if (backward) products.Grads(r0, rows, logits);
  }
  return loss_sum;
}

struct Fp32Products {
  const float *x, *weight;
  float *d_x, *d_weight;
  int64_t C, V;
  void Logits(int64_t r0, int64_t rows, float* logits) const {
    Gemm(false, true, rows, V, C, 1.0f, x + r0 * C, C, weight, C, 0.0f, logits, V);
  }
  void Grads(int64_t r0, int64_t rows, const float* d_logits) const {
    // d_x(rows, C) = d_logits(rows, V) @ weight(V, C)
    Gemm(false, false, rows, C, V, 1.0f, d_logits, V, weight, C, 0.0f, d_x + r0 * C, C);
    // d_weight(V, C) += d_logits^T(V, rows) @ x(rows, C)
    if (d_weight != nullptr)
      Gemm(true, false, V, C, rows, 1.0f, d_logits, V, x + r0 * C, C, 1.0f, d_weight, C);
  }
};

// The same products with bf16 operands: d_logits is rounded to bf16 (d_logits_bf16) first.
struct Bf16Products {
  const uint16_t *x, *weight;
  float *d_x, *d_weight;
  uint16_t* d_logits_bf16;
  int64_t C, V;
  void Logits(int64_t r0, int64_t rows, float* logits) const {
    GemmBf16(false, true, rows, V, C, x + r0 * C, C, weight, C, false, logits, V);
  }
  void Grads(int64_t r0, int64_t rows, const float* d_logits) const {
    ConvertFromF32(DType::kBF16, d_logits, d_logits_bf16, rows * V);
    GemmBf16(false, false, rows, C, V, d_logits_bf16, V, weight, C, false, d_x + r0 * C, C);
    if (d_weight != nullptr) {
      GemmBf16(true, false, V, C, rows, d_logits_bf16, V, x + r0 * C, C, true, d_weight, C);
    }
  }
};

}  // namespace

double ClassifierForwardBackward(float* losses, float* d_x, float* d_weight, const float* x,
                                 const float* weight, const int32_t* targets, int64_t N,
                                 int64_t C, int64_t V, float loss_scale, float* logits_scratch,
                                 int64_t chunk_rows) {
  Fp32Products p{x, weight, d_x, d_weight, C, V};
  return Classify(losses, d_x != nullptr, targets, N, V, loss_scale, logits_scratch,
                  chunk_rows, p);
}

double ClassifierForwardBackwardBf16(float* losses, float* d_x, float* d_weight,
                                     const uint16_t* x, const uint16_t* weight,
                                     const int32_t* targets, int64_t N, int64_t C, int64_t V,
                                     float loss_scale, float* logits_scratch,
                                     uint16_t* d_logits_scratch, int64_t chunk_rows) {
  Bf16Products p{x, weight, d_x, d_weight, d_logits_scratch, C, V};
  return Classify(losses, d_x != nullptr, targets, N, V, loss_scale, logits_scratch,
                  chunk_rows, p);
}

}  // namespace tessera::cpu
