// models/lora.h — low-rank adapters (finetune.lora, model_config.h): which projections of a
// block carry one, and how they are named and laid out (the forward and backward of a
// projection with its adapters are the block's: models/block_lora.cc).
//
// A target is one Hugging Face projection of every block (PEFT's target_modules names):
//   llama  q_proj k_proj v_proj o_proj gate_proj up_proj down_proj
//   gpt2   c_attn, c_fc, attn.c_proj, mlp.c_proj ("c_proj": both, as PEFT's suffix match)
//   "all-linear": every projection of the family.
// Routed experts are never targets (the MLP targets skip MoE blocks; every block must keep at
// least one adapter). Each target t of block i has two parameters, in the block's ADAPTER
// unit (param_store.h: L + 2 + num_moe_layers + i, after the expert units):
//   <module>.lora_A.weight (r, in)   init N(0, 1/sqrt(3 in)): the variance of PEFT's
//                                    kaiming_uniform(a = sqrt(5))
//   <module>.lora_B.weight (out, r)  init 0, so training starts at the base model
// with <module> the projection's HF module ("model.layers.3.self_attn.q_proj", "h.0.attn.c_attn").
// The block's fused GEMMs hold several projections ([q | k | v], [gate | up]): a target is a
// block of output rows of its site's GEMM, and adds to those rows only:
//   y[:, rows_t] += s * (drop(x) A_t^T) B_t^T,   s = alpha / r
// Tensor parallelism (partition.h): on a column-parallel site (qkv, fc) A is whole on every
// rank and B's rows split as the site's (c_attn: in three blocks); A's gradient is then a
// partial sum per rank, summed over tp by the block. On a row-parallel site (proj, out) A's
// input columns split as the site's and B is whole; u = x A^T is summed over tp (an (N, r)
// all-reduce) and tp rank 0 alone adds u B^T to its partial product before the site's sum.
// Pure values and functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "runtime/core/status.h"

namespace tessera {

// Stream id of LoRA's dropout masks: a step's key is StreamKey(seed, kLoraDropoutStream, data
// epoch, data index at the step's start), so a resumed run draws the masks it would have.
inline constexpr uint64_t kLoraDropoutStream = 0x6c6f7261;  // "lora"

// The block's four GEMMs: [q | k | v], the attention output, the first MLP projection
// ([gate | up] / c_fc), the second (down / mlp.c_proj).
enum class LoraSite { kQkv, kProj, kFc, kOut };

struct LoraTarget {
  std::string module;   // after the block prefix: "self_attn.q_proj", "attn.c_attn"
  LoraSite site = LoraSite::kQkv;
  int64_t in = 0;       // input features (global)
  int64_t out = 0;      // output rows (global)
  int64_t row0 = 0;     // its first row in the site's fused output (global)
  int64_t tp_blocks = 1;  // row blocks split alike under tp (c_attn: 3)
  bool mlp = false;     // absent from MoE blocks
  bool column() const { return site == LoraSite::kQkv || site == LoraSite::kFc; }
};

// The family's projections that `config.lora.targets` names (its default when empty), in site
// order; InvalidArgument naming an unknown name and the family's names. Ignores lora.rank.
Result<std::vector<LoraTarget>> LoraTargets(const ModelConfig& config);
// The targets that block `layer` carries (the MLP ones only in a dense block).
std::vector<LoraTarget> LoraTargetsOf(const ModelConfig& config, int64_t layer);
// The adapters' parameters in all: r (in + out) per target and block (0 without LoRA).
int64_t LoraParams(const ModelConfig& config);
// "model.layers.3." / "h.3.": the block's HF name prefix.
std::string BlockPrefix(const ModelConfig& config, int64_t layer);
// PEFT's target_modules for adapter_config.json: the projections' last names.
std::vector<std::string> LoraModuleNames(const ModelConfig& config);
// The config without adapters: the base model (its parameters are the LoRA model's first ones,
// in the same order and at the same flat offsets).
ModelConfig BaseModelConfig(const ModelConfig& config);

// The LoRA rules (rank, alpha, dropout ranges; known targets; every block keeps an adapter):
// nullopt or the first broken one. Called from ModelConfig::Check.
std::optional<ModelConfigProblem> CheckLora(const ModelConfig& config);

}  // namespace tessera
