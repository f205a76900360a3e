// comm/nccl_reduce.cu — ReduceGatheredRows (nccl_reduce.h): one thread per element, the rows
// added in rank order, so the result does not depend on the launch geometry.
#include "comm/nccl_reduce.h"

#include "runtime/core/dtype_device.cuh"

namespace tessera {
namespace {

enum class Kind { kF32, kBf16, kF16 };

__device__ inline float Load(Kind k, const void* p, int64_t i) {
  switch (k) {
    case Kind::kBf16: return cuda::FromBf16Bits(static_cast<const uint16_t*>(p)[i]);
    case Kind::kF16: return cuda::FromF16Bits(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ inline void Store(Kind k, void* p, int64_t i, float v) {
  switch (k) {
    case Kind::kBf16: static_cast<uint16_t*>(p)[i] = cuda::ToBf16Bits(v); break;
    case Kind::kF16: static_cast<uint16_t*>(p)[i] = cuda::ToF16Bits(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

__global__ void FloatRows(Kind k, bool max, float div, const void* gathered, int nrows,
                          int64_t stride, void* dst, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = Load(k, gathered, i);  // the first contribution exactly
    for (int r = 1; r < nrows; ++r) {
      const float v = Load(k, gathered, r * stride + i);
      // A NaN wins a max, as comm/reduce.cc's MaxF: a max must not hide a diverged rank.
      acc = max ? ((v > acc || isnan(v)) ? v : acc) : acc + v;
    }
    Store(k, dst, i, div != 1.0f ? acc / div : acc);
  }
}

// Sum and max are exact in i32 (wrapping), as comm/reduce.cc's.
__global__ void IntRows(bool max, const int32_t* gathered, int nrows, int64_t stride,
                        int32_t* dst, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t acc = static_cast<uint32_t>(gathered[i]);
    for (int r = 1; r < nrows; ++r) {
      const int32_t v = gathered[r * stride + i];
      acc = max ? static_cast<uint32_t>(::max(static_cast<int32_t>(acc), v))
                : acc + static_cast<uint32_t>(v);
    }
    dst[i] = static_cast<int32_t>(acc);
  }
}

}  // namespace

cudaError_t ReduceGatheredRows(cudaStream_t s, DType dtype, RowOp op, const void* gathered,
                               int nrows, int64_t row_stride, void* dst, int64_t n) {
  if (n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65535 * 8 ? wanted : 65535 * 8);
  const bool max = op == RowOp::kMax;
  if (dtype == DType::kI32) {
    IntRows<<<blocks, kThreads, 0, s>>>(max, static_cast<const int32_t*>(gathered), nrows,
                                        row_stride, static_cast<int32_t*>(dst), n);
  } else {
    const Kind k = dtype == DType::kBF16  ? Kind::kBf16
                   : dtype == DType::kF16 ? Kind::kF16
                                          : Kind::kF32;
    const float div = op == RowOp::kAvg ? static_cast<float>(nrows) : 1.0f;
    FloatRows<<<blocks, kThreads, 0, s>>>(k, max, div, gathered, nrows, row_stride, dst, n);
  }
  return cudaGetLastError();
}

}  // namespace tessera
