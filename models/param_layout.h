// models/param_layout.h — the parameters of a GPT-2 or Llama model: Hugging Face names, shapes,
// roles (kind, tied), tensor-parallel splits and init rules, in flat-buffer order.
//
// A parameter's role and split are declared here, where it is created; nothing downstream
// (partition, optimizer groups, checkpoints, export) recovers them from its name.
// Owns the naming and ordering rules (models/README.md): embeddings, then each block, then the
// final norm, then the LM head when untied. Within a Llama block q_proj, k_proj, v_proj are
// adjacent (together one ((NH+2*NKV)*HS, C) matrix) and so are gate_proj, up_proj (one (2F, C)
// matrix), so each is ONE GEMM. Also owns the units (param_store.h) and the init values: a
// flat element's initial value is a pure function of (config, seed, index), so any range of
// the flat buffer can be initialised alone (a ZeRO-3 rank inits only its shard).
// Pure functions of the config; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "models/parameter.h"
#include "runtime/core/tensor.h"

namespace tessera {

enum class InitRule {
  kNormal,          // N(0, init_std)
  kResidualNormal,  // N(0, init_std / sqrt(2 * num_layers)): projections into the residual
  kZeros,           // biases
  kOnes,            // norm weights
  kLoraA,           // N(0, 1 / sqrt(3 * in)): a LoRA A matrix (models/lora.h)
};

// How a parameter splits over tensor-parallel ranks (models/partition.h has the Megatron
// rules): declared with the parameter, never recovered from its name.
enum class TpSplit : uint8_t {
  kReplicated,  // every tp rank holds it whole (norms, row-parallel biases, wpe)
  kRows,        // column-parallel: output rows split (in tp_blocks stacked blocks, each split)
  kCols,        // row-parallel: input columns split
  kVocab,       // vocab-parallel: vocabulary rows split, padded to equal shares
};

struct ParamDecl {
  std::string name;            // Hugging Face name, e.g. "h.0.attn.c_attn.weight"
  Shape shape;                 // our layout (nn.Linear: (out, in))
  // The parameter's role, declared here: kind decides weight decay (optimizer.decay_*).
  ParamKind kind = ParamKind::kMatrix;
  bool tied = false;           // the token embedding doubles as the LM head (tie_embeddings)
  TpSplit tp_split = TpSplit::kReplicated;
  int64_t tp_blocks = 1;       // kRows: stacked row blocks split alike (GPT-2 c_attn: q|k|v = 3)
  bool hf_transposed = false;  // GPT-2 Conv1D weights are (in, out) in HF files
  InitRule init = InitRule::kNormal;
  // A routed expert weight (model.moe): dim 0 is the global expert axis, split over the
  // expert-parallel ranks; it lives in its block's expert unit.
  bool expert = false;
  // finetune.lora: every base parameter is frozen (no gradient, no optimizer state, not in
  // checkpoints); the adapters, each block's in its adapter unit, are what trains.
  bool frozen = false;
  int unit = 0;                // 0 embeddings, 1 + l block l, L + 1 final norm [+ lm_head],
                               //   L + 2 + m the routed experts of the m-th MoE block,
                               //   L + 2 + M + l block l's adapters (M MoE blocks)
};

// Every parameter of the model, in buffer order. Assumes a validated config.
std::vector<ParamDecl> DeclareParameters(const ModelConfig& config);

// A llama-family MoE block's shared experts, after "model.layers.N.": "mlp.shared_experts."
// (DeepSeek's), or "mlp.shared_expert." under model.moe.shared_expert_gate (Qwen2-MoE's, whose
// gate is "mlp.shared_expert_gate.weight").
std::string SharedExpertPrefix(const ModelConfig& config);

// Weights that enter a matmul per token (all kMatrix parameters, plus the embedding when it
// doubles as the LM head; of the routed experts only the top_k / num_experts a token uses).
// Embedding lookups are not matmuls and are excluded.
int64_t MatmulParams(const ModelConfig& config);
// Of MatmulParams, the MoE blocks' share: routers, shared experts and the routed experts a
// token uses.
int64_t MoeMatmulParams(const ModelConfig& config);

// Stream id of parameter init: StreamKey(seed, kInitStream, parameter index).
inline constexpr uint64_t kInitStream = 0x696e6974;  // "init"

// Units of the model (param_store.h): num_layers + 2, plus one expert unit per MoE block,
// plus (finetune.lora) one adapter unit per block.
int NumUnits(const ModelConfig& config);
// The expert unit of block `layer` (an MoE block): L + 2 + its index among the MoE blocks.
int ExpertUnit(const ModelConfig& config, int64_t layer);
// The adapter unit of block `layer` (finetune.lora): L + 2 + M + layer.
int AdapterUnit(const ModelConfig& config, int64_t layer);

// Flat offsets of the units of param_store.h, NumUnits + 1 values: bounds[u] is where unit u
// begins (unit 0 = embeddings, 1 + l = block l, L + 1 = final norm [+ lm_head when untied],
// L + 2 + m = the m-th MoE block's routed experts, L + 2 + M + l = block l's adapters),
// bounds.back() == the number of
// parameters. Every unit is non-empty.
std::vector<int64_t> UnitBounds(const ModelConfig& config);

// out[i] = the initial value of flat element begin + i, for 0 <= begin <= end <= num_params,
// as Transformer::InitRandom(seed) sets it: element j of parameter p is draw j of the stream
// Rng(StreamKey(seed, kInitStream, p)) (a normal takes two counters, so Rng(key, 2j) yields
// it), scaled by the parameter's rule (N(0, init_std), N(0, init_std / sqrt(2 L)), 0 or 1).
// The same bits for any sub-range and thread count. Parallel (OpenMP) over chunks.
void InitParameterRange(const ModelConfig& config, uint64_t seed, int64_t begin, int64_t end,
                        float* out);

}  // namespace tessera
