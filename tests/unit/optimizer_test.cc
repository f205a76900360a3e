// AdamW against a scalar double reference and hand-computed values, step-counter restore,
// determinism, the blocked gradient norm and clipping, and the learning-rate schedule.
// links: tessera_optimizer
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "optimizer/adamw.h"
#include "optimizer/grad_clip.h"
#include "optimizer/lr_schedule.h"
#include "runtime/kernels/cpu/threads.h"

namespace tessera {
namespace {

std::vector<float> RandomVector(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

bool SameBits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// Restores the OpenMP thread count a test changed.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(cpu::NumThreads()) {}
  ~ThreadCountGuard() { cpu::SetNumThreads(saved_); }

 private:
  int saved_;
};

AdamWConfig TestConfig() {
  AdamWConfig c;
  c.lr = 1e-2f;
  c.beta1 = 0.9f;
  c.beta2 = 0.95f;
  c.eps = 1e-8f;
  c.weight_decay = 0.1f;
  return c;
}

// Several parameters whose edges fall inside, on and across AdamW::kChunk boundaries, with
// a gap (no range: updated without decay) and one range passed out of order.
constexpr int64_t kN = 3 * AdamW::kChunk + 1234;
std::vector<ParamRange> TestRanges() {
  return {
      {0, 1000, true, "a.weight"},
      {1000, 24, false, "a.bias"},
      {1024, AdamW::kChunk, true, "b.weight"},  // crosses the first chunk boundary
      {2 * AdamW::kChunk + 7, 300, false, "norm.weight"},
      // [1024 + kChunk, 2*kChunk + 7) is a gap
      {2 * AdamW::kChunk + 307, kN - (2 * AdamW::kChunk + 307), true, "c.weight"},
  };
}

TEST(AdamW, HandComputedTwoSteps) {
  AdamWConfig c;
  c.beta1 = 0.9f;
  c.beta2 = 0.999f;
  c.eps = 1e-8f;
  c.weight_decay = 0.1f;
  AdamW opt(c, 2, {{0, 1, true, "w"}, {1, 1, false, "b"}}, nullptr);
  float p[2] = {1.0f, 1.0f};
  float g[2] = {0.5f, 0.5f};
  // t=1, lr=0.1: decay 1 -> 0.99; m=0.05, v=0.00025; m_hat=0.5, v_hat=0.25;
  // p -= 0.1 * 0.5 / (0.5 + 1e-8)  ->  0.89 (decayed) and 0.9 (not decayed).
  opt.Step(p, g, 0.1f);
  EXPECT_EQ(opt.step(), 1);
  EXPECT_NEAR(p[0], 0.89f, 1e-7);
  EXPECT_NEAR(p[1], 0.90f, 1e-7);
  // The betas are floats: 1 - 0.999f = 0.000999987, 1.3e-5 away from 0.001 relatively. v_hat
  // divides by the same 1 - b2, so p is unaffected; v itself carries that offset.
  EXPECT_NEAR(opt.exp_avg().f32()[0], 0.05f, 0.05 * 1e-6);
  EXPECT_NEAR(opt.exp_avg_sq().f32()[0], 0.00025f, 0.00025 * 2e-5);
  // t=2, g=-0.5: m = 0.045 - 0.05 = -0.005, m_hat = -0.005/0.19 = -1/38;
  // v = 0.00024975 + 0.00025 = 0.00049975, v_hat = 0.00049975/0.001999 = 0.25;
  // p -= 0.1 * (-1/38) / 0.5  ->  +0.2/38 = +0.005263158.
  g[0] = g[1] = -0.5f;
  opt.Step(p, g, 0.1f);
  EXPECT_EQ(opt.step(), 2);
  EXPECT_NEAR(p[0], 0.89f * 0.99f + 0.2f / 38.0f, 2e-7);  // 0.886363160
  EXPECT_NEAR(p[1], 0.90f + 0.2f / 38.0f, 2e-7);          // 0.905263158
}

// torch.optim.AdamW written out per element in double, one range at a time.
void ReferenceStep(std::vector<double>& p, const std::vector<float>& g, std::vector<double>& m,
                   std::vector<double>& v, const std::vector<ParamRange>& ranges,
                   const AdamWConfig& c, double lr, int64_t t) {
  const double b1 = c.beta1, b2 = c.beta2;
  for (const ParamRange& r : ranges) {
    if (!r.decay) continue;
    for (int64_t i = r.offset; i < r.offset + r.size; ++i) p[i] *= 1.0 - lr * c.weight_decay;
  }
  for (size_t i = 0; i < p.size(); ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * double(g[i]) * g[i];
    const double m_hat = m[i] / (1 - std::pow(b1, double(t)));
    const double v_hat = v[i] / (1 - std::pow(b2, double(t)));
    p[i] -= lr * m_hat / (std::sqrt(v_hat) + c.eps);
  }
}

TEST(AdamW, MatchesDoubleReferenceWithDecayRanges) {
  const AdamWConfig c = TestConfig();
  std::vector<ParamRange> ranges = TestRanges();
  std::swap(ranges[1], ranges[3]);  // the optimizer sorts; the reference does not care
  AdamW opt(c, kN, ranges, nullptr);
  std::vector<float> p = RandomVector(kN, 1);
  std::vector<double> ref_p(p.begin(), p.end()), ref_m(kN, 0.0), ref_v(kN, 0.0);
  const float lrs[] = {1e-2f, 2e-2f, 5e-3f, 1e-2f, 3e-2f, 1e-3f};
  for (int s = 0; s < 6; ++s) {
    // Gradients of varying size, some exactly zero (v stays 0: only eps guards the divide).
    std::vector<float> g = RandomVector(kN, 100 + s, s % 2 ? 0.1f : 3.0f);
    for (int64_t i = 0; i < kN; i += 97) g[i] = 0.0f;
    opt.Step(p.data(), g.data(), lrs[s]);
    ReferenceStep(ref_p, g, ref_m, ref_v, ranges, c, lrs[s], s + 1);
  }
  EXPECT_EQ(opt.step(), 6);
  int64_t bad = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const double tol = 1e-6 * std::abs(ref_p[i]) + 1e-7;
    // m is a sum of terms up to 0.3 with both signs: its error is absolute, not relative.
    const double tol_m = 1e-6 * std::abs(ref_m[i]) + 1e-7;
    if (std::abs(p[i] - ref_p[i]) > tol || std::abs(opt.exp_avg().f32()[i] - ref_m[i]) > tol_m) {
      if (++bad < 5) ADD_FAILURE() << "element " << i << ": " << p[i] << " vs " << ref_p[i];
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(AdamW, RestoredStepCounterAndMomentsGiveIdenticalBits) {
  const AdamWConfig c = TestConfig();
  const std::vector<float> p0 = RandomVector(kN, 2);
  std::vector<std::vector<float>> grads;
  for (int s = 0; s < 5; ++s) grads.push_back(RandomVector(kN, 200 + s));

  std::vector<float> p_full = p0;
  AdamW full(c, kN, TestRanges(), nullptr);
  for (int s = 0; s < 5; ++s) full.Step(p_full.data(), grads[s].data(), 1e-2f);

  std::vector<float> p_split = p0;
  AdamW first(c, kN, TestRanges(), nullptr);
  for (int s = 0; s < 2; ++s) first.Step(p_split.data(), grads[s].data(), 1e-2f);
  MemoryTracker tracker;
  AdamW resumed(c, kN, TestRanges(), &tracker);
  std::memcpy(resumed.exp_avg().data(), first.exp_avg().data(), first.exp_avg().nbytes());
  std::memcpy(resumed.exp_avg_sq().data(), first.exp_avg_sq().data(),
              first.exp_avg_sq().nbytes());
  resumed.set_step(first.step());
  for (int s = 2; s < 5; ++s) resumed.Step(p_split.data(), grads[s].data(), 1e-2f);

  EXPECT_EQ(resumed.step(), 5);
  EXPECT_TRUE(SameBits(p_full.data(), p_split.data(), kN));
  EXPECT_TRUE(SameBits(full.exp_avg().f32(), resumed.exp_avg().f32(), kN));
  EXPECT_TRUE(SameBits(full.exp_avg_sq().f32(), resumed.exp_avg_sq().f32(), kN));

  // Without the restored counter, bias correction differs and so do the parameters.
  std::vector<float> p_wrong = p0;
  AdamW forgot(c, kN, TestRanges(), nullptr);
  for (int s = 0; s < 2; ++s) forgot.Step(p_wrong.data(), grads[s].data(), 1e-2f);
  forgot.set_step(0);
  for (int s = 2; s < 5; ++s) forgot.Step(p_wrong.data(), grads[s].data(), 1e-2f);
  EXPECT_FALSE(SameBits(p_full.data(), p_wrong.data(), kN));
}

TEST(AdamW, SameBitsForAnyThreadCountAndPartition) {
  ThreadCountGuard guard;
  const AdamWConfig c = TestConfig();
  const std::vector<float> p0 = RandomVector(kN, 3);
  const std::vector<float> g = RandomVector(kN, 4);
  auto run = [&](int threads) {
    cpu::SetNumThreads(threads);
    std::vector<float> p = p0;
    AdamW opt(c, kN, TestRanges(), nullptr);
    for (int s = 0; s < 3; ++s) opt.Step(p.data(), g.data(), 1e-2f);
    return p;
  };
  const std::vector<float> one = run(1);
  EXPECT_TRUE(SameBits(one.data(), run(2).data(), kN));
  EXPECT_TRUE(SameBits(one.data(), run(3).data(), kN));
  EXPECT_TRUE(SameBits(one.data(), run(1).data(), kN));

  // StepRange over an uneven partition equals Step.
  std::vector<float> p = p0;
  AdamW opt(c, kN, TestRanges(), nullptr);
  const int64_t cuts[] = {0, 5, 999, 1001, AdamW::kChunk + 3, 2 * AdamW::kChunk + 400, kN};
  for (int64_t t = 1; t <= 3; ++t) {
    for (size_t i = 0; i + 1 < std::size(cuts); ++i) {
      opt.StepRange(p.data(), g.data(), cuts[i], cuts[i + 1], 1e-2f, t);
    }
  }
  EXPECT_EQ(opt.step(), 0);  // StepRange leaves the counter to the caller
  EXPECT_TRUE(SameBits(one.data(), p.data(), kN));
}

// StepSlice: each slice of the partition lives in its own buffer (params/grads start at the
// slice's first element, as a ZeRO rank's pieces do); the moments and the values equal Step's.
TEST(AdamW, StepSliceOnSeparateBuffersEqualsStep) {
  const AdamWConfig c = TestConfig();
  const std::vector<float> p0 = RandomVector(kN, 5);
  const std::vector<float> g = RandomVector(kN, 6);
  std::vector<float> p_ref = p0;
  AdamW ref(c, kN, TestRanges(), nullptr);
  const int64_t cuts[] = {0, 3, 1000, 1500, AdamW::kChunk + 1024, 2 * AdamW::kChunk + 100, kN};
  std::vector<std::vector<float>> slices;
  for (size_t i = 0; i + 1 < std::size(cuts); ++i) {
    slices.emplace_back(p0.begin() + cuts[i], p0.begin() + cuts[i + 1]);
  }
  AdamW opt(c, kN, TestRanges(), nullptr);
  for (int64_t t = 1; t <= 3; ++t) {
    ref.Step(p_ref.data(), g.data(), 2e-2f);
    for (size_t i = 0; i + 1 < std::size(cuts); ++i) {
      const std::vector<float> g_slice(g.begin() + cuts[i], g.begin() + cuts[i + 1]);
      opt.StepSlice(slices[i].data(), g_slice.data(), cuts[i], cuts[i + 1], 2e-2f, t);
    }
  }
  std::vector<float> p;
  for (const auto& s : slices) p.insert(p.end(), s.begin(), s.end());
  EXPECT_TRUE(SameBits(p_ref.data(), p.data(), kN));
  EXPECT_TRUE(SameBits(ref.exp_avg().f32(), opt.exp_avg().f32(), kN));
  EXPECT_TRUE(SameBits(ref.exp_avg_sq().f32(), opt.exp_avg_sq().f32(), kN));
  EXPECT_EQ(opt.step(), 0);
}

TEST(AdamW, StateLivesInTheOptimizerArena) {
  MemoryTracker tracker;
  {
    AdamW opt(TestConfig(), 1000, {}, &tracker);
    EXPECT_EQ(opt.exp_avg().numel(), 1000);
    EXPECT_EQ(opt.exp_avg_sq().numel(), 1000);
    EXPECT_GE(tracker.current(MemoryKind::kOptimizerState), 2 * 1000 * sizeof(float));
    EXPECT_EQ(tracker.reserved(MemoryKind::kOptimizerState), AdamW::StateBytes(1000));
    EXPECT_EQ(opt.exp_avg_sq().f32()[999], 0.0f);  // moments start at zero
  }
  EXPECT_EQ(tracker.current(MemoryKind::kOptimizerState), 0u);
}

TEST(ParamRanges, ValidationRejectsOverlapAndOutOfBounds) {
  EXPECT_TRUE(ValidateParamRanges(TestRanges(), kN).ok());
  EXPECT_TRUE(ValidateParamRanges({}, 0).ok());
  EXPECT_FALSE(ValidateParamRanges({{0, 10, true, "a"}, {9, 5, true, "b"}}, 100).ok());
  EXPECT_FALSE(ValidateParamRanges({{50, 10, true, "b"}, {0, 51, true, "a"}}, 100).ok());
  EXPECT_FALSE(ValidateParamRanges({{95, 10, true, "a"}}, 100).ok());
  EXPECT_FALSE(ValidateParamRanges({{-1, 1, true, "a"}}, 100).ok());
  Status st = ValidateParamRanges({{0, 10, true, "h.0.w"}, {5, 5, false, "h.0.b"}}, 100);
  EXPECT_NE(st.message().find("h.0.w"), std::string::npos) << st.message();
}

TEST(GradNorm, MatchesNaiveDoubleSum) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{37}, kNormBlock, 5 * kNormBlock + 11}) {
    const std::vector<float> x = RandomVector(n, 5 + static_cast<uint32_t>(n), 2.0f);
    double naive = 0.0;
    for (float v : x) naive += double(v) * v;
    EXPECT_NEAR(SumOfSquares(x.data(), n), naive, 1e-12 * naive);
    EXPECT_NEAR(GlobalL2Norm(x.data(), n), std::sqrt(naive), 1e-12 * std::sqrt(naive) + 1e-300);
  }
  const float three_four[] = {3.0f, 4.0f};
  EXPECT_EQ(GlobalL2Norm(three_four, 2), 5.0);
}

TEST(GradNorm, SameBitsForAnyThreadCount) {
  ThreadCountGuard guard;
  const int64_t n = 7 * kNormBlock + 333;
  const std::vector<float> x = RandomVector(n, 6, 10.0f);
  cpu::SetNumThreads(1);
  const double one = GlobalL2Norm(x.data(), n);
  cpu::SetNumThreads(2);
  const double two = GlobalL2Norm(x.data(), n);
  cpu::SetNumThreads(3);
  const double three = GlobalL2Norm(x.data(), n);
  EXPECT_EQ(std::memcmp(&one, &two, sizeof one), 0);
  EXPECT_EQ(std::memcmp(&one, &three, sizeof one), 0);
}

// The lane order grad_clip.cc documents, written as plainly as possible: lane j sums
// x[j], x[j+8], ... over whole groups of 8, the tail goes into lane 0, then 0 + lanes 0..7.
double BlockSumInDocumentedOrder(const float* x, int64_t n) {
  double lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] += double(x[i + j]) * double(x[i + j]);
  for (; i < n; ++i) lane[0] += double(x[i]) * double(x[i]);
  double s = 0.0;
  for (double v : lane) s += v;
  return s;
}

TEST(GradNorm, BlockPartialsFollowTheDocumentedLaneOrderForAnyLength) {
  // Lengths around the 8-lane groups, the 4-block interleaved groups and partial blocks.
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{9}, kNormBlock - 1, kNormBlock + 3,
                    3 * kNormBlock, 4 * kNormBlock, 4 * kNormBlock + 1, 9 * kNormBlock - 5}) {
    const std::vector<float> x = RandomVector(n, 40 + static_cast<uint32_t>(n % 1000), 3.0f);
    std::vector<double> partial(static_cast<size_t>(NumNormBlocks(n)));
    BlockSumsOfSquares(x.data(), n, partial.data());
    for (int64_t b = 0; b < NumNormBlocks(n); ++b) {
      const int64_t len = std::min(kNormBlock, n - b * kNormBlock);
      const double want = BlockSumInDocumentedOrder(x.data() + b * kNormBlock, len);
      ASSERT_EQ(std::memcmp(&partial[b], &want, sizeof want), 0) << "n=" << n << " block " << b;
    }
  }
}

TEST(GradNorm, EveryVectorPathThisCpuHasGivesTheSameBits) {
  const int64_t n = 11 * kNormBlock + 13;
  const std::vector<float> x = RandomVector(n, 77, 3.0f);
  std::vector<double> avx2(static_cast<size_t>(NumNormBlocks(n)));
  BlockSumsOfSquares(x.data(), n, avx2.data(), NormPath::kAvx2);
  for (int64_t b = 0; b < NumNormBlocks(n); ++b) {
    const int64_t len = std::min(kNormBlock, n - b * kNormBlock);
    const double want = BlockSumInDocumentedOrder(x.data() + b * kNormBlock, len);
    ASSERT_EQ(std::memcmp(&avx2[b], &want, sizeof want), 0) << "AVX2, block " << b;
  }
  if (ActiveNormPath() != NormPath::kAvx512) {
    std::printf("this CPU has no AVX-512: only the AVX2 norm ran\n");
    return;
  }
  std::vector<double> avx512(avx2.size());
  BlockSumsOfSquares(x.data(), n, avx512.data(), NormPath::kAvx512);
  EXPECT_EQ(std::memcmp(avx2.data(), avx512.data(), avx2.size() * sizeof(double)), 0);
}

TEST(AdamW, FoldedGradScaleEqualsScalingTheGradientsFirst) {
  ThreadCountGuard guard;
  const int64_t n = 3 * AdamW::kChunk + 123;
  const std::vector<ParamRange> ranges = {{0, 1000, true, "w"}, {1000, 77, false, "b"},
                                          {1077, n - 1077, true, "w2"}};
  const std::vector<float> p0 = RandomVector(n, 50, 0.02f);
  const float scale = 0.37f;
  for (int threads : {1, 2}) {
    cpu::SetNumThreads(threads);
    AdamW separate(AdamWConfig{}, n, ranges, nullptr), folded(AdamWConfig{}, n, ranges, nullptr);
    std::vector<float> ps = p0, pf = p0;
    for (int step = 0; step < 3; ++step) {
      std::vector<float> g = RandomVector(n, 60 + static_cast<uint32_t>(step), 1e-2f);
      const std::vector<float> g_before = g;
      folded.Step(pf.data(), g.data(), 1e-3f, scale);
      EXPECT_TRUE(SameBits(g.data(), g_before.data(), n)) << "the gradients are only read";
      ScaleInPlace(g.data(), n, scale);
      separate.Step(ps.data(), g.data(), 1e-3f);
    }
    EXPECT_TRUE(SameBits(pf.data(), ps.data(), n));
    EXPECT_TRUE(SameBits(folded.exp_avg().f32(), separate.exp_avg().f32(), n));
    EXPECT_TRUE(SameBits(folded.exp_avg_sq().f32(), separate.exp_avg_sq().f32(), n));
  }
}

TEST(ClipScale, IsTheFloatCoefficientOrExactlyOne) {
  EXPECT_EQ(ClipScale(4.0, 1.0), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_EQ(ClipScale(0.5, 1.0), 1.0f);                                        // below max_norm
  EXPECT_EQ(ClipScale(4.0, 0.0), 1.0f);                                        // clipping off
  EXPECT_EQ(ClipScale(std::numeric_limits<double>::infinity(), 1.0), 1.0f);  // step skipped
}

TEST(ClipGradNorm, BelowThresholdLeavesGradientsAlone) {
  std::vector<float> g = RandomVector(3 * kNormBlock, 7);
  const std::vector<float> before = g;
  const double norm = GlobalL2Norm(g.data(), g.size());
  EXPECT_EQ(ClipGradNorm(g.data(), g.size(), 2.0 * norm), norm);
  EXPECT_TRUE(SameBits(g.data(), before.data(), g.size()));
}

TEST(ClipGradNorm, AboveThresholdScalesToMaxNorm) {
  std::vector<float> g = RandomVector(3 * kNormBlock + 5, 8);
  const std::vector<float> before = g;
  const double norm = GlobalL2Norm(g.data(), g.size());
  const double max_norm = norm / 4.0;
  EXPECT_EQ(ClipGradNorm(g.data(), g.size(), max_norm), norm);  // returns the pre-clip norm
  const float coef = static_cast<float>(max_norm / (norm + 1e-6));
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], before[i] * coef) << i;
  EXPECT_NEAR(GlobalL2Norm(g.data(), g.size()), max_norm, 1e-5 * max_norm);
}

TEST(ClipGradNorm, ZeroMaxNormOnlyMeasures) {
  float g[] = {30.0f, 40.0f};
  EXPECT_EQ(ClipGradNorm(g, 2, 0.0), 50.0);
  EXPECT_EQ(g[0], 30.0f);
  EXPECT_EQ(g[1], 40.0f);
  EXPECT_EQ(ClipCoefficient(50.0, -1.0), 1.0);
}

TEST(ClipGradNorm, NonFiniteNormIsReturnedAndNotApplied) {
  float g[] = {1.0f, std::numeric_limits<float>::infinity(), 2.0f};
  EXPECT_TRUE(std::isinf(ClipGradNorm(g, 3, 1.0)));
  EXPECT_EQ(g[0], 1.0f);
  EXPECT_EQ(g[2], 2.0f);
  float h[] = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_TRUE(std::isnan(ClipGradNorm(h, 2, 1.0)));
  EXPECT_EQ(h[0], 1.0f);
}

LrScheduleConfig Schedule(LrDecay decay, int64_t warmup, int64_t decay_steps = 0) {
  LrScheduleConfig s;
  s.decay = decay;
  s.warmup_steps = warmup;
  s.min_lr_ratio = 0.1f;
  s.decay_steps = decay_steps;
  return s;
}

// Warm-up over 10 steps, then decay over steps [10, 110) of a 110-step run: midpoint 60.
TEST(LearningRate, CosineKeyPoints) {
  const LrScheduleConfig s = Schedule(LrDecay::kCosine, 10);
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 0, 110), 0.1f);    // warm-up start: peak/W
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 4, 110), 0.5f);
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 9, 110), 1.0f);    // warm-up end: peak
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 10, 110), 1.0f);   // decay start: progress 0
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 60, 110), 0.55f);  // midpoint: (peak+floor)/2
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 35, 110),
                  static_cast<float>(0.1 + 0.45 * (1 + std::cos(std::numbers::pi / 4))));
  EXPECT_GT(LearningRate(s, 1.0f, 109, 110), 0.1f);        // last step, just above the floor
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 110, 110), 0.1f);  // end: floor
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 500, 110), 0.1f);  // after the end: floor
}

TEST(LearningRate, LinearKeyPoints) {
  const LrScheduleConfig s = Schedule(LrDecay::kLinear, 10);
  EXPECT_FLOAT_EQ(LearningRate(s, 2.0f, 0, 110), 0.2f);
  EXPECT_FLOAT_EQ(LearningRate(s, 2.0f, 9, 110), 2.0f);
  EXPECT_FLOAT_EQ(LearningRate(s, 2.0f, 10, 110), 2.0f);
  EXPECT_FLOAT_EQ(LearningRate(s, 2.0f, 60, 110), 1.1f);
  EXPECT_FLOAT_EQ(LearningRate(s, 2.0f, 85, 110), 2.0f - 1.8f * 0.75f);
  EXPECT_FLOAT_EQ(LearningRate(s, 2.0f, 110, 110), 0.2f);
  EXPECT_FLOAT_EQ(LearningRate(s, 2.0f, 111, 110), 0.2f);
}

TEST(LearningRate, ConstantKeyPoints) {
  const LrScheduleConfig s = Schedule(LrDecay::kConstant, 4);
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 0, 100), 0.25f);
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 3, 100), 1.0f);
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 50, 100), 1.0f);
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 100, 100), 1.0f);  // no floor for constant
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 1000, 100), 1.0f);
}

TEST(LearningRate, DecayStepsOverridesTotalAndNoWarmup) {
  const LrScheduleConfig s = Schedule(LrDecay::kLinear, 0, 50);
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 0, 1000), 1.0f);  // no warm-up: peak at step 0
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 25, 1000), 0.55f);
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 50, 1000), 0.1f);  // floor at decay_steps, not total
  EXPECT_FLOAT_EQ(LearningRate(s, 1.0f, 999, 1000), 0.1f);
  // decay_end <= warmup: straight from the warm-up to the floor, no division by zero.
  const LrScheduleConfig short_decay = Schedule(LrDecay::kCosine, 10, 5);
  EXPECT_FLOAT_EQ(LearningRate(short_decay, 1.0f, 9, 100), 1.0f);
  EXPECT_FLOAT_EQ(LearningRate(short_decay, 1.0f, 10, 100), 0.1f);
}

}  // namespace
}  // namespace tessera
