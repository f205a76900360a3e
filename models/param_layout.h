// models/param_layout.h — the parameters of a GPT-2 or Llama model: Hugging Face names, shapes,
// kinds and init rules, in flat-buffer order.
//
// Owns the naming and ordering rules (models/README.md): embeddings, then each block, then the
// final norm, then the LM head when untied. Within a Llama block q_proj, k_proj, v_proj are
// adjacent (together one ((NH+2*NKV)*HS, C) matrix) and so are gate_proj, up_proj (one (2F, C)
// matrix), so each is ONE GEMM. Pure functions of the config; thread-safe.
#pragma once

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
};

struct ParamDecl {
  std::string name;            // Hugging Face name, e.g. "h.0.attn.c_attn.weight"
  Shape shape;                 // our layout (nn.Linear: (out, in))
  ParamKind kind = ParamKind::kMatrix;
  bool hf_transposed = false;  // GPT-2 Conv1D weights are (in, out) in HF files
  InitRule init = InitRule::kNormal;
};

// Every parameter of the model, in buffer order. Assumes a validated config.
std::vector<ParamDecl> DeclareParameters(const ModelConfig& config);

// Weights that enter a matmul (all kMatrix parameters, plus the embedding when it doubles as
// the LM head). Embedding lookups are not matmuls and are excluded.
int64_t MatmulParams(const ModelConfig& config);

}  // namespace tessera
