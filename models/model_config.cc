// models/model_config.cc — the rules of a model config (one copy, for the config loader and
// the model) and the names of the model enums, as written in YAML.
#include "models/model_config.h"

#include "models/lora.h"

#include <cstdio>

namespace tessera {
namespace {

std::string N(int64_t v) { return std::to_string(v); }

std::string F(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

std::optional<ModelConfigProblem> Broken(std::vector<std::string> keys, std::string problem) {
  return ModelConfigProblem{std::move(keys), std::move(problem)};
}

// The per-key ranges, worded as the config loader words a range (config.cc).
std::optional<ModelConfigProblem> CheckRanges(const ModelConfig& m) {
  const bool llama = m.family == ModelFamily::kLlama;
  if (m.vocab_size < 2) return Broken({"model.vocab_size"}, "must be >= 2, got " + N(m.vocab_size));
  if (m.max_seq_len < 1) return Broken({"model.max_seq_len"}, "must be >= 1, got " + N(m.max_seq_len));
  if (m.num_layers < 1) return Broken({"model.num_layers"}, "must be >= 1, got " + N(m.num_layers));
  if (m.hidden_size < 1) return Broken({"model.hidden_size"}, "must be >= 1, got " + N(m.hidden_size));
  if (m.num_heads < 1) return Broken({"model.num_heads"}, "must be >= 1, got " + N(m.num_heads));
  if (m.head_dim < 0) return Broken({"model.head_dim"}, "must be >= 0 (0: hidden_size / num_heads), got " + N(m.head_dim));
  if (m.num_kv_heads < 0) {
    return Broken({"model.num_kv_heads"}, "must be >= 0, got " + N(m.num_kv_heads));
  }
  if (m.ffn_hidden_size < 0) {
    return Broken({"model.ffn_hidden_size"}, "must be >= 0, got " + N(m.ffn_hidden_size));
  }
  if (!(m.norm_eps > 0)) return Broken({"model.norm_eps"}, "must be > 0, got " + F(m.norm_eps));
  if (llama && !(m.rope_theta > 0)) {
    return Broken({"model.rope_theta"}, "must be > 0, got " + F(m.rope_theta));
  }
  if (m.sliding_window < 0) {
    return Broken({"model.sliding_window"}, "must be >= 0 (0: no window), got " + N(m.sliding_window));
  }
  if (!llama && m.qk_norm) {
    return Broken({"model.qk_norm", "model.family"}, "is a llama-family option (Qwen3's)");
  }
  if (!llama && m.qkv_bias) {
    return Broken({"model.qkv_bias", "model.family"},
                  "is a llama-family option: gpt2's c_attn always has its bias");
  }
  if (!(m.init_std > 0)) return Broken({"model.init_std"}, "must be > 0, got " + F(m.init_std));
  const RopeScaling& r = m.rope_scaling;
  if (r.type != RopeScalingType::kNone && !(r.factor > 0)) {
    return Broken({"model.rope_scaling.factor"}, "must be > 0, got " + F(r.factor));
  }
  if (r.type == RopeScalingType::kLlama3) {
    if (!(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor)) {
      return Broken({"model.rope_scaling.high_freq_factor", "model.rope_scaling.low_freq_factor"},
                    "llama3 needs 0 < low_freq_factor < high_freq_factor, got " +
                        F(r.low_freq_factor) + " and " + F(r.high_freq_factor));
    }
    if (r.original_max_position < 1) {
      return Broken({"model.rope_scaling.original_max_position"},
                    "must be >= 1, got " + N(r.original_max_position));
    }
  }
  return std::nullopt;
}

// model.moe's ranges and the rules between its keys (when experts are on).
std::optional<ModelConfigProblem> CheckMoe(const ModelConfig& m) {
  const MoeConfig& e = m.moe;
  if (e.num_experts < 0 || e.num_experts == 1) {
    return Broken({"model.moe.num_experts"},
                  "must be 0 (a dense model) or >= 2, got " + N(e.num_experts));
  }
  if (!e.enabled()) return std::nullopt;
  if (e.top_k < 1 || e.top_k > e.num_experts) {
    return Broken({"model.moe.top_k", "model.moe.num_experts"},
                  "top_k=" + N(e.top_k) + " must be in [1, num_experts=" + N(e.num_experts) + "]");
  }
  if (e.expert_ffn_size < 0) {
    return Broken({"model.moe.expert_ffn_size"}, "must be >= 0, got " + N(e.expert_ffn_size));
  }
  if (e.shared_experts < 0) {
    return Broken({"model.moe.shared_experts"}, "must be >= 0, got " + N(e.shared_experts));
  }
  if (e.shared_expert_gate && (e.shared_experts < 1 || m.family != ModelFamily::kLlama)) {
    return Broken({"model.moe.shared_expert_gate", "model.moe.shared_experts"},
                  "gates the shared experts of a llama-family model: needs shared_experts >= 1 "
                  "and family llama (got shared_experts=" + N(e.shared_experts) + ", family " +
                      ModelFamilyName(m.family) + ")");
  }
  if (e.first_dense_layers < 0 || e.first_dense_layers >= m.num_layers) {
    return Broken({"model.moe.first_dense_layers", "model.num_layers"},
                  "first_dense_layers=" + N(e.first_dense_layers) +
                      " must leave at least one MoE block of num_layers=" + N(m.num_layers) +
                      " (0 .. " + N(m.num_layers - 1) + ")");
  }
  if (e.layer_interval < 1) {
    return Broken({"model.moe.layer_interval"}, "must be >= 1, got " + N(e.layer_interval));
  }
  if (!(e.route_scale > 0)) {
    return Broken({"model.moe.route_scale"}, "must be > 0, got " + F(e.route_scale));
  }
  if (e.groups < 1 || e.num_experts % e.groups != 0) {
    return Broken({"model.moe.groups", "model.moe.num_experts"},
                  "groups=" + N(e.groups) + " must divide num_experts=" + N(e.num_experts) +
                      " into equal groups");
  }
  if (e.groups_kept < 1 || e.groups_kept > e.groups) {
    return Broken({"model.moe.groups_kept", "model.moe.groups"},
                  "groups_kept=" + N(e.groups_kept) + " must be in [1, groups=" + N(e.groups) + "]");
  }
  if (e.groups > 1) {
    if (e.top_k > e.groups_kept * (e.num_experts / e.groups)) {
      return Broken({"model.moe.top_k", "model.moe.groups_kept"},
                    "top_k=" + N(e.top_k) + " exceeds the " + N(e.groups_kept * (e.num_experts / e.groups)) +
                        " experts of groups_kept=" + N(e.groups_kept) + " groups");
    }
  }
  if (e.capacity_factor < 0) {
    return Broken({"model.moe.capacity_factor"},
                  "must be > 0 (or 0 for dropless routing), got " + F(e.capacity_factor));
  }
  const struct {
    const char* key;
    float value;
  } coefficients[] = {{"model.moe.aux_loss", e.aux_loss},
                      {"model.moe.seq_aux_loss", e.seq_aux_loss},
                      {"model.moe.z_loss", e.z_loss},
                      {"model.moe.bias_update_rate", e.bias_update_rate}};
  for (const auto& c : coefficients) {
    if (!(c.value >= 0)) return Broken({c.key}, "must be >= 0, got " + F(c.value));
  }
  return std::nullopt;
}

}  // namespace

int64_t ModelConfig::moe_layers_before(int64_t layer) const {
  int64_t n = 0;
  for (int64_t l = 0; l < layer; ++l) n += is_moe_layer(l) ? 1 : 0;
  return n;
}

std::optional<ModelConfigProblem> ModelConfig::Check() const {
  if (std::optional<ModelConfigProblem> range = CheckRanges(*this)) return range;
  if (std::optional<ModelConfigProblem> moe_problem = CheckMoe(*this)) return moe_problem;
  if (std::optional<ModelConfigProblem> lora_problem = CheckLora(*this)) return lora_problem;
  if (head_dim > 0 && family == ModelFamily::kGpt2) {
    return Broken({"model.head_dim", "model.family"},
                  "gpt2's heads are hidden_size / num_heads wide: head_dim must be 0");
  }
  if (head_dim == 0 && hidden_size % num_heads != 0) {
    return Broken({"model.num_heads", "model.hidden_size"},
                  "num_heads=" + N(num_heads) + " does not divide hidden_size=" + N(hidden_size));
  }
  if (num_heads % kv_heads() != 0) {
    return Broken({"model.num_kv_heads", "model.num_heads"},
                  "num_kv_heads=" + N(num_kv_heads) + " does not divide num_heads=" + N(num_heads));
  }
  if (family == ModelFamily::kGpt2 && kv_heads() != num_heads) {
    return Broken({"model.num_kv_heads", "model.family"},
                  "gpt2 has no grouped-query attention: num_kv_heads=" + N(num_kv_heads) +
                      " must equal num_heads=" + N(num_heads) + " (or be 0)");
  }
  if (family == ModelFamily::kLlama && head_size() % 2 != 0) {
    if (head_dim > 0) return Broken({"model.head_dim"}, "llama needs an even head size for RoPE, got " + N(head_dim));
    return Broken({"model.hidden_size", "model.num_heads", "model.family"},
                  "llama needs an even head size for RoPE, got hidden_size=" + N(hidden_size) +
                      " / num_heads=" + N(num_heads) + " = " + N(head_size()));
  }
  return std::nullopt;
}

Status ModelConfig::Validate() const {
  const std::optional<ModelConfigProblem> p = Check();
  if (!p) return Status::Ok();
  return InvalidArgument(p->keys.front() + ": " + p->problem);
}

const char* ModelFamilyName(ModelFamily f) { return f == ModelFamily::kGpt2 ? "gpt2" : "llama"; }

const char* RouterScoreName(RouterScore s) {
  return s == RouterScore::kSoftmax ? "softmax" : "sigmoid";
}

const char* RecomputePolicyName(RecomputePolicy p) {
  switch (p) {
    case RecomputePolicy::kNone: return "none";
    case RecomputePolicy::kSelective: return "selective";
    case RecomputePolicy::kFull: return "full";
  }
  return "?";
}

}  // namespace tessera
