// runtime/kernels/cuda/classifier.cu — the per-row steps of the chunked LM head + cross-entropy
// (runtime/kernels/cpu/vocab_parallel.cc's algorithm; the GEMMs are cuBLAS calls in
// cuda_backend.cc). Per chunk: row maxima, then the exponentials and their sums with each
// row's target logit, then the losses, then the logits turned into their gradient in place.
// Between the steps, a vocab-parallel rank reduces maxima and sums over its tp group.
// One block per row; a row's sums: per-thread strides then BlockSum's fixed tree (the sum of
// exponentials in double, as the CPU's), so reruns give the same bits.
#include "runtime/kernels/cuda/device_util.cuh"
#include "runtime/kernels/cuda/launch.h"

namespace tessera::cuda {
namespace {

constexpr int kRowThreads = 512;

__global__ void RowMaxKernel(float* maxima, const float* logits, int64_t V_ld, int64_t V_real) {
  __shared__ float shared[kWarp];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * V_ld;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V_real; j += blockDim.x) m = fmaxf(m, row[j]);
  m = BlockMax(m, shared);
  if (threadIdx.x == 0) maxima[blockIdx.x] = m;
}

__global__ void ExpSumAndTargetKernel(float* pairs, float* logits, const float* maxima,
                                      const int32_t* targets, int64_t V_ld, int64_t V_real,
                                      int64_t vocab_begin) {
  __shared__ double shared[kWarp];
  const int64_t r = blockIdx.x;
  float* row = logits + r * V_ld;
  const int64_t target = targets[r];
  if (target < 0) {  // ignored row: no loss, no gradient
    for (int64_t j = threadIdx.x; j < V_ld; j += blockDim.x) row[j] = 0.0f;
    if (threadIdx.x == 0) pairs[2 * r] = pairs[2 * r + 1] = 0.0f;
    return;
  }
  const int64_t local = target - vocab_begin;
  const bool mine = local >= 0 && local < V_real;
  const float target_logit = mine ? row[local] : 0.0f;  // read before the row is overwritten
  __syncthreads();
  const float m = maxima[r];
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < V_ld; j += blockDim.x) {
    if (j < V_real) {
      const float e = expf(row[j] - m);
      row[j] = e;
      sum += e;
    } else {
      row[j] = 0.0f;  // padding: no logit
    }
  }
  sum = BlockSum(sum, shared);
  if (threadIdx.x == 0) {
    pairs[2 * r] = static_cast<float>(sum);
    pairs[2 * r + 1] = target_logit;
  }
}

__global__ void RowLossKernel(float* losses, const float* pairs, const float* maxima,
                              const int32_t* targets, int64_t rows) {
  for (int64_t r = GridStart(); r < rows; r += GridStride()) {
    double loss = 0.0;
    if (targets[r] >= 0) {
      loss = log(static_cast<double>(pairs[2 * r])) + static_cast<double>(maxima[r]) -
             pairs[2 * r + 1];
    }
    losses[r] = static_cast<float>(loss);
  }
}

__global__ void SoftmaxGradKernel(float* logits, const float* pairs, const int32_t* targets,
                                  int64_t V_ld, int64_t V_real, int64_t vocab_begin,
                                  float loss_scale) {
  const int64_t r = blockIdx.x;
  const int64_t target = targets[r];
  if (target < 0) return;  // already zero
  float* row = logits + r * V_ld;
  const float g = static_cast<float>(static_cast<double>(loss_scale) / pairs[2 * r]);
  const int64_t local = target - vocab_begin;
  for (int64_t j = threadIdx.x; j < V_real; j += blockDim.x) {
    float v = row[j] * g;
    if (j == local) v -= loss_scale;
    row[j] = v;
  }
}

}  // namespace

void RowMax(cudaStream_t s, float* maxima, const float* logits, int64_t rows, int64_t V_ld,
            int64_t V_real) {
  if (rows == 0) return;
  RowMaxKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, s>>>(maxima, logits, V_ld, V_real);
  CUDA_CHECK_LAUNCH();
}

void ExpSumAndTarget(cudaStream_t s, float* pairs, float* logits, const float* maxima,
                     const int32_t* targets, int64_t rows, int64_t V_ld, int64_t V_real,
                     int64_t vocab_begin) {
  if (rows == 0) return;
  ExpSumAndTargetKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, s>>>(
      pairs, logits, maxima, targets, V_ld, V_real, vocab_begin);
  CUDA_CHECK_LAUNCH();
}

void RowLoss(cudaStream_t s, float* losses, const float* pairs, const float* maxima,
             const int32_t* targets, int64_t rows) {
  if (rows == 0) return;
  RowLossKernel<<<BlocksFor(rows), kThreads, 0, s>>>(losses, pairs, maxima, targets, rows);
  CUDA_CHECK_LAUNCH();
}

void SoftmaxGrad(cudaStream_t s, float* logits, const float* pairs, const int32_t* targets,
                 int64_t rows, int64_t V_ld, int64_t V_real, int64_t vocab_begin,
                 float loss_scale) {
  if (rows == 0) return;
  SoftmaxGradKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, s>>>(
      logits, pairs, targets, V_ld, V_real, vocab_begin, loss_scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
