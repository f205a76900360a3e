// runtime/kernels/cuda/elementwise.cu — the element-wise ops: GELU (tanh form), SwiGLU, the
// residual adds, LoRA's counter-based dropout, and the bias / position adds tensor parallelism
// does after a reduction. One thread per element (grid-stride), each element independent of
// every other, so the results do not depend on the launch geometry.
// Numerics: the formulas of runtime/kernels/cpu/activation.cc with CUDA's expf in place of the
// CPU's vectorised exp (a few ulp apart). Dropout draws runtime/core/random.h's stream bit for
// bit, so a GPU rank drops the elements a CPU rank would.
#include "runtime/kernels/cuda/device_util.cuh"
#include "runtime/kernels/cuda/launch.h"

namespace tessera::cuda {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

__device__ inline float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void GeluForwardKernel(float* out, const float* inp, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float x = inp[i];
    const float u = kGeluK * (x + kGeluC * x * x * x);
    out[i] = x * Sigmoid(2.0f * u);  // 0.5 (1 + tanh u) = sigmoid(2u)
  }
}

__global__ void GeluBackwardKernel(float* d_inp, const float* d_out, const float* inp, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float x = inp[i];
    const float u = kGeluK * (x + kGeluC * x * x * x);
    const float sg = Sigmoid(2.0f * u);
    const float du = kGeluK * (1.0f + 3.0f * kGeluC * x * x);
    d_inp[i] = d_out[i] * (sg + x * sg * (1.0f - sg) * 2.0f * du);
  }
}

__global__ void SwigluForwardKernel(float* out, const float* inp, int64_t N, int64_t H) {
  for (int64_t e = GridStart(); e < N * H; e += GridStride()) {
    const int64_t i = e / H, j = e % H;
    const float g = inp[i * 2 * H + j], u = inp[i * 2 * H + H + j];
    out[e] = g * Sigmoid(g) * u;
  }
}

__global__ void SwigluBackwardKernel(float* d_inp, const float* d_out, const float* inp,
                                     int64_t N, int64_t H) {
  for (int64_t e = GridStart(); e < N * H; e += GridStride()) {
    const int64_t i = e / H, j = e % H;
    const float g = inp[i * 2 * H + j], u = inp[i * 2 * H + H + j], d = d_out[e];
    const float sg = Sigmoid(g);
    d_inp[i * 2 * H + j] = d * u * sg * (1.0f + g * (1.0f - sg));
    d_inp[i * 2 * H + H + j] = d * g * sg;
  }
}

__global__ void AddKernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) out[i] = a[i] + b[i];
}

__global__ void AddInPlaceKernel(float* acc, const float* x, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) acc[i] += x[i];
}

// runtime/core/random.h's Mix64 and Rng(key, counter).NextFloat(), on the device.
__device__ inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ inline float DrawFloat(uint64_t key, uint64_t counter) {
  return static_cast<float>(Mix64(key ^ Mix64(counter)) >> 40) * (1.0f / 16777216.0f);
}

__global__ void DropoutKernel(float* out, const float* x, int64_t rows, int64_t cols,
                              int64_t col0, int64_t ld_index, float p, uint64_t key, float scale) {
  for (int64_t e = GridStart(); e < rows * cols; e += GridStride()) {
    const int64_t i = e / cols, j = e % cols;
    const uint64_t draw = static_cast<uint64_t>(i * ld_index + col0 + j);
    out[e] = DrawFloat(key, draw) >= p ? x[e] * scale : 0.0f;
  }
}

__global__ void AddBiasKernel(float* out, const float* bias, int64_t N, int64_t OC) {
  for (int64_t e = GridStart(); e < N * OC; e += GridStride()) out[e] += bias[e % OC];
}

__global__ void AddPositionsKernel(float* out, const float* wpe, int64_t row_begin, int64_t rows,
                                   int64_t T, int64_t C) {
  for (int64_t e = GridStart(); e < rows * C; e += GridStride()) {
    const int64_t i = e / C, c = e % C;
    out[e] += wpe[((row_begin + i) % T) * C + c];
  }
}

}  // namespace

void GeluForward(cudaStream_t s, float* out, const float* inp, int64_t n) {
  if (n == 0) return;
  GeluForwardKernel<<<BlocksFor(n), kThreads, 0, s>>>(out, inp, n);
  CUDA_CHECK_LAUNCH();
}

void GeluBackward(cudaStream_t s, float* d_inp, const float* d_out, const float* inp, int64_t n) {
  if (n == 0) return;
  GeluBackwardKernel<<<BlocksFor(n), kThreads, 0, s>>>(d_inp, d_out, inp, n);
  CUDA_CHECK_LAUNCH();
}

void SwigluForward(cudaStream_t s, float* out, const float* inp, int64_t N, int64_t H) {
  if (N * H == 0) return;
  SwigluForwardKernel<<<BlocksFor(N * H), kThreads, 0, s>>>(out, inp, N, H);
  CUDA_CHECK_LAUNCH();
}

void SwigluBackward(cudaStream_t s, float* d_inp, const float* d_out, const float* inp, int64_t N,
                    int64_t H) {
  if (N * H == 0) return;
  SwigluBackwardKernel<<<BlocksFor(N * H), kThreads, 0, s>>>(d_inp, d_out, inp, N, H);
  CUDA_CHECK_LAUNCH();
}

void Add(cudaStream_t s, float* out, const float* a, const float* b, int64_t n) {
  if (n == 0) return;
  AddKernel<<<BlocksFor(n), kThreads, 0, s>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH();
}

void AddInPlace(cudaStream_t s, float* acc, const float* x, int64_t n) {
  if (n == 0) return;
  AddInPlaceKernel<<<BlocksFor(n), kThreads, 0, s>>>(acc, x, n);
  CUDA_CHECK_LAUNCH();
}

void Dropout(cudaStream_t s, float* out, const float* x, int64_t rows, int64_t cols, int64_t col0,
             int64_t ld_index, float p, uint64_t key) {
  if (rows * cols == 0) return;
  DropoutKernel<<<BlocksFor(rows * cols), kThreads, 0, s>>>(out, x, rows, cols, col0, ld_index,
                                                            p, key, 1.0f / (1.0f - p));
  CUDA_CHECK_LAUNCH();
}

void AddBias(cudaStream_t s, float* out, const float* bias, int64_t N, int64_t OC) {
  if (N * OC == 0) return;
  AddBiasKernel<<<BlocksFor(N * OC), kThreads, 0, s>>>(out, bias, N, OC);
  CUDA_CHECK_LAUNCH();
}

void AddPositions(cudaStream_t s, float* out, const float* wpe, int64_t row_begin, int64_t rows,
                  int64_t T, int64_t C) {
  if (rows * C == 0) return;
  AddPositionsKernel<<<BlocksFor(rows * C), kThreads, 0, s>>>(out, wpe, row_begin, rows, T, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
