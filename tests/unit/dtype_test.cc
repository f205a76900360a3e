// tests/unit/dtype_test.cc — the branch-free scalar conversions of runtime/core/dtype.h against
// straightforward branchy reference definitions (the ones dtype.cc had before the conversions
// were made vectorisable), bit for bit.
// links: tessera_core
#include <cmath>
#include <cstdint>
#include <cstring>

#include <gtest/gtest.h>

#include <vector>

#include <limits>

#include "runtime/core/dtype.h"

namespace tessera {
namespace {

float ReferenceF16ToF32(uint16_t h) {
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

uint16_t ReferenceF32ToF16(float f) {
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

uint16_t ReferenceF32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN stays NaN
  }
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

TEST(DType, F16ConversionsMatchTheReferenceBitForBit) {
  // Every half (NaN payloads included) widens exactly as the reference does.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float a = F16ToF32(static_cast<uint16_t>(h)), b = ReferenceF16ToF32(static_cast<uint16_t>(h));
    ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << std::hex << h;
  }
  // Narrowing: a prime stride through all 2^32 float patterns (~1M of them, every exponent),
  // plus the edges: rounding to and past 65504, the subnormal boundary, ties, zeros, inf, NaN.
  auto check = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    ASSERT_EQ(F32ToF16(f), ReferenceF32ToF16(f)) << std::hex << bits;
  };
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4099) check(static_cast<uint32_t>(bits));
  for (uint32_t base : {0x477fe000u, 0x477ff000u, 0x47800000u, 0x38800000u, 0x33800000u,
                        0x33000000u, 0x7f800000u, 0x7fc00001u, 0x7f800001u, 0u}) {
    for (uint32_t d = 0; d < 0x2000u; ++d) {
      check(base + d);
      check(base - d);
      check((base + d) | 0x80000000u);
    }
  }
}

TEST(DType, Bf16NarrowingMatchesTheReferenceBitForBit) {
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4099) {
    float f;
    const uint32_t b = static_cast<uint32_t>(bits);
    std::memcpy(&f, &b, 4);
    ASSERT_EQ(F32ToBf16(f), ReferenceF32ToBf16(f)) << std::hex << b;
  }
  for (uint32_t b : {0x7f800000u, 0x7f800001u, 0x7fc00000u, 0xff800001u, 0x3f808000u,
                     0x3f818000u, 0x7f7fffffu, 0u, 0x80000000u}) {
    float f;
    std::memcpy(&f, &b, 4);
    ASSERT_EQ(F32ToBf16(f), ReferenceF32ToBf16(f)) << std::hex << b;
  }
}

}  // namespace
// FirstNonFinite: every NaN/Inf pattern is found at its index, in every block position, and
// the largest finite values, subnormals and zeros are not.
TEST(DType, FirstNonFiniteFindsEveryNanAndInf) {
  std::vector<float> f(1000, 1.0f);
  f[3] = std::numeric_limits<float>::max();
  f[4] = -std::numeric_limits<float>::denorm_min();
  f[5] = -0.0f;
  EXPECT_EQ(FirstNonFinite(f.data(), 1000, DType::kF32), -1);
  for (int64_t at : {0, 255, 256, 511, 999}) {
    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
      std::vector<float> g = f;
      g[at] = bad;
      g[999] = at == 999 ? bad : g[999];
      EXPECT_EQ(FirstNonFinite(g.data(), 1000, DType::kF32), at);
      EXPECT_EQ(FirstNonFinite(g.data(), at, DType::kF32), -1);  // only the first n are read
    }
  }
  uint32_t signalling = 0x7f800001u;
  std::memcpy(&f[700], &signalling, 4);
  EXPECT_EQ(FirstNonFinite(f.data(), 1000, DType::kF32), 700);
  std::vector<uint16_t> h(300, 0x3c00);  // f16 1.0
  h[10] = 0x7bff;                        // f16 max: finite
  EXPECT_EQ(FirstNonFinite(h.data(), 300, DType::kF16), -1);
  h[299] = 0x7e00;  // f16 NaN
  EXPECT_EQ(FirstNonFinite(h.data(), 300, DType::kF16), 299);
  std::vector<uint16_t> b(300, 0x3f80);  // bf16 1.0
  b[1] = 0x7f7f;                         // bf16 max: finite
  EXPECT_EQ(FirstNonFinite(b.data(), 300, DType::kBF16), -1);
  b[2] = 0xff80;  // bf16 -inf
  EXPECT_EQ(FirstNonFinite(b.data(), 300, DType::kBF16), 2);
  std::vector<int32_t> ints(10, -1);
  EXPECT_EQ(FirstNonFinite(ints.data(), 10, DType::kI32), -1);
}

}  // namespace tessera
