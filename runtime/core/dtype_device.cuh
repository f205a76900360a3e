// runtime/core/dtype_device.cuh — fp32 <-> bf16 / f16 on the device with the bits of
// runtime/core/dtype.h's scalar conversions (round to nearest even; a NaN stays a quiet NaN of
// its sign, and a 16-bit NaN widens with its sign and payload; f16 overflow becomes inf): the
// one device copy of those rules, for the backend's conversions (convert.cu) and the NCCL
// backend's rank-ordered reductions (comm/).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace tessera::cuda {

__device__ inline uint16_t ToBf16Bits(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__device__ inline float FromBf16Bits(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

// cuda_fp16's rounding is IEEE round-to-nearest-even with subnormals and overflow to inf, as
// dtype.h's; only its NaN (a canonical 0x7fff) differs from dtype.h's quiet NaN of the sign.
__device__ inline uint16_t ToF16Bits(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7e00u);
  }
  return __half_as_ushort(__float2half_rn(f));
}

// cvt.f32.f16 (__half2float) turns every NaN into the canonical 0x7fffffff, dropping its sign
// and payload; dtype.h's F16ToF32 keeps both (exponent all ones, payload shifted up, not
// quieted), so NaNs are widened here by bits and only numbers go through the conversion.
__device__ inline float FromF16Bits(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0u) {
    return __uint_as_float((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7f800000u |
                           (static_cast<uint32_t>(h & 0x03ffu) << 13));
  }
  return __half2float(__ushort_as_half(h));
}

}  // namespace tessera::cuda
