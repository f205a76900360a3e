// tests/testing/tiny_model.h — the tiny dense models and the random token batches that the
// model-level tests share (the transformer, its parameter stores, tensor and pipeline
// parallelism, the measuring backend): small enough for finite differences and for many ranks
// in one process. Test-only; header-only.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "models/transformer.h"

namespace tessera::testing {

// hidden 16 in 4 heads, sequences up to 16; Llama with GQA (2 KV heads) and an FFN of 24.
inline ModelConfig TinyDense(ModelFamily family, int layers, int64_t vocab, bool tied,
                             RecomputePolicy policy, float init_std = 0.2f) {
  ModelConfig c;
  c.family = family;
  c.vocab_size = vocab;
  c.max_seq_len = 16;
  c.num_layers = layers;
  c.hidden_size = 16;
  c.num_heads = 4;
  c.num_kv_heads = family == ModelFamily::kLlama ? 2 : 0;
  c.ffn_hidden_size = family == ModelFamily::kLlama ? 24 : 0;
  c.tie_embeddings = tied;
  c.init_std = init_std;
  c.recompute = policy;
  return c;
}

struct TokenBatch {
  std::vector<int32_t> inputs, targets;
};

// n input and target tokens below V from `seed`; the targets at i % ignore_every == ignore_at
// are -1, which the loss must skip (ignore_every 0: none is).
inline TokenBatch RandomTokens(int64_t n, int64_t V, uint32_t seed, int ignore_every,
                               int ignore_at) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
  TokenBatch b;
  for (int64_t i = 0; i < n; ++i) {
    b.inputs.push_back(tok(gen));
    b.targets.push_back(ignore_every > 0 && i % ignore_every == ignore_at ? -1 : tok(gen));
  }
  return b;
}

}  // namespace tessera::testing
