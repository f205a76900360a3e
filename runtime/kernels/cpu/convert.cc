// runtime/kernels/cpu/convert.cc — fp32 <-> bf16 / f16 in bulk (convert.h).
//
// The per-element conversions are runtime/core/dtype.h's (branch-free, so these loops
// vectorise); this file adds the loops and their threading.
// Threads: elementwise over static ranges, so any thread count gives the same bits.
#include "runtime/kernels/cpu/convert.h"

#include <bit>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu {
namespace {

inline uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
inline float Float(uint32_t b) { return std::bit_cast<float>(b); }

}  // namespace

void RoundTo(DType dtype, float* x, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      return;
    case DType::kBF16:
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
      for (int64_t i = 0; i < n; ++i) x[i] = Bf16ToF32(F32ToBf16(x[i]));
      return;
    case DType::kF16:
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
      for (int64_t i = 0; i < n; ++i) x[i] = F16ToF32(F32ToF16(x[i]));
      return;
    case DType::kI32:
      break;
  }
  TESSERA_CHECK_MSG(false, "RoundTo: not a float type");
}

void ConvertFromF32(DType dtype, const float* src, void* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32: {
      float* out = static_cast<float*>(dst);
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
      for (int64_t i = 0; i < n; ++i) out[i] = src[i];
      return;
    }
    case DType::kBF16: {
      uint16_t* out = static_cast<uint16_t*>(dst);
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
      for (int64_t i = 0; i < n; ++i) {
        out[i] = F32ToBf16(src[i]);
      }
      return;
    }
    case DType::kF16: {
      uint16_t* out = static_cast<uint16_t*>(dst);
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
      for (int64_t i = 0; i < n; ++i) out[i] = F32ToF16(src[i]);
      return;
    }
    case DType::kI32:
      break;
  }
  TESSERA_CHECK_MSG(false, "ConvertFromF32: not a float type");
}

void ConvertToF32(DType dtype, const void* src, float* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32: {
      const float* in = static_cast<const float*>(src);
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
      for (int64_t i = 0; i < n; ++i) dst[i] = in[i];
      return;
    }
    case DType::kBF16: {
      const uint16_t* in = static_cast<const uint16_t*>(src);
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(in[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* in = static_cast<const uint16_t*>(src);
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(in[i]);
      return;
    }
    case DType::kI32:
      break;
  }
  TESSERA_CHECK_MSG(false, "ConvertToF32: not a float type");
}

bool AllFinite(const float* x, int64_t n) {
  uint32_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n >= vec::kMinParallelElems)
  for (int64_t i = 0; i < n; ++i) {
    bad |= static_cast<uint32_t>((Bits(x[i]) & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

}  // namespace tessera::cpu
