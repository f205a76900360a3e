// runtime/kernels/cuda/column_sum.cuh — acc(C) += sum over rows r < N of value(r, c): every
// parameter gradient that sums over rows (biases, norm weights) goes through here, so the one
// deterministic order lives in one place. Stage 1 cuts the rows into kColumnSumBlocks fixed
// blocks and a thread sums one column of one block, rows in order, into scratch; stage 2 adds
// one column's block sums in block order. No atomics; the order depends on N and C only.
#pragma once

#include "runtime/kernels/cuda/device_util.cuh"
#include "runtime/kernels/cuda/launch.h"

namespace tessera::cuda {

template <typename Value>
__global__ void BlockColumnSums(float* partial, Value value, int64_t N, int64_t C,
                                int64_t rows_per_block) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t blk = blockIdx.y;
  if (c >= C) return;
  const int64_t r1 = min(N, (blk + 1) * rows_per_block);
  float sum = 0.0f;
  for (int64_t r = blk * rows_per_block; r < r1; ++r) sum += value(r, c);
  partial[blk * C + c] = sum;
}

// value(r, c) = x[r * C + c]: a plain column sum.
struct Element {
  const float* x;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const { return x[r * C + c]; }
};

// A template so that every .cu file gets its own copy (no relocatable device code needed).
template <int kUnused = 0>
__global__ void AddBlockSums(float* acc, const float* partial, int64_t C) {
  for (int64_t c = GridStart(); c < C; c += GridStride()) {
    float sum = 0.0f;
    for (int64_t blk = 0; blk < kColumnSumBlocks; ++blk) sum += partial[blk * C + c];
    acc[c] += sum;
  }
}

// `scratch` holds ColumnSumScratchFloats(C) floats.
template <typename Value>
void ColumnSum(cudaStream_t s, float* acc, Value value, int64_t N, int64_t C, float* scratch) {
  if (N == 0 || C == 0) return;
  const int64_t rows_per_block = (N + kColumnSumBlocks - 1) / kColumnSumBlocks;
  const dim3 grid(static_cast<unsigned>((C + kThreads - 1) / kThreads),
                  static_cast<unsigned>(kColumnSumBlocks));
  BlockColumnSums<<<grid, kThreads, 0, s>>>(scratch, value, N, C, rows_per_block);
  CUDA_CHECK_LAUNCH();
  AddBlockSums<><<<BlocksFor(C), kThreads, 0, s>>>(acc, scratch, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
