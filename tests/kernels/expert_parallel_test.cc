// links: tessera_models
// tests/kernels/expert_parallel_test.cc — an expert-parallel Transformer (ep ranks as threads
// over the in-process FakeHub, each with its own micro-batch and E/ep of the experts) computes
// what the one-rank model computes on the same micro-batches: each rank's loss, every expert's
// gradient (on the rank that holds it: the sum over every rank's tokens) and the dense
// gradients summed over ranks. Mixtral-like (softmax) and DeepSeek-like (sigmoid, groups,
// shared expert, bias) routers, GPT-2 and Llama, ep 2 and 4, dropless and with capacity, every
// recompute policy, and routing that sends every token to one rank's experts (the other ranks
// receive nothing and must not stall).
#include "models/expert_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/fake_communicator.h"
#include "models/partition.h"
#include "models/transformer.h"

namespace tessera {
namespace {

constexpr int64_t kB = 2, kT = 8;
constexpr uint64_t kSeed = 9;

enum class Router { kMixtral, kDeepSeek, kQwen2 };

struct Case {
  ModelFamily family;
  Router router;
  RecomputePolicy policy;
  int ep;
  bool capacity;
};

ModelConfig TinyMoe(const Case& k) {
  ModelConfig c;
  c.family = k.family;
  c.vocab_size = 32;
  c.max_seq_len = 16;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_heads = 4;
  c.num_kv_heads = k.family == ModelFamily::kLlama ? 2 : 0;
  c.ffn_hidden_size = 24;
  c.tie_embeddings = k.family == ModelFamily::kGpt2;
  c.init_std = 0.2f;
  c.recompute = k.policy;
  MoeConfig& e = c.moe;
  e.num_experts = 8;
  e.top_k = 2;
  e.expert_ffn_size = 8;
  if (k.router == Router::kMixtral) {
    e.aux_loss = 0.01f;
    e.z_loss = 0.001f;
  } else if (k.router == Router::kQwen2) {  // gates not renormalised, a gated shared expert
    e.normalize_gates = false;
    e.shared_experts = 1;
    e.shared_expert_gate = true;
    e.aux_loss = 0.01f;
    c.qkv_bias = true;
  } else {
    e.score = RouterScore::kSigmoid;
    e.groups = 4;
    e.groups_kept = 2;
    e.shared_experts = 1;
    e.route_scale = 2.5f;
    e.seq_aux_loss = 0.01f;
    e.bias_update_rate = 0.001f;
    e.first_dense_layers = 1;
  }
  if (k.capacity) e.capacity_factor = 1.0f;
  return c;
}

std::vector<int32_t> Tokens(uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> tok(0, 31);
  std::vector<int32_t> t(kB * kT);
  for (auto& x : t) x = tok(gen);
  return t;
}

struct Outcome {
  std::vector<double> loss;                 // per rank (per micro-batch for the reference)
  std::vector<std::vector<float>> grads;    // per rank, local flat
  std::vector<std::vector<int64_t>> counts;  // per rank: the MoE blocks' expert counts
  std::vector<Status> status;
};

// The routing bias of every MoE block: `skew` pulls every token to experts 0 and 1 (both on
// ep rank 0), else a small pattern (selection then differs from the scores).
void SetBias(Transformer& m, bool skew) {
  for (MoeLayerState& s : m.moe_layers()) {
    for (size_t e = 0; e < s.bias.size(); ++e) {
      s.bias[e] = skew ? (e < 2 ? 100.0f : 0.0f) : 0.05f * static_cast<float>(e % 3);
    }
  }
}

// One ForwardBackward per rank over its own micro-batch (seed 100 + rank), grad scale 1/ep.
Outcome RunEp(const ModelConfig& config, int ep, bool skew) {
  auto hub = FakeHub::Create(ep);
  Outcome run;
  run.loss.assign(ep, 0.0);
  run.grads.resize(ep);
  run.counts.resize(ep);
  run.status.assign(ep, Status::Ok());
  std::vector<std::thread> threads;
  for (int r = 0; r < ep; ++r) {
    threads.emplace_back([&, r] {
      CommOptions opts;
      opts.name = "ep";
      opts.timeout_s = 30;
      std::unique_ptr<Communicator> comm = hub->Connect(r, opts);
      ModelOptions mo;
      mo.ep = comm.get();
      auto model = Transformer::Create(config, kB, kT, nullptr, mo);
      if (!model.ok()) {
        run.status[r] = model.status();
        return;
      }
      Transformer& m = **model;
      m.InitRandom(kSeed);
      SetBias(m, skew);
      m.ZeroGrads();
      const std::vector<int32_t> in = Tokens(100 + r), tg = Tokens(200 + r);
      run.loss[r] = m.ForwardBackward(in.data(), tg.data(), 1.0f / ep);
      run.status[r] = m.comm_status();
      Tensor g = m.flat_grads();
      run.grads[r].assign(g.f32(), g.f32() + g.numel());
      for (const MoeLayerState& s : m.moe_layers()) {
        run.counts[r].insert(run.counts[r].end(), s.counts.begin(), s.counts.end());
      }
    });
  }
  for (auto& t : threads) t.join();
  return run;
}

// The one-rank model over the same micro-batches, one after the other (gradients accumulate).
Outcome RunOne(const ModelConfig& config, int ep, bool skew) {
  auto model = Transformer::Create(config, kB, kT, nullptr);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  Transformer& m = **model;
  m.InitRandom(kSeed);
  SetBias(m, skew);
  m.ZeroGrads();
  Outcome run;
  for (int r = 0; r < ep; ++r) {
    const std::vector<int32_t> in = Tokens(100 + r), tg = Tokens(200 + r);
    for (MoeLayerState& s : m.moe_layers()) s.ResetStats();
    run.loss.push_back(m.ForwardBackward(in.data(), tg.data(), 1.0f / ep));
    run.counts.emplace_back();
    for (const MoeLayerState& s : m.moe_layers()) {
      run.counts.back().insert(run.counts.back().end(), s.counts.begin(), s.counts.end());
    }
  }
  Tensor g = m.flat_grads();
  run.grads.emplace_back(g.f32(), g.f32() + g.numel());
  return run;
}

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& k = info.param;
  return std::string(ModelFamilyName(k.family)) +
         (k.router == Router::kMixtral ? "_mixtral_"
          : k.router == Router::kQwen2 ? "_qwen2_"
                                       : "_deepseek_") +
         RecomputePolicyName(k.policy) + "_ep" + std::to_string(k.ep) +
         (k.capacity ? "_capacity" : "_dropless");
}

// The largest difference between the ep ranks' gradients (experts from their holder, dense
// ones summed over ranks in rank order) and the one-rank gradients, relative to the largest
// one-rank gradient of the tensor.
double CompareGrads(const ModelConfig& config, int ep, const Outcome& got, const Outcome& want) {
  const std::vector<float>& ref = want.grads[0];
  std::vector<int> seen(ref.size(), 0);
  double worst = 0.0;
  std::vector<float> dense(ref.size(), 0.0f);
  for (int r = 0; r < ep; ++r) {
    auto part = ModelPartition::Create(config, 1, 0, {}, ep, r);
    EXPECT_TRUE(part.ok()) << part.status().ToString();
    part->ForEachGlobalPiece(0, part->num_local(), [&](const TpParam& p, int64_t gb, int64_t n,
                                                         int64_t local) {
      for (int64_t i = 0; i < n; ++i) {
        const size_t at = static_cast<size_t>(p.global_offset + gb + i);
        const float v = got.grads[r][static_cast<size_t>(local + i)];
        if (p.local.expert) {
          dense[at] = v;
        } else {
          dense[at] = r == 0 ? v : dense[at] + v;  // rank order, fp32: a dp reduction
        }
        ++seen[at];
      }
    });
  }
  int64_t off = 0;
  for (const ParamDecl& d : DeclareParameters(config)) {
    const int64_t n = d.shape.numel();
    double scale = 0.0;
    for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(double(ref[off + i])));
    for (int64_t i = 0; i < n; ++i) {
      const size_t at = static_cast<size_t>(off + i);
      EXPECT_EQ(seen[at], d.expert ? 1 : ep) << d.name;
      if (scale > 0) worst = std::max(worst, std::abs(double(dense[at]) - ref[at]) / scale);
    }
    off += n;
  }
  return worst;
}

class EpModel : public ::testing::TestWithParam<Case> {};

TEST_P(EpModel, MatchesOneRankOnTheSameMicroBatches) {
  const Case k = GetParam();
  const ModelConfig config = TinyMoe(k);
  for (bool skew : {false, true}) {
    SCOPED_TRACE(skew ? "every token on rank 0's experts" : "spread routing");
    const Outcome got = RunEp(config, k.ep, skew);
    for (const Status& s : got.status) ASSERT_TRUE(s.ok()) << s.ToString();
    const Outcome want = RunOne(config, k.ep, skew);
    double worst_loss = 0.0;
    for (int r = 0; r < k.ep; ++r) {
      // An ep expert's GEMM runs over every source's rows, the one rank's over one
      // micro-batch's: sgemm's rows may round differently with the row count (observed: the
      // last bit or two), never enough to move a routing decision here.
      worst_loss = std::max(worst_loss, std::abs(got.loss[r] - want.loss[r]) / want.loss[r]);
      EXPECT_EQ(got.counts[r], want.counts[r]) << "rank " << r;
    }
    EXPECT_LT(worst_loss, 1e-6);
    char loss_figure[32];
    std::snprintf(loss_figure, sizeof loss_figure, "%.3g", worst_loss);
    RecordProperty(skew ? "worst_loss_skewed" : "worst_loss", loss_figure);
    // An ep expert's weight gradient is one GEMM over every source's rows; the one rank
    // here runs the micro-batches one after the other and adds their GEMMs: close, not
    // always the same bits.
    const double worst = CompareGrads(config, k.ep, got, want);
    EXPECT_LT(worst, 4e-6);  // observed up to 8.7e-7 (sgemm's blocking differs by machine)
    char figure[32];
    std::snprintf(figure, sizeof figure, "%.3g", worst);
    RecordProperty(skew ? "worst_skewed" : "worst", figure);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, EpModel,
    ::testing::Values(
        Case{ModelFamily::kGpt2, Router::kMixtral, RecomputePolicy::kNone, 2, false},
        Case{ModelFamily::kGpt2, Router::kMixtral, RecomputePolicy::kFull, 4, true},
        Case{ModelFamily::kGpt2, Router::kDeepSeek, RecomputePolicy::kSelective, 2, true},
        Case{ModelFamily::kLlama, Router::kMixtral, RecomputePolicy::kSelective, 4, false},
        Case{ModelFamily::kLlama, Router::kDeepSeek, RecomputePolicy::kNone, 4, false},
        Case{ModelFamily::kLlama, Router::kDeepSeek, RecomputePolicy::kFull, 2, true},
        Case{ModelFamily::kLlama, Router::kQwen2, RecomputePolicy::kSelective, 2, false}),
    Name);

TEST(EpModel, HoldsOnlyItsExpertsAndRefusesASplitThatDoesNotDivide) {
  ModelConfig c = TinyMoe({ModelFamily::kLlama, Router::kMixtral, RecomputePolicy::kNone, 2, false});
  auto one = Transformer::Create(c, kB, kT, nullptr);
  ASSERT_TRUE(one.ok());
  auto part = ModelPartition::Create(c, 1, 0, {}, 4, 3);
  ASSERT_TRUE(part.ok());
  int64_t experts = 0, all_experts = 0;
  for (const TpParam& p : part->params()) {
    if (!p.local.expert) continue;
    EXPECT_EQ(p.local.shape[0], 2) << p.local.name;
    EXPECT_EQ(p.tensor.split_group, ShardGroup::kEp);
    EXPECT_EQ(p.tensor.offset[0], 6) << p.local.name;
    experts += p.local.shape.numel();
  }
  for (const ParamDecl& d : DeclareParameters(c)) all_experts += d.expert ? d.shape.numel() : 0;
  EXPECT_EQ(4 * experts, all_experts);
  EXPECT_EQ(part->num_local(), (*one)->num_params() - all_experts + experts);

  auto bad = ModelPartition::Create(c, 1, 0, {}, 3, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ep must divide model.moe.num_experts=8"), std::string::npos)
      << bad.status().ToString();
}

TEST(EpModel, AHungPeerIsANamedTimeoutNotAHang) {
  // Rank 1 never joins its first exchange: rank 0's wait ends after the group's timeout with
  // an error naming the group and the op, and its later exchanges return at once.
  ModelConfig c = TinyMoe({ModelFamily::kGpt2, Router::kMixtral, RecomputePolicy::kNone, 2, false});
  auto hub = FakeHub::Create(2);
  CommOptions opts;
  opts.name = "ep.0";
  opts.timeout_s = 0.5;
  std::unique_ptr<Communicator> c0 = hub->Connect(0, opts);
  std::unique_ptr<Communicator> c1 = hub->Connect(1, opts, {FakeFault::Kind::kHang, 1});
  Status seen[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      ModelOptions mo;
      mo.ep = r == 0 ? c0.get() : c1.get();
      auto model = Transformer::Create(c, kB, kT, nullptr, mo);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      (*model)->InitRandom(kSeed);
      const std::vector<int32_t> in = Tokens(1), tg = Tokens(2);
      (*model)->ForwardBackward(in.data(), tg.data(), 1.0f);
      seen[r] = (*model)->comm_status();
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_FALSE(seen[0].ok());
  EXPECT_NE(seen[0].ToString().find("ep.0"), std::string::npos) << seen[0].ToString();
  EXPECT_NE(seen[0].ToString().find("all_to_all"), std::string::npos) << seen[0].ToString();
}

}  // namespace
}  // namespace tessera
