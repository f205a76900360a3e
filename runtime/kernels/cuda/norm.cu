// runtime/kernels/cuda/norm.cu — LayerNorm and RMSNorm forward and backward (the formulas of
// runtime/kernels/cpu/norm.cc), RMSNorm also over strided rows (Qwen3's per-head q/k norms).
// A row's statistics: one block per row, a fixed per-thread stride then BlockSum's fixed tree.
// The weight and bias gradients are sums over rows: column_sum.cuh, run before d_inp is
// written so that d_inp may alias d_out, as on the CPU.
#include "runtime/kernels/cuda/column_sum.cuh"

namespace tessera::cuda {
namespace {

__device__ inline int64_t RowAt(Rows r, int64_t i, int64_t C) {
  return r.stride == 0 ? i * C : (i / r.per) * r.stride + (i % r.per) * C;
}

// Threads per row block: enough for C, at most 512, a multiple of the warp.
int RowThreads(int64_t C) { return RowBlockThreads(C, 512); }

__global__ void LayerNormForwardKernel(float* out, float* mean, float* rstd, const float* inp,
                                       const float* weight, const float* bias, int64_t C,
                                       float eps) {
  __shared__ float shared[kWarp];
  const int64_t i = blockIdx.x;
  const float* x = inp + i * C;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += x[c];
  const float m = BlockSum(sum, shared) / static_cast<float>(C);
  float sq = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sq += (x[c] - m) * (x[c] - m);
  const float var = BlockSum(sq, shared) / static_cast<float>(C);
  const float s = 1.0f / sqrtf(var + eps);
  float* o = out + i * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (threadIdx.x == 0) {
    if (mean != nullptr) mean[i] = m;
    if (rstd != nullptr) rstd[i] = s;
  }
}

// d_x = rstd * (g - mean(g) - n * mean(g * n)), g = weight * d_out, n = (x - mean) * rstd.
__global__ void LayerNormInputGradKernel(float* d_inp, const float* d_out, const float* inp,
                                         const float* weight, const float* mean,
                                         const float* rstd, int64_t C) {
  __shared__ float shared[kWarp];
  const int64_t i = blockIdx.x;
  const float* x = inp + i * C;
  const float* dy = d_out + i * C;
  const float m = mean[i], s = rstd[i];
  float g_sum = 0.0f, gn_sum = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float g = weight[c] * dy[c];
    g_sum += g;
    gn_sum += g * ((x[c] - m) * s);
  }
  const float g_mean = BlockSum(g_sum, shared) / static_cast<float>(C);
  const float gn_mean = BlockSum(gn_sum, shared) / static_cast<float>(C);
  float* dx = d_inp + i * C;
  // Each thread reads its own elements of dy before writing the same elements of dx: aliasing
  // d_inp with d_out is safe.
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float g = weight[c] * dy[c];
    dx[c] = s * (g - g_mean - ((x[c] - m) * s) * gn_mean);
  }
}

struct LayerNormWeightGrad {
  const float *d_out, *inp, *mean, *rstd;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const {
    return d_out[r * C + c] * ((inp[r * C + c] - mean[r]) * rstd[r]);
  }
};

__global__ void RmsNormForwardKernel(float* out, Rows out_rows, float* rstd, const float* inp,
                                     Rows in_rows, const float* weight, int64_t C, float eps) {
  __shared__ float shared[kWarp];
  const int64_t i = blockIdx.x;
  const float* x = inp + RowAt(in_rows, i, C);
  float sq = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sq += x[c] * x[c];
  const float s = 1.0f / sqrtf(BlockSum(sq, shared) / static_cast<float>(C) + eps);
  float* o = out + RowAt(out_rows, i, C);
  // out may alias inp row for row: every thread has read x (BlockSum synchronised) and
  // writes only the elements it reads.
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = x[c] * s * weight[c];
  if (threadIdx.x == 0 && rstd != nullptr) rstd[i] = s;
}

// d_x = rstd * (g - n * mean(g * n)), mean(g * n) = rstd * mean(g * x).
__global__ void RmsNormInputGradKernel(float* d_inp, Rows d_inp_rows, const float* d_out,
                                       Rows d_out_rows, const float* inp, Rows in_rows,
                                       const float* weight, const float* rstd, int64_t C) {
  __shared__ float shared[kWarp];
  const int64_t i = blockIdx.x;
  const float* x = inp + RowAt(in_rows, i, C);
  const float* dy = d_out + RowAt(d_out_rows, i, C);
  const float s = rstd[i];
  float gx = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) gx += weight[c] * dy[c] * x[c];
  const float gn_mean = s * BlockSum(gx, shared) / static_cast<float>(C);
  float* dx = d_inp + RowAt(d_inp_rows, i, C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    dx[c] = s * (weight[c] * dy[c] - (x[c] * s) * gn_mean);
  }
}

struct RmsNormWeightGrad {
  const float *d_out, *inp, *rstd;
  Rows d_out_rows, in_rows;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const {
    return d_out[RowAt(d_out_rows, r, C) + c] * (inp[RowAt(in_rows, r, C) + c] * rstd[r]);
  }
};

}  // namespace

void LayerNormForward(cudaStream_t s, float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, int64_t N, int64_t C, float eps) {
  if (N == 0) return;
  LayerNormForwardKernel<<<static_cast<unsigned>(N), RowThreads(C), 0, s>>>(
      out, mean, rstd, inp, weight, bias, C, eps);
  CUDA_CHECK_LAUNCH();
}

void LayerNormBackward(cudaStream_t s, float* d_inp, float* d_weight, float* d_bias,
                       const float* d_out, const float* inp, const float* weight,
                       const float* mean, const float* rstd, int64_t N, int64_t C,
                       float* scratch) {
  if (N == 0) return;
  if (d_weight != nullptr) {
    ColumnSum(s, d_weight, LayerNormWeightGrad{d_out, inp, mean, rstd, C}, N, C, scratch);
  }
  if (d_bias != nullptr) {
    ColumnSum(s, d_bias, Element{d_out, C}, N, C, scratch + ColumnSumScratchFloats(C));
  }
  if (d_inp != nullptr) {
    LayerNormInputGradKernel<<<static_cast<unsigned>(N), RowThreads(C), 0, s>>>(
        d_inp, d_out, inp, weight, mean, rstd, C);
    CUDA_CHECK_LAUNCH();
  }
}

void RmsNormForward(cudaStream_t s, float* out, Rows out_rows, float* rstd, const float* inp,
                    Rows in_rows, const float* weight, int64_t N, int64_t C, float eps) {
  if (N == 0) return;
  RmsNormForwardKernel<<<static_cast<unsigned>(N), RowThreads(C), 0, s>>>(
      out, out_rows, rstd, inp, in_rows, weight, C, eps);
  CUDA_CHECK_LAUNCH();
}

void RmsNormBackward(cudaStream_t s, float* d_inp, Rows d_inp_rows, float* d_weight,
                     const float* d_out, Rows d_out_rows, const float* inp, Rows in_rows,
                     const float* weight, const float* rstd, int64_t N, int64_t C,
                     float* scratch) {
  if (N == 0) return;
  if (d_weight != nullptr) {
    ColumnSum(s, d_weight, RmsNormWeightGrad{d_out, inp, rstd, d_out_rows, in_rows, C}, N, C,
              scratch);
  }
  if (d_inp != nullptr) {
    RmsNormInputGradKernel<<<static_cast<unsigned>(N), RowThreads(C), 0, s>>>(
        d_inp, d_inp_rows, d_out, d_out_rows, inp, in_rows, weight, rstd, C);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace tessera::cuda
