// models/lora.cc — LoRA targets, names and rules (lora.h).
#include "models/lora.h"

#include <algorithm>

namespace tessera {
namespace {

// Every projection of the family, in site order, with its PEFT name(s).
struct Known {
  const char* name;      // the target name a config gives
  LoraTarget target;
};

std::vector<Known> FamilyTargets(const ModelConfig& c) {
  const int64_t C = c.hidden_size, F = c.ffn_size();
  if (c.family == ModelFamily::kGpt2) {
    return {{"c_attn", {"attn.c_attn", LoraSite::kQkv, C, 3 * C, 0, 3, false}},
            {"attn.c_proj", {"attn.c_proj", LoraSite::kProj, C, C, 0, 1, false}},
            {"c_fc", {"mlp.c_fc", LoraSite::kFc, C, F, 0, 1, true}},
            {"mlp.c_proj", {"mlp.c_proj", LoraSite::kOut, F, C, 0, 1, true}}};
  }
  const int64_t Q = c.num_heads * c.head_size(), KV = c.kv_heads() * c.head_size();
  return {{"q_proj", {"self_attn.q_proj", LoraSite::kQkv, C, Q, 0, 1, false}},
          {"k_proj", {"self_attn.k_proj", LoraSite::kQkv, C, KV, Q, 1, false}},
          {"v_proj", {"self_attn.v_proj", LoraSite::kQkv, C, KV, Q + KV, 1, false}},
          {"o_proj", {"self_attn.o_proj", LoraSite::kProj, Q, C, 0, 1, false}},
          {"gate_proj", {"mlp.gate_proj", LoraSite::kFc, C, F, 0, 1, true}},
          {"up_proj", {"mlp.up_proj", LoraSite::kFc, C, F, F, 1, true}},
          {"down_proj", {"mlp.down_proj", LoraSite::kOut, F, C, 0, 1, true}}};
}

std::vector<std::string> DefaultTargets(const ModelConfig& c) {
  if (c.family == ModelFamily::kGpt2) return {"c_attn"};
  return {"q_proj", "v_proj"};  // PEFT's default for Llama-style models
}

// Whether target name `given` selects projection `k` ("c_proj" selects both GPT-2 ones).
bool Selects(const std::string& given, const Known& k) {
  if (given == "all-linear" || given == k.name) return true;
  return given == "c_proj" && (std::string(k.name) == "attn.c_proj" || std::string(k.name) == "mlp.c_proj");
}

std::string KnownNames(const ModelConfig& c) {
  std::string names;
  for (const Known& k : FamilyTargets(c)) names += std::string(names.empty() ? "" : ", ") + k.name;
  if (c.family == ModelFamily::kGpt2) names += ", c_proj (both)";
  return names + ", all-linear";
}

}  // namespace

Result<std::vector<LoraTarget>> LoraTargets(const ModelConfig& config) {
  const std::vector<std::string> given =
      config.lora.targets.empty() ? DefaultTargets(config) : config.lora.targets;
  const std::vector<Known> known = FamilyTargets(config);
  for (const std::string& g : given) {
    if (std::none_of(known.begin(), known.end(), [&](const Known& k) { return Selects(g, k); })) {
      return InvalidArgument("finetune.lora.targets: \"" + g + "\" is not a projection of " +
                             ModelFamilyName(config.family) + " (one of " + KnownNames(config) +
                             "; routed experts are never adapted)");
    }
  }
  std::vector<LoraTarget> out;
  for (const Known& k : known) {
    if (std::any_of(given.begin(), given.end(), [&](const std::string& g) { return Selects(g, k); })) {
      out.push_back(k.target);
    }
  }
  return out;
}

std::vector<LoraTarget> LoraTargetsOf(const ModelConfig& config, int64_t layer) {
  Result<std::vector<LoraTarget>> all = LoraTargets(config);
  std::vector<LoraTarget> out;
  if (!all.ok()) return out;
  for (const LoraTarget& t : *all) {
    if (!t.mlp || !config.is_moe_layer(layer)) out.push_back(t);
  }
  return out;
}

int64_t LoraParams(const ModelConfig& config) {
  if (!config.lora.enabled()) return 0;
  int64_t n = 0;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    for (const LoraTarget& t : LoraTargetsOf(config, i)) n += config.lora.rank * (t.in + t.out);
  }
  return n;
}

std::string BlockPrefix(const ModelConfig& config, int64_t layer) {
  return (config.family == ModelFamily::kGpt2 ? "h." : "model.layers.") + std::to_string(layer) + ".";
}

std::vector<std::string> LoraModuleNames(const ModelConfig& config) {
  std::vector<std::string> names;
  Result<std::vector<LoraTarget>> all = LoraTargets(config);
  if (!all.ok()) return names;
  for (const LoraTarget& t : *all) {
    // GPT-2's two c_proj share the last name: PEFT's "c_proj" matches both, so name the pair
    // by their full suffixes to keep exactly the adapted ones.
    names.push_back(config.family == ModelFamily::kGpt2 ? t.module
                                                        : t.module.substr(t.module.find('.') + 1));
  }
  return names;
}

ModelConfig BaseModelConfig(const ModelConfig& config) {
  ModelConfig base = config;
  base.lora = LoraConfig();
  return base;
}

std::optional<ModelConfigProblem> CheckLora(const ModelConfig& c) {
  const LoraConfig& l = c.lora;
  if (!l.enabled()) return std::nullopt;
  auto broken = [](std::string key, std::string problem) {
    return ModelConfigProblem{{std::move(key)}, std::move(problem)};
  };
  if (l.rank > 4096) return broken("finetune.lora.rank", "must be in 0..4096 (0: no adapters), got " + std::to_string(l.rank));
  if (!(l.alpha > 0)) return broken("finetune.lora.alpha", "must be > 0, got " + std::to_string(l.alpha));
  if (!(l.dropout >= 0 && l.dropout < 1)) {
    return broken("finetune.lora.dropout", "must be in [0, 1), got " + std::to_string(l.dropout));
  }
  Result<std::vector<LoraTarget>> targets = LoraTargets(c);
  if (!targets.ok()) return broken("finetune.lora.targets", targets.status().message().substr(std::string("finetune.lora.targets: ").size()));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (LoraTargetsOf(c, i).empty()) {
      return broken("finetune.lora.targets",
                    "block " + std::to_string(i) + " is an MoE block and the targets adapt only "
                    "MLP projections, which its routed experts replace: add an attention "
                    "projection (every block carries an adapter)");
    }
  }
  return std::nullopt;
}

}  // namespace tessera
