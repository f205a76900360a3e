// models/hf_weights_export.cc — Parameters -> HF tensors (CollectHfExport) and one HF
// safetensors file (ExportHfWeights). See hf_weights.h for the contracts.
#include "models/hf_layout.h"
#include "models/hf_weights.h"

namespace tessera {

HfMoeNames DefaultHfMoeNames(const ModelConfig& config) {
  const MoeConfig& e = config.moe;
  // Exactly what HF's Mixtral block computes: softmax, top-k renormalised, nothing else.
  // Qwen3-MoE (q/k norms) routes the same way but names its experts as Qwen2-MoE does.
  const bool mixtral = e.score == RouterScore::kSoftmax && e.normalize_gates &&
                       e.route_scale == 1.0f && e.shared_experts == 0 && e.groups == 1 &&
                       !config.qk_norm;
  return mixtral ? HfMoeNames::kMixtral : HfMoeNames::kQwenMoe;
}

Result<HfExportTensors> CollectHfExport(const std::string& where, const ModelConfig& config,
                                        std::span<const Parameter> params, DType dtype,
                                        const HfExtras* extras) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return InvalidArgument(where + ": HF export dtype must be f32, bf16 or f16, got " +
                           std::string(DTypeName(dtype)));
  }
  RETURN_IF_ERROR(CheckHfParams(params, /*values=*/true));
  for (const Parameter& p : params) {
    if (config.tie_embeddings && p.name() == "lm_head.weight") {
      return InvalidArgument(where + ": parameter 'lm_head.weight' exists but the config ties "
                             "embeddings");
    }
  }
  HfExportTensors out;
  if (extras != nullptr) {  // an all-zero bias is no bias: not written
    for (const std::vector<float>& row : extras->moe_bias) {
      for (float v : row) out.routing_bias |= v != 0.0f;
    }
  }
  // A routing bias is DeepSeek's: Mixtral's names would hide that the routing differs.
  out.moe_names = out.routing_bias ? HfMoeNames::kQwenMoe : DefaultHfMoeNames(config);
  const std::vector<HfTensor> layout = HfLayout(config, params, out.moe_names);
  out.owned.reserve(layout.size());  // (in, out) copies of Conv1D weights; never reallocated
  for (const HfTensor& h : layout) {
    SafetensorsTensorOut t;
    t.name = h.name;
    t.shape = h.shape;
    t.source_dtype = DType::kF32;
    t.dtype = dtype;
    const Parameter& p = params[h.param];
    t.data = p.value.f32() + h.offset;
    if (h.transposed) {
      const int64_t rows = p.spec.global_shape[0], cols = p.spec.global_shape[1];
      const float* src = p.value.f32();  // (out, in)
      std::vector<float>& dst = out.owned.emplace_back(static_cast<size_t>(cols * rows));
      for (int64_t o = 0; o < rows; ++o) {
        for (int64_t i = 0; i < cols; ++i) dst[static_cast<size_t>(i * rows + o)] = src[o * cols + i];
      }
      t.data = dst.data();
    }
    out.tensors.push_back(std::move(t));
  }
  if (!out.routing_bias) return out;
  const std::vector<std::string> bias_names = HfMoeBiasNames(config);
  if (extras->moe_bias.size() != bias_names.size()) {
    return InvalidArgument(where + ": " + std::to_string(extras->moe_bias.size()) +
                           " MoE bias rows for " + std::to_string(bias_names.size()) +
                           " MoE blocks");
  }
  for (size_t i = 0; i < bias_names.size(); ++i) {
    SafetensorsTensorOut t;
    t.name = bias_names[i];
    t.shape = Shape{static_cast<int64_t>(extras->moe_bias[i].size())};
    t.source_dtype = DType::kF32;
    t.dtype = DType::kF32;  // a selection bias: kept exact whatever the weights' dtype
    t.data = extras->moe_bias[i].data();
    out.tensors.push_back(std::move(t));
  }
  return out;
}

Status ExportHfWeights(const std::string& path, const ModelConfig& config,
                       std::span<const Parameter> params, DType dtype, const HfExtras* extras) {
  ASSIGN_OR_RETURN(HfExportTensors out, CollectHfExport(path, config, params, dtype, extras));
  return WriteSafetensors(path, out.tensors, {{"format", "pt"}});
}

}  // namespace tessera
