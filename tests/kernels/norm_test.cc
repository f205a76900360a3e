// links: tessera_kernels
// tests/kernels/norm_test.cc — LayerNorm and RMSNorm against double-precision references,
// finite differences, determinism, thread-count independence of parameter gradients, and
// += semantics.
#include <cmath>
#include <vector>

#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/threads.h"
#include "tests/kernels/gradcheck.h"

namespace tessera::cpu {
namespace {

using testing::BitEqual;
using testing::ExpectGradMatches;
using testing::Project;
using testing::RandomVector;
using testing::RelativeError;

TEST(LayerNorm, ForwardMatchesDoubleReference) {
  const int64_t N = 9, C = 37;
  const float eps = 1e-5f;
  auto x = RandomVector(N * C, 1, -2.0f, 3.0f), w = RandomVector(C, 2), b = RandomVector(C, 3);
  std::vector<float> out(N * C), mean(N), rstd(N), ref(N * C);
  LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, eps);
  for (int64_t i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[i * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    const double s = 1.0 / std::sqrt(v / C + eps);
    EXPECT_NEAR(mean[i], m, 1e-6);
    EXPECT_NEAR(rstd[i], s, 1e-5 * s);
    for (int64_t c = 0; c < C; ++c) ref[i * C + c] = static_cast<float>((x[i * C + c] - m) * s * w[c] + b[c]);
  }
  EXPECT_LT(RelativeError(out.data(), ref.data(), out.size()), 1e-6);
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  const int64_t N = 5, C = 19;
  auto x = RandomVector(N * C, 4, -2.0f, 2.0f), w = RandomVector(C, 5), b = RandomVector(C, 6);
  const auto r = RandomVector(N * C, 7);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    return Project(out.data(), r);
  };
  loss();
  std::vector<float> d_x(N * C, 42.0f), d_w(C, 0.0f), d_b(C, 0.0f);
  LayerNormBackward(d_x.data(), d_w.data(), d_b.data(), r.data(), x.data(), w.data(), mean.data(),
                    rstd.data(), N, C);
  ExpectGradMatches("d_inp", x, loss, d_x.data());
  ExpectGradMatches("d_weight", w, loss, d_w.data());
  ExpectGradMatches("d_bias", b, loss, d_b.data());
}

TEST(RmsNorm, ForwardMatchesDoubleReference) {
  const int64_t N = 7, C = 45;
  const float eps = 1e-6f;
  auto x = RandomVector(N * C, 8, -2.0f, 3.0f), w = RandomVector(C, 9);
  std::vector<float> out(N * C), rstd(N), ref(N * C);
  RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  for (int64_t i = 0; i < N; ++i) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += static_cast<double>(x[i * C + c]) * x[i * C + c];
    const double s = 1.0 / std::sqrt(ms / C + eps);
    EXPECT_NEAR(rstd[i], s, 1e-5 * s);
    for (int64_t c = 0; c < C; ++c) ref[i * C + c] = static_cast<float>(x[i * C + c] * s * w[c]);
  }
  EXPECT_LT(RelativeError(out.data(), ref.data(), out.size()), 1e-6);
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  const int64_t N = 6, C = 21;
  auto x = RandomVector(N * C, 10, -2.0f, 2.0f), w = RandomVector(C, 11);
  const auto r = RandomVector(N * C, 12);
  std::vector<float> out(N * C), rstd(N);
  auto loss = [&] {
    RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    return Project(out.data(), r);
  };
  loss();
  std::vector<float> d_x(N * C, 42.0f), d_w(C, 0.0f);
  RmsNormBackward(d_x.data(), d_w.data(), r.data(), x.data(), w.data(), rstd.data(), N, C);
  ExpectGradMatches("d_inp", x, loss, d_x.data());
  ExpectGradMatches("d_weight", w, loss, d_w.data());
}

// Big enough (N*C >= 2^14) that the OpenMP paths run.
struct NormCase {
  static constexpr int64_t N = 96, C = 320;
  std::vector<float> x = RandomVector(N * C, 13, -2.0f, 2.0f), w = RandomVector(C, 14),
                     b = RandomVector(C, 15), d_out = RandomVector(N * C, 16);
  std::vector<float> out = std::vector<float>(N * C), mean = std::vector<float>(N),
                     rstd = std::vector<float>(N);
  struct Grads {
    std::vector<float> out, d_x, d_w, d_b;
  };
  Grads RunLayerNorm() {
    Grads g{std::vector<float>(N * C), std::vector<float>(N * C), std::vector<float>(C, 0.0f),
            std::vector<float>(C, 0.0f)};
    LayerNormForward(g.out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    LayerNormBackward(g.d_x.data(), g.d_w.data(), g.d_b.data(), d_out.data(), x.data(), w.data(),
                      mean.data(), rstd.data(), N, C);
    return g;
  }
  Grads RunRmsNorm() {
    Grads g{std::vector<float>(N * C), std::vector<float>(N * C), std::vector<float>(C, 0.0f), {}};
    RmsNormForward(g.out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    RmsNormBackward(g.d_x.data(), g.d_w.data(), d_out.data(), x.data(), w.data(), rstd.data(), N, C);
    return g;
  }
};

// Strided rows (NormRows: q|k heads inside packed [q | k | v] rows, as the q/k norms use them)
// compute exactly what RmsNormForward/Backward compute on the same rows gathered contiguously,
// with rows interleaved so a wrong stride would pick another row's values.
TEST(RmsNorm, StridedRowsEqualTheContiguousKernelBitForBit) {
  const int64_t T = 5, NH = 3, NKV = 2, HS = 7, QKV = (NH + 2 * NKV) * HS;
  const float eps = 1e-6f;
  auto packed = RandomVector(T * QKV, 4, -2.0f, 2.0f), w = RandomVector(HS, 5);
  auto dy_packed = RandomVector(T * QKV, 6);
  std::vector<float> q(T * NH * HS), dq(T * NH * HS);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < NH * HS; ++i) {
      q[t * NH * HS + i] = packed[t * QKV + i];
      dq[t * NH * HS + i] = dy_packed[t * QKV + i];
    }
  }
  std::vector<float> ref(q.size()), ref_rstd(T * NH), ref_dx(q.size()), ref_dw(HS, 0.0f);
  RmsNormForward(ref.data(), ref_rstd.data(), q.data(), w.data(), T * NH, HS, eps);
  RmsNormBackward(ref_dx.data(), ref_dw.data(), dq.data(), q.data(), w.data(), ref_rstd.data(),
                  T * NH, HS);
  std::vector<float> out = packed, rstd(T * NH), dx = dy_packed, dw(HS, 0.0f);
  RmsNormForwardRows(out.data(), {NH, QKV}, rstd.data(), packed.data(), {NH, QKV}, w.data(),
                     T * NH, HS, eps);
  RmsNormBackwardRows(dx.data(), {NH, QKV}, dw.data(), dx.data(), {NH, QKV}, packed.data(),
                      {NH, QKV}, w.data(), rstd.data(), T * NH, HS);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < NH * HS; ++i) {
      ASSERT_EQ(out[t * QKV + i], ref[t * NH * HS + i]) << t << " " << i;
      ASSERT_EQ(dx[t * QKV + i], ref_dx[t * NH * HS + i]) << t << " " << i;
    }
    for (int64_t i = NH * HS; i < QKV; ++i) {  // k and v untouched
      ASSERT_EQ(out[t * QKV + i], packed[t * QKV + i]);
      ASSERT_EQ(dx[t * QKV + i], dy_packed[t * QKV + i]);
    }
  }
  EXPECT_TRUE(BitEqual(rstd, ref_rstd));
  EXPECT_TRUE(BitEqual(dw, ref_dw));
}

TEST(Norms, DeterministicAndParamGradsIndependentOfThreadCount) {
  NormCase k;
  const int threads = NumThreads();
  const auto ln_a = k.RunLayerNorm(), ln_b = k.RunLayerNorm();
  const auto rms_a = k.RunRmsNorm(), rms_b = k.RunRmsNorm();
  SetNumThreads(1);
  const auto ln_1 = k.RunLayerNorm();
  const auto rms_1 = k.RunRmsNorm();
  SetNumThreads(threads);
  EXPECT_TRUE(BitEqual(ln_a.out, ln_b.out));
  EXPECT_TRUE(BitEqual(ln_a.d_x, ln_b.d_x));
  EXPECT_TRUE(BitEqual(ln_a.d_w, ln_b.d_w));
  EXPECT_TRUE(BitEqual(ln_a.d_b, ln_b.d_b));
  EXPECT_TRUE(BitEqual(rms_a.out, rms_b.out));
  EXPECT_TRUE(BitEqual(rms_a.d_x, rms_b.d_x));
  EXPECT_TRUE(BitEqual(rms_a.d_w, rms_b.d_w));
  // Rows are summed in index order per channel, whatever the number of threads.
  EXPECT_TRUE(BitEqual(ln_a.d_w, ln_1.d_w));
  EXPECT_TRUE(BitEqual(ln_a.d_b, ln_1.d_b));
  EXPECT_TRUE(BitEqual(ln_a.d_x, ln_1.d_x));
  EXPECT_TRUE(BitEqual(rms_a.d_w, rms_1.d_w));
}

TEST(Norms, BackwardAccumulatesParamGradsAndSkipsNulls) {
  NormCase k;
  const auto once = k.RunLayerNorm();
  std::vector<float> d_w(NormCase::C, 0.0f), d_b(NormCase::C, 0.0f);
  for (int i = 0; i < 2; ++i)
    LayerNormBackward(nullptr, d_w.data(), d_b.data(), k.d_out.data(), k.x.data(), k.w.data(),
                      k.mean.data(), k.rstd.data(), NormCase::N, NormCase::C);
  for (int64_t c = 0; c < NormCase::C; ++c) {
    EXPECT_EQ(d_w[c], 2.0f * once.d_w[c]);  // 0 + g + g is exact
    EXPECT_EQ(d_b[c], 2.0f * once.d_b[c]);
  }
  // d_inp alone, and d_inp aliasing d_out (in place), give the same bits as the full call.
  std::vector<float> d_x(NormCase::N * NormCase::C);
  LayerNormBackward(d_x.data(), nullptr, nullptr, k.d_out.data(), k.x.data(), k.w.data(),
                    k.mean.data(), k.rstd.data(), NormCase::N, NormCase::C);
  EXPECT_TRUE(BitEqual(d_x, once.d_x));
  std::vector<float> in_place = k.d_out, d_w2(NormCase::C, 0.0f);
  LayerNormBackward(in_place.data(), d_w2.data(), nullptr, in_place.data(), k.x.data(), k.w.data(),
                    k.mean.data(), k.rstd.data(), NormCase::N, NormCase::C);
  EXPECT_TRUE(BitEqual(in_place, once.d_x));
  EXPECT_TRUE(BitEqual(d_w2, once.d_w));

  const auto rms_once = k.RunRmsNorm();
  std::vector<float> rms_w(NormCase::C, 0.0f);
  for (int i = 0; i < 2; ++i)
    RmsNormBackward(nullptr, rms_w.data(), k.d_out.data(), k.x.data(), k.w.data(), k.rstd.data(),
                    NormCase::N, NormCase::C);
  for (int64_t c = 0; c < NormCase::C; ++c) EXPECT_EQ(rms_w[c], 2.0f * rms_once.d_w[c]);
}

}  // namespace
}  // namespace tessera::cpu
