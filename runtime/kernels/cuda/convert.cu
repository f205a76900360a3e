// runtime/kernels/cuda/convert.cu — RoundTo, ConvertFromF32, ConvertToF32 on the device: the
// bits of runtime/core/dtype.h's scalar conversions for every input (bf16 and f16 round to
// nearest even; a NaN stays a quiet NaN of its sign, f16 overflow becomes inf), so a value
// rounded on the GPU equals one rounded on the CPU and checkpoints do not depend on the device.
#include <cuda_fp16.h>

#include "runtime/core/check.h"
#include "runtime/kernels/cuda/device_util.cuh"
#include "runtime/kernels/cuda/launch.h"

namespace tessera::cuda {
namespace {

__device__ inline uint16_t ToBf16(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__device__ inline float FromBf16(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

// cuda_fp16's rounding is IEEE round-to-nearest-even with subnormals and overflow to inf, as
// dtype.h's; only its NaN (a canonical 0x7fff) differs from dtype.h's quiet NaN of the sign.
__device__ inline uint16_t ToF16(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7e00u);
  return __half_as_ushort(__float2half_rn(f));
}

__device__ inline float FromF16(uint16_t h) { return __half2float(__ushort_as_half(h)); }

__global__ void RoundKernel(bool bf16, float* x, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    x[i] = bf16 ? FromBf16(ToBf16(x[i])) : FromF16(ToF16(x[i]));
  }
}

__global__ void FromF32Kernel(bool bf16, const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    dst[i] = bf16 ? ToBf16(src[i]) : ToF16(src[i]);
  }
}

__global__ void ToF32Kernel(bool bf16, const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    dst[i] = bf16 ? FromBf16(src[i]) : FromF16(src[i]);
  }
}

void CheckHalf(DType dtype) {
  TESSERA_CHECK_MSG(dtype == DType::kBF16 || dtype == DType::kF16,
                    "a conversion to dtype %d: only bf16, f16 and f32 are floating types",
                    static_cast<int>(dtype));
}

}  // namespace

void RoundTo(cudaStream_t s, DType dtype, float* x, int64_t n) {
  if (dtype == DType::kF32 || n == 0) return;
  CheckHalf(dtype);
  RoundKernel<<<BlocksFor(n), kThreads, 0, s>>>(dtype == DType::kBF16, x, n);
  CUDA_CHECK_LAUNCH();
}

void ConvertFromF32(cudaStream_t s, DType dtype, const float* src, void* dst, int64_t n) {
  if (n == 0) return;
  if (dtype == DType::kF32) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
    return;
  }
  CheckHalf(dtype);
  FromF32Kernel<<<BlocksFor(n), kThreads, 0, s>>>(dtype == DType::kBF16, src,
                                                  static_cast<uint16_t*>(dst), n);
  CUDA_CHECK_LAUNCH();
}

void ConvertToF32(cudaStream_t s, DType dtype, const void* src, float* dst, int64_t n) {
  if (n == 0) return;
  if (dtype == DType::kF32) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
    return;
  }
  CheckHalf(dtype);
  ToF32Kernel<<<BlocksFor(n), kThreads, 0, s>>>(dtype == DType::kBF16,
                                                static_cast<const uint16_t*>(src), dst, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
