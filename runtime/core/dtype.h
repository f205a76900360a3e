// runtime/core/dtype.h — element types and the f16/bf16 <-> f32 conversions.
//
// Conversions round to nearest even (as PyTorch and the safetensors producers do), so a value
// written as bf16 and read back is what any other trainer would read. Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tessera {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32 };

size_t DTypeSize(DType t);
// "f32", "bf16", "f16", "i32".
std::string_view DTypeName(DType t);
// Accepts our names and the safetensors ones ("F32", "BF16", "F16", "I32"); false if unknown.
bool ParseDType(std::string_view name, DType* out);

inline float Bf16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN stays NaN
  }
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

}  // namespace tessera
