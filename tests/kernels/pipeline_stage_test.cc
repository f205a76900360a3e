// links: tessera_models
// tests/kernels/pipeline_stage_test.cc — a model cut into pipeline chunks (models/partition.h),
// each its own Transformer running ForwardStage / BackwardStage with activations handed from
// chunk to chunk, computes the one-rank model's loss and gradients: bit for bit when the
// embeddings are untied (every chunk runs the same kernels on the same inputs), and within
// float rounding when tied (the last chunk's copy of the token table collects the head's
// gradient; summed with the first chunk's it is the one-rank gradient). Several activation
// contexts in flight (forwards of two micro-batches before their backwards, as 1F1B's warm-up
// does) give the gradients of the two micro-batches accumulated. The last chunk's loss from
// ForwardStage equals the one-rank loss.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "models/partition.h"
#include "models/transformer.h"
#include "runtime/kernels/cpu/threads.h"
#include "tests/testing/tiny_model.h"

namespace tessera {
namespace {

constexpr int64_t kB = 2, kT = 8;
constexpr uint64_t kSeed = 5;

ModelConfig Tiny(ModelFamily family, bool tied, RecomputePolicy policy) {
  return testing::TinyDense(family, 4, 32, tied, policy);
}

using Batch = testing::TokenBatch;

Batch MakeBatch(int64_t V, uint32_t seed) { return testing::RandomTokens(kB * kT, V, seed, 6, 1); }

struct Stage {
  std::unique_ptr<ModelPartition> partition;
  std::unique_ptr<Transformer> model;
};

// One model per chunk of `split` (layers per chunk), each with `contexts` activation sets.
std::vector<Stage> MakeStages(const ModelConfig& config, const std::vector<int64_t>& split,
                              MemoryTracker* memory, int contexts) {
  std::vector<Stage> stages;
  const int n = static_cast<int>(split.size());
  for (int s = 0; s < n; ++s) {
    auto chunks = PipelineChunks(config.num_layers, n, s, 1, split);
    EXPECT_TRUE(chunks.ok()) << chunks.status().ToString();
    auto p = ModelPartition::Create(config, 1, 0, *chunks);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    Stage st;
    st.partition = std::make_unique<ModelPartition>(std::move(*p));
    ModelOptions o;
    o.partition = st.partition.get();
    o.contexts = contexts;
    auto m = Transformer::Create(config, kB, kT, memory, o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    st.model = std::move(*m);
    st.model->InitRandom(kSeed);
    st.model->ZeroGrads();
    stages.push_back(std::move(st));
  }
  return stages;
}

// Forward of micro-batch `b` through every stage in context ctx; returns the loss.
double Forward(std::vector<Stage>& stages, int ctx, const Batch& b) {
  const int64_t C = stages[0].model->config().hidden_size;
  std::vector<float> x(kB * kT * C), y(kB * kT * C);
  double loss = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    loss = stages[s].model->ForwardStage(ctx, b.inputs.data(), b.targets.data(), x.data(), y.data());
    std::swap(x, y);
  }
  return loss;
}

void Backward(std::vector<Stage>& stages, int ctx, float grad_scale) {
  const int64_t C = stages[0].model->config().hidden_size;
  std::vector<float> d(kB * kT * C), e(kB * kT * C);
  for (size_t s = stages.size(); s-- > 0;) {
    stages[s].model->BackwardStage(ctx, d.data(), e.data(), grad_scale);
    std::swap(d, e);
  }
}

// The stages' gradients placed at their global offsets; a tied copy is added to the first
// stage's embedding gradient (what the trainer's embedding-group sum does).
std::vector<float> GlobalGrads(std::vector<Stage>& stages, int64_t n) {
  std::vector<float> g(n, 0.0f);
  for (Stage& st : stages) {
    Tensor local = st.model->flat_grads();
    st.partition->ForEachGlobalPiece(0, st.partition->num_local(),
                                     [&](const TpParam& p, int64_t gb, int64_t len, int64_t l) {
                                       for (int64_t k = 0; k < len; ++k) {
                                         g[p.global_offset + gb + k] += local.f32()[l + k];
                                       }
                                     });
  }
  return g;
}

struct Case {
  ModelFamily family;
  bool tied;
  RecomputePolicy policy;
  std::vector<int64_t> split;
};

class PipelineStageTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { before_ = cpu::SetNumThreads(1); }
  void TearDown() override { cpu::SetNumThreads(before_); }
  int before_ = 1;
};

TEST_P(PipelineStageTest, ChunksComputeTheOneRankGradients) {
  const Case c = GetParam();
  const ModelConfig config = Tiny(c.family, c.tied, c.policy);
  const Batch b0 = MakeBatch(config.vocab_size, 1), b1 = MakeBatch(config.vocab_size, 2);
  MemoryTracker m1, m2;
  auto one = Transformer::Create(config, kB, kT, &m1);
  ASSERT_TRUE(one.ok());
  (*one)->InitRandom(kSeed);
  (*one)->ZeroGrads();
  const double l0 = (*one)->ForwardBackward(b0.inputs.data(), b0.targets.data(), 0.5f);
  const double l1 = (*one)->ForwardBackward(b1.inputs.data(), b1.targets.data(), 0.5f);
  const Tensor ref = (*one)->flat_grads();

  std::vector<Stage> stages = MakeStages(config, c.split, &m2, /*contexts=*/2);
  // 1F1B warm-up order on a stage: both forwards in flight, then both backwards.
  const double p0 = Forward(stages, 0, b0);
  const double p1 = Forward(stages, 1, b1);
  Backward(stages, 0, 0.5f);
  Backward(stages, 1, 0.5f);
  EXPECT_EQ(p0, l0);
  EXPECT_EQ(p1, l1);
  const std::vector<float> got = GlobalGrads(stages, ref.numel());
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    worst = std::max(worst, std::fabs(double(got[i]) - ref.f32()[i]));
    scale = std::max(scale, std::fabs(double(ref.f32()[i])));
  }
  if (!c.tied) {
    EXPECT_EQ(0, std::memcmp(got.data(), ref.f32(), ref.nbytes())) << "max diff " << worst;
  } else {
    EXPECT_LT(worst, 1e-6 * scale) << "max diff " << worst << " of " << scale;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Splits, PipelineStageTest,
    ::testing::Values(Case{ModelFamily::kGpt2, false, RecomputePolicy::kNone, {2, 2}},
                      Case{ModelFamily::kGpt2, true, RecomputePolicy::kSelective, {1, 2, 1}},
                      Case{ModelFamily::kLlama, false, RecomputePolicy::kFull, {1, 1, 1, 1}},
                      Case{ModelFamily::kLlama, true, RecomputePolicy::kNone, {3, 1}}));

TEST(PipelineStage, EachContextKeepsItsOwnActivations) {
  // Two contexts reserve twice the activation memory of one.
  cpu::SetNumThreads(1);
  const ModelConfig config = Tiny(ModelFamily::kGpt2, false, RecomputePolicy::kNone);
  MemoryTracker one, two;
  auto a = MakeStages(config, {2, 2}, &one, 1);
  auto b = MakeStages(config, {2, 2}, &two, 2);
  EXPECT_EQ(two.reserved(MemoryKind::kActivations), 2 * one.reserved(MemoryKind::kActivations));
}

TEST(PipelineStage, BadChunkOptionsAreRefused) {
  const ModelConfig config = Tiny(ModelFamily::kGpt2, false, RecomputePolicy::kNone);
  auto p = ModelPartition::Create(config, 1, 0, {{0, 2, true, false}});
  ASSERT_TRUE(p.ok());
  MemoryTracker memory;
  ModelOptions o;
  o.partition = &*p;
  o.chunk = 1;
  auto m = Transformer::Create(config, kB, kT, &memory, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("chunk 1"), std::string::npos) << m.status().ToString();
  o.chunk = 0;
  o.contexts = 0;
  m = Transformer::Create(config, kB, kT, &memory, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("contexts=0"), std::string::npos);
}

}  // namespace
}  // namespace tessera
