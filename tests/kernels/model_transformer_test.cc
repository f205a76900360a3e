// links: tessera_models
// tests/kernels/model_transformer_test.cc — the whole GPT-2 and Llama models (transformer.h):
// finite-difference gradient checks under every recompute policy, bit-identical gradients
// across policies with decreasing activation peaks, determinism, gradient accumulation,
// loss at init, parameter layout, FLOP formula and Create() validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/param_layout.h"
#include "models/transformer.h"
#include "tests/testing/tiny_model.h"

namespace tessera {
namespace {

constexpr int64_t kB = 2, kT = 8;

ModelConfig Tiny(ModelFamily family, RecomputePolicy policy, float init_std = 0.2f) {
  return testing::TinyDense(family, 2, 32, family == ModelFamily::kGpt2, policy, init_std);
}

using Batch = testing::TokenBatch;

// Random tokens; one target in every 7 is ignored (-1) unless `all_counted`.
Batch MakeBatch(int64_t B, int64_t T, int64_t V, uint32_t seed, bool all_counted = false) {
  return testing::RandomTokens(B * T, V, seed, all_counted ? 0 : 7, 3);
}

std::unique_ptr<Transformer> Make(const ModelConfig& c, int64_t B = kB, int64_t T = kT,
                                  MemoryTracker* tracker = nullptr) {
  auto r = Transformer::Create(c, B, T, tracker);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

std::vector<float> Copy(const Tensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

const char* Name(ModelFamily f) { return ModelFamilyName(f); }

// ---- finite differences -----------------------------------------------------------------

class GradCheck : public ::testing::TestWithParam<std::tuple<ModelFamily, RecomputePolicy>> {};

// `after_init` may change the initial weights (e.g. LoRA's B, zero at init). With a
// `dropout_key` every loss is a training forward's with that key's masks (LoRA dropout), which
// the gradient must differentiate; otherwise the losses are evaluations.
void ExpectGradientsMatchFiniteDifferences(
    const ModelConfig& config, const std::function<void(Transformer&)>& after_init = {},
    uint64_t dropout_key = 0) {
  const ModelFamily family = config.family;
  auto m = Make(config);
  m->InitRandom(7);
  if (after_init) after_init(*m);
  const Batch b = MakeBatch(kB, kT, 32, 11);
  m->ZeroGrads();
  m->SetDropoutKey(dropout_key);
  const double loss = m->ForwardBackward(b.inputs.data(), b.targets.data(), 1.0f);
  auto evaluate = [&] {
    if (dropout_key == 0) return m->Forward(b.inputs.data(), b.targets.data());
    m->SetDropoutKey(dropout_key);
    return m->ForwardBackward(b.inputs.data(), b.targets.data(), 1.0f);  // grads copied below
  };
  const std::vector<float> g = Copy(m->flat_grads());
  // Evaluation runs the same kernels: the same loss, bit for bit.
  EXPECT_EQ(loss, evaluate());
  float* theta = m->flat_params().f32();
  const std::vector<float> theta0(theta, theta + m->num_params());
  const int64_t P = m->num_params();

  // L(theta0 + eps * d), with theta restored exactly afterwards.
  auto loss_at = [&](const std::vector<double>& d, double eps) {
    for (int64_t i = 0; i < P; ++i) theta[i] = static_cast<float>(theta0[i] + eps * d[i]);
    const double l = evaluate();
    std::copy(theta0.begin(), theta0.end(), theta);
    return l;
  };

  // Directional derivatives g.d against central differences, d of unit norm: random
  // directions plus the gradient's own direction (the strongest signal).
  std::mt19937 gen(3);
  std::normal_distribution<double> normal;
  double worst_dir = 0, worst_elem = 0;
  for (int k = 0; k < 5; ++k) {
    std::vector<double> d(P);
    if (k == 0) {
      for (int64_t i = 0; i < P; ++i) d[i] = g[i];
    } else {
      for (auto& x : d) x = normal(gen);
    }
    double norm = 0;
    for (double x : d) norm += x * x;
    norm = std::sqrt(norm);
    for (auto& x : d) x /= norm;
    double analytic = 0;
    for (int64_t i = 0; i < P; ++i) analytic += g[i] * d[i];
    const double eps = 1e-2;
    const double numeric = (loss_at(d, eps) - loss_at(d, -eps)) / (2 * eps);
    EXPECT_NEAR(analytic, numeric, 1e-2 * std::abs(numeric) + 2e-4)
        << Name(family) << " direction " << k;
    worst_dir = std::max(worst_dir, std::abs(analytic - numeric) / std::abs(numeric));
  }

  // Per element: the two largest-|g| entries of every parameter.
  int checked = 0;
  for (const Parameter& p : m->parameters()) {
    std::vector<int64_t> idx(p.numel());
    for (int64_t i = 0; i < p.numel(); ++i) idx[i] = i;
    std::partial_sort(idx.begin(), idx.begin() + 2, idx.end(), [&](int64_t a, int64_t c) {
      return std::abs(g[p.offset + a]) > std::abs(g[p.offset + c]);
    });
    for (int j = 0; j < 2; ++j) {
      const int64_t i = p.offset + idx[j];
      std::vector<double> d(P, 0.0);
      d[i] = 1.0;
      const double eps = 1e-2;
      const double numeric = (loss_at(d, eps) - loss_at(d, -eps)) / (2 * eps);
      EXPECT_NEAR(g[i], numeric, 3e-2 * std::abs(numeric) + 5e-4)
          << Name(family) << " " << p.name() << "[" << idx[j] << "]";
      worst_elem = std::max(worst_elem, std::abs(g[i] - numeric) / std::abs(numeric));
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  std::printf("loss %.4f; worst relative error: directional %.2e, per element %.2e (%d)\n",
              loss, worst_dir, worst_elem, checked);
}

TEST_P(GradCheck, DirectionalAndPerElementMatchFiniteDifferences) {
  const auto [family, policy] = GetParam();
  ExpectGradientsMatchFiniteDifferences(Tiny(family, policy));
}

// Qwen2's q/k/v biases and Mistral's sliding window (3 of the 8 positions), under each policy.
TEST(GradCheckOptions, QkvBiasesAndSlidingWindow) {
  for (RecomputePolicy policy :
       {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
    SCOPED_TRACE(RecomputePolicyName(policy));
    ModelConfig c = Tiny(ModelFamily::kLlama, policy);
    c.qkv_bias = true;
    c.sliding_window = 3;
    ExpectGradientsMatchFiniteDifferences(c);
  }
}

// An explicit head width (Mistral-Nemo, Qwen3): 4 heads of 6 over a width of 16, so q/k/v
// project 16 -> 24 (+ 12 + 12) and o_proj 24 -> 16.
TEST(GradCheckOptions, ExplicitHeadDim) {
  for (RecomputePolicy policy : {RecomputePolicy::kNone, RecomputePolicy::kFull}) {
    SCOPED_TRACE(RecomputePolicyName(policy));
    ModelConfig c = Tiny(ModelFamily::kLlama, policy);
    c.head_dim = 6;
    ExpectGradientsMatchFiniteDifferences(c);
  }
}

// Qwen3's q/k norms (an RMSNorm over every query and key head before RoPE), with heads of an
// explicit width as Qwen3's are, under each policy.
TEST(GradCheckOptions, QkNorms) {
  for (RecomputePolicy policy :
       {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
    SCOPED_TRACE(RecomputePolicyName(policy));
    ModelConfig c = Tiny(ModelFamily::kLlama, policy);
    c.qk_norm = true;
    c.head_dim = 6;
    ExpectGradientsMatchFiniteDifferences(c);
  }
}

// LoRA adapters (models/lora.h) on every projection, B drawn at random (it starts at zero,
// which would leave A's gradient zero), under each policy; the llama model has GQA, so q and
// k/v adapters add to row blocks of different heights of the fused qkv GEMM.
void RandomizeLoraB(Transformer& m) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (const Parameter& p : m.parameters()) {
    if (p.name().find("lora_B") == std::string::npos) continue;
    for (int64_t i = 0; i < p.numel(); ++i) p.value.f32()[i] = normal(gen);
  }
}

TEST(GradCheckOptions, LoraAdaptersOnEveryProjection) {
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    for (RecomputePolicy policy :
         {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
      SCOPED_TRACE(std::string(Name(family)) + " " + RecomputePolicyName(policy));
      ModelConfig c = Tiny(family, policy);
      c.lora.rank = 3;
      c.lora.alpha = 6.0f;
      c.lora.targets = {"all-linear"};
      ExpectGradientsMatchFiniteDifferences(c, RandomizeLoraB);
    }
  }
}

// LoRA dropout (0.3 on every adapter's input): the gradient of a training forward's loss for
// fixed masks, under each policy (recomputation and backward redraw the forward's masks).
TEST(GradCheckOptions, LoraDropout) {
  for (RecomputePolicy policy :
       {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
    SCOPED_TRACE(RecomputePolicyName(policy));
    ModelConfig c = Tiny(ModelFamily::kLlama, policy);
    c.lora.rank = 3;
    c.lora.alpha = 6.0f;
    c.lora.dropout = 0.3f;
    c.lora.targets = {"all-linear"};
    ExpectGradientsMatchFiniteDifferences(c, RandomizeLoraB, /*dropout_key=*/12345);
  }
}

// Dropout acts in training forwards only, and differently for different keys.
TEST(Lora, DropoutActsInTrainingOnlyAndFollowsTheKey) {
  ModelConfig c = Tiny(ModelFamily::kGpt2, RecomputePolicy::kNone);
  c.lora.rank = 3;
  c.lora.dropout = 0.5f;
  c.lora.targets = {"all-linear"};
  auto m = Make(c);
  m->InitRandom(7);
  RandomizeLoraB(*m);
  const Batch b = MakeBatch(kB, kT, 32, 11);
  auto train = [&](uint64_t key) {
    m->SetDropoutKey(key);
    return m->ForwardBackward(b.inputs.data(), b.targets.data(), 1.0f);
  };
  const double eval = m->Forward(b.inputs.data(), b.targets.data());
  EXPECT_EQ(train(0), eval);
  EXPECT_NE(train(1), eval);
  EXPECT_EQ(train(1), train(1));
  EXPECT_NE(train(1), train(2));
}

// The adapters are declared after everything else, so the base model's parameters keep their
// names, shapes, offsets and initial values; B starts at zero, so the LoRA model computes the
// base model's loss at init.
TEST(Lora, TheBaseModelIsUnchangedAtInit) {
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    ModelConfig base = Tiny(family, RecomputePolicy::kNone);
    ModelConfig lora = base;
    lora.lora.rank = 4;
    lora.lora.targets = {"all-linear"};
    auto mb = Make(base), ml = Make(lora);
    mb->InitRandom(7);
    ml->InitRandom(7);
    ASSERT_GT(ml->num_params(), mb->num_params());
    for (int64_t i = 0; i < mb->num_params(); ++i) {
      ASSERT_EQ(mb->flat_params().f32()[i], ml->flat_params().f32()[i]) << i;
    }
    const Batch b = MakeBatch(kB, kT, 32, 11);
    EXPECT_EQ(mb->Forward(b.inputs.data(), b.targets.data()),
              ml->Forward(b.inputs.data(), b.targets.data()));
    int adapters = 0;
    for (const ParamDecl& d : DeclareParameters(lora)) {
      adapters += !d.frozen;
      if (d.name.find("lora_") != std::string::npos) {
        EXPECT_FALSE(d.frozen) << d.name;
      }
    }
    EXPECT_EQ(adapters, family == ModelFamily::kGpt2 ? 2 * 4 * 2 : 2 * 7 * 2);
  }
}

// A window changes the model (its loss) unless it covers the sequence.
TEST(SlidingWindow, ChangesTheLossOnlyWhenShorterThanTheSequence) {
  const Batch b = MakeBatch(kB, kT, 32, 11);
  auto loss = [&](int64_t window) {
    ModelConfig c = Tiny(ModelFamily::kLlama, RecomputePolicy::kNone);
    c.sliding_window = window;
    auto m = Make(c);
    m->InitRandom(7);
    return m->Forward(b.inputs.data(), b.targets.data());
  };
  EXPECT_EQ(loss(0), loss(kT));
  EXPECT_NE(loss(0), loss(3));
}

INSTANTIATE_TEST_SUITE_P(
    Models, GradCheck,
    ::testing::Combine(::testing::Values(ModelFamily::kGpt2, ModelFamily::kLlama),
                       ::testing::Values(RecomputePolicy::kNone, RecomputePolicy::kSelective,
                                         RecomputePolicy::kFull)),
    [](const auto& p) {
      return std::string(Name(std::get<0>(p.param))) + "_" +
             RecomputePolicyName(std::get<1>(p.param));
    });

// ---- recompute policies ------------------------------------------------------------------

// Medium shapes: big enough that every kernel takes its multithreaded path.
ModelConfig Medium(ModelFamily family, RecomputePolicy policy) {
  ModelConfig c = Tiny(family, policy, 0.05f);
  c.vocab_size = 512;
  c.max_seq_len = 32;
  c.hidden_size = 128;
  c.ffn_hidden_size = 0;
  c.num_layers = 1;  // the tiny configs cover the chaining of blocks
  return c;
}

class Recompute : public ::testing::TestWithParam<std::tuple<ModelFamily, bool>> {};

TEST_P(Recompute, GradientsBitIdenticalAndActivationPeaksDecrease) {
  const auto [family, medium] = GetParam();
  const int64_t B = medium ? 4 : kB, T = medium ? 32 : kT;
  const RecomputePolicy policies[3] = {RecomputePolicy::kNone, RecomputePolicy::kSelective,
                                       RecomputePolicy::kFull};
  std::vector<float> grads[3];
  double losses[3];
  size_t act_peak[3], ws_peak[3];
  for (int k = 0; k < 3; ++k) {
    const ModelConfig c = medium ? Medium(family, policies[k]) : Tiny(family, policies[k]);
    const Batch b = MakeBatch(B, T, c.vocab_size, 5);
    MemoryTracker tracker;
    auto m = Make(c, B, T, &tracker);
    m->InitRandom(21);
    // Two steps: gradients accumulate, and the arenas are reused.
    losses[k] = m->ForwardBackward(b.inputs.data(), b.targets.data(), 0.5f);
    m->ForwardBackward(b.inputs.data(), b.targets.data(), 0.5f);
    grads[k] = Copy(m->flat_grads());
    act_peak[k] = tracker.peak(MemoryKind::kActivations);
    ws_peak[k] = tracker.peak(MemoryKind::kWorkspace);
    // The measuring pass sized the arenas exactly for the step.
    EXPECT_EQ(act_peak[k], tracker.reserved(MemoryKind::kActivations));
    EXPECT_EQ(ws_peak[k], tracker.reserved(MemoryKind::kWorkspace));
    std::printf("%s C=%ld recompute=%-9s activations peak %8zu B, workspace peak %8zu B\n",
                Name(family), static_cast<long>(c.hidden_size), RecomputePolicyName(policies[k]),
                act_peak[k], ws_peak[k]);
  }
  for (int k = 1; k < 3; ++k) {
    EXPECT_EQ(losses[0], losses[k]) << RecomputePolicyName(policies[k]);
    ASSERT_EQ(grads[0].size(), grads[k].size());
    EXPECT_EQ(0, std::memcmp(grads[0].data(), grads[k].data(), grads[0].size() * 4))
        << RecomputePolicyName(policies[k]) << " gradients differ from none";
  }
  EXPECT_GT(act_peak[0], act_peak[1]);
  EXPECT_GT(act_peak[1], act_peak[2]);
}

INSTANTIATE_TEST_SUITE_P(
    Models, Recompute,
    ::testing::Combine(::testing::Values(ModelFamily::kGpt2, ModelFamily::kLlama),
                       ::testing::Bool()),
    [](const auto& p) {
      return std::string(Name(std::get<0>(p.param))) +
             (std::get<1>(p.param) ? "_medium" : "_tiny");
    });

// ---- determinism, accumulation, known values --------------------------------------------

class Family : public ::testing::TestWithParam<ModelFamily> {};

TEST_P(Family, SameSeedSameParamsAndGradientBits) {
  const ModelConfig c = Tiny(GetParam(), RecomputePolicy::kSelective);
  auto a = Make(c), b = Make(c), other = Make(c);
  a->InitRandom(99);
  b->InitRandom(99);
  other->InitRandom(100);
  const size_t bytes = a->flat_params().nbytes();
  EXPECT_EQ(0, std::memcmp(a->flat_params().data(), b->flat_params().data(), bytes));
  EXPECT_NE(0, std::memcmp(a->flat_params().data(), other->flat_params().data(), bytes));
  const Batch batch = MakeBatch(kB, kT, 32, 1);
  const double la = a->ForwardBackward(batch.inputs.data(), batch.targets.data(), 1.0f);
  const double lb = b->ForwardBackward(batch.inputs.data(), batch.targets.data(), 1.0f);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(0, std::memcmp(a->flat_grads().data(), b->flat_grads().data(), bytes));
}

TEST_P(Family, InitFollowsRules) {
  ModelConfig c = Tiny(GetParam(), RecomputePolicy::kNone, 0.02f);
  c.hidden_size = 64;
  c.num_layers = 8;
  auto m = Make(c);
  m->InitRandom(5);
  for (const Parameter& p : m->parameters()) {
    const float* v = p.value.f32();
    double sum2 = 0;
    for (int64_t i = 0; i < p.numel(); ++i) sum2 += double(v[i]) * v[i];
    const double rms = std::sqrt(sum2 / p.numel());
    const std::string& n = p.name();
    if (p.kind == ParamKind::kBias) {
      EXPECT_EQ(rms, 0.0) << n;
    } else if (p.kind == ParamKind::kNorm) {
      EXPECT_EQ(rms, 1.0) << n;
    } else {
      const bool resid = n.find("c_proj") != std::string::npos ||
                         n.find("o_proj") != std::string::npos ||
                         n.find("down_proj") != std::string::npos;
      const double expected = resid ? 0.02 / std::sqrt(2.0 * c.num_layers) : 0.02;
      EXPECT_NEAR(rms, expected, 0.1 * expected) << n;
    }
  }
}

TEST_P(Family, TwoHalfMicroBatchesMatchOneBatch) {
  const ModelConfig c = Tiny(GetParam(), RecomputePolicy::kNone);
  auto small = Make(c, kB, kT), big = Make(c, 2 * kB, kT);
  small->InitRandom(3);
  std::memcpy(big->flat_params().data(), small->flat_params().data(),
              small->flat_params().nbytes());
  // Equal counted tokens per micro-batch, so the mean of means is the mean.
  const Batch b1 = MakeBatch(kB, kT, 32, 1, true), b2 = MakeBatch(kB, kT, 32, 2, true);
  Batch both = b1;
  both.inputs.insert(both.inputs.end(), b2.inputs.begin(), b2.inputs.end());
  both.targets.insert(both.targets.end(), b2.targets.begin(), b2.targets.end());
  const double l1 = small->ForwardBackward(b1.inputs.data(), b1.targets.data(), 0.5f);
  const double l2 = small->ForwardBackward(b2.inputs.data(), b2.targets.data(), 0.5f);
  const double l = big->ForwardBackward(both.inputs.data(), both.targets.data(), 1.0f);
  EXPECT_NEAR(0.5 * (l1 + l2), l, 1e-5);
  const float* ga = small->flat_grads().f32();
  const float* gb = big->flat_grads().f32();
  double max_abs = 0, max_diff = 0;
  for (int64_t i = 0; i < small->num_params(); ++i) {
    max_abs = std::max(max_abs, double(std::abs(gb[i])));
    max_diff = std::max(max_diff, double(std::abs(ga[i] - gb[i])));
  }
  EXPECT_GT(max_abs, 0.0);
  EXPECT_LT(max_diff, 1e-5 * max_abs + 1e-7);
}

TEST_P(Family, LossAtSmallInitIsLogVocab) {
  auto m = Make(Tiny(GetParam(), RecomputePolicy::kNone, 0.002f));
  m->InitRandom(1);
  const Batch b = MakeBatch(kB, kT, 32, 4);
  EXPECT_NEAR(m->Forward(b.inputs.data(), b.targets.data()), std::log(32.0), 1e-2);
  // All targets ignored: no counted tokens, loss 0 and no gradient.
  std::vector<int32_t> none(kB * kT, -1);
  m->ZeroGrads();
  EXPECT_EQ(m->ForwardBackward(b.inputs.data(), none.data(), 1.0f), 0.0);
  const float* g = m->flat_grads().f32();
  EXPECT_TRUE(std::all_of(g, g + m->num_params(), [](float x) { return x == 0.0f; }));
}

TEST_P(Family, ParametersAreContiguousNamedViews) {
  const ModelConfig c = Tiny(GetParam(), RecomputePolicy::kNone);
  auto m = Make(c);
  int64_t offset = 0;
  for (const Parameter& p : m->parameters()) {
    EXPECT_EQ(p.offset, offset) << p.name();
    EXPECT_EQ(p.value.f32(), m->flat_params().f32() + offset);
    EXPECT_EQ(p.grad.f32(), m->flat_grads().f32() + offset);
    EXPECT_TRUE(p.spec.IsWhole());
    EXPECT_EQ(p.spec.global_shape, p.value.shape());
    offset += p.numel();
  }
  EXPECT_EQ(offset, m->num_params());
  auto ps = m->parameters();
  if (GetParam() == ModelFamily::kGpt2) {
    EXPECT_EQ(ps.front().name(), "wte.weight");
    EXPECT_EQ(ps[1].name(), "wpe.weight");
    EXPECT_EQ(ps[1].value.shape(), Shape({16, 16}));
    EXPECT_EQ(ps[4].name(), "h.0.attn.c_attn.weight");
    EXPECT_EQ(ps[4].value.shape(), Shape({48, 16}));
    EXPECT_TRUE(ps[4].hf_transposed);
    EXPECT_EQ(ps.back().name(), "ln_f.bias");
  } else {
    EXPECT_EQ(ps.front().name(), "model.embed_tokens.weight");
    EXPECT_EQ(ps[2].name(), "model.layers.0.self_attn.q_proj.weight");
    EXPECT_EQ(ps[3].value.shape(), Shape({8, 16}));  // k_proj: 2 kv heads x 4
    EXPECT_EQ(ps[7].name(), "model.layers.0.mlp.gate_proj.weight");
    EXPECT_EQ(ps[8].name(), "model.layers.0.mlp.up_proj.weight");
    EXPECT_EQ(ps.back().name(), "lm_head.weight");
    EXPECT_EQ(ps.back().kind, ParamKind::kMatrix);
  }
  EXPECT_EQ(ps.front().kind, ParamKind::kEmbedding);
}

INSTANTIATE_TEST_SUITE_P(Models, Family,
                         ::testing::Values(ModelFamily::kGpt2, ModelFamily::kLlama),
                         [](const auto& p) { return std::string(Name(p.param)); });

// ---- published sizes and FLOPs ----------------------------------------------------------

int64_t Total(const ModelConfig& c) {
  int64_t n = 0;
  for (const ParamDecl& d : DeclareParameters(c)) n += d.shape.numel();
  return n;
}

TEST(Layout, PublishedParameterCounts) {
  ModelConfig gpt2;  // GPT-2 124M
  gpt2.vocab_size = 50257;
  gpt2.max_seq_len = 1024;
  gpt2.num_layers = 12;
  gpt2.hidden_size = 768;
  gpt2.num_heads = 12;
  EXPECT_EQ(Total(gpt2), 124439808);
  ModelConfig llama;  // TinyLlama 1.1B
  llama.family = ModelFamily::kLlama;
  llama.vocab_size = 32000;
  llama.max_seq_len = 2048;
  llama.num_layers = 22;
  llama.hidden_size = 2048;
  llama.num_heads = 32;
  llama.num_kv_heads = 4;
  llama.ffn_hidden_size = 5632;
  llama.tie_embeddings = false;
  EXPECT_EQ(Total(llama), 1100048384);
  ModelConfig qwen2 = llama;  // Qwen2-0.5B: q/k/v biases, tied embeddings
  qwen2.vocab_size = 151936;
  qwen2.num_layers = 24;
  qwen2.hidden_size = 896;
  qwen2.num_heads = 14;
  qwen2.num_kv_heads = 2;
  qwen2.ffn_hidden_size = 4864;
  qwen2.tie_embeddings = true;
  qwen2.qkv_bias = true;
  EXPECT_EQ(Total(qwen2), 494032768);
  ModelConfig qwen3 = qwen2;  // Qwen3-0.6B: q/k norms, 16 heads of 128 over a width of 1024
  qwen3.qkv_bias = false;
  qwen3.qk_norm = true;
  qwen3.num_layers = 28;
  qwen3.hidden_size = 1024;
  qwen3.num_heads = 16;
  qwen3.num_kv_heads = 8;
  qwen3.head_dim = 128;
  qwen3.ffn_hidden_size = 3072;
  // 0.44B without the embedding, as its model card says: 440,466,432 + 155,582,464.
  EXPECT_EQ(Total(qwen3), 596049920);
}

TEST(Layout, TrainFlopsPerTokenIsPalmFormula) {
  const ModelConfig c = Tiny(ModelFamily::kGpt2, RecomputePolicy::kNone);
  auto m = Make(c);
  const int64_t C = 16, F = 64, L = 2, V = 32;
  const int64_t matmul = L * (3 * C * C + C * C + F * C + C * F) + V * C;  // tied head
  EXPECT_DOUBLE_EQ(m->TrainFlopsPerToken(), 6.0 * matmul + 12.0 * L * C * kT);
}

// ---- Create() validation ----------------------------------------------------------------

void ExpectInvalid(const ModelConfig& c, int64_t B, int64_t T, const std::string& needle) {
  auto r = Transformer::Create(c, B, T, nullptr);
  ASSERT_FALSE(r.ok()) << needle;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(Create, RejectsInvalidShapesNamingTheNumbers) {
  ModelConfig c = Tiny(ModelFamily::kGpt2, RecomputePolicy::kNone);
  c.num_heads = 3;
  ExpectInvalid(c, kB, kT, "model.num_heads: num_heads=3 does not divide hidden_size=16");
  c = Tiny(ModelFamily::kLlama, RecomputePolicy::kNone);
  c.num_kv_heads = 3;
  ExpectInvalid(c, kB, kT, "num_kv_heads=3 does not divide num_heads=4");
  c = Tiny(ModelFamily::kGpt2, RecomputePolicy::kNone);
  c.num_kv_heads = 2;
  ExpectInvalid(c, kB, kT, "gpt2 has no grouped-query attention: num_kv_heads=2 must equal num_heads=4");
  c = Tiny(ModelFamily::kGpt2, RecomputePolicy::kNone);
  ExpectInvalid(c, kB, 17, "T=17 exceeds max_seq_len=16");
  ExpectInvalid(c, 0, kT, "B=0");
  ExpectInvalid(c, kB, 0, "T=0");
  c.vocab_size = 1;
  ExpectInvalid(c, kB, kT, "model.vocab_size: must be >= 2, got 1");
  c = Tiny(ModelFamily::kLlama, RecomputePolicy::kNone);
  c.hidden_size = 12;  // head size 3: RoPE rotates pairs
  ExpectInvalid(c, kB, kT, "even head size");
  c = Tiny(ModelFamily::kGpt2, RecomputePolicy::kNone);
  c.num_layers = 0;
  ExpectInvalid(c, kB, kT, "model.num_layers: must be >= 1, got 0");
}

}  // namespace
}  // namespace tessera
