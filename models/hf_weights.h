// models/hf_weights.h — Hugging Face weight import/export for Tessera models.
//
// Parameter names already are the family's HF names (models/parameter.h), so import is a
// lookup plus two translations: GPT-2 files may prefix names with "transformer." (as
// GPT2LMHeadModel.save_pretrained does), and GPT-2's Conv1D weights (Parameter::hf_transposed)
// are (in, out) in HF files but (out, in) in Tessera.
//
// Import is all-or-nothing with respect to the file's contents: every name, shape and dtype is
// validated before the first byte is written into a parameter, so a wrong file never leaves a
// half-loaded model. Only an I/O failure during the copy itself (the file changed or the disk
// failed after validation) can leave parameters partly written; that Status says so.
// Thread-safety: none; the caller owns `params` for the duration of the call.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "models/parameter.h"
#include "models/safetensors.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

namespace tessera {

// How a Llama-family MoE model's routed experts are named in HF files: Mixtral's
// (block_sparse_moe.gate, block_sparse_moe.experts.N.w1/w2/w3) or Qwen2-MoE's / DeepSeek's
// (mlp.gate, mlp.experts.N.{gate,up,down}_proj; DeepSeek's mlp.shared_experts.*). Tessera keeps them
// stacked on the expert axis (param_layout.h); import and export split them per expert.
// GPT-2-family experts have no HF convention and keep Tessera's stacked names.
enum class HfMoeNames { kMixtral, kQwenMoe };
// What an export writes: Mixtral's names for a model that computes exactly what HF's Mixtral
// does (softmax, renormalised gates, route scale 1, no shared experts, no groups, no routing
// bias), the others' otherwise. Import reads either.
HfMoeNames DefaultHfMoeNames(const ModelConfig& config);

// What an HF file may hold beyond the parameters.
struct HfExtras {
  // The routing bias of every MoE block, in layer order (DeepSeek-V3's
  // "model.layers.L.mlp.gate.e_score_correction_bias", E each); empty when the file has none.
  std::vector<std::vector<float>> moe_bias;
};

// Loads HF weights into `params` (whole, f32, CPU tensors). `path` is a .safetensors file, a
// model.safetensors.index.json, or a directory holding model.safetensors or
// model.safetensors.index.json (the single file wins if both exist).
// Tensors in F32, F16 or BF16 are converted to f32. Ignored without complaint: GPT-2's causal
// mask buffers "h.{i}.attn.bias" / "h.{i}.attn.masked_bias", Llama's
// "model.layers.{i}.self_attn.rotary_emb.inv_freq", and "lm_head.weight" when
// config.tie_embeddings. Errors: kNotFound (no file), kDataLoss (malformed file), and
// kInvalidArgument naming file and tensor for missing tensors, unexpected tensors, shape or
// dtype mismatches. An MoE model's experts are read per expert in either dialect (above).
// With `extras`, the MoE blocks' routing-bias tensors are read into it (all blocks' or none);
// without, a file holding them is refused (ignoring a routing bias would route differently).
Status LoadHfWeights(const std::string& path, const ModelConfig& config,
                     std::span<Parameter> params, HfExtras* extras = nullptr);

// Writes `params` as one safetensors file at `path` with HF names (no "transformer." prefix,
// like the hub's gpt2 model.safetensors) and HF layouts (hf_transposed weights back to
// (in, out)), stored as `dtype` (kF32, kBF16 or kF16), with metadata {"format": "pt"}.
// When config.tie_embeddings no "lm_head.weight" is written (HF drops the shared tensor);
// a parameter of that name under a tied config is kInvalidArgument. Atomic (temp + rename).
// Loading an f32 export gives bit-identical parameters. An MoE model's experts are written per
// expert (DefaultHfMoeNames); `extras` adds the routing bias (always f32) unless it is all zero.
Status ExportHfWeights(const std::string& path, const ModelConfig& config,
                       std::span<const Parameter> params, DType dtype = DType::kF32,
                       const HfExtras* extras = nullptr);

// What an export writes, tensor by tensor in model order (embeddings, blocks in layer order,
// the rest), each pointing into `params`, `extras` or `owned`; ExportHfWeights writes them as
// one file, ExportHfModelDir (hf_export.h) as shards. `where` names the output in errors.
struct HfExportTensors {
  std::vector<SafetensorsTensorOut> tensors;
  std::vector<std::vector<float>> owned;  // transposed copies the tensors point into
  bool routing_bias = false;              // a non-zero MoE routing bias is written
  HfMoeNames moe_names = HfMoeNames::kMixtral;
};
Result<HfExportTensors> CollectHfExport(const std::string& where, const ModelConfig& config,
                                        std::span<const Parameter> params, DType dtype,
                                        const HfExtras* extras);

}  // namespace tessera
