// links: tessera_kernels
// tests/kernels/diverged_values_test.cc — the kernels on the values of a diverged run (weights
// and activations in the tens to hundreds, as after a too-large learning rate) produce no
// subnormal float on any thread: every pool thread and OpenBLAS flush them (threads.h), and
// on healthy values the flushing mode gives the same bits as IEEE arithmetic.
//
// Why subnormals, counted and not timed: on cores that take a microcode assist per instruction
// touching one, a diverged run spends its time in those assists. Under IEEE rules (before the
// pool flushed them) these inputs gave: GELU d_inp 4% subnormal, SwiGLU d_inp 21%, attention's
// dS 48% and d_qkv 19%, the LM head's d_logits 99% — in line with a real diverged run of
// configs/tiny.yaml (lr 10: d_logits 99%, dS 35%, the gradients 6-20%).
#include <omp.h>

#include <bit>
#include <cstdint>
#include <vector>

#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/threads.h"
#include "tests/kernels/gradcheck.h"

namespace tessera::cpu {
namespace {

using testing::BitEqual;
using testing::RandomVector;

// From the bits (exponent field 0, mantissa not): std::fpclassify compares floats, and with
// subnormal inputs read as zero it would call every subnormal a zero.
bool IsSubnormal(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  return (bits & 0x7f800000u) == 0 && (bits & 0x007fffffu) != 0;
}

int64_t CountSubnormals(const float* x, size_t n) {
  int64_t count = 0;
  for (size_t i = 0; i < n; ++i) count += IsSubnormal(x[i]) ? 1 : 0;
  return count;
}
int64_t CountSubnormals(const std::vector<float>& x) { return CountSubnormals(x.data(), x.size()); }

// Every test runs on a pool of 3 threads, as the trainer sets it up (SetNumThreads), and
// restores the pool it found (ctest runs kernels tests with OMP_NUM_THREADS=1).
class DivergedValues : public ::testing::Test {
 protected:
  void SetUp() override { before_ = SetNumThreads(kThreads); }
  void TearDown() override {
    SetFlushSubnormals(true);
    SetNumThreads(before_);
  }
  static constexpr int kThreads = 3;
  int before_ = 1;
};

TEST_F(DivergedValues, EveryPoolThreadFlushesSubnormalResultsAfterSetNumThreads) {
  volatile float tiny = 1e-30f, small = 1e-10f;  // product 1e-40: subnormal under IEEE rules
  std::vector<float> product(kThreads, -1.0f);
  std::vector<int> seen(kThreads, 0);
#pragma omp parallel num_threads(kThreads)
  {
    const int t = omp_get_thread_num();
    product[t] = tiny * small;
    seen[t] = 1;
  }
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t], 1) << "the pool has fewer than " << kThreads << " threads";
    EXPECT_EQ(product[t], 0.0f) << "pool thread " << t << " keeps subnormal results";
  }
  EXPECT_TRUE(PoolFlushesSubnormals());
}

TEST_F(DivergedValues, SgemmOnEveryOpenBlasThreadReadsSubnormalOperandsAsZero) {
  // Large enough for OpenBLAS to split it over the pool. Under IEEE rules every element of C
  // would be K * 1e-40 * 1e30 = 2.56e-8; with subnormal inputs read as zero it is exactly 0.
  const int64_t M = 256, N = 256, K = 256;
  std::vector<float> a(M * K, 1e-40f), b(K * N, 1e30f), c(M * N, -1.0f);
  ASSERT_EQ(CountSubnormals(a), M * K);
  Gemm(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
  int64_t nonzero = 0;
  for (float v : c) nonzero += v != 0.0f ? 1 : 0;
  EXPECT_EQ(nonzero, 0) << "sgemm read subnormal operands as numbers on some thread";
}

TEST_F(DivergedValues, GeluBackwardOfLargeNegativeInputsHasNoSubnormals) {
  // x << 0 makes sigmoid(2u) = 1 / (1 + 2.4e38) ~ 4e-39 and s (1 - s) subnormal.
  const int64_t n = 1 << 16;  // above the OpenMP threshold: the pool computes it
  auto x = RandomVector(n, 1, -300.0f, 300.0f);
  auto d_out = RandomVector(n, 2, -1e-3f, 1e-3f);
  std::vector<float> out(n), d_x(n);
  GeluForward(out.data(), x.data(), n);
  GeluBackward(d_x.data(), d_out.data(), x.data(), n);
  EXPECT_EQ(CountSubnormals(out), 0);
  EXPECT_EQ(CountSubnormals(d_x), 0);
}

TEST_F(DivergedValues, SwigluBackwardOfLargeGatesHasNoSubnormals) {
  const int64_t N = 64, H = 512;
  auto inp = RandomVector(N * 2 * H, 3, -300.0f, 300.0f);
  auto d_out = RandomVector(N * H, 4, -1e-3f, 1e-3f);
  std::vector<float> out(N * H), d_inp(N * 2 * H);
  SwigluForward(out.data(), inp.data(), N, H);
  SwigluBackward(d_inp.data(), d_out.data(), inp.data(), N, H);
  EXPECT_EQ(CountSubnormals(out), 0);
  EXPECT_EQ(CountSubnormals(d_inp), 0);
}

TEST_F(DivergedValues, AttentionOnHugeScoresHasNoSubnormalProbabilitiesOrGradients) {
  // q.k / sqrt(HS) spans thousands: most probabilities are exp(-87.3) (ExpF's floor) / sum,
  // below FLT_MIN, and dS = P (dP - rowsum) multiplies them by gradients.
  const int64_t B = 2, T = 64, NH = 4, NKV = 2, HS = 16, R = (NH + 2 * NKV) * HS;
  auto qkv = RandomVector(B * T * R, 5, -30.0f, 30.0f);
  auto d_out = RandomVector(B * T * NH * HS, 6, -1e-3f, 1e-3f);
  std::vector<float> out(B * T * NH * HS), att(B * NH * T * T), scratch(B * NH * T * T),
      d_qkv(B * T * R);
  AttentionForward(out.data(), att.data(), qkv.data(), B, T, NH, NKV, HS, 0);
  AttentionBackward(d_qkv.data(), scratch.data(), d_out.data(), qkv.data(), att.data(), B, T, NH,
                    NKV, HS);
  EXPECT_EQ(CountSubnormals(att), 0);
  EXPECT_EQ(CountSubnormals(scratch), 0);  // dS, the operand of the dQ and dK products
  EXPECT_EQ(CountSubnormals(out), 0);
  EXPECT_EQ(CountSubnormals(d_qkv), 0);
}

TEST_F(DivergedValues, ClassifierOnHugeLogitsHasNoSubnormalGradients) {
  // Logits spanning thousands: exp(l - max) is ExpF's floor almost everywhere, and scaled by
  // loss_scale / sum it falls below FLT_MIN in d_logits, which two sgemm calls then read.
  const int64_t N = 256, C = 64, V = 256, chunk = 128;
  auto x = RandomVector(N * C, 7, -30.0f, 30.0f);
  auto w = RandomVector(V * C, 8, -30.0f, 30.0f);
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 37) % V);
  std::vector<float> losses(N), d_x(N * C), d_w(V * C, 0.0f), scratch(chunk * V);
  const double sum = ClassifierForwardBackward(losses.data(), d_x.data(), d_w.data(), x.data(),
                                               w.data(), targets.data(), N, C, V, 1.0f / N,
                                               scratch.data(), chunk);
  ASSERT_GT(sum / N, 100.0) << "the logits are not diverged enough to test anything";
  EXPECT_EQ(CountSubnormals(scratch), 0);  // d_logits of the last chunk
  EXPECT_EQ(CountSubnormals(d_x), 0);
  EXPECT_EQ(CountSubnormals(d_w), 0);
}

// Healthy magnitudes never come near FLT_MIN, so the flushing mode must give exactly the bits
// of IEEE arithmetic: flushing is free for a run that is not diverging.
TEST_F(DivergedValues, FlushingLeavesHealthyValuesBitIdentical) {
  const int64_t B = 2, T = 32, NH = 4, NKV = 4, HS = 16, R = (NH + 2 * NKV) * HS;
  const int64_t N = B * T, C = NH * HS, V = 96, n = N * 4 * C;
  const auto qkv = RandomVector(N * R, 9), d_att_out = RandomVector(N * C, 10, -0.1f, 0.1f);
  const auto pre = RandomVector(n, 11, -4.0f, 4.0f), d_pre = RandomVector(n, 12, -0.1f, 0.1f);
  const auto x = RandomVector(N * C, 13), w = RandomVector(V * C, 14, -0.2f, 0.2f);
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 5) % V);
  auto run = [&](bool flush) {
    SetFlushSubnormals(flush);
    std::vector<float> out(N * C), att(B * NH * T * T), scratch(B * NH * T * T), d_qkv(N * R);
    std::vector<float> gelu(n), d_gelu(n), losses(N), d_x(N * C), d_w(V * C, 0.0f), cls(16 * V);
    AttentionForward(out.data(), att.data(), qkv.data(), B, T, NH, NKV, HS, 0);
    AttentionBackward(d_qkv.data(), scratch.data(), d_att_out.data(), qkv.data(), att.data(), B, T,
                      NH, NKV, HS);
    GeluForward(gelu.data(), pre.data(), n);
    GeluBackward(d_gelu.data(), d_pre.data(), pre.data(), n);
    ClassifierForwardBackward(losses.data(), d_x.data(), d_w.data(), x.data(), w.data(),
                              targets.data(), N, C, V, 1.0f / N, cls.data(), 16);
    std::vector<float> all;
    for (const auto* v : {&out, &att, &d_qkv, &gelu, &d_gelu, &losses, &d_x, &d_w})
      all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  const std::vector<float> ieee = run(false), flushed = run(true);
  EXPECT_EQ(CountSubnormals(ieee), 0);
  EXPECT_TRUE(BitEqual(ieee, flushed));
}

TEST_F(DivergedValues, SwitchingFlushingOffRestoresIeeeOnEveryPoolThread) {
  SetFlushSubnormals(false);
  EXPECT_FALSE(PoolFlushesSubnormals());
  volatile float tiny = 1e-30f, small = 1e-10f;
  int64_t subnormal = 0;
#pragma omp parallel num_threads(kThreads) reduction(+ : subnormal)
  subnormal += IsSubnormal(tiny * small) ? 1 : 0;
  EXPECT_EQ(subnormal, kThreads);
  SetNumThreads(kThreads);  // resizing keeps the chosen mode
  EXPECT_FALSE(PoolFlushesSubnormals());
  SetFlushSubnormals(true);
  EXPECT_TRUE(PoolFlushesSubnormals());
}

}  // namespace
}  // namespace tessera::cpu
