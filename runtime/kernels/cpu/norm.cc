// runtime/kernels/cpu/norm.cc — LayerNorm (GPT-2) and RMSNorm (Llama), forward and backward.
//
// Owns: LayerNormForward/Backward, RmsNormForward/Backward (ops.h).
// Threads: per-row work (statistics, output, d_inp) is parallel over rows. The parameter
// gradients (d_weight, d_bias) are reductions over rows; they run parallel over channel
// blocks, each block summing rows in index order, so their bits depend neither on the
// thread count nor on scheduling. Row statistics use the fixed lane order of vec.h.
// mean/rstd outputs may be null (then nothing is saved).
#include <algorithm>
#include <cmath>

#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kChannelBlock = 64;

int64_t NumChannelBlocks(int64_t C) { return (C + kChannelBlock - 1) / kChannelBlock; }

}  // namespace

// mean = sum(x)/C; var = sum((x-mean)^2)/C (biased, as torch); rstd = 1/sqrt(var + eps)
// out = (x - mean) * rstd * weight + bias
void LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (N * C >= vec::kMinParallelElems)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    const float m = vec::Sum(x, C) / static_cast<float>(C);
    const float var = vec::SumSqDiff(x, m, C) / static_cast<float>(C);
    const float s = 1.0f / std::sqrt(var + eps);
    float* o = out + i * C;
    for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    if (mean != nullptr) mean[i] = m;
    if (rstd != nullptr) rstd[i] = s;
  }
}

// With n = (x - mean) * rstd and g = weight * d_out:
//   d_x = rstd * (g - mean(g) - n * mean(g * n))
//   d_weight += sum_rows d_out * n,  d_bias += sum_rows d_out
void LayerNormBackward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                       const float* inp, const float* weight, const float* mean,
                       const float* rstd, int64_t N, int64_t C) {
  const bool parallel = N * C >= vec::kMinParallelElems;
  // Parameter gradients first, so that d_inp may alias d_out (d_inp pass reads a row of d_out
  // before writing the same row).
  if (d_weight != nullptr || d_bias != nullptr) {
    const int64_t num_blocks = NumChannelBlocks(C);
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t blk = 0; blk < num_blocks; ++blk) {
      const int64_t c0 = blk * kChannelBlock;
      const int64_t width = std::min(kChannelBlock, C - c0);
      float acc_w[kChannelBlock] = {}, acc_b[kChannelBlock] = {};
      for (int64_t i = 0; i < N; ++i) {
        const float* x = inp + i * C + c0;
        const float* dy = d_out + i * C + c0;
        const float m = mean[i], s = rstd[i];
        for (int64_t c = 0; c < width; ++c) {
          acc_w[c] += dy[c] * ((x[c] - m) * s);
          acc_b[c] += dy[c];
        }
      }
      if (d_weight != nullptr)
        for (int64_t c = 0; c < width; ++c) d_weight[c0 + c] += acc_w[c];
      if (d_bias != nullptr)
        for (int64_t c = 0; c < width; ++c) d_bias[c0 + c] += acc_b[c];
    }
  }
  if (d_inp != nullptr) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < N; ++i) {
      const float* x = inp + i * C;
      const float* dy = d_out + i * C;
      float* dx = d_inp + i * C;
      const float m = mean[i], s = rstd[i];
      // dx doubles as scratch: first g, then the result.
      for (int64_t c = 0; c < C; ++c) dx[c] = weight[c] * dy[c];
      float g_sum = 0.0f, gn_sum = 0.0f;
      {
        float acc_g[vec::kLanes] = {}, acc_gn[vec::kLanes] = {};
        int64_t c = 0;
        for (; c + vec::kLanes <= C; c += vec::kLanes)
          for (int j = 0; j < vec::kLanes; ++j) {
            acc_g[j] += dx[c + j];
            acc_gn[j] += dx[c + j] * ((x[c + j] - m) * s);
          }
        for (int j = 0; j < vec::kLanes; ++j) {
          g_sum += acc_g[j];
          gn_sum += acc_gn[j];
        }
        for (; c < C; ++c) {
          g_sum += dx[c];
          gn_sum += dx[c] * ((x[c] - m) * s);
        }
      }
      const float g_mean = g_sum / static_cast<float>(C);
      const float gn_mean = gn_sum / static_cast<float>(C);
      for (int64_t c = 0; c < C; ++c) dx[c] = s * (dx[c] - g_mean - ((x[c] - m) * s) * gn_mean);
    }
  }
}

// rstd = 1/sqrt(mean(x^2) + eps); out = x * rstd * weight
void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                    int64_t C, float eps) {
  RmsNormForwardRows(out, {}, rstd, inp, {}, weight, N, C, eps);
}

void RmsNormBackward(float* d_inp, float* d_weight, const float* d_out, const float* inp,
                     const float* weight, const float* rstd, int64_t N, int64_t C) {
  RmsNormBackwardRows(d_inp, {}, d_weight, d_out, {}, inp, {}, weight, rstd, N, C);
}

void RmsNormForwardRows(float* out, NormRows out_rows, float* rstd, const float* inp,
                        NormRows in_rows, const float* weight, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (N * C >= vec::kMinParallelElems)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + in_rows.At(i, C);
    const float s = 1.0f / std::sqrt(vec::Dot(x, x, C) / static_cast<float>(C) + eps);
    float* o = out + out_rows.At(i, C);
    for (int64_t c = 0; c < C; ++c) o[c] = x[c] * s * weight[c];
    if (rstd != nullptr) rstd[i] = s;
  }
}

// With n = x * rstd and g = weight * d_out:
//   d_x = rstd * (g - n * mean(g * n)),  d_weight += sum_rows d_out * n
void RmsNormBackwardRows(float* d_inp, NormRows d_inp_rows, float* d_weight, const float* d_out,
                         NormRows d_out_rows, const float* inp, NormRows in_rows,
                         const float* weight, const float* rstd, int64_t N, int64_t C) {
  const bool parallel = N * C >= vec::kMinParallelElems;
  // Parameter gradient first, so that d_inp may alias d_out.
  if (d_weight != nullptr) {
    const int64_t num_blocks = NumChannelBlocks(C);
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t blk = 0; blk < num_blocks; ++blk) {
      const int64_t c0 = blk * kChannelBlock;
      const int64_t width = std::min(kChannelBlock, C - c0);
      float acc[kChannelBlock] = {};
      for (int64_t i = 0; i < N; ++i) {
        const float* x = inp + in_rows.At(i, C) + c0;
        const float* dy = d_out + d_out_rows.At(i, C) + c0;
        const float s = rstd[i];
        for (int64_t c = 0; c < width; ++c) acc[c] += dy[c] * (x[c] * s);
      }
      for (int64_t c = 0; c < width; ++c) d_weight[c0 + c] += acc[c];
    }
  }
  if (d_inp != nullptr) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < N; ++i) {
      const float* x = inp + in_rows.At(i, C);
      const float* dy = d_out + d_out_rows.At(i, C);
      float* dx = d_inp + d_inp_rows.At(i, C);
      const float s = rstd[i];
      for (int64_t c = 0; c < C; ++c) dx[c] = weight[c] * dy[c];
      // mean(g * n) = rstd * mean(g * x)
      const float gn_mean = s * vec::Dot(dx, x, C) / static_cast<float>(C);
      for (int64_t c = 0; c < C; ++c) dx[c] = s * (dx[c] - (x[c] * s) * gn_mean);
    }
  }
}

}  // namespace tessera::cpu
