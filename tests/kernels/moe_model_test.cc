// links: tessera_models
// tests/kernels/moe_model_test.cc — models with mixture-of-experts blocks (model.moe,
// models/moe.h): finite-difference gradient checks of the whole model (router, experts,
// shared experts, combine and every auxiliary loss) under every recompute policy and router
// kind, bit-identical gradients across policies, determinism, capacity drops and the routing
// statistics a training forward records.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/block.h"
#include "models/moe.h"
#include "models/param_layout.h"
#include "models/transformer.h"
#include "runtime/kernels/cpu_backend.h"
#include "runtime/kernels/measuring_backend.h"

namespace tessera {
namespace {

constexpr int64_t kB = 2, kT = 8;

enum class Router { kMixtral, kDeepSeek, kQwen2 };

// A tiny MoE model: Mixtral-like (softmax top-2 of 4, normalised, Switch aux + z-loss) or
// DeepSeek-like (sigmoid, 2 groups of 3 with 1 kept... top-2, a shared expert, sequence-wise aux,
// route scale, balancing bias, first block dense) or Qwen2-MoE-like (llama only: softmax top-2 of
// 4 not renormalised, a shared expert gated by sigmoid(h . w), q/k/v biases).
ModelConfig TinyMoe(ModelFamily family, Router router, RecomputePolicy policy) {
  ModelConfig c;
  c.family = family;
  c.vocab_size = 32;
  c.max_seq_len = 16;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_heads = 4;
  c.num_kv_heads = family == ModelFamily::kLlama ? 2 : 0;
  c.ffn_hidden_size = 24;
  c.tie_embeddings = family == ModelFamily::kGpt2;
  c.init_std = 0.2f;
  c.recompute = policy;
  MoeConfig& e = c.moe;
  e.expert_ffn_size = 8;
  if (router == Router::kMixtral) {
    e.num_experts = 4;
    e.top_k = 2;
    e.aux_loss = 0.01f;
    e.z_loss = 0.001f;
  } else if (router == Router::kQwen2) {
    e.num_experts = 4;
    e.top_k = 2;
    e.normalize_gates = false;
    e.shared_experts = 1;
    e.shared_expert_gate = true;
    e.aux_loss = 0.01f;
    c.qkv_bias = true;
  } else {
    e.num_experts = 6;
    e.top_k = 2;
    e.score = RouterScore::kSigmoid;
    e.groups = 3;
    e.groups_kept = 2;
    e.shared_experts = 1;
    e.route_scale = 2.5f;
    e.seq_aux_loss = 0.01f;
    e.bias_update_rate = 0.001f;
    e.first_dense_layers = 1;
  }
  return c;
}

std::vector<int32_t> Tokens(int64_t n, int64_t V, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = tok(gen);
  return t;
}

std::unique_ptr<Transformer> Make(const ModelConfig& c, MemoryTracker* tracker = nullptr) {
  auto r = Transformer::Create(c, kB, kT, tracker);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

// The training objective of the last forward: the mean cross-entropy plus every MoE block's
// auxiliary losses.
double Objective(Transformer& m, double ce) {
  double total = ce;
  for (const MoeLayerState& s : m.moe_layers()) total += s.last_aux_loss;
  return total;
}

struct Case {
  ModelFamily family;
  Router router;
  RecomputePolicy policy;
  float capacity_factor = 0.0f;  // 0: dropless
  int64_t layer_interval = 1;    // > 1: three blocks, MoE blocks 0 and 2 (a dense one between)
  int64_t lora_rank = 0;         // > 0: LoRA adapters on every projection (not the experts)
};

ModelConfig CaseConfig(const Case& c) {
  ModelConfig config = TinyMoe(c.family, c.router, c.policy);
  config.moe.capacity_factor = c.capacity_factor;
  if (c.layer_interval > 1) {
    config.num_layers = 3;
    config.moe.first_dense_layers = 0;
    config.moe.layer_interval = c.layer_interval;
  }
  if (c.lora_rank > 0) {
    config.lora.rank = c.lora_rank;
    config.lora.targets = {"all-linear"};
  }
  return config;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return std::string(ModelFamilyName(info.param.family)) +
         (info.param.router == Router::kMixtral  ? "_mixtral_"
          : info.param.router == Router::kQwen2 ? "_qwen2_"
                                                : "_deepseek_") +
         RecomputePolicyName(info.param.policy) +
         (info.param.capacity_factor > 0 ? "_capacity" : "") +
         (info.param.layer_interval > 1 ? "_interval" : "") +
         (info.param.lora_rank > 0 ? "_lora" : "");
}

class MoeGradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(MoeGradCheck, DirectionalDerivativesMatchFiniteDifferencesOfLossPlusAuxLosses) {
  const Case c = GetParam();
  const ModelConfig config = CaseConfig(c);
  if (c.layer_interval > 1) {
    ASSERT_TRUE(config.is_moe_layer(0) && !config.is_moe_layer(1) && config.is_moe_layer(2));
  }
  auto m = Make(config);
  m->InitRandom(7);
  // LoRA's B starts at zero, which would leave A's gradient zero: draw it.
  std::mt19937 b_gen(5);
  std::normal_distribution<float> b_normal(0.0f, 0.3f);
  for (const Parameter& p : m->parameters()) {
    if (p.name().find("lora_B") == std::string::npos) continue;
    for (int64_t i = 0; i < p.numel(); ++i) p.value.f32()[i] = b_normal(b_gen);
  }
  // A non-zero balancing bias, as after some training: selection then differs from scores.
  for (MoeLayerState& s : m->moe_layers()) {
    for (size_t e = 0; e < s.bias.size(); ++e) s.bias[e] = config.moe.bias_update_rate > 0 ? 0.05f * (e % 3) : 0.0f;
  }
  const std::vector<int32_t> in = Tokens(kB * kT, 32, 11), tg = Tokens(kB * kT, 32, 12);
  m->ZeroGrads();
  const double ce = m->ForwardBackward(in.data(), tg.data(), 1.0f);
  const double objective = Objective(*m, ce);
  EXPECT_EQ(ce, m->Forward(in.data(), tg.data()));
  EXPECT_EQ(objective, Objective(*m, ce));
  const int64_t P = m->num_params();
  const std::vector<float> g(m->flat_grads().f32(), m->flat_grads().f32() + P);
  // The check covers the MoE parts: the router and every routed expert have gradients, and
  // the auxiliary losses are on.
  for (const Parameter& p : m->parameters()) {
    const bool moe = p.name().find("router") != std::string::npos ||
                     p.name().find("mlp.gate.") != std::string::npos ||
                     p.name().find("experts") != std::string::npos ||
                     p.name().find("shared_expert") != std::string::npos;
    if (!moe) continue;
    double sq = 0;
    for (int64_t i = 0; i < p.numel(); ++i) sq += double(g[p.offset + i]) * g[p.offset + i];
    EXPECT_GT(sq, 0.0) << p.name();
  }
  EXPECT_GT(objective, ce);
  float* theta = m->flat_params().f32();
  const std::vector<float> theta0(theta, theta + P);
  // The objective at theta0 + eps*d, and the experts' token counts there (a training pass
  // records them; its gradients are not used).
  auto objective_at = [&](const std::vector<double>& d, double eps, std::vector<int64_t>* counts) {
    for (int64_t i = 0; i < P; ++i) theta[i] = static_cast<float>(theta0[i] + eps * d[i]);
    for (MoeLayerState& s : m->moe_layers()) s.ResetStats();
    m->ZeroGrads();
    const double l = Objective(*m, m->ForwardBackward(in.data(), tg.data(), 1.0f));
    counts->clear();
    for (const MoeLayerState& s : m->moe_layers()) counts->insert(counts->end(), s.counts.begin(), s.counts.end());
    std::copy(theta0.begin(), theta0.end(), theta);
    return l;
  };
  std::vector<int64_t> counts0;
  EXPECT_EQ(objective_at(std::vector<double>(static_cast<size_t>(P), 0.0), 0.0, &counts0), objective);
  std::mt19937 gen(3);
  std::normal_distribution<double> normal;
  // Direction 5: the gradient restricted to Qwen2-MoE's shared-expert gates, where present (a
  // handful of weights that random directions barely move).
  std::vector<double> gate_only(static_cast<size_t>(P), 0.0);
  for (const Parameter& p : m->parameters()) {
    if (p.name().find("shared_expert_gate") == std::string::npos) continue;
    for (int64_t i = 0; i < p.numel(); ++i) gate_only[p.offset + i] = g[p.offset + i];
  }
  const bool gated = config.moe.shared_expert_gate;
  for (int k = 0; k < (gated ? 6 : 5); ++k) {
    std::vector<double> d(static_cast<size_t>(P));
    if (k == 0) {
      for (int64_t i = 0; i < P; ++i) d[i] = g[i];
    } else if (k == 5) {
      d = gate_only;
    } else {
      for (auto& x : d) x = normal(gen);
    }
    double norm = 0;
    for (double x : d) norm += x * x;
    norm = std::sqrt(norm);
    for (auto& x : d) x /= norm;
    double analytic = 0;
    for (int64_t i = 0; i < P; ++i) analytic += g[i] * d[i];
    // Routing is piecewise constant: a step that changes which experts tokens pick crosses a
    // kink, and the difference quotient there measures the jump, not the derivative. Such a
    // step (seen as changed expert counts) is halved until routing stays put.
    double eps = 2e-3, numeric = 0;
    for (int tries = 0;; ++tries) {
      std::vector<int64_t> up, down;
      numeric = (objective_at(d, eps, &up) - objective_at(d, -eps, &down)) / (2 * eps);
      if ((up == counts0 && down == counts0) || tries == 6) break;
      eps /= 2;
    }
    EXPECT_NEAR(analytic, numeric, 2e-2 * std::abs(numeric) + 5e-4) << "direction " << k;
  }
}

TEST_P(MoeGradCheck, EveryPolicyGivesBitIdenticalGradients) {
  const Case c = GetParam();
  if (c.policy != RecomputePolicy::kNone) GTEST_SKIP() << "compared once, from the none case";
  const std::vector<int32_t> in = Tokens(kB * kT, 32, 21), tg = Tokens(kB * kT, 32, 22);
  std::vector<float> reference;
  double reference_loss = 0;
  for (RecomputePolicy p : {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
    Case with_policy = c;
    with_policy.policy = p;
    auto m = Make(CaseConfig(with_policy));
    m->InitRandom(5);
    m->ZeroGrads();
    const double loss = m->ForwardBackward(in.data(), tg.data(), 0.5f);
    std::vector<float> g(m->flat_grads().f32(), m->flat_grads().f32() + m->num_params());
    if (reference.empty()) {
      reference = g;
      reference_loss = loss;
      continue;
    }
    EXPECT_EQ(loss, reference_loss) << RecomputePolicyName(p);
    EXPECT_EQ(std::memcmp(g.data(), reference.data(), g.size() * sizeof(float)), 0)
        << RecomputePolicyName(p);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, MoeGradCheck,
    ::testing::Values(Case{ModelFamily::kGpt2, Router::kMixtral, RecomputePolicy::kNone},
                      Case{ModelFamily::kGpt2, Router::kMixtral, RecomputePolicy::kSelective},
                      Case{ModelFamily::kGpt2, Router::kMixtral, RecomputePolicy::kFull},
                      Case{ModelFamily::kGpt2, Router::kDeepSeek, RecomputePolicy::kNone},
                      Case{ModelFamily::kLlama, Router::kMixtral, RecomputePolicy::kNone},
                      Case{ModelFamily::kLlama, Router::kMixtral, RecomputePolicy::kFull},
                      Case{ModelFamily::kLlama, Router::kDeepSeek, RecomputePolicy::kNone},
                      Case{ModelFamily::kLlama, Router::kDeepSeek, RecomputePolicy::kSelective},
                      // capacity 0.75: ceil(16 * 2 / 4 * 0.75) = 6 of ~8 rows per expert kept
                      Case{ModelFamily::kGpt2, Router::kMixtral, RecomputePolicy::kNone, 0.75f},
                      Case{ModelFamily::kLlama, Router::kDeepSeek, RecomputePolicy::kFull, 0.75f},
                      Case{ModelFamily::kLlama, Router::kMixtral, RecomputePolicy::kNone, 0.0f, 2},
                      Case{ModelFamily::kLlama, Router::kQwen2, RecomputePolicy::kNone},
                      Case{ModelFamily::kLlama, Router::kQwen2, RecomputePolicy::kSelective},
                      Case{ModelFamily::kLlama, Router::kQwen2, RecomputePolicy::kFull},
                      // LoRA: attention adapters in every block, MLP ones in the dense block 0
                      Case{ModelFamily::kLlama, Router::kDeepSeek, RecomputePolicy::kNone,
                           0.0f, 1, 3},
                      Case{ModelFamily::kGpt2, Router::kDeepSeek, RecomputePolicy::kFull,
                           0.0f, 1, 2}),
    CaseName);

TEST(MoeModel, TrainingForwardsRecordStatisticsAndEvaluationDoesNot) {
  ModelConfig c = TinyMoe(ModelFamily::kLlama, Router::kMixtral, RecomputePolicy::kFull);
  auto m = Make(c);
  m->InitRandom(1);
  ASSERT_EQ(m->moe_layers().size(), 2u);
  EXPECT_EQ(m->moe_layer_ids(), (std::vector<int64_t>{0, 1}));
  const std::vector<int32_t> in = Tokens(kB * kT, 32, 31), tg = Tokens(kB * kT, 32, 32);
  m->ForwardBackward(in.data(), tg.data(), 1.0f);
  m->ForwardBackward(in.data(), tg.data(), 1.0f);
  for (const MoeLayerState& s : m->moe_layers()) {
    int64_t total = 0;
    for (int64_t n : s.counts) total += n;
    EXPECT_EQ(total, 2 * kB * kT * 2);  // two micro-batches, k = 2; recompute not counted
    EXPECT_EQ(s.assigned, total);
    EXPECT_EQ(s.kept, total);           // dropless
    EXPECT_EQ(s.calls, 2);
    EXPECT_GT(s.aux_loss, 0.0);
  }
  const std::vector<int64_t> before = m->moe_layers()[0].counts;
  m->Forward(in.data(), tg.data());
  EXPECT_EQ(m->moe_layers()[0].counts, before);
}

TEST(MoeModel, CapacityDropsAssignmentsAndCountsThemBeforeDropping) {
  ModelConfig c = TinyMoe(ModelFamily::kGpt2, Router::kMixtral, RecomputePolicy::kNone);
  c.moe.capacity_factor = 0.5f;  // ceil(16 * 2 / 4 * 0.5) = 4 of ~8 per expert
  auto m = Make(c);
  m->InitRandom(2);
  const std::vector<int32_t> in = Tokens(kB * kT, 32, 41), tg = Tokens(kB * kT, 32, 42);
  m->ZeroGrads();
  m->ForwardBackward(in.data(), tg.data(), 1.0f);
  for (const MoeLayerState& s : m->moe_layers()) {
    EXPECT_EQ(s.assigned, kB * kT * 2);
    EXPECT_LE(s.kept, 4 * 4);
    EXPECT_LT(s.kept, s.assigned);
  }
}

// The sublayer alone (no shared experts) at capacity 2 per expert: a token whose every
// assignment was dropped gets an output row of exact zeros, so its block passes on its
// residual unchanged; a kept token gets its experts' output.
TEST(MoeLayer, ATokenWithEveryAssignmentDroppedKeepsItsResidual) {
  ModelConfig c = TinyMoe(ModelFamily::kLlama, Router::kMixtral, RecomputePolicy::kNone);
  c.moe.capacity_factor = 0.25f;  // ceil(16 * 2 / 4 * 0.25) = 2 rows per expert, 8 of 32
  const MoeDims d = MoeDims::Of(c, kB, kT, DType::kF32);
  ASSERT_EQ(d.capacity(), 2);
  const MoeLayer layer(d);
  const int64_t R = d.R(), C = d.C, E = d.E();
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(gen);
    return v;
  };
  const std::vector<float> router = random(E * C), fc = random(E * d.fc_dim() * C),
                           out_w = random(E * C * d.Fe), h = random(R * C);
  MoeWeights w;
  w.router = router.data();
  w.fc_w = fc.data();
  w.out_w = out_w.data();
  MoeLayerState state(E);
  MoeSaved saved;
  MeasuringBackend measuring;
  Arena m_act = measuring.MakeArena(MemoryKind::kActivations, 0, nullptr);
  Arena m_ws = measuring.MakeArena(MemoryKind::kWorkspace, 0, nullptr);
  StepContext measure{&measuring, &m_act, &m_ws, 1.0f};
  layer.Forward(measure, m_act, m_act, nullptr, nullptr, saved, w, state, false);
  CpuBackend be;
  Arena act = be.MakeArena(MemoryKind::kActivations, m_act.peak(), nullptr);
  Arena ws = be.MakeArena(MemoryKind::kWorkspace, m_ws.peak(), nullptr);
  StepContext step{&be, &act, &ws, 1.0f};
  std::vector<float> out(static_cast<size_t>(R * C), 1.0f);
  layer.Forward(step, act, act, h.data(), out.data(), saved, w, state, true);
  EXPECT_EQ(state.kept, 8);
  int dropped = 0, kept = 0;
  for (int64_t t = 0; t < R; ++t) {
    const int32_t* rows = saved.row_of.i32() + t * d.k();
    const bool all_dropped = std::all_of(rows, rows + d.k(), [](int32_t r) { return r < 0; });
    const float* o = out.data() + t * C;
    const bool zero = std::all_of(o, o + C, [](float x) { return x == 0.0f; });
    EXPECT_EQ(zero, all_dropped) << "token " << t;
    (all_dropped ? dropped : kept) += 1;
  }
  EXPECT_GT(dropped, 0);
  EXPECT_GT(kept, 0);
}

TEST(MoeModel, CapacityIsTheWrittenFactorsCeilingNotTheFloatsNeighbour) {
  ModelConfig c = TinyMoe(ModelFamily::kGpt2, Router::kMixtral, RecomputePolicy::kNone);
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.capacity_factor = 1.1f;  // 1.10000002f: 16 * 2 / 4 * 1.1 = 8.8 -> 9
  EXPECT_EQ(MoeDims::Of(c, 2, 8, DType::kF32).capacity(), 9);
  c.moe.capacity_factor = 1.25f;  // exact: 10
  EXPECT_EQ(MoeDims::Of(c, 2, 8, DType::kF32).capacity(), 10);
  ModelConfig d = c;
  d.moe.num_experts = 16;
  d.moe.capacity_factor = 1.1f;  // 40 * 2 / 16 * 1.1 = 5.5 -> 6
  EXPECT_EQ(MoeDims::Of(d, 5, 8, DType::kF32).capacity(), 6);
  d.moe.num_experts = 20;
  d.moe.capacity_factor = 1.1f;  // 100 * 2 / 20 * 1.1 = 11 exactly as written, not 12
  EXPECT_EQ(MoeDims::Of(d, 10, 10, DType::kF32).capacity(), 11);
  c.moe.capacity_factor = 0.0f;
  EXPECT_EQ(MoeDims::Of(c, 2, 8, DType::kF32).capacity(), -1);
}

TEST(MoeModel, SameSeedSameBitsAndTheFlopsCountOnlyTheChosenExperts) {
  const ModelConfig c = TinyMoe(ModelFamily::kLlama, Router::kDeepSeek, RecomputePolicy::kNone);
  const std::vector<int32_t> in = Tokens(kB * kT, 32, 51), tg = Tokens(kB * kT, 32, 52);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    auto m = Make(c);
    m->InitRandom(9);
    m->ZeroGrads();
    m->ForwardBackward(in.data(), tg.data(), 1.0f);
    std::vector<float> g(m->flat_grads().f32(), m->flat_grads().f32() + m->num_params());
    if (run == 0) {
      first = g;
    } else {
      EXPECT_EQ(std::memcmp(g.data(), first.data(), g.size() * sizeof(float)), 0);
    }
  }
  // One MoE block (the first is dense): router 6x16, a shared [gate|up] 16x16 and down 16x8,
  // two routed experts of 3 x 8 x 16 per token.
  EXPECT_EQ(MoeMatmulParams(c), 6 * 16 + 3 * 8 * 16 + 2 * 3 * 8 * 16);
}

}  // namespace
}  // namespace tessera
