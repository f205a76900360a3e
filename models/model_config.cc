// models/model_config.cc — the rules of a model config (one copy, for the config loader and
// the model) and the names of the model enums, as written in YAML.
#include "models/model_config.h"

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
  if (!(m.init_std > 0)) return Broken({"model.init_std"}, "must be > 0, got " + F(m.init_std));
  return std::nullopt;
}

}  // namespace

std::optional<ModelConfigProblem> ModelConfig::Check() const {
  if (std::optional<ModelConfigProblem> range = CheckRanges(*this)) return range;
  if (hidden_size % num_heads != 0) {
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

const char* RecomputePolicyName(RecomputePolicy p) {
  switch (p) {
    case RecomputePolicy::kNone: return "none";
    case RecomputePolicy::kSelective: return "selective";
    case RecomputePolicy::kFull: return "full";
  }
  return "?";
}

}  // namespace tessera
