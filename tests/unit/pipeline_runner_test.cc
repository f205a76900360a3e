// tests/unit/pipeline_runner_test.cc — PipelineRunner (runtime/train/pipeline.h) with p stage
// ranks as threads over the in-process FakeHub reproduces one rank's optimizer-step gradients.
// Each rank holds its chunks of a tiny model (ModelPartition with PipelineChunks) in a
// ParamShards (zero 0, no dp, grad_accum_steps = m) and runs BeginStep, TrainStep (m
// micro-batches, grad_scale 1/m), FinishGradients, SyncTiedEmbeddings. The reference is one
// rank doing m ForwardBackward calls over the same micro-batches through a whole-model
// ParamShards (the trainer's one-rank path):
//   - the last stage's returned loss is the one-rank sum of the per-micro mean losses, bit for
//     bit (the same head kernels on the same activations, added in micro order on both sides);
//   - untied models: every stage's reduced gradients, mapped to global offsets, are the
//     one-rank gradients BIT FOR BIT. Why the order matches: each unit's gradient is computed
//     by one chunk's BackwardStage with the kernels ForwardBackward uses, from the same inputs
//     (tests/kernels/pipeline_stage_test.cc); every schedule runs a chunk's backwards in micro
//     order, and the runner's BeginMicroBatch(k) makes ParamShards compute micro 0 straight
//     into the reduced buffer and each later micro from zero in a scratch slot, added in order
//     k = 1 .. m-1 — exactly the additions of the one-rank run;
//   - tied models: the first stage's embedding gradient and the last stage's copy's are
//     bitwise equal after SyncTiedEmbeddings and within 1e-6 (relative to the tensor's largest
//     gradient) of one rank's (lookup and head contributions are summed in another order: per
//     stage over micro-batches, then across stages);
//   - a model with its OWN gradient buffers accumulating the m calls is only within 1e-6 of
//     both (same losses): some of its kernels add micro k into the running sum inside their
//     loops instead of adding one finished per-micro sum, so some 20 to 130 elements of these
//     models round differently.
// Schedules: gpipe, 1f1b and interleaved (v = 2) with p = 2, m = 4, L = 4; 1f1b with p = 4;
// interleaved with two blocks per chunk; GPT-2 (tied) and Llama (GQA, untied). Also: a rank
// that never runs its step makes the others' TrainStep fail with kTimeout / kAborted within a
// short comm timeout (never a hang), and PipelineContextsPerChunk gives the schedules'
// in-flight counts. TiedCopyKeepsItsSlot guards the tied copy's ParamShards slot.
// One stage (pp = 1, no pp group): TrainStep is the one-rank loop bit for bit, Forward the
// model's evaluation loss.
// Thread-safety: each test drives its own hub and threads; kernels run single-threaded.
// links: tessera_train
#include "runtime/train/pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/fake_communicator.h"
#include "models/param_layout.h"
#include "models/partition.h"
#include "models/transformer.h"
#include "optimizer/adamw.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/train/rank_layout.h"
#include "runtime/train/param_shards.h"
#include "runtime/train/rank_layout.h"
#include "tests/testing/tiny_model.h"

namespace tessera {
namespace {

constexpr int64_t kB = 2, kT = 8;
constexpr uint64_t kSeed = 9;

ModelConfig Tiny(ModelFamily family, int64_t layers) {
  return testing::TinyDense(family, static_cast<int>(layers), 32, family == ModelFamily::kGpt2,
                            RecomputePolicy::kNone);
}

// m micro-batches back to back: micro k at offset k * B * T.
using Batches = testing::TokenBatch;

Batches MakeBatches(int64_t V, int m) { return testing::RandomTokens(m * kB * kT, V, 17, 7, 3); }

// As the trainer's DecayRanges: one range per local parameter, in flat order.
Result<std::unique_ptr<ParamShards>> MakeShards(const ModelPartition& partition, int m,
                                                MemoryTracker* memory) {
  ParamShardsOptions o;
  o.zero = 0;
  o.grad_accum_steps = m;
  // As the trainer does: a later chunk's embedding unit (the tied copy) gets the embedding
  // slot, never a block's.
  for (size_t k = 1; k < partition.chunks().size(); ++k) {
    o.embedding_units.push_back(partition.chunk_unit_begin(static_cast<int>(k)));
  }
  AdamWConfig adamw;
  ASSIGN_OR_RETURN(auto shards, ParamShards::Create(o, adamw, partition.unit_bounds(),
                                                    DecayRanges(partition, adamw), nullptr, memory));
  EXPECT_TRUE(shards->Load([&](int64_t b, int64_t e, float* out) { partition.InitRange(kSeed, b, e, out); }).ok());
  return shards;
}

// This rank's reduced gradients in local flat order (zero 0: each unit whole).
std::vector<float> LocalGrads(ParamShards& shards, const ModelPartition& partition) {
  std::vector<float> g;
  const int units = static_cast<int>(partition.unit_bounds().size()) - 1;
  for (int u = 0; u < units; ++u) {
    std::span<float> s = shards.ReducedGrads(u);
    EXPECT_EQ(static_cast<int64_t>(s.size()),
              partition.unit_bounds()[u + 1] - partition.unit_bounds()[u]);
    g.insert(g.end(), s.begin(), s.end());
  }
  return g;
}

struct Reference {
  double loss = 0;  // sum of the per-micro mean losses
  std::vector<float> grads;  // global flat
};

// One rank, m ForwardBackward calls with grad_scale 1/m: through a ParamShards store (the
// trainer's one-rank path) or, own_buffers, with the model's own flat gradient buffer.
Reference RunOneRank(const ModelConfig& config, const Batches& b, int m, bool own_buffers) {
  Reference ref;
  MemoryTracker memory;
  const int64_t tokens = kB * kT;
  if (own_buffers) {
    auto model = Transformer::Create(config, kB, kT, &memory);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    (*model)->InitRandom(kSeed);
    (*model)->ZeroGrads();
    for (int k = 0; k < m; ++k) {
      ref.loss += (*model)->ForwardBackward(b.inputs.data() + k * tokens,
                                            b.targets.data() + k * tokens, 1.0f / m);
    }
    Tensor g = (*model)->flat_grads();
    ref.grads.assign(g.f32(), g.f32() + g.numel());
    return ref;
  }
  auto partition = ModelPartition::Create(config, 1, 0);
  EXPECT_TRUE(partition.ok()) << partition.status().ToString();
  auto shards = MakeShards(*partition, m, &memory);
  EXPECT_TRUE(shards.ok()) << shards.status().ToString();
  ModelOptions mo;
  mo.store = shards->get();
  mo.partition = &*partition;
  auto model = Transformer::Create(config, kB, kT, &memory, mo);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  (*shards)->BeginStep();
  for (int k = 0; k < m; ++k) {
    (*shards)->BeginMicroBatch(k);
    ref.loss += (*model)->ForwardBackward(b.inputs.data() + k * tokens,
                                          b.targets.data() + k * tokens, 1.0f / m);
  }
  EXPECT_TRUE((*shards)->FinishGradients().ok());
  ref.grads = LocalGrads(**shards, *partition);  // one whole-model chunk: local == global
  return ref;
}

// Per global tensor: max |a - b| <= 1e-6 * max |b| (b: the store path's gradients).
void ExpectClose(const ModelConfig& config, const std::vector<float>& a,
                 const std::vector<float>& b, const char* what) {
  int64_t offset = 0;
  for (const ParamDecl& d : DeclareParameters(config)) {
    double worst = 0, scale = 0;
    for (int64_t i = offset; i < offset + d.shape.numel(); ++i) {
      worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
      scale = std::max(scale, std::fabs(double(b[i])));
    }
    EXPECT_LE(worst, 1e-6 * scale) << what << " " << d.name << ": max diff " << worst << " of "
                                   << scale;
    offset += d.shape.numel();
  }
}

struct RankResult {
  Status status = Status::Ok();
  double loss = 0;
  std::vector<float> local;  // reduced gradients, local flat order
  std::unique_ptr<ModelPartition> partition;
  double seconds = 0;  // TrainStep's wall time
};

struct PpCase {
  PipelineSchedule schedule;
  int p, m, v;
  int64_t layers;
  ModelFamily family;
};

// Sets up rank `stage` of the case and runs one step; `dead` ranks set up (the runner's
// Create is collective) and then never step, holding their communicators until `release`.
struct DeadGate {
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return released; });
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      released = true;
    }
    cv.notify_all();
  }
};

Status RunRank(const PpCase& c, const ModelConfig& config, const Batches& b, FakeHub& hub,
               double timeout_s, int stage, bool dead, DeadGate* gate, RankResult& out) {
  cpu::SetNumThreads(1);
  CommOptions co;
  co.name = "pp";
  co.timeout_s = timeout_s;
  std::unique_ptr<Communicator> pp = hub.Connect(stage, co);
  ASSIGN_OR_RETURN(auto chunks, PipelineChunks(config.num_layers, c.p, stage, c.v, {}));
  ASSIGN_OR_RETURN(ModelPartition partition, ModelPartition::Create(config, 1, 0, chunks));
  out.partition = std::make_unique<ModelPartition>(std::move(partition));
  MemoryTracker memory;
  ASSIGN_OR_RETURN(auto shards, MakeShards(*out.partition, c.m, &memory));
  PipelineOptions po;
  po.schedule = c.schedule;
  po.pp = c.p;
  po.stage = stage;
  po.virtual_stages = c.v;
  po.micro_batches = c.m;
  const std::vector<int> contexts = PipelineContextsPerChunk(po);
  std::vector<std::unique_ptr<Transformer>> models;
  std::vector<Transformer*> views;
  for (int k = 0; k < c.v; ++k) {
    ModelOptions mo;
    mo.store = shards.get();
    mo.partition = out.partition.get();
    mo.chunk = k;
    mo.contexts = contexts[static_cast<size_t>(k)];
    ASSIGN_OR_RETURN(auto model, Transformer::Create(config, kB, kT, &memory, mo));
    views.push_back(model.get());
    models.push_back(std::move(model));
  }
  ASSIGN_OR_RETURN(auto runner, PipelineRunner::Create(po, pp.get(), views, shards.get()));
  if (dead) {
    gate->Wait();  // a hung process: alive, never answering
    return Status::Ok();
  }
  shards->BeginStep();
  const auto t0 = std::chrono::steady_clock::now();
  auto loss = runner->TrainStep(b.inputs.data(), b.targets.data(), 1.0f / c.m);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!loss.ok()) return loss.status();
  out.loss = *loss;
  RETURN_IF_ERROR(shards->FinishGradients());
  RETURN_IF_ERROR(runner->SyncTiedEmbeddings());
  out.local = LocalGrads(*shards, *out.partition);
  return Status::Ok();
}

std::vector<RankResult> RunPipeline(const PpCase& c, const ModelConfig& config, const Batches& b,
                                    double timeout_s, int dead_rank = -1) {
  auto hub = FakeHub::Create(c.p);
  std::vector<RankResult> results(static_cast<size_t>(c.p));
  DeadGate gate;
  std::atomic<int> live_left{c.p - (dead_rank >= 0 ? 1 : 0)};
  std::vector<std::thread> threads;
  for (int r = 0; r < c.p; ++r) {
    threads.emplace_back([&, r] {
      RankResult& out = results[static_cast<size_t>(r)];
      out.status = RunRank(c, config, b, *hub, timeout_s, r, r == dead_rank, &gate, out);
      if (r != dead_rank && --live_left == 0) gate.Release();
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

std::string Name(const PpCase& c) {
  return std::string(PipelineScheduleName(c.schedule)) + " p" + std::to_string(c.p) + " m" +
         std::to_string(c.m) + " v" + std::to_string(c.v) + " L" + std::to_string(c.layers) +
         (c.family == ModelFamily::kGpt2 ? " gpt2 tied" : " llama untied");
}

std::string CaseName(const ::testing::TestParamInfo<PpCase>& info) {
  std::string s = Name(info.param);
  std::replace(s.begin(), s.end(), ' ', '_');
  return s;
}

class PipelineRunnerTest : public ::testing::TestWithParam<PpCase> {
 protected:
  void SetUp() override { before_ = cpu::SetNumThreads(1); }
  void TearDown() override { cpu::SetNumThreads(before_); }
  int before_ = 1;
};

TEST_P(PipelineRunnerTest, StepMatchesOneRank) {
  const PpCase c = GetParam();
  SCOPED_TRACE(Name(c));
  const ModelConfig config = Tiny(c.family, c.layers);
  const Batches b = MakeBatches(config.vocab_size, c.m);
  const Reference ref = RunOneRank(config, b, c.m, /*own_buffers=*/false);
  const Reference own = RunOneRank(config, b, c.m, /*own_buffers=*/true);
  ASSERT_EQ(ref.grads.size(), own.grads.size());
  // The store path and the model's own buffers: the same losses; gradients that differ only
  // in the order micro-batches are added (see the top).
  EXPECT_EQ(ref.loss, own.loss);
  ExpectClose(config, own.grads, ref.grads, "own buffers");

  std::vector<RankResult> ranks = RunPipeline(c, config, b, /*timeout_s=*/30);
  for (int r = 0; r < c.p; ++r) ASSERT_TRUE(ranks[r].status.ok()) << r << ": " << ranks[r].status.ToString();
  for (int r = 0; r + 1 < c.p; ++r) EXPECT_EQ(ranks[r].loss, 0.0) << "stage " << r;
  EXPECT_EQ(ranks[c.p - 1].loss, ref.loss);

  // Every global element from exactly one stage; tied copies collected apart.
  const int64_t n = static_cast<int64_t>(ref.grads.size());
  std::vector<float> got(n, 0.0f), copy(n, 0.0f);
  std::vector<int> seen(n, 0), copy_seen(n, 0);
  for (int r = 0; r < c.p; ++r) {
    const RankResult& rr = ranks[r];
    ASSERT_EQ(static_cast<int64_t>(rr.local.size()), rr.partition->num_local());
    rr.partition->ForEachGlobalPiece(
        0, rr.partition->num_local(), [&](const TpParam& p, int64_t gb, int64_t len, int64_t l) {
          for (int64_t k = 0; k < len; ++k) {
            const int64_t g = p.global_offset + gb + k;
            if (p.pipeline_copy()) {
              copy[g] = rr.local[l + k];
              ++copy_seen[g];
            } else {
              got[g] = rr.local[l + k];
              ++seen[g];
            }
          }
        });
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "global element " << i;
  int64_t copies = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (copy_seen[i] == 0) continue;
    ++copies;
    ASSERT_EQ(copy_seen[i], 1);
    // Both copies take the same step: the same bits.
    ASSERT_EQ(0, std::memcmp(&copy[i], &got[i], sizeof(float))) << "element " << i << ": copy "
                                                                  << copy[i] << " vs " << got[i];
  }
  EXPECT_EQ(copies > 0, config.tie_embeddings && c.p > 1);

  // Compare per global tensor: max |diff| relative to the tensor's largest gradient.
  int64_t offset = 0;
  for (const ParamDecl& d : DeclareParameters(config)) {
    const int64_t size = d.shape.numel();
    double worst = 0, scale = 0;
    for (int64_t i = offset; i < offset + size; ++i) {
      worst = std::max(worst, std::fabs(double(got[i]) - ref.grads[i]));
      scale = std::max(scale, std::fabs(double(ref.grads[i])));
    }
    const bool exact = 0 == std::memcmp(got.data() + offset, ref.grads.data() + offset,
                                        static_cast<size_t>(size) * sizeof(float));
    if (!config.tie_embeddings || d.kind != ParamKind::kEmbedding) {
      EXPECT_TRUE(exact) << d.name << ": max diff " << worst << " of " << scale;
    } else {
      EXPECT_LE(worst, 1e-6 * scale) << d.name << ": max diff " << worst << " of " << scale;
    }
    offset += size;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineRunnerTest,
    ::testing::Values(PpCase{PipelineSchedule::kGpipe, 2, 4, 1, 4, ModelFamily::kLlama},
                      PpCase{PipelineSchedule::kGpipe, 2, 4, 1, 4, ModelFamily::kGpt2},
                      PpCase{PipelineSchedule::k1F1B, 2, 4, 1, 4, ModelFamily::kLlama},
                      PpCase{PipelineSchedule::k1F1B, 2, 4, 1, 4, ModelFamily::kGpt2},
                      PpCase{PipelineSchedule::kInterleaved, 2, 4, 2, 4, ModelFamily::kLlama},
                      PpCase{PipelineSchedule::kInterleaved, 2, 4, 2, 4, ModelFamily::kGpt2},
                      PpCase{PipelineSchedule::k1F1B, 4, 4, 1, 4, ModelFamily::kLlama},
                      PpCase{PipelineSchedule::k1F1B, 4, 4, 1, 4, ModelFamily::kGpt2},
                      // Two blocks per chunk.
                      PpCase{PipelineSchedule::kInterleaved, 2, 4, 2, 8, ModelFamily::kLlama}),
    CaseName);

// The tied copy of the embeddings on the last stage is its last chunk's first unit; with two
// or more blocks in that chunk it once shared a block's ParamShards slot, whose Grads then
// overwrote the copy's open gradient buffer (wte off by half its largest gradient).
// ParamShardsOptions::embedding_units gives it the embedding slot; this case guards that.
INSTANTIATE_TEST_SUITE_P(
    TiedCopyKeepsItsSlot, PipelineRunnerTest,
    ::testing::Values(PpCase{PipelineSchedule::kInterleaved, 2, 4, 2, 8, ModelFamily::kGpt2}),
    CaseName);

// pp = 1 as the one-stage case (no pp group): the runner's TrainStep is the one-rank loop —
// the same loss and reduced gradients, bit for bit, as m BeginMicroBatch + ForwardBackward
// calls (RunOneRank's store path), its hook runs once per micro-batch, and Forward is the
// model's evaluation loss.
TEST(PipelineRunner, OneStageIsTheOneRankLoopBitForBit) {
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    const ModelConfig config = Tiny(family, 2);
    const int m = 3;
    const Batches b = MakeBatches(config.vocab_size, m);
    const Reference ref = RunOneRank(config, b, m, /*own_buffers=*/false);
    MemoryTracker memory;
    auto partition = ModelPartition::Create(config, 1, 0);
    ASSERT_TRUE(partition.ok());
    auto shards = MakeShards(*partition, m, &memory);
    ASSERT_TRUE(shards.ok());
    ModelOptions mo;
    mo.store = shards->get();
    mo.partition = &*partition;
    auto model = Transformer::Create(config, kB, kT, &memory, mo);
    ASSERT_TRUE(model.ok());
    PipelineOptions po;
    po.micro_batches = m;
    int hooks = 0;
    auto runner = PipelineRunner::Create(po, nullptr, {model->get()}, shards->get(), [&] { ++hooks; });
    ASSERT_TRUE(runner.ok()) << runner.status().ToString();
    (*shards)->BeginStep();
    auto loss = (*runner)->TrainStep(b.inputs.data(), b.targets.data(), 1.0f / m);
    ASSERT_TRUE(loss.ok()) << loss.status().ToString();
    ASSERT_TRUE((*shards)->FinishGradients().ok());
    ASSERT_TRUE((*runner)->SyncTiedEmbeddings().ok());  // nothing to sync on one stage
    EXPECT_EQ(hooks, m);
    EXPECT_EQ(*loss, ref.loss);
    const std::vector<float> grads = LocalGrads(**shards, *partition);
    ASSERT_EQ(grads.size(), ref.grads.size());
    EXPECT_EQ(std::memcmp(grads.data(), ref.grads.data(), grads.size() * sizeof(float)), 0)
        << ModelFamilyName(family);
    auto eval = (*runner)->Forward(b.inputs.data(), b.targets.data());
    ASSERT_TRUE(eval.ok());
    EXPECT_EQ(*eval, (*model)->Forward(b.inputs.data(), b.targets.data()));
  }
}

TEST(PipelineRunner, DeadNeighbourTimesOutInsteadOfHanging) {
  cpu::SetNumThreads(1);
  const PpCase c{PipelineSchedule::k1F1B, 4, 4, 1, 4, ModelFamily::kLlama};
  const ModelConfig config = Tiny(c.family, c.layers);
  const Batches b = MakeBatches(config.vocab_size, c.m);
  constexpr double kTimeoutS = 0.5;
  constexpr int kDead = 2;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<RankResult> ranks = RunPipeline(c, config, b, kTimeoutS, kDead);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < c.p; ++r) {
    if (r == kDead) {
      EXPECT_TRUE(ranks[r].status.ok()) << ranks[r].status.ToString();  // it set up, then hung
      continue;
    }
    const Status& s = ranks[r].status;
    ASSERT_FALSE(s.ok()) << "rank " << r << " stepped past a dead neighbour";
    EXPECT_TRUE(s.code() == StatusCode::kTimeout || s.code() == StatusCode::kAborted)
        << "rank " << r << ": " << s.ToString();
    EXPECT_NE(s.message().find("pp"), std::string::npos) << s.ToString();  // names the group
    // Each receive waits at most the timeout; a rank fails by its first unanswered receive.
    EXPECT_LT(ranks[r].seconds, 2 * c.p * kTimeoutS) << "rank " << r;
  }
  EXPECT_LT(total, 20.0);  // set-up, the waits and the runners' send drains: never a hang
}

TEST(PipelineRunner, ContextsPerChunkFollowTheSchedule) {
  PipelineOptions o;
  o.schedule = PipelineSchedule::k1F1B;
  o.pp = 4;
  o.micro_batches = 8;
  o.stage = 0;
  EXPECT_EQ(PipelineContextsPerChunk(o), std::vector<int>({4}));  // p - stage in flight
  o.stage = 3;
  EXPECT_EQ(PipelineContextsPerChunk(o), std::vector<int>({1}));
  o.schedule = PipelineSchedule::kGpipe;
  for (int stage = 0; stage < 4; ++stage) {
    o.stage = stage;
    EXPECT_EQ(PipelineContextsPerChunk(o), std::vector<int>({8})) << "stage " << stage;
  }
  // Interleaved: one entry per chunk, together at least what the stage holds at once.
  o.schedule = PipelineSchedule::kInterleaved;
  o.pp = 2;
  o.micro_batches = 4;
  o.virtual_stages = 2;
  o.stage = 0;
  const std::vector<int> ctx = PipelineContextsPerChunk(o);
  ASSERT_EQ(ctx.size(), 2u);
  EXPECT_GE(ctx[0] + ctx[1], MaxInFlight(o.schedule, 2, 4, 2, 0));
  for (int n : ctx) EXPECT_GE(n, 1);
}

}  // namespace
}  // namespace tessera
