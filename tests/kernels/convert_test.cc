// links: tessera_kernels
// tests/kernels/convert_test.cc — the bulk fp32 <-> bf16 / f16 conversions (cpu/convert.h)
// against the scalar ones of runtime/core/dtype.h, bit for bit: every 16-bit pattern, every
// fp32 sign/exponent/high-mantissa pattern with low bits at and around the rounding points
// (ties included), random bit patterns, and the named corner cases; the same bits on 1 and 2
// threads; AllFinite.
#include "runtime/kernels/cpu/convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/kernels/cpu/threads.h"

namespace tessera {
namespace {

float F(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t B(float f) { return std::bit_cast<uint32_t>(f); }

uint16_t Scalar16(DType t, float f) { return t == DType::kBF16 ? F32ToBf16(f) : F32ToF16(f); }
float ScalarWiden(DType t, uint16_t h) { return t == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h); }

// Every kernel on `x` against the scalar functions; returns the number of mismatches
// (reporting the first few).
int64_t CheckAgainstScalar(DType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> narrow(n);
  cpu::ConvertFromF32(t, x.data(), narrow.data(), n);
  std::vector<float> rounded = x;
  cpu::RoundTo(t, rounded.data(), n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t want = Scalar16(t, x[i]);
    const uint32_t want_round = B(ScalarWiden(t, want));
    if (narrow[i] != want || B(rounded[i]) != want_round) {
      if (++bad <= 5) {
        ADD_FAILURE() << DTypeName(t) << " input 0x" << std::hex << B(x[i]) << ": narrow 0x"
                      << narrow[i] << " want 0x" << want << ", round 0x" << B(rounded[i])
                      << " want 0x" << want_round;
      }
    }
  }
  return bad;
}

class Convert16 : public ::testing::TestWithParam<DType> {};

TEST_P(Convert16, EverySixteenBitPatternWidensAndRoundTrips) {
  const DType t = GetParam();
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> wide(65536);
  cpu::ConvertToF32(t, all.data(), wide.data(), 65536);
  int64_t bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) bad += B(wide[h]) != B(ScalarWiden(t, all[h]));
  EXPECT_EQ(bad, 0);
  // Back again: every non-NaN pattern is representable, so it survives unchanged; NaNs stay
  // NaN (quieted) exactly as the scalar conversion does.
  std::vector<uint16_t> back(65536);
  cpu::ConvertFromF32(t, wide.data(), back.data(), 65536);
  int64_t changed = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    if (!std::isnan(wide[h])) changed += back[h] != h;
  }
  EXPECT_EQ(changed, 0);
  EXPECT_EQ(CheckAgainstScalar(t, wide), 0);
}

TEST_P(Convert16, MatchesScalarAroundEveryRoundingPoint) {
  // All 65536 values of the top 16 bits (sign, exponent, 7 mantissa bits) times low 16-bit
  // patterns at and next to every power of two: bf16 ties (0x8000) and f16 normal ties
  // (0x1000), and, through the top bits, the f16 subnormal ties, overflow and NaNs.
  std::vector<uint32_t> lows = {0, 0xffff};
  for (int k = 0; k < 16; ++k) {
    lows.push_back(1u << k);
    lows.push_back((1u << k) - 1);
    lows.push_back((1u << k) + 1);
  }
  std::vector<float> x;
  x.reserve(65536 * lows.size());
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : lows) x.push_back(F((hi << 16) | (lo & 0xffff)));
  EXPECT_EQ(CheckAgainstScalar(GetParam(), x), 0);
}

TEST_P(Convert16, MatchesScalarOnRandomBitsAndNamedCases) {
  std::mt19937 gen(17);
  std::vector<float> x(1 << 20);
  for (float& v : x) v = F(static_cast<uint32_t>(gen()));
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> named = {
      0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, std::nanf(""), -std::nanf(""),
      F(0x7fc00001), F(0x7f800001), F(0xff800001),   // quiet and signalling NaNs with payload
      65504.0f, 65519.0f, 65520.0f, -65520.0f, 1e6f,  // f16 max, last to round down, overflow
      std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
      F(0x7f7f8000), F(0x7f7f7fff),                  // bf16 overflow tie / just below
      5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f,   // f16 min subnormal, half of it (tie to 0)
      8.940697e-8f,                                  // 1.5 subnormal ulps: tie to even (2)
      6.1035156e-5f, 6.1031e-5f,                     // f16 min normal, just below
      std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
      1.00390625f, 1.01171875f, 1.0004883f, 1.0014648f};  // bf16 / f16 ties at 1
  x.insert(x.end(), named.begin(), named.end());
  EXPECT_EQ(CheckAgainstScalar(GetParam(), x), 0);
}

TEST_P(Convert16, OverflowIsInfinityNanStaysNan) {
  const DType t = GetParam();
  std::vector<float> x = {std::nanf(""), -std::nanf(""), 3e38f, 70000.0f};
  cpu::RoundTo(t, x.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(std::isnan(x[0]));
  EXPECT_TRUE(std::isnan(x[1]));
  EXPECT_TRUE(std::signbit(x[1]));
  if (t == DType::kF16) {
    EXPECT_EQ(x[2], std::numeric_limits<float>::infinity());
    EXPECT_EQ(x[3], std::numeric_limits<float>::infinity());
  } else {
    EXPECT_TRUE(std::isfinite(x[2]));
    EXPECT_EQ(x[3], 70144.0f);  // bf16 has 8 mantissa bits: 70000 -> 137 * 512
  }
}

TEST_P(Convert16, SameBitsOnOneAndTwoThreads) {
  const DType t = GetParam();
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<float> x(300001);  // several OpenMP chunks and an odd tail
  for (float& v : x) v = normal(gen);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> r[2];
  std::vector<uint16_t> h[2];
  std::vector<float> w[2];
  const int before = cpu::NumThreads();
  for (int k = 0; k < 2; ++k) {
    cpu::SetNumThreads(k + 1);
    r[k] = x;
    cpu::RoundTo(t, r[k].data(), n);
    h[k].resize(n);
    cpu::ConvertFromF32(t, x.data(), h[k].data(), n);
    w[k].resize(n);
    cpu::ConvertToF32(t, h[k].data(), w[k].data(), n);
  }
  cpu::SetNumThreads(before);
  EXPECT_EQ(0, std::memcmp(r[0].data(), r[1].data(), n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(h[0].data(), h[1].data(), n * sizeof(uint16_t)));
  EXPECT_EQ(0, std::memcmp(w[0].data(), w[1].data(), n * sizeof(float)));
  // Rounding is narrowing then widening.
  EXPECT_EQ(0, std::memcmp(r[0].data(), w[0].data(), n * sizeof(float)));
  EXPECT_EQ(CheckAgainstScalar(t, x), 0);
}

INSTANTIATE_TEST_SUITE_P(Types, Convert16, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& p) { return std::string(DTypeName(p.param)); });

TEST(ConvertF32, RoundIsNoOpAndConversionsCopy) {
  std::vector<float> x = {1.0f / 3.0f, -1e-40f, 1e38f, std::nanf(""), 0.1f};
  std::vector<float> r = x, out(x.size()), back(x.size());
  const int64_t n = static_cast<int64_t>(x.size());
  cpu::RoundTo(DType::kF32, r.data(), n);
  cpu::ConvertFromF32(DType::kF32, x.data(), out.data(), n);
  cpu::ConvertToF32(DType::kF32, out.data(), back.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(B(r[i]), B(x[i]));
    EXPECT_EQ(B(out[i]), B(x[i]));
    EXPECT_EQ(B(back[i]), B(x[i]));
  }
}

TEST(AllFinite, FindsAnyInfOrNanAnywhere) {
  std::vector<float> x(100003, 1.5f);
  x[7] = std::numeric_limits<float>::max();
  x[8] = std::numeric_limits<float>::denorm_min();
  const int64_t n = static_cast<int64_t>(x.size());
  EXPECT_TRUE(cpu::AllFinite(x.data(), n));
  EXPECT_TRUE(cpu::AllFinite(x.data(), 0));
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {inf, -inf, std::nanf(""), -std::nanf("")}) {
    for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
      std::vector<float> y = x;
      y[pos] = bad;
      EXPECT_FALSE(cpu::AllFinite(y.data(), n)) << bad << " at " << pos;
      EXPECT_TRUE(pos == 0 || cpu::AllFinite(y.data(), pos));  // the prefix before it
    }
  }
}

}  // namespace
}  // namespace tessera
