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

// Index of the first of the n elements at `data` that is NaN or +-Inf, or -1 when all are
// finite (always -1 for kI32). Vectorised: costs a fraction of a memcpy of the same bytes.
int64_t FirstNonFinite(const void* data, int64_t n, DType t);

inline float Bf16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Branch-free (every case computed, then selected with masks) so that loops over these
// functions vectorise: the bulk kernels (runtime/kernels/cpu/convert.h) and the comm layer's
// reductions call them per element. Bit-identical to the straightforward branchy definitions,
// which tests/unit/dtype_test.cc keeps as the reference and compares over every f16 pattern
// and a stride through all 2^32 floats. Assume the default round-to-nearest FP mode.
namespace dtype_detail {
// m is all ones or all zeros.
inline uint32_t SelectBits(uint32_t m, uint32_t a, uint32_t b) { return (a & m) | (b & ~m); }
inline uint32_t MaskIf(bool c) { return 0u - static_cast<uint32_t>(c); }
inline uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline float Float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
}  // namespace dtype_detail

inline uint16_t F32ToBf16(float f) {
  using dtype_detail::MaskIf, dtype_detail::SelectBits;
  const uint32_t bits = dtype_detail::Bits(f);
  const uint32_t quiet = (bits >> 16) | 0x0040u;  // a NaN stays a (quiet) NaN
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;  // nearest, ties even
  return static_cast<uint16_t>(SelectBits(MaskIf((bits & 0x7fffffffu) > 0x7f800000u), quiet, rounded));
}

inline float F16ToF32(uint16_t h) {
  using dtype_detail::MaskIf, dtype_detail::SelectBits;
  constexpr uint32_t kExpMask = 0x7c00u << 13;  // the f16 exponent field at the f32 position
  constexpr float kMagic = 0x1p-14f;            // the smallest normal f16
  const uint32_t bits = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exp = bits & kExpMask;
  const uint32_t normal = bits + ((127u - 15u) << 23);     // rebias
  const uint32_t inf_nan = normal + ((128u - 16u) << 23);  // exponent all ones, payload kept
  // Zero/subnormal: read as 2^-14 * (1 + m/1024), then subtract 2^-14 (exact).
  const uint32_t sub = dtype_detail::Bits(dtype_detail::Float(normal + (1u << 23)) - kMagic);
  const uint32_t out = SelectBits(MaskIf(exp == kExpMask), inf_nan,
                                  SelectBits(MaskIf(exp == 0), sub, normal));
  return dtype_detail::Float(out | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

inline uint16_t F32ToF16(float f) {
  using dtype_detail::MaskIf, dtype_detail::SelectBits;
  const uint32_t bits = dtype_detail::Bits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  // >= 65536, inf or NaN (NaN: quiet, payload dropped).
  const uint32_t big = SelectBits(MaskIf(abs > 0x7f800000u), 0x7e00u, 0x7c00u);
  // Below 2^-14: adding 0.5 lines the f16 subnormal ulp (2^-24) up with the f32 ulp, so the FP
  // add itself rounds to nearest even.
  const uint32_t sub = dtype_detail::Bits(dtype_detail::Float(abs) + 0.5f) - (126u << 23);
  // Normal: rebias and round to nearest even on the 13 dropped bits; a carry past 65504 lands
  // on the inf encoding.
  const uint32_t normal = (abs + ((15u - 127u) << 23) + 0xfffu + ((abs >> 13) & 1u)) >> 13;
  const uint32_t out = SelectBits(MaskIf(abs >= (143u << 23)), big,
                                  SelectBits(MaskIf(abs < (113u << 23)), sub, normal));
  return static_cast<uint16_t>(out | sign);
}


}  // namespace tessera
