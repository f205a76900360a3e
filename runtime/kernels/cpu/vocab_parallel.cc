// runtime/kernels/cpu/vocab_parallel.cc — the pieces tensor parallelism needs beside the
// ordinary kernels: bias and position adds done after a reduction, the vocab-parallel
// embedding and the vocab-parallel LM head + cross-entropy (ops.h, "Tensor parallelism").
//
// Owns: AddBias, AddPositions, VocabEmbeddingForward/Backward, VocabParallelClassifier.
// Threads and determinism as ops.h: OpenMP over rows (or channel blocks where rows would
// share an output), fixed summation orders, Gemm outside parallel regions.
// The classifier never gathers the logits: per chunk each rank reduces its rows' maxima and
// then its [sum of exp | target logit] pairs through the caller's `combine` (two small
// collectives per chunk), which is what makes the loss independent of how the vocabulary is
// split (up to float rounding of the partial sums).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kChannelBlock = 64;  // floats per work item, as embedding.cc

}  // namespace

void AddBias(float* out, const float* bias, int64_t N, int64_t OC) {
#pragma omp parallel for schedule(static) if (N * OC >= vec::kMinParallelElems)
  for (int64_t i = 0; i < N; ++i) {
    float* o = out + i * OC;
    for (int64_t c = 0; c < OC; ++c) o[c] += bias[c];
  }
}

void AddPositions(float* out, const float* wpe, int64_t row_begin, int64_t rows, int64_t T,
                  int64_t C) {
#pragma omp parallel for schedule(static) if (rows * C >= vec::kMinParallelElems)
  for (int64_t i = 0; i < rows; ++i) {
    float* o = out + i * C;
    const float* p = wpe + ((row_begin + i) % T) * C;
    for (int64_t c = 0; c < C; ++c) o[c] += p[c];
  }
}

void VocabEmbeddingForward(float* out, const int32_t* tokens, const float* wte_local,
                           int64_t vocab_begin, int64_t vocab_rows, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C >= vec::kMinParallelElems)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
    float* o = out + i * C;
    if (row >= 0 && row < vocab_rows) {
      std::memcpy(o, wte_local + row * C, C * sizeof(float));
    } else {
      std::memset(o, 0, C * sizeof(float));
    }
  }
}

void VocabEmbeddingBackward(float* d_wte_local, const float* d_out, const int32_t* tokens,
                            int64_t vocab_begin, int64_t vocab_rows, int64_t N, int64_t C) {
  const int64_t num_blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (N * C >= vec::kMinParallelElems)
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    const int64_t c0 = blk * kChannelBlock;
    const int64_t width = std::min(kChannelBlock, C - c0);
    for (int64_t i = 0; i < N; ++i) {  // tokens in order: deterministic accumulation
      const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
      if (row < 0 || row >= vocab_rows) continue;
      float* dst = d_wte_local + row * C + c0;
      const float* src = d_out + i * C + c0;
      for (int64_t c = 0; c < width; ++c) dst[c] += src[c];
    }
  }
}

// Per row i with target y, over the global vocabulary (m, s, l[y] reduced across ranks):
//   m = max(l), s = sum exp(l - m), loss_i = log(s) + m - l[y]
//   d_logits_i = loss_scale * (exp(l - m) / s - onehot(y)) on this rank's real columns
double VocabParallelClassifier(float* losses, float* d_x, float* d_weight, const float* x,
                               const float* weight, const int32_t* targets, int64_t N,
                               int64_t C, int64_t V_local, int64_t V_real, int64_t vocab_begin,
                               float loss_scale, float* logits_scratch, int64_t chunk_rows,
                               CombineFn combine, void* combine_ctx) {
  TESSERA_CHECK(chunk_rows > 0 && V_real >= 0 && V_real <= V_local);
  const bool backward = d_x != nullptr;
  const int64_t cap = std::min(chunk_rows, N);
  std::vector<float> maxima(static_cast<size_t>(cap));
  std::vector<float> pairs(static_cast<size_t>(2 * cap));  // [sum exp, target logit] per row
  double loss_sum = 0.0;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, N - r0);
    float* logits = logits_scratch;  // (rows, V_local)
    Gemm(false, true, rows, V_local, C, 1.0f, x + r0 * C, C, weight, C, 0.0f, logits, V_local);
    for (int64_t r = 0; r < rows; ++r) {
      maxima[r] = V_real > 0 ? vec::Max(logits + r * V_local, V_real) : kNegInf;
    }
    combine(combine_ctx, maxima.data(), rows, /*max=*/true);
#pragma omp parallel for schedule(static) if (rows * V_local >= vec::kMinParallelElems)
    for (int64_t r = 0; r < rows; ++r) {
      float* row = logits + r * V_local;
      const int64_t target = targets[r0 + r];
      const int64_t local_target = target - vocab_begin;
      const bool mine = target >= 0 && local_target >= 0 && local_target < V_real;
      pairs[2 * r + 1] = mine ? row[local_target] : 0.0f;
      if (target < 0) {  // ignored row: no loss, no gradient
        pairs[2 * r] = 0.0f;
        std::memset(row, 0, V_local * sizeof(float));
        continue;
      }
      pairs[2 * r] = static_cast<float>(vec::ExpShiftSum(row, maxima[r], V_real));
      std::memset(row + V_real, 0, (V_local - V_real) * sizeof(float));  // padding: no logit
    }
    combine(combine_ctx, pairs.data(), 2 * rows, /*max=*/false);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t target = targets[r0 + r];
      double loss = 0.0;
      if (target >= 0) {
        loss = std::log(static_cast<double>(pairs[2 * r])) + static_cast<double>(maxima[r]) -
               pairs[2 * r + 1];
      }
      losses[r0 + r] = static_cast<float>(loss);
      loss_sum += loss;
    }
    if (!backward) continue;
#pragma omp parallel for schedule(static) if (rows * V_local >= vec::kMinParallelElems)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t target = targets[r0 + r];
      if (target < 0) continue;  // already zero
      float* row = logits + r * V_local;
      const float g = static_cast<float>(static_cast<double>(loss_scale) / pairs[2 * r]);
      for (int64_t j = 0; j < V_real; ++j) row[j] *= g;
      const int64_t local_target = target - vocab_begin;
      if (local_target >= 0 && local_target < V_real) row[local_target] -= loss_scale;
    }
    // d_x(rows, C) = d_logits(rows, V_local) @ weight(V_local, C): this rank's part
    Gemm(false, false, rows, C, V_local, 1.0f, logits, V_local, weight, C, 0.0f, d_x + r0 * C, C);
    if (d_weight != nullptr) {
      Gemm(true, false, V_local, C, rows, 1.0f, logits, V_local, x + r0 * C, C, 1.0f, d_weight,
           C);
    }
  }
  return loss_sum;
}

}  // namespace tessera::cpu
