// links: tessera_kernels
// tests/kernels/rope_test.cc — RoPE against the Hugging Face rotate_half formula computed
// here, inverse property, finite differences (backward = R^T), v untouched, determinism.
#include <cmath>
#include <vector>

#include "runtime/kernels/cpu/ops.h"
#include "tests/kernels/gradcheck.h"

namespace tessera::cpu {
namespace {

using testing::BitEqual;
using testing::ExpectGradMatches;
using testing::Project;
using testing::RandomVector;
using testing::RelativeError;

constexpr int64_t B = 2, T = 5, NH = 4, NKV = 2, HS = 8, R = (NH + 2 * NKV) * HS;
constexpr float kTheta = 10000.0f;

TEST(Rope, ForwardMatchesHfRotateHalf) {
  const int64_t pos_offset = 3;
  const auto qkv0 = RandomVector(B * T * R, 1);
  auto qkv = qkv0;
  RopeForward(qkv.data(), B, T, NH, NKV, HS, PlainRope(kTheta), pos_offset);
  std::vector<float> ref = qkv0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < NH + NKV; ++h) {  // q heads then k heads
        const float* x = qkv0.data() + (b * T + t) * R + h * HS;
        float* y = ref.data() + (b * T + t) * R + h * HS;
        for (int64_t i = 0; i < HS / 2; ++i) {
          const double a = static_cast<double>(t + pos_offset) * std::pow(kTheta, -2.0 * i / HS);
          y[i] = static_cast<float>(x[i] * std::cos(a) - x[i + HS / 2] * std::sin(a));
          y[i + HS / 2] = static_cast<float>(x[i + HS / 2] * std::cos(a) + x[i] * std::sin(a));
        }
      }
  EXPECT_LT(RelativeError(qkv.data(), ref.data(), qkv.size()), 1e-6);
  for (int64_t n = 0; n < B * T; ++n)  // v heads untouched, bit for bit
    for (int64_t j = (NH + NKV) * HS; j < R; ++j) ASSERT_EQ(qkv[n * R + j], qkv0[n * R + j]);
}

TEST(Rope, BackwardIsTheInverseRotation) {
  const auto x0 = RandomVector(B * T * R, 2);
  auto x = x0;
  RopeForward(x.data(), B, T, NH, NKV, HS, PlainRope(kTheta), 7);
  RopeBackward(x.data(), B, T, NH, NKV, HS, PlainRope(kTheta), 7);
  EXPECT_LT(RelativeError(x.data(), x0.data(), x.size()), 1e-6);
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  auto qkv = RandomVector(B * T * R, 3);
  const auto r = RandomVector(B * T * R, 4);
  std::vector<float> work;
  auto loss = [&] {
    work = qkv;
    RopeForward(work.data(), B, T, NH, NKV, HS, PlainRope(kTheta), 2);
    return Project(work.data(), r);
  };
  auto d_qkv = r;  // backward works in place on the incoming gradient
  RopeBackward(d_qkv.data(), B, T, NH, NKV, HS, PlainRope(kTheta), 2);
  ExpectGradMatches("d_qkv", qkv, loss, d_qkv.data());
}

TEST(Rope, DeterministicAcrossRuns) {
  const int64_t b = 2, t = 64, nh = 12, nkv = 4, hs = 64;  // parallel path
  const auto x0 = RandomVector(b * t * (nh + 2 * nkv) * hs, 5);
  auto x1 = x0, x2 = x0;
  RopeForward(x1.data(), b, t, nh, nkv, hs, PlainRope(500000.0f), 0);
  RopeForward(x2.data(), b, t, nh, nkv, hs, PlainRope(500000.0f), 0);
  EXPECT_TRUE(BitEqual(x1, x2));
  RopeBackward(x1.data(), b, t, nh, nkv, hs, PlainRope(500000.0f), 0);
  RopeBackward(x2.data(), b, t, nh, nkv, hs, PlainRope(500000.0f), 0);
  EXPECT_TRUE(BitEqual(x1, x2));
}

// Llama 3.1's frequencies (transformers' _compute_llama3_parameters, written here from its
// steps in double: torch.where over wavelengths), for Llama-3.1-8B's head size and base.
TEST(Rope, Llama3ScalingFollowsTheReferenceProcedure) {
  RopeParams p;
  p.theta = 500000.0f;
  p.scaling.type = RopeScalingType::kLlama3;
  p.scaling.factor = 8.0f;
  p.scaling.low_freq_factor = 1.0f;
  p.scaling.high_freq_factor = 4.0f;
  p.scaling.original_max_position = 8192;
  const int64_t hs = 128;
  const std::vector<float> got = RopeInverseFrequencies(hs, p);
  ASSERT_EQ(got.size(), 64u);
  const double L = 8192, low_wavelen = L / 1.0, high_wavelen = L / 4.0;
  int low = 0, medium = 0, high = 0;
  for (int64_t i = 0; i < hs / 2; ++i) {
    const double inv = 1.0 / std::pow(500000.0, (2.0 * i) / hs);
    const double wavelen = 2 * M_PI / inv;
    double scaled = wavelen > low_wavelen ? inv / 8.0 : inv;
    const double smooth = (L / wavelen - 1.0) / (4.0 - 1.0);
    const double smoothed = (1 - smooth) * scaled / 8.0 + smooth * scaled;
    const bool is_medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (is_medium) scaled = smoothed;
    (wavelen > low_wavelen ? low : is_medium ? medium : high) += 1;
    EXPECT_EQ(got[static_cast<size_t>(i)], static_cast<float>(scaled)) << "i=" << i;
  }
  EXPECT_GT(low, 0);  // every band is exercised
  EXPECT_GT(medium, 0);
  EXPECT_GT(high, 0);
  // The highest frequency is untouched, the lowest divided by the factor.
  EXPECT_EQ(got.front(), 1.0f);
  const std::vector<float> plain = RopeInverseFrequencies(hs, PlainRope(500000.0f));
  EXPECT_EQ(got.back(), static_cast<float>(static_cast<double>(1.0 / std::pow(500000.0, 126.0 / 128)) / 8.0));
  EXPECT_NE(got.back(), plain.back());
}

TEST(Rope, LinearScalingDividesEveryFrequencyAndRotatesAsIfPositionsWereStretched) {
  RopeParams linear = PlainRope(kTheta);
  linear.scaling.type = RopeScalingType::kLinear;
  linear.scaling.factor = 4.0f;
  const std::vector<float> plain = RopeInverseFrequencies(HS, PlainRope(kTheta));
  const std::vector<float> got = RopeInverseFrequencies(HS, linear);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(got[i], static_cast<float>(1.0 / std::pow(double(kTheta), 2.0 * i / HS) / 4.0));
  }
  // Position 8 under factor 4 turns like position 2 without scaling (exact: powers of two).
  std::vector<float> a = RandomVector(R, 5), b = a;
  RopeForward(a.data(), 1, 1, NH, NKV, HS, linear, 8);
  RopeForward(b.data(), 1, 1, NH, NKV, HS, PlainRope(kTheta), 2);
  for (int64_t j = 0; j < R; ++j) EXPECT_NEAR(a[j], b[j], 1e-6f) << j;
}

}  // namespace
}  // namespace tessera::cpu
