// links: tessera_kernels
// tests/kernels/activation_test.cc — GELU (tanh form), SwiGLU, residual adds and the
// vectorised exp they rely on: references in double, finite differences, determinism.
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/vec.h"
#include "tests/kernels/gradcheck.h"

namespace tessera::cpu {
namespace {

using testing::BitEqual;
using testing::ExpectGradMatches;
using testing::Project;
using testing::RandomVector;
using testing::RelativeError;

TEST(ExpF, WithinFewUlpOfStdExpOverTheRange) {
  double worst = 0.0;
  for (double x = -87.0; x <= 88.0; x += 0.0137) {
    const float xf = static_cast<float>(x);
    const double ref = std::exp(static_cast<double>(xf));
    worst = std::max(worst, std::fabs(vec::ExpF(xf) - ref) / ref);
  }
  EXPECT_LT(worst, 4e-7);  // ~3 ulp of fp32
  EXPECT_EQ(vec::ExpF(0.0f), 1.0f);
  EXPECT_GT(vec::ExpF(-1000.0f), 0.0f);  // clamped: tiny, not zero/denormal
  EXPECT_LT(vec::ExpF(-1000.0f), 1e-37f);
  EXPECT_TRUE(std::isfinite(vec::ExpF(1000.0f)));
  EXPECT_TRUE(std::isnan(vec::ExpF(std::nanf(""))));
}

double GeluRef(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// vec::Max is the select "x > m ? x : m" lane by lane (16 lanes, then the lanes in order, then
// the tail), whatever instructions run it: the same bits with NaNs, infinities and signed zeros.
float MaxBySelect(const float* x, int64_t n) {
  float lane[vec::kLanes];
  for (float& l : lane) l = x[0];
  int64_t i = 0;
  for (; i + vec::kLanes <= n; i += vec::kLanes)
    for (int j = 0; j < vec::kLanes; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  float m = lane[0];
  for (int j = 1; j < vec::kLanes; ++j) m = lane[j] > m ? lane[j] : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

TEST(VecMax, SameBitsAsTheLaneSelectIncludingNanAndSignedZero) {
  const float specials[] = {std::nanf(""), 0.0f, -0.0f, INFINITY, -INFINITY, 1.5f, -2.0f};
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t n = 1 + next() % 200;
    std::vector<float> x(n);
    for (float& v : x) {
      v = next() % 4 == 0 ? specials[next() % 7] : static_cast<float>(next() % 2001) * 1e-3f - 1.0f;
    }
    const float want = MaxBySelect(x.data(), n), got = vec::Max(x.data(), n);
    ASSERT_EQ(std::memcmp(&want, &got, sizeof got), 0) << "trial " << trial << " n " << n;
  }
}

TEST(Gelu, ForwardMatchesTanhFormula) {
  std::vector<float> x;
  for (float v = -12.0f; v <= 12.0f; v += 0.01f) x.push_back(v);
  std::vector<float> out(x.size());
  GeluForward(out.data(), x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(out[i], GeluRef(x[i]), 1e-6 * (1.0 + std::fabs(x[i]))) << "x=" << x[i];
  EXPECT_FALSE(std::isnan(out[0]));
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  const int64_t n = 300;
  auto x = RandomVector(n, 1, -4.0f, 4.0f);
  const auto r = RandomVector(n, 2);
  std::vector<float> out(n), d_x(n);
  auto loss = [&] {
    GeluForward(out.data(), x.data(), n);
    return Project(out.data(), r);
  };
  GeluBackward(d_x.data(), r.data(), x.data(), n);
  ExpectGradMatches("d_inp", x, loss, d_x.data());
}

TEST(Swiglu, ForwardMatchesNaive) {
  const int64_t N = 5, H = 23;
  auto inp = RandomVector(N * 2 * H, 3, -6.0f, 6.0f);
  std::vector<float> out(N * H), ref(N * H);
  SwigluForward(out.data(), inp.data(), N, H);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < H; ++j) {
      const double g = inp[i * 2 * H + j], u = inp[i * 2 * H + H + j];
      ref[i * H + j] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
    }
  EXPECT_LT(RelativeError(out.data(), ref.data(), out.size()), 1e-6);
}

TEST(Swiglu, BackwardMatchesFiniteDifferences) {
  const int64_t N = 4, H = 17;
  auto inp = RandomVector(N * 2 * H, 4, -3.0f, 3.0f);
  const auto r = RandomVector(N * H, 5);
  std::vector<float> out(N * H), d_inp(N * 2 * H, 9.0f);
  auto loss = [&] {
    SwigluForward(out.data(), inp.data(), N, H);
    return Project(out.data(), r);
  };
  SwigluBackward(d_inp.data(), r.data(), inp.data(), N, H);
  ExpectGradMatches("d_inp", inp, loss, d_inp.data());
}

TEST(Residual, AddAndAddInPlace) {
  const int64_t n = 70000;  // parallel path
  auto a = RandomVector(n, 6), b = RandomVector(n, 7);
  std::vector<float> out(n);
  Add(out.data(), a.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]);
  auto acc = a;
  AddInPlace(acc.data(), b.data(), n);
  EXPECT_TRUE(BitEqual(acc, out));
  auto alias = a;
  Add(alias.data(), alias.data(), b.data(), n);  // out aliases a
  EXPECT_TRUE(BitEqual(alias, out));
}

TEST(Activations, DeterministicAcrossRuns) {
  const int64_t N = 64, H = 768;  // parallel path
  auto x = RandomVector(N * 2 * H, 8, -5.0f, 5.0f), d = RandomVector(N * 2 * H, 9);
  std::vector<float> g[2], dg[2], s[2], ds[2];
  for (int run = 0; run < 2; ++run) {
    g[run].resize(N * 2 * H);
    dg[run].resize(N * 2 * H);
    s[run].resize(N * H);
    ds[run].resize(N * 2 * H);
    GeluForward(g[run].data(), x.data(), N * 2 * H);
    GeluBackward(dg[run].data(), d.data(), x.data(), N * 2 * H);
    SwigluForward(s[run].data(), x.data(), N, H);
    SwigluBackward(ds[run].data(), d.data(), x.data(), N, H);
  }
  EXPECT_TRUE(BitEqual(g[0], g[1]));
  EXPECT_TRUE(BitEqual(dg[0], dg[1]));
  EXPECT_TRUE(BitEqual(s[0], s[1]));
  EXPECT_TRUE(BitEqual(ds[0], ds[1]));
}

}  // namespace
}  // namespace tessera::cpu

namespace tessera::cpu {
namespace {

// LoRA's dropout: about p of the elements are zero, the others scaled by 1 / (1 - p); the mask
// is a function of (key, element index), so a slice of columns [col0, col0 + cols) of a wider
// input draws the same mask as the whole; another key draws another mask; out may alias x.
TEST(Dropout, DropsAboutPScalesTheRestAndSlicesDrawTheWholeInputsMask) {
  const int64_t rows = 64, cols = 96;
  const float p = 0.25f;
  std::vector<float> x(rows * cols), whole(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) x[i] = 1.0f + 0.001f * static_cast<float>(i % 97);
  Dropout(whole.data(), x.data(), rows, cols, 0, cols, p, 42);
  int64_t dropped = 0;
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (whole[i] == 0.0f) {
      ++dropped;
    } else {
      ASSERT_EQ(whole[i], x[i] * (1.0f / (1.0f - p))) << i;
    }
  }
  const double frac = static_cast<double>(dropped) / static_cast<double>(rows * cols);
  EXPECT_NEAR(frac, p, 0.03);  // 6144 draws: 4.5 standard deviations
  // Columns [32, 80) of every row, as a tensor-parallel rank holds them.
  const int64_t c0 = 32, w = 48;
  std::vector<float> slice(rows * w), out(rows * w);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < w; ++j) slice[i * w + j] = x[i * cols + c0 + j];
  }
  Dropout(out.data(), slice.data(), rows, w, c0, cols, p, 42);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < w; ++j) ASSERT_EQ(out[i * w + j], whole[i * cols + c0 + j]);
  }
  Dropout(slice.data(), slice.data(), rows, w, c0, cols, p, 42);  // in place
  EXPECT_EQ(slice, out);
  std::vector<float> other(rows * cols);
  Dropout(other.data(), x.data(), rows, cols, 0, cols, p, 43);
  EXPECT_NE(other, whole);
}

}  // namespace
}  // namespace tessera::cpu
