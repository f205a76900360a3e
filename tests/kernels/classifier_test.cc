// links: tessera_kernels
// tests/kernels/classifier_test.cc — fused LM head + cross-entropy: losses against a naive
// log-softmax in double, ignored targets, chunking, finite differences of d_x and d_weight,
// forward-only mode, += / = semantics and determinism.
#include <cmath>
#include <vector>

#include "runtime/kernels/cpu/ops.h"
#include "tests/kernels/gradcheck.h"

namespace tessera::cpu {
namespace {

using testing::BitEqual;
using testing::ExpectGradMatches;
using testing::RandomVector;
using testing::RelativeError;

struct Problem {
  int64_t N, C, V;
  std::vector<float> x, w;
  std::vector<int32_t> targets;
  Problem(int64_t n, int64_t c, int64_t v, uint32_t seed) : N(n), C(c), V(v) {
    x = RandomVector(N * C, seed, -2.0f, 2.0f);
    w = RandomVector(V * C, seed + 1, -1.0f, 1.0f);
    targets.resize(N);
    for (int64_t i = 0; i < N; ++i) targets[i] = (i % 4 == 3) ? -1 : static_cast<int32_t>((i * 7 + 3) % V);
  }
  double Run(std::vector<float>& losses, float* d_x, float* d_w, float scale, int64_t chunk) const {
    losses.assign(N, -1.0f);
    std::vector<float> scratch(chunk * V);
    return ClassifierForwardBackward(losses.data(), d_x, d_w, x.data(), w.data(), targets.data(), N,
                                     C, V, scale, scratch.data(), chunk);
  }
};

TEST(Classifier, LossesMatchNaiveLogSoftmaxAndIgnoreNegativeTargets) {
  const Problem p(11, 16, 37, 1);
  std::vector<float> losses;
  const double sum = p.Run(losses, nullptr, nullptr, 1.0f, 4);
  double ref_sum = 0.0;
  for (int64_t i = 0; i < p.N; ++i) {
    if (p.targets[i] < 0) {
      EXPECT_EQ(losses[i], 0.0f);
      continue;
    }
    std::vector<double> logits(p.V);
    double m = -1e300;
    for (int64_t v = 0; v < p.V; ++v) {
      double d = 0;
      for (int64_t c = 0; c < p.C; ++c) d += static_cast<double>(p.x[i * p.C + c]) * p.w[v * p.C + c];
      logits[v] = d;
      m = std::max(m, d);
    }
    double z = 0;
    for (double l : logits) z += std::exp(l - m);
    const double loss = std::log(z) + m - logits[p.targets[i]];
    EXPECT_NEAR(losses[i], loss, 1e-5 * (1 + loss)) << "row " << i;
    ref_sum += loss;
  }
  EXPECT_NEAR(sum, ref_sum, 1e-5 * ref_sum);
}

TEST(Classifier, ChunkSizeDoesNotChangeResults) {
  const Problem p(10, 12, 29, 2);
  std::vector<float> l1, l4, l32, dx1(p.N * p.C), dx4(p.N * p.C), dw1(p.V * p.C, 0.0f), dw4(p.V * p.C, 0.0f);
  const double s1 = p.Run(l1, dx1.data(), dw1.data(), 0.5f, 1);
  const double s4 = p.Run(l4, dx4.data(), dw4.data(), 0.5f, 4);
  const double s32 = p.Run(l32, nullptr, nullptr, 0.5f, 32);  // chunk larger than N
  EXPECT_NEAR(s1, s4, 1e-6 * s1);
  EXPECT_NEAR(s1, s32, 1e-6 * s1);
  EXPECT_LT(RelativeError(l1.data(), l4.data(), l1.size()), 1e-6);
  EXPECT_LT(RelativeError(l1.data(), l32.data(), l1.size()), 1e-6);
  EXPECT_LT(RelativeError(dx1.data(), dx4.data(), dx1.size()), 1e-6);
  EXPECT_LT(RelativeError(dw1.data(), dw4.data(), dw1.size()), 1e-6);
}

TEST(Classifier, BackwardMatchesFiniteDifferences) {
  Problem p(7, 6, 13, 3);
  const float scale = 1.0f / 6.0f;  // 6 counted rows of 7 (row 3 is ignored)
  std::vector<float> losses, d_x(p.N * p.C, 77.0f), d_w(p.V * p.C, 0.0f);
  p.Run(losses, d_x.data(), d_w.data(), scale, 3);
  auto loss = [&] {
    std::vector<float> l;
    return scale * p.Run(l, nullptr, nullptr, scale, 3);
  };
  ExpectGradMatches("d_x", p.x, loss, d_x.data());
  ExpectGradMatches("d_weight", p.w, loss, d_w.data());
  // Ignored rows get exactly zero input gradient.
  for (int64_t i = 0; i < p.N; ++i) {
    if (p.targets[i] >= 0) continue;
    for (int64_t c = 0; c < p.C; ++c) EXPECT_EQ(d_x[i * p.C + c], 0.0f);
  }
}

TEST(Classifier, ForwardOnlyMatchesFusedAndSemanticsHold) {
  const Problem p(64, 48, 300, 4);  // parallel path
  std::vector<float> l_fwd, l_a, l_b, dx_a(p.N * p.C), dx_b(p.N * p.C, 1e30f);
  std::vector<float> dw_a(p.V * p.C, 0.0f), dw_b(p.V * p.C, 0.0f);
  const double s_fwd = p.Run(l_fwd, nullptr, nullptr, 0.1f, 16);
  const double s_a = p.Run(l_a, dx_a.data(), dw_a.data(), 0.1f, 16);
  const double s_b = p.Run(l_b, dx_b.data(), dw_b.data(), 0.1f, 16);
  EXPECT_EQ(s_fwd, s_a);
  EXPECT_EQ(s_a, s_b);
  EXPECT_TRUE(BitEqual(l_fwd, l_a));
  EXPECT_TRUE(BitEqual(l_a, l_b));
  EXPECT_TRUE(BitEqual(dx_a, dx_b));  // d_x written, garbage overwritten; deterministic
  EXPECT_TRUE(BitEqual(dw_a, dw_b));
  p.Run(l_b, dx_b.data(), dw_b.data(), 0.1f, 16);  // d_weight accumulates
  for (size_t i = 0; i < dw_a.size(); ++i)
    ASSERT_NEAR(dw_b[i], 2.0f * dw_a[i], 1e-5f * (1.0f + std::fabs(dw_a[i])));
  // d_weight null: d_x alone is still produced.
  std::vector<float> dx_c(p.N * p.C);
  p.Run(l_b, dx_c.data(), nullptr, 0.1f, 16);
  EXPECT_TRUE(BitEqual(dx_a, dx_c));
}

TEST(Classifier, LargeLogitsStayFinite) {
  Problem p(4, 8, 50, 5);
  for (auto& v : p.w) v *= 200.0f;  // logits in the thousands: naive exp would overflow
  std::vector<float> losses, d_x(p.N * p.C);
  std::vector<float> d_w(p.V * p.C, 0.0f);
  const double sum = p.Run(losses, d_x.data(), d_w.data(), 1.0f, 2);
  EXPECT_TRUE(std::isfinite(sum));
  for (float v : d_x) ASSERT_TRUE(std::isfinite(v));
  for (float v : losses) ASSERT_GE(v, 0.0f);
}

TEST(ClassifierDeathTest, RejectsTargetOutOfVocabulary) {
  Problem p(2, 4, 5, 6);
  p.targets[1] = 5;
  std::vector<float> losses;
  EXPECT_DEATH(p.Run(losses, nullptr, nullptr, 1.0f, 2), "target");
}

}  // namespace
}  // namespace tessera::cpu
