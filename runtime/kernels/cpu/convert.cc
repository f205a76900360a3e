// runtime/kernels/cpu/convert.cc — fp32 <-> bf16 / f16 in bulk (convert.h).
//
// The scalar conversions in runtime/core/dtype.h branch (NaN, overflow, subnormal) and call
// nearbyint, so loops over them do not vectorise. Here every case is computed and the right
// one selected, in integer arithmetic on the bit patterns, which gcc turns into vector blends.
// The f16 subnormal case rounds by one float addition instead of nearbyint: for a < 2^-14,
// a + 0.5f lies in [0.5, 1), where one fp32 ulp is 2^-24 = one f16 subnormal ulp, so the
// addition itself rounds a to the nearest subnormal (ties to even, the default rounding
// mode nearbyint also uses) and the low bits of the sum are the f16 mantissa.
// Threads: elementwise over static ranges, so any thread count gives the same bits.
#include "runtime/kernels/cpu/convert.h"

#include <bit>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu {
namespace {

inline uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
inline float Float(uint32_t b) { return std::bit_cast<float>(b); }

// F32ToBf16, widened back to fp32 bits (the low 16 bits zero).
inline uint32_t RoundBf16Bits(uint32_t bits) {
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  const uint32_t quiet = (bits & 0xffff0000u) | 0x00400000u;
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  return nan ? quiet : rounded;
}

// F32ToF16, branch-free.
inline uint32_t HalfBits(uint32_t bits) {
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  const uint32_t inf_nan = 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  // Normal: drop 13 mantissa bits rounding to nearest even, rebias the exponent 127 -> 15.
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  const uint32_t normal = ((rounded >> 13) - (112u << 10)) & 0x7fffu;
  // Subnormal (or zero, or 1024 = the smallest normal when it rounds up): see the file comment.
  const uint32_t sub = Bits(Float(abs) + 0.5f) - 0x3f000000u;
  const uint32_t mag = abs >= 0x7f800000u  ? inf_nan
                       : abs >= 0x477ff000u ? 0x7c00u  // rounds past 65504: inf
                       : abs < 0x38800000u  ? sub
                                            : normal;
  return sign | mag;
}

// F16ToF32, branch-free: subnormals are mant * 2^-24, exact in fp32.
inline uint32_t WidenHalfBits(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  const float sub_value = static_cast<float>(static_cast<int32_t>(mant)) * 5.9604644775390625e-8f;
  const uint32_t sub = Bits(sub_value);
  const uint32_t special = 0x7f800000u | (mant << 13);
  const uint32_t normal = ((exp + 112u) << 23) | (mant << 13);
  return sign | (exp == 0 ? sub : exp == 31 ? special : normal);
}

}  // namespace

void RoundTo(DType dtype, float* x, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      return;
    case DType::kBF16:
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
      for (int64_t i = 0; i < n; ++i) x[i] = Float(RoundBf16Bits(Bits(x[i])));
      return;
    case DType::kF16:
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
      for (int64_t i = 0; i < n; ++i) x[i] = Float(WidenHalfBits(HalfBits(Bits(x[i]))));
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
        out[i] = static_cast<uint16_t>(RoundBf16Bits(Bits(src[i])) >> 16);
      }
      return;
    }
    case DType::kF16: {
      uint16_t* out = static_cast<uint16_t*>(dst);
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint16_t>(HalfBits(Bits(src[i])));
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
      for (int64_t i = 0; i < n; ++i) dst[i] = Float(static_cast<uint32_t>(in[i]) << 16);
      return;
    }
    case DType::kF16: {
      const uint16_t* in = static_cast<const uint16_t*>(src);
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
      for (int64_t i = 0; i < n; ++i) dst[i] = Float(WidenHalfBits(in[i]));
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
