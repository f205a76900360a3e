// models/hf_layout.cc — HF tensor names and layouts of Tessera's parameters (hf_layout.h).
#include "models/hf_layout.h"

#include <set>

#include "models/quote.h"

namespace tessera {
namespace {

// "model.layers.3.mlp.experts.gate_up_proj" -> "model.layers.3." (empty if not a layer name).
std::string LayerPrefix(const std::string& name) {
  const size_t at = name.find(".mlp.");
  return at == std::string::npos ? std::string() : name.substr(0, at + 1);
}

// True if name == prefix + <layer index < num_layers> + suffix.
bool MatchesLayerPattern(std::string_view name, std::string_view prefix, std::string_view suffix,
                         int64_t num_layers) {
  if (name.size() <= prefix.size() + suffix.size()) return false;
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return false;
  std::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) return false;
  int64_t layer = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    layer = layer * 10 + (c - '0');
  }
  return layer < num_layers;
}

}  // namespace

Shape HfShape(const Parameter& p) {
  if (!p.hf_transposed) return p.spec.global_shape;
  return Shape{p.spec.global_shape[1], p.spec.global_shape[0]};
}

// A caller bug otherwise, but reported as a Status because this sits on a user-facing path.
Status CheckHfParams(std::span<const Parameter> params, bool values) {
  std::set<std::string_view> seen;
  for (const Parameter& p : params) {
    const std::string where = "parameter " + Quote(p.name());
    if (!seen.insert(p.name()).second) return InvalidArgument("duplicate " + where);
    if (!p.spec.IsWhole()) {
      return InvalidArgument(where + ": holds a slice (" + p.spec.ToString() +
                             "): HF import/export takes whole tensors (gather them first)");
    }
    if (p.hf_transposed && p.spec.global_shape.rank() != 2) {
      return InvalidArgument(where + ": hf_transposed needs a 2-D shape, got " +
                             p.spec.global_shape.ToString());
    }
    if (!values) continue;
    if (p.value.empty() && p.spec.global_shape.numel() > 0) {
      return InvalidArgument(where + ": no value buffer");
    }
    if (p.value.dtype() != DType::kF32 || p.value.device() != Device::kCpu) {
      return InvalidArgument(where + ": value must be an f32 CPU tensor");
    }
    if (p.value.numel() != p.spec.global_shape.numel()) {
      return InvalidArgument(where + ": value has " + std::to_string(p.value.numel()) +
                             " elements, spec shape " + p.spec.global_shape.ToString());
    }
  }
  return Status::Ok();
}

std::vector<HfTensor> HfLayout(const ModelConfig& config, std::span<const Parameter> params,
                               HfMoeNames dialect) {
  std::vector<HfTensor> out;
  const bool llama = config.family == ModelFamily::kLlama;
  const int64_t E = config.moe.num_experts, Fe = config.expert_ffn(), C = config.hidden_size;
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = params[i];
    const std::string& name = p.name();
    const bool mixtral = llama && dialect == HfMoeNames::kMixtral;
    if (mixtral && name.ends_with(".mlp.gate.weight")) {
      out.push_back({LayerPrefix(name) + "block_sparse_moe.gate.weight", p.spec.global_shape, i});
      continue;
    }
    if (!llama || name.find(".mlp.experts.") == std::string::npos) {
      out.push_back({name, HfShape(p), i, 0, p.hf_transposed});
      continue;
    }
    const std::string layer = LayerPrefix(name);
    const std::string experts = layer + (mixtral ? "block_sparse_moe.experts." : "mlp.experts.");
    const bool gate_up = name.ends_with("experts.gate_up_proj");
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = experts + std::to_string(e) + ".";
      if (gate_up) {  // (E, 2Fe, C): expert e's [gate | up] rows
        out.push_back({x + (mixtral ? "w1.weight" : "gate_proj.weight"), Shape{Fe, C}, i, e * 2 * Fe * C});
        out.push_back({x + (mixtral ? "w3.weight" : "up_proj.weight"), Shape{Fe, C}, i, e * 2 * Fe * C + Fe * C});
      } else {        // (E, C, Fe)
        out.push_back({x + (mixtral ? "w2.weight" : "down_proj.weight"), Shape{C, Fe}, i, e * C * Fe});
      }
    }
  }
  return out;
}

HfMoeNames HfDialectOf(std::span<const std::string> names) {
  for (const std::string& name : names) {
    if (name.find(".block_sparse_moe.") != std::string::npos) return HfMoeNames::kMixtral;
  }
  return HfMoeNames::kQwenMoe;
}

bool HfIgnorable(std::string_view name, const ModelConfig& config) {
  if (config.tie_embeddings && name == "lm_head.weight") return true;
  if (config.family == ModelFamily::kGpt2) {
    return MatchesLayerPattern(name, "h.", ".attn.bias", config.num_layers) ||
           MatchesLayerPattern(name, "h.", ".attn.masked_bias", config.num_layers);
  }
  return MatchesLayerPattern(name, "model.layers.", ".self_attn.rotary_emb.inv_freq",
                             config.num_layers);
}

std::vector<std::string> HfMoeBiasNames(const ModelConfig& config) {
  std::vector<std::string> names;
  const bool gpt2 = config.family == ModelFamily::kGpt2;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    if (!config.is_moe_layer(l)) continue;
    names.push_back(gpt2 ? "h." + std::to_string(l) + ".mlp.router.e_score_correction_bias"
                         : "model.layers." + std::to_string(l) + ".mlp.gate.e_score_correction_bias");
  }
  return names;
}

}  // namespace tessera
