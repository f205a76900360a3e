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
#include "runtime/kernels/rope_params.h"

namespace tessera {

enum class ModelFamily { kGpt2, kLlama };

// Which saved activations are kept for backward (see models/README.md):
//  kNone      keep everything the forward produced;
//  kSelective keep layer inputs and cheap-to-store tensors, recompute attention probabilities
//             and MLP hidden activations in backward (Megatron's "selective");
//  kFull      keep only each block's input; recompute the whole block in backward.
// Gradients are identical under all three.
enum class RecomputePolicy { kNone, kSelective, kFull };

// How a router turns logits into scores (model.moe.score).
enum class RouterScore { kSoftmax, kSigmoid };

// model.moe: a mixture of experts in place of the MLP of some blocks (Mixtral, Qwen2-MoE,
// DeepSeek-V3 style). Each MoE block has a router (E x C, no bias), E routed experts (an MLP
// each: SwiGLU for llama, GELU with biases for gpt2, of width expert_ffn()) and optionally
// shared experts (one MLP of width shared_experts * expert_ffn() applied to every token).
// A token's output is residual + sum over its k chosen experts of gate * expert(h), plus the
// shared experts' output. models/moe.h has the routing rules.
struct MoeConfig {
  int64_t num_experts = 0;        // model.moe.num_experts: E routed experts per MoE block;
                                  //   0 = a dense model; otherwise >= 2
  int64_t top_k = 2;              // model.moe.top_k: experts per token, 1..num_experts
  int64_t expert_ffn_size = 0;    // model.moe.expert_ffn_size: each expert's MLP width;
                                  //   0 = model.ffn_hidden_size's rule
  int64_t shared_experts = 0;     // model.moe.shared_experts: experts every token goes
                                  //   through (DeepSeek's), >= 0
  bool shared_expert_gate = false;  // model.moe.shared_expert_gate: the shared experts'
                                  //   output scaled per token by sigmoid(h . w_gate), w_gate
                                  //   (1, C) (Qwen2-MoE's, with its names mlp.shared_expert.*
                                  //   and mlp.shared_expert_gate); llama family, needs
                                  //   shared_experts >= 1
  int64_t first_dense_layers = 0; // model.moe.first_dense_layers: the first K blocks keep a
                                  //   dense MLP, 0..num_layers-1
  int64_t layer_interval = 1;     // model.moe.layer_interval: after those, every N-th block
                                  //   is an MoE block (1: all of them), >= 1
  RouterScore score = RouterScore::kSoftmax;  // model.moe.score: softmax | sigmoid
  bool normalize_gates = true;    // model.moe.normalize_gates: the k gates of a token divided
                                  //   by their sum (Mixtral, DeepSeek-V3: true; Qwen2-MoE: false)
  float route_scale = 1.0f;       // model.moe.route_scale: gates multiplied by this, > 0
  int64_t groups = 1;             // model.moe.groups: experts in G equal groups, each scored
                                  //   by the sum of its top 2 (DeepSeek's device/node-limited
                                  //   routing), divides num_experts
  int64_t groups_kept = 1;        // model.moe.groups_kept: groups a token may use, 1..groups;
                                  //   they must hold at least top_k experts
  float capacity_factor = 0.0f;   // model.moe.capacity_factor: 0 = dropless; else each expert
                                  //   takes at most ceil(tokens * k / E * factor) tokens, > 0
  float aux_loss = 0.0f;          // model.moe.aux_loss: Switch load-balancing loss coefficient
  float seq_aux_loss = 0.0f;      // model.moe.seq_aux_loss: sequence-wise variant (DeepSeek-V3)
  float z_loss = 0.0f;            // model.moe.z_loss: router z-loss coefficient
  float bias_update_rate = 0.0f;  // model.moe.bias_update_rate: aux-loss-free balancing: a
                                  //   per-expert bias added to the scores for selection only,
                                  //   moved by rate * sign(mean - count) after every step;
                                  //   0 = off. All four >= 0.

  bool enabled() const { return num_experts > 0; }
};

// finetune.lora: low-rank adapters (LoRA, Hu et al. 2021) on chosen projections of every
// block; the base model is then frozen: no gradients, no optimizer state, not in checkpoints
// (models/lora.h has the targets and the math). A projection y = W x becomes
// y = W x + (alpha / rank) * B A drop(x), A (rank, in), B (out, rank), B starting at zero.
struct LoraConfig {
  int64_t rank = 0;                  // finetune.lora.rank: r, 0 = no adapters, else 1..4096
  float alpha = 16.0f;               // finetune.lora.alpha: the update is scaled by alpha / r, > 0
  float dropout = 0.0f;              // finetune.lora.dropout: on the adapters' input, [0, 1)
  std::vector<std::string> targets;  // finetune.lora.targets: projection names (models/lora.h);
                                     //   empty = the family's default (q_proj, v_proj / c_attn)
  bool base_bf16 = false;            // finetune.lora.base_dtype: f32 | bf16 (the frozen base
                                     //   weights stored rounded to bf16: half the bytes)

  bool enabled() const { return rank > 0; }
  float scale() const { return alpha / static_cast<float>(rank); }
};

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
  int64_t head_dim = 0;            // model.head_dim: each attention head's width; 0 =
                                   //   hidden_size / num_heads. Another width (Mistral-Nemo,
                                   //   Qwen3: q/k/v project to heads x head_dim, o_proj back
                                   //   to hidden_size) is llama only; even, for RoPE
  int64_t num_kv_heads = 0;        // model.num_kv_heads: key/value heads (GQA); 0 = num_heads;
                                   //   must divide num_heads
  int64_t ffn_hidden_size = 0;     // model.ffn_hidden_size: MLP width; 0 = 4*hidden_size
                                   //   (gpt2) or the Llama rule 2/3*4C rounded up to 64 (llama)
  float norm_eps = 1e-5f;          // model.norm_eps: LayerNorm/RMSNorm epsilon, > 0
  float rope_theta = 10000.0f;     // model.rope_theta: RoPE base (llama only), > 0
  RopeScaling rope_scaling;        // model.rope_scaling: {type: none | linear | llama3, factor,
                                   //   low_freq_factor, high_freq_factor,
                                   //   original_max_position} (runtime/kernels/rope_params.h;
                                   //   llama only); default none
  int64_t sliding_window = 0;      // model.sliding_window: each token attends to itself and the
                                   //   W-1 tokens before it (Mistral's window); 0 = the whole
                                   //   causal context, >= 0
  bool qkv_bias = false;           // model.qkv_bias: biases on the q/k/v projections (Qwen2);
                                   //   llama only (gpt2's c_attn always has one)
  bool qk_norm = false;            // model.qk_norm: RMSNorm of every query and key head before
                                   //   RoPE, one weight of head_size per q and per k (Qwen3);
                                   //   llama only
  bool tie_embeddings = true;      // model.tie_embeddings: LM head shares wte; default true for
                                   //   gpt2, false for llama
  float init_std = 0.02f;          // model.init_std: std of the normal init of weights, > 0
  RecomputePolicy recompute = RecomputePolicy::kNone;  // model.recompute: none|selective|full
  MoeConfig moe;                   // model.moe: experts (default: none, a dense model)
  LoraConfig lora;                 // finetune.lora: adapters (default: none, full training)

  int64_t head_size() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }
  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int64_t ffn_size() const {
    if (ffn_hidden_size > 0) return ffn_hidden_size;
    if (family == ModelFamily::kGpt2) return 4 * hidden_size;
    int64_t h = 2 * 4 * hidden_size / 3;
    return (h + 63) / 64 * 64;
  }

  // Each expert's MLP width (model.moe.expert_ffn_size, or ffn_size()).
  int64_t expert_ffn() const { return moe.expert_ffn_size > 0 ? moe.expert_ffn_size : ffn_size(); }
  // Whether block `layer` has experts in place of its MLP.
  bool is_moe_layer(int64_t layer) const {
    return moe.enabled() && layer >= moe.first_dense_layers &&
           (layer - moe.first_dense_layers) % moe.layer_interval == 0;
  }
  // MoE blocks before block `layer` (its index among them when it is one); num_moe_layers():
  // all of them.
  int64_t moe_layers_before(int64_t layer) const;
  int64_t num_moe_layers() const { return moe_layers_before(num_layers); }

  // The first rule this config breaks (the ranges above, then the rules between keys, in that
  // order, so no rule divides by a zero an earlier one refuses), or nullopt.
  std::optional<ModelConfigProblem> Check() const;
  // Check as a Status: InvalidArgument("<first key>: <problem>").
  Status Validate() const;
};

const char* ModelFamilyName(ModelFamily f);
const char* RecomputePolicyName(RecomputePolicy p);
const char* RouterScoreName(RouterScore s);  // "softmax" "sigmoid"

}  // namespace tessera
