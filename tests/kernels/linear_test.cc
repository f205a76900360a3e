// links: tessera_kernels
// tests/kernels/linear_test.cc — Gemm, LinearForward/Backward and the sgemm benchmark helper
// against naive loops, finite differences, and for determinism and += semantics.
#include <vector>

#include "runtime/kernels/cpu/bench.h"
#include "runtime/kernels/cpu/ops.h"
#include "tests/kernels/gradcheck.h"

namespace tessera::cpu {
namespace {

using testing::BitEqual;
using testing::ExpectGradMatches;
using testing::Project;
using testing::RandomVector;
using testing::RelativeError;

// C = alpha op(A) op(B) + beta C in double, with the same leading-dimension conventions.
void NaiveGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k)
        s += static_cast<double>(ta ? A[k * lda + i] : A[i * lda + k]) *
             (tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = static_cast<float>(alpha * s + beta * C[i * ldc + j]);
    }
}

TEST(Gemm, MatchesNaiveForAllTransposesAndStrides) {
  const int64_t M = 7, N = 5, K = 9, pad = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      auto a = RandomVector((ta ? K : M) * lda, 1);
      auto b = RandomVector((tb ? N : K) * ldb, 2);
      auto c = RandomVector(M * ldc, 3);
      auto expected = c;
      Gemm(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, c.data(), ldc);
      NaiveGemm(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, expected.data(), ldc);
      EXPECT_LT(RelativeError(c.data(), expected.data(), c.size()), 1e-6) << ta << tb;
    }
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  std::vector<float> c = {1, 2, 3, 4};
  Gemm(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}));
  Gemm(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

void NaiveLinear(float* out, const float* inp, const float* w, const float* bias, int64_t N,
                 int64_t C, int64_t OC) {
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OC; ++o) {
      double s = bias ? bias[o] : 0.0;
      for (int64_t c = 0; c < C; ++c) s += static_cast<double>(inp[i * C + c]) * w[o * C + c];
      out[i * OC + o] = static_cast<float>(s);
    }
}

TEST(Linear, ForwardMatchesNaiveWithAndWithoutBias) {
  const int64_t N = 13, C = 24, OC = 17;
  auto inp = RandomVector(N * C, 4), w = RandomVector(OC * C, 5), bias = RandomVector(OC, 6);
  std::vector<float> out(N * OC, 7.0f), ref(N * OC);
  for (const float* b : {static_cast<const float*>(bias.data()), static_cast<const float*>(nullptr)}) {
    LinearForward(out.data(), inp.data(), w.data(), b, N, C, OC);
    NaiveLinear(ref.data(), inp.data(), w.data(), b, N, C, OC);
    EXPECT_LT(RelativeError(out.data(), ref.data(), out.size()), 1e-6);
  }
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  const int64_t N = 6, C = 8, OC = 5;
  auto inp = RandomVector(N * C, 7), w = RandomVector(OC * C, 8), bias = RandomVector(OC, 9);
  const auto r = RandomVector(N * OC, 10);
  std::vector<float> out(N * OC);
  auto loss = [&] {
    LinearForward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    return Project(out.data(), r);
  };
  std::vector<float> d_inp(N * C, 99.0f), d_w(OC * C, 0.0f), d_b(OC, 0.0f);
  LinearBackward(d_inp.data(), d_w.data(), d_b.data(), r.data(), inp.data(), w.data(), N, C, OC);
  ExpectGradMatches("d_inp", inp, loss, d_inp.data());
  ExpectGradMatches("d_weight", w, loss, d_w.data());
  ExpectGradMatches("d_bias", bias, loss, d_b.data());
}

TEST(Linear, BackwardAccumulatesParamsWritesInputAndSkipsNulls) {
  const int64_t N = 40, C = 48, OC = 36;
  auto inp = RandomVector(N * C, 11), w = RandomVector(OC * C, 12), d_out = RandomVector(N * OC, 13);
  std::vector<float> d_inp(N * C, 5.0f), d_w(OC * C, 0.0f), d_b(OC, 0.0f);
  LinearBackward(d_inp.data(), d_w.data(), d_b.data(), d_out.data(), inp.data(), w.data(), N, C, OC);
  const auto d_inp1 = d_inp, d_w1 = d_w, d_b1 = d_b;
  LinearBackward(d_inp.data(), d_w.data(), d_b.data(), d_out.data(), inp.data(), w.data(), N, C, OC);
  EXPECT_TRUE(BitEqual(d_inp, d_inp1));  // written, not accumulated
  for (size_t i = 0; i < d_w.size(); ++i) EXPECT_NEAR(d_w[i], 2.0f * d_w1[i], 1e-5f * (1 + std::fabs(d_w1[i])));
  for (size_t i = 0; i < d_b.size(); ++i) EXPECT_FLOAT_EQ(d_b[i], 2.0f * d_b1[i]);
  // Null pointers: only the requested gradients are touched.
  std::vector<float> d_w_only(OC * C, 0.0f);
  LinearBackward(nullptr, d_w_only.data(), nullptr, d_out.data(), inp.data(), w.data(), N, C, OC);
  EXPECT_TRUE(BitEqual(d_w_only, d_w1));
  std::vector<float> d_b_only(OC, 0.0f);
  LinearBackward(nullptr, nullptr, d_b_only.data(), d_out.data(), inp.data(), w.data(), N, C, OC);
  EXPECT_TRUE(BitEqual(d_b_only, d_b1));
}

TEST(Linear, DeterministicAcrossRuns) {
  const int64_t N = 256, C = 96, OC = 160;  // big enough for the parallel paths
  auto inp = RandomVector(N * C, 14), w = RandomVector(OC * C, 15), bias = RandomVector(OC, 16);
  auto d_out = RandomVector(N * OC, 17);
  std::vector<float> out[2], d_inp[2], d_w[2], d_b[2];
  for (int run = 0; run < 2; ++run) {
    out[run].assign(N * OC, 0.0f);
    d_inp[run].assign(N * C, 0.0f);
    d_w[run].assign(OC * C, 0.0f);
    d_b[run].assign(OC, 0.0f);
    LinearForward(out[run].data(), inp.data(), w.data(), bias.data(), N, C, OC);
    LinearBackward(d_inp[run].data(), d_w[run].data(), d_b[run].data(), d_out.data(), inp.data(),
                   w.data(), N, C, OC);
  }
  EXPECT_TRUE(BitEqual(out[0], out[1]));
  EXPECT_TRUE(BitEqual(d_inp[0], d_inp[1]));
  EXPECT_TRUE(BitEqual(d_w[0], d_w[1]));
  EXPECT_TRUE(BitEqual(d_b[0], d_b[1]));
}

TEST(Bench, MeasuresPositiveSgemmThroughput) {
  const double gflops = MeasureSgemmGflops(64, 64, 64, 3);
  EXPECT_GT(gflops, 0.0);
  EXPECT_LT(gflops, 1e5);  // a sanity bound: no CPU here does 100 TFLOP/s
}

}  // namespace
}  // namespace tessera::cpu
