// runtime/kernels/cuda/device_util.cuh — device helpers every .cu file of the backend shares:
// launch geometry and the deterministic reductions (fixed shuffle trees, no atomics).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/kernels/cuda/cuda_check.h"

namespace tessera::cuda {

constexpr int kWarp = 32;
constexpr int kThreads = 256;  // the default block of element-wise kernels

// Blocks of `threads` covering n items, at most 65535 * 32 (grid-stride loops cover the rest).
inline unsigned BlocksFor(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535LL * 32) b = 65535LL * 32;
  return static_cast<unsigned>(b);
}

// Threads for one block per row of C elements: a multiple of the warp (BlockSum's
// requirement), no more than the row has work for, at most `cap`.
inline int RowBlockThreads(int64_t C, int cap) {
  int64_t t = (C + kWarp - 1) / kWarp * kWarp;
  if (t < kWarp) t = kWarp;
  if (t > cap) t = cap;
  return static_cast<int>(t);
}

// Grid-stride index loop: for (int64_t i = GridStart(); i < n; i += GridStride()).
__device__ inline int64_t GridStart() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Sum / max over the 32 lanes of a warp, the same tree every time; every lane gets the result.
__device__ inline float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline double WarpSum(double v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float WarpMax(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets
// the result. `shared` holds 32 values of T. Fixed order: lanes, then warps in order.
template <typename T>
__device__ inline T BlockSum(T v, T* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = WarpSum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = lane < warps ? shared[lane] : T(0);
  return WarpSum(total);
}
__device__ inline float BlockMax(float v, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = lane < warps ? shared[lane] : -INFINITY;
  return WarpMax(m);
}

}  // namespace tessera::cuda
