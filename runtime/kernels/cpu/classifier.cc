// runtime/kernels/cpu/classifier.cc — LM head fused with softmax cross-entropy.
//
// Owns: ClassifierForwardBackward (ops.h).
// Memory: rows go through `logits_scratch` (chunk_rows, V) one chunk at a time, so the full
// (N, V) logits never exist; the same buffer holds exp values, then d_logits, in place.
// Threads: the three products per chunk (logits, d_x, d_weight) are multithreaded Gemm
// (cblas_sgemm) calls made outside OpenMP regions; the per-row softmax work in between is an
// OpenMP loop over rows. Determinism: each row's statistics use vec.h's fixed order; the
// returned loss sum adds per-row losses in row order in double after the parallel loop.
// Invariant: targets are in [0, V) or negative (= ignored); anything else is a CHECK failure
// (the data layer validates ids first).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu {

// Per row i with target y: m = max(l), s = sum exp(l - m)
//   loss_i = log(s) + m - l[y]
//   d_logits_i = loss_scale * (exp(l - m) / s - onehot(y))   (0 for ignored rows)
//   d_x = d_logits @ weight (written), d_weight += d_logits^T @ x
double ClassifierForwardBackward(float* losses, float* d_x, float* d_weight, const float* x,
                                 const float* weight, const int32_t* targets, int64_t N,
                                 int64_t C, int64_t V, float loss_scale, float* logits_scratch,
                                 int64_t chunk_rows) {
  TESSERA_CHECK(chunk_rows > 0);
  for (int64_t i = 0; i < N; ++i)
    TESSERA_CHECK_MSG(targets[i] < V, "target %d at row %lld is >= V=%lld", targets[i],
                      static_cast<long long>(i), static_cast<long long>(V));
  const bool backward = d_x != nullptr;
  std::vector<double> row_loss(static_cast<size_t>(std::min(chunk_rows, N)));
  double loss_sum = 0.0;
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, N - r0);
    float* logits = logits_scratch;  // (rows, V)
    Gemm(false, true, rows, V, C, 1.0f, x + r0 * C, C, weight, C, 0.0f, logits, V);
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
    if (!backward) continue;
    // d_x(rows, C) = d_logits(rows, V) @ weight(V, C)
    Gemm(false, false, rows, C, V, 1.0f, logits, V, weight, C, 0.0f, d_x + r0 * C, C);
    // d_weight(V, C) += d_logits^T(V, rows) @ x(rows, C)
    if (d_weight != nullptr)
      Gemm(true, false, V, C, rows, 1.0f, logits, V, x + r0 * C, C, 1.0f, d_weight, C);
  }
  return loss_sum;
}

}  // namespace tessera::cpu
