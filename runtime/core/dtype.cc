// runtime/core/dtype.cc — IEEE binary16 conversions and dtype names.
#include "runtime/core/dtype.h"

#include <cmath>

namespace tessera {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
  }
  return 0;
}

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
  }
  return "?";
}

bool ParseDType(std::string_view n, DType* out) {
  if (n == "f32" || n == "F32") { *out = DType::kF32; return true; }
  if (n == "bf16" || n == "BF16") { *out = DType::kBF16; return true; }
  if (n == "f16" || n == "F16") { *out = DType::kF16; return true; }
  if (n == "i32" || n == "I32") { *out = DType::kI32; return true; }
  return false;
}

float F16ToF32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t F32ToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504: inf
  if (abs < 0x38800000u) {                        // below the smallest normal: subnormal or 0
    float a;
    std::memcpy(&a, &abs, 4);
    // Scale so one f16 subnormal ulp (2^-24) is 1.0, then round to nearest even.
    float scaled = a * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t rounding = 0xfffu + ((abs >> 13) & 1u);
  abs += rounding;
  return sign | static_cast<uint16_t>(((abs >> 13) - (112u << 10)) & 0x7fffu);
}

}  // namespace tessera
