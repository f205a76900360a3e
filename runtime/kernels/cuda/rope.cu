// runtime/kernels/cuda/rope.cu — rotary position embedding in Hugging Face's rotate_half
// layout (runtime/kernels/cpu/rope.cc's numerics: angle = float(pos) * inv_freq[i] as an fp32
// product, then cosf / sinf of it: CUDA's reduce large angles exactly and are within 2 ulp,
// the CPU's libm within 1). One thread per (token, rotated head, pair i); pairs are independent.
#include "runtime/core/check.h"
#include "runtime/kernels/cuda/device_util.cuh"
#include "runtime/kernels/cuda/launch.h"

namespace tessera::cuda {
namespace {

struct InvFreq {
  float v[kMaxRopeHalf];
};

__global__ void RotateKernel(float* qkv, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                             InvFreq inv_freq, int64_t pos_offset, float sign, int64_t n) {
  const int64_t half = HS / 2, heads = NH + NKV, row = (NH + 2 * NKV) * HS;
  for (int64_t e = GridStart(); e < n; e += GridStride()) {
    const int64_t i = e % half;
    const int64_t h = (e / half) % heads;
    const int64_t token = e / (half * heads);
    const float angle = static_cast<float>(token % T + pos_offset) * inv_freq.v[i];
    const float c = cosf(angle), sn = sign * sinf(angle);
    float* x = qkv + token * row + h * HS;
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * sn;
    x[i + half] = b * c + a * sn;
  }
}

void Rotate(cudaStream_t s, float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
            int64_t HS, const float* inv_freq, int64_t pos_offset, float sign) {
  TESSERA_CHECK_MSG(HS % 2 == 0 && HS / 2 <= kMaxRopeHalf,
                    "RoPE on the GPU needs an even head size of at most %lld, got %lld",
                    static_cast<long long>(2 * kMaxRopeHalf), static_cast<long long>(HS));
  const int64_t n = B * T * (NH + NKV) * (HS / 2);
  if (n == 0) return;
  InvFreq table{};
  for (int64_t i = 0; i < HS / 2; ++i) table.v[i] = inv_freq[i];
  RotateKernel<<<BlocksFor(n), kThreads, 0, s>>>(qkv, T, NH, NKV, HS, table, pos_offset, sign, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void RopeForward(cudaStream_t s, float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                 int64_t HS, const float* inv_freq, int64_t pos_offset) {
  Rotate(s, qkv, B, T, NH, NKV, HS, inv_freq, pos_offset, 1.0f);
}

// R^T: the rotation by -angle.
void RopeBackward(cudaStream_t s, float* d_qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                  int64_t HS, const float* inv_freq, int64_t pos_offset) {
  Rotate(s, d_qkv, B, T, NH, NKV, HS, inv_freq, pos_offset, -1.0f);
}

}  // namespace tessera::cuda
