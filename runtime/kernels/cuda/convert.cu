// runtime/kernels/cuda/convert.cu — RoundTo, ConvertFromF32, ConvertToF32 on the device: the
// bits of runtime/core/dtype.h's scalar conversions for every input (bf16 and f16 round to
// nearest even; a NaN stays a quiet NaN of its sign, f16 overflow becomes inf), so a value
// rounded on the GPU equals one rounded on the CPU and checkpoints do not depend on the device.
#include "runtime/core/check.h"
#include "runtime/kernels/cuda/device_util.cuh"
#include "runtime/core/dtype_device.cuh"
#include "runtime/kernels/cuda/launch.h"

namespace tessera::cuda {
namespace {

__global__ void RoundKernel(bool bf16, float* x, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    x[i] = bf16 ? FromBf16Bits(ToBf16Bits(x[i])) : FromF16Bits(ToF16Bits(x[i]));
  }
}

__global__ void FromF32Kernel(bool bf16, const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    dst[i] = bf16 ? ToBf16Bits(src[i]) : ToF16Bits(src[i]);
  }
}

__global__ void ToF32Kernel(bool bf16, const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    dst[i] = bf16 ? FromBf16Bits(src[i]) : FromF16Bits(src[i]);
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
