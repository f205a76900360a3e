// models/model_config.h — the shape of a decoder-only transformer, as typed config.
//
// Filled by runtime/train/config.cc from the `model:` section of a YAML config; each field
// documents its YAML key, meaning, default and range. Plain data. Its rules are written once,
// in ModelConfig::Check: the config loader reports a broken one at the keys' file:line:col, the
// model constructor (Validate) refuses a config that breaks one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/status.h"

namespace tessera {

enum class ModelFamily { kGpt2, kLlama };

// Which saved activations are kept for backward (see models/README.md):
//  kNone      keep everything the forward produced;
//  kSelective keep layer inputs and cheap-to-store tensors, recompute attention probabilities
//             and MLP hidden activations in backward (Megatron's "selective");
//  kFull      keep only each block's input; recompute the whole block in backward.
// Gradients are identical under all three.
enum class RecomputePolicy { kNone, kSelective, kFull };

// A broken rule: the YAML keys it involves, most specific first ("model.num_heads"), and the
// problem in words ("num_heads=3 does not divide hidden_size=64").
struct ModelConfigProblem {
  std::vector<std::string> keys;
  std::string problem;
};

struct ModelConfig {
  ModelFamily family = ModelFamily::kGpt2;  // model.family: gpt2 | llama
  int64_t vocab_size = 256;        // model.vocab_size: tokens in the vocabulary, >= 2
  int64_t max_seq_len = 128;       // model.max_seq_len: longest sequence (GPT-2 n_positions), >= 1
  int64_t num_layers = 2;          // model.num_layers: transformer blocks, >= 1
  int64_t hidden_size = 64;        // model.hidden_size: C, divisible by num_heads
  int64_t num_heads = 4;           // model.num_heads: query heads, >= 1
  int64_t num_kv_heads = 0;        // model.num_kv_heads: key/value heads (GQA); 0 = num_heads;
                                   //   must divide num_heads
  int64_t ffn_hidden_size = 0;     // model.ffn_hidden_size: MLP width; 0 = 4*hidden_size
                                   //   (gpt2) or the Llama rule 2/3*4C rounded up to 64 (llama)
  float norm_eps = 1e-5f;          // model.norm_eps: LayerNorm/RMSNorm epsilon, > 0
  float rope_theta = 10000.0f;     // model.rope_theta: RoPE base (llama only), > 0
  bool tie_embeddings = true;      // model.tie_embeddings: LM head shares wte; default true for
                                   //   gpt2, false for llama
  float init_std = 0.02f;          // model.init_std: std of the normal init of weights, > 0
  RecomputePolicy recompute = RecomputePolicy::kNone;  // model.recompute: none|selective|full

  int64_t head_size() const { return hidden_size / num_heads; }
  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int64_t ffn_size() const {
    if (ffn_hidden_size > 0) return ffn_hidden_size;
    if (family == ModelFamily::kGpt2) return 4 * hidden_size;
    int64_t h = 2 * 4 * hidden_size / 3;
    return (h + 63) / 64 * 64;
  }

  // The first rule this config breaks (the ranges above, then the rules between keys, in that
  // order, so no rule divides by a zero an earlier one refuses), or nullopt.
  std::optional<ModelConfigProblem> Check() const;
  // Check as a Status: InvalidArgument("<first key>: <problem>").
  Status Validate() const;
};

const char* ModelFamilyName(ModelFamily f);
const char* RecomputePolicyName(RecomputePolicy p);

}  // namespace tessera
