// models/hf_layout.h — where each tensor of a Hugging Face weights file lives in Tessera's
// parameters: the one mapping that import (hf_weights.cc) and export (hf_weights_export.cc)
// share. Internal to models/; callers use hf_weights.h.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/hf_weights.h"

namespace tessera {

// One tensor of an HF file and where it lives in Tessera: a parameter whole, or (routed experts,
// stacked on the expert axis in Tessera) one expert's block of it, contiguous at `offset`.
struct HfTensor {
  std::string name;
  Shape shape;              // in the file
  size_t param = 0;         // index in the parameter list
  int64_t offset = 0;       // elements into its value
  bool transposed = false;  // GPT-2 Conv1D: (in, out) in the file, (out, in) in Tessera
};

// HF layout of a parameter: its global shape, or the 2-D transpose for Conv1D weights.
Shape HfShape(const Parameter& p);

// The parameters' specs are usable for HF import/export: unique names, whole tensors (global
// shapes), hf_transposed only on 2-D shapes. With `values`, also whole f32 CPU value buffers.
Status CheckHfParams(std::span<const Parameter> params, bool values);

// Every HF tensor of `params` (CheckHfParams passed). Llama-family MoE blocks are written per
// expert in one of the two HF dialects:
//   kMixtral   block_sparse_moe.gate.weight, block_sparse_moe.experts.N.{w1 (gate), w3 (up),
//              w2 (down)}.weight
//   kQwenMoe   mlp.gate.weight, mlp.experts.N.{gate,up,down}_proj.weight (Qwen2-MoE's and
//              DeepSeek's routed experts), the shared experts under their own names
// GPT-2-family experts have no HF convention: their stacked tensors keep Tessera's names.
std::vector<HfTensor> HfLayout(const ModelConfig& config, std::span<const Parameter> params,
                               HfMoeNames dialect);

// The dialect of a file's MoE tensor names (Mixtral's when it has a block_sparse_moe tensor).
HfMoeNames HfDialectOf(std::span<const std::string> names);

// Buffers HF files carry that are not parameters (recomputed by Tessera), and the tied head.
bool HfIgnorable(std::string_view name, const ModelConfig& config);

// The MoE blocks' routing-bias tensor names (DeepSeek-V3's e_score_correction_bias beside the
// router, one per MoE block), in layer order.
std::vector<std::string> HfMoeBiasNames(const ModelConfig& config);

}  // namespace tessera
