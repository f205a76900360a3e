// links: tessera_models
// tests/kernels/bf16_activations_test.cc — activations stored in bf16 (models/
// activation_store.h): the activations arena takes at most 55 % of fp32's bytes, every
// recompute policy still gives bit-identical gradients, reruns are bit-identical, and a bf16
// step tracks the fp32 step on the same (bf16-valued) weights within stated tolerances.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "models/transformer.h"
#include "runtime/kernels/cpu/convert.h"

namespace tessera {
namespace {

// Big enough that every kernel takes its multithreaded path, two layers so that blocks chain.
ModelConfig Medium(ModelFamily family, RecomputePolicy policy) {
  ModelConfig c;
  c.family = family;
  c.vocab_size = 512;
  c.max_seq_len = 32;
  c.num_layers = 2;
  c.hidden_size = 128;
  c.num_heads = 4;
  c.num_kv_heads = family == ModelFamily::kLlama ? 2 : 0;
  c.tie_embeddings = family == ModelFamily::kGpt2;
  c.init_std = 0.05f;
  c.recompute = policy;
  return c;
}

constexpr int64_t kB = 4, kT = 32;

struct StepOut {
  double loss = 0;
  std::vector<float> grads;
  size_t act = 0, ws = 0;
};

// Two accumulated steps of `c` with activations in `act` on weights rounded to bf16 (as a
// bf16 run's parameter shards give them), so fp32 and bf16 differ only in the activations.
StepOut TwoSteps(const ModelConfig& c, DType act) {
  ModelOptions mo;
  mo.activation_dtype = act;
  MemoryTracker tracker;
  auto made = Transformer::Create(c, kB, kT, &tracker, mo);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  Transformer& m = **made;
  m.InitRandom(21);
  cpu::RoundTo(DType::kBF16, m.flat_params().f32(), m.num_params());
  std::mt19937 gen(5);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<int32_t> in(kB * kT), tgt(kB * kT);
  for (auto& t : in) t = tok(gen);
  for (auto& t : tgt) t = tok(gen);
  m.ZeroGrads();
  StepOut r;
  r.loss = m.ForwardBackward(in.data(), tgt.data(), 0.5f);
  m.ForwardBackward(in.data(), tgt.data(), 0.5f);  // arenas reused, gradients accumulate
  const Tensor g = m.flat_grads();
  r.grads.assign(g.f32(), g.f32() + g.numel());
  r.act = tracker.peak(MemoryKind::kActivations);
  r.ws = tracker.peak(MemoryKind::kWorkspace);
  // The measuring pass sized the arenas exactly, bf16 copies included.
  EXPECT_EQ(r.act, tracker.reserved(MemoryKind::kActivations));
  EXPECT_EQ(r.ws, tracker.reserved(MemoryKind::kWorkspace));
  return r;
}

double RelRms(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (static_cast<double>(a[i]) - ref[i]) * (static_cast<double>(a[i]) - ref[i]);
    n += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(d / n);
}

class Bf16Activations
    : public ::testing::TestWithParam<std::tuple<ModelFamily, RecomputePolicy>> {};

TEST_P(Bf16Activations, HalveTheArenaAndTrackFp32) {
  const auto [family, policy] = GetParam();
  const ModelConfig c = Medium(family, policy);
  const StepOut fp32 = TwoSteps(c, DType::kF32);
  const StepOut bf16 = TwoSteps(c, DType::kBF16);
  const double ratio = static_cast<double>(bf16.act) / static_cast<double>(fp32.act);
  const double rms = RelRms(bf16.grads, fp32.grads);
  std::printf("%s %-9s activations %7zu B (fp32 %7zu B, %.1f%%), workspace %7zu B (fp32 %7zu B); "
              "loss %.6f vs %.6f, gradient rel. RMS %.2e\n",
              ModelFamilyName(family), RecomputePolicyName(policy), bf16.act, fp32.act,
              100 * ratio, bf16.ws, fp32.ws, bf16.loss, fp32.loss, rms);
  EXPECT_LE(ratio, 0.55) << "bf16 activations must take at most 55% of fp32's bytes";
  // Tolerances: each stored activation is rounded once (relative 2^-9); observed loss
  // differences ~1e-4 and gradient RMS ~3e-3 at these shapes.
  EXPECT_NEAR(bf16.loss, fp32.loss, 2e-3 * std::fabs(fp32.loss));
  EXPECT_LT(rms, 2e-2);
  EXPECT_NE(0, std::memcmp(bf16.grads.data(), fp32.grads.data(), fp32.grads.size() * 4))
      << "bf16 storage changed nothing: are activations rounded at all?";
}

TEST_P(Bf16Activations, RerunsAreBitIdentical) {
  const auto [family, policy] = GetParam();
  const StepOut a = TwoSteps(Medium(family, policy), DType::kBF16);
  const StepOut b = TwoSteps(Medium(family, policy), DType::kBF16);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(0, std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * 4));
}

INSTANTIATE_TEST_SUITE_P(
    Models, Bf16Activations,
    ::testing::Combine(::testing::Values(ModelFamily::kGpt2, ModelFamily::kLlama),
                       ::testing::Values(RecomputePolicy::kNone, RecomputePolicy::kSelective,
                                         RecomputePolicy::kFull)),
    [](const auto& p) {
      return std::string(ModelFamilyName(std::get<0>(p.param))) + "_" +
             RecomputePolicyName(std::get<1>(p.param));
    });

// Recomputation reads back the same stored bits, so every policy gives the same gradients.
TEST(Bf16ActivationsPolicies, GradientsBitIdenticalAcrossPolicies) {
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    SCOPED_TRACE(ModelFamilyName(family));
    const StepOut none = TwoSteps(Medium(family, RecomputePolicy::kNone), DType::kBF16);
    for (RecomputePolicy p : {RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
      const StepOut other = TwoSteps(Medium(family, p), DType::kBF16);
      EXPECT_EQ(none.loss, other.loss) << RecomputePolicyName(p);
      EXPECT_EQ(0, std::memcmp(none.grads.data(), other.grads.data(), none.grads.size() * 4))
          << RecomputePolicyName(p) << " gradients differ from none";
      EXPECT_LT(other.act, none.act) << RecomputePolicyName(p);
    }
  }
}

}  // namespace
}  // namespace tessera
