// tests/testing/tiny_replica.h — a tiny GPT-2 whose parameters live in a ParamShards (the
// trainer's store), for unit tests of the data-parallel state and of checkpoints: the model,
// its decay ranges, deterministic tokens, and one rank's replica built on a communicator (null:
// one process). Test-only; header-only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "models/param_layout.h"
#include "models/transformer.h"
#include "runtime/train/param_shards.h"

namespace tessera::testing {

inline constexpr int64_t kTinyB = 2, kTinyT = 8;  // micro-batch shape
inline constexpr uint64_t kTinySeed = 5;

inline ModelConfig TinyGpt2(int layers, int64_t hidden, bool tied) {
  ModelConfig c;
  c.family = ModelFamily::kGpt2;
  c.vocab_size = 40;
  c.max_seq_len = kTinyT;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_heads = 2;
  c.tie_embeddings = tied;
  return c;
}

// Flat ranges of the model's parameters; weight decay on matrices only.
inline std::vector<ParamRange> TinyRanges(const ModelConfig& c) {
  std::vector<ParamRange> r;
  int64_t off = 0;
  for (const ParamDecl& d : DeclareParameters(c)) {
    r.push_back({off, d.shape.numel(), d.kind == ParamKind::kMatrix, d.name});
    off += d.shape.numel();
  }
  return r;
}

// Micro-batch k's tokens (deterministic).
inline void TinyTokens(int64_t k, std::vector<int32_t>& in, std::vector<int32_t>& tgt) {
  in.resize(kTinyB * kTinyT);
  tgt.resize(kTinyB * kTinyT);
  for (int64_t i = 0; i < kTinyB * kTinyT; ++i) {
    in[i] = static_cast<int32_t>((i * 7 + k * 13 + 3) % 40);
    tgt[i] = static_cast<int32_t>((i * 11 + k * 5 + 1) % 40);
  }
}

struct Replica {
  MemoryTracker memory;
  std::unique_ptr<ParamShards> shards;
  std::unique_ptr<Transformer> model;
};

// One rank's replica: ParamShards (AdamW lr 1e-2, buckets of 300 elements so zero 0/1 use
// several) initialised from `seed`, and the model on top of it. Null (with a test failure) if
// either cannot be built. `disk`: its optimizer state on disk (optimizer.offload: nvme).
inline std::unique_ptr<Replica> BuildReplica(const ModelConfig& c, int zero, DType dtype,
                                             Communicator* comm, int64_t accum = 1,
                                             uint64_t seed = kTinySeed,
                                             std::optional<ShardedAdamWDisk> disk = std::nullopt) {
  auto r = std::make_unique<Replica>();
  ParamShardsOptions o;
  o.disk = std::move(disk);
  o.zero = zero;
  o.param_dtype = dtype;
  o.grad_accum_steps = accum;
  o.bucket_elems = 300;
  AdamWConfig adamw;
  adamw.lr = 1e-2f;
  auto shards = ParamShards::Create(o, adamw, UnitBounds(c), TinyRanges(c), comm, &r->memory);
  EXPECT_TRUE(shards.ok()) << shards.status().ToString();
  if (!shards.ok()) return nullptr;
  r->shards = std::move(*shards);
  EXPECT_TRUE(r->shards->Load([&](int64_t b, int64_t e, float* out) { InitParameterRange(c, seed, b, e, out); }).ok());
  ModelOptions mo;
  mo.store = r->shards.get();
  mo.activation_dtype = dtype;
  auto model = Transformer::Create(c, kTinyB, kTinyT, &r->memory, mo);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return nullptr;
  r->model = std::move(*model);
  return r;
}

}  // namespace tessera::testing
