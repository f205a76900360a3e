// models/hf_config_json.cc — ModelConfig to a Hugging Face config.json (hf_config.h), the
// inverse of the intake in hf_config.cc: each field written is one the intake maps back.
#include <cstdlib>

#include "models/hf_config.h"
#include "models/hf_weights.h"
#include "runtime/core/yaml_reader.h"

namespace tessera {
namespace {

// A float as the shortest decimal that reads back to it (1e-05, not 9.99999975e-06).
double Decimal(float v) { return std::strtod(FormatYamlFloat(v).c_str(), nullptr); }

Status NoType(const std::string& why) {
  return FailedPrecondition("no Hugging Face model type Tessera writes computes this model: " +
                            why);
}

// A model with q/k norms: Qwen3's or Qwen3-MoE's, or why neither fits.
Result<std::string> Qwen3Type(const ModelConfig& m, bool routing_bias) {
  if (m.qkv_bias) return NoType("Qwen3 (the q/k norms' type) has no q/k/v biases");
  if (m.sliding_window > 0) return NoType("Qwen3 as Tessera writes it has no sliding window");
  if (!m.moe.enabled()) return std::string("qwen3");
  const MoeConfig& e = m.moe;
  if (routing_bias || e.score != RouterScore::kSoftmax || e.groups != 1 || e.route_scale != 1.0f ||
      e.shared_experts > 0) {
    return NoType("Qwen3-MoE routes by softmax top-k, without groups, a route scale, shared "
                  "experts or a routing bias");
  }
  if (e.first_dense_layers != e.layer_interval - 1) {
    return NoType("Qwen3-MoE's dense blocks are those before every decoder_sparse_step-th; this "
                  "model has first_dense_layers=" + std::to_string(e.first_dense_layers) +
                  " with layer_interval=" + std::to_string(e.layer_interval));
  }
  return std::string("qwen3_moe");
}

// The model type of a Llama-family model, or why none fits.
Result<std::string> LlamaType(const ModelConfig& m, bool routing_bias) {
  if (m.qk_norm) return Qwen3Type(m, routing_bias);
  if (!m.moe.enabled()) {
    if (m.qkv_bias) return std::string("qwen2");
    return std::string(m.sliding_window > 0 ? "mistral" : "llama");
  }
  const MoeConfig& e = m.moe;
  if (!routing_bias && e.shared_expert_gate) {  // Qwen2-MoE's, or nothing
    if (!m.qkv_bias) return NoType("Qwen2-MoE (the gated shared expert's type) has q/k/v biases");
    if (e.score != RouterScore::kSoftmax || e.groups != 1 || e.route_scale != 1.0f) {
      return NoType("Qwen2-MoE routes by softmax top-k, without groups or a route scale");
    }
    if (e.first_dense_layers != e.layer_interval - 1) {
      return NoType("Qwen2-MoE's dense blocks are those before every decoder_sparse_step-th; this "
                    "model has first_dense_layers=" + std::to_string(e.first_dense_layers) +
                    " with layer_interval=" + std::to_string(e.layer_interval));
    }
    return std::string("qwen2_moe");
  }
  if (routing_bias || DefaultHfMoeNames(m) != HfMoeNames::kMixtral) {
    return NoType("its routing (sigmoid scores, groups, shared experts, a route scale, "
                  "unnormalised gates or a routing bias) is not Mixtral's, and DeepSeek-V3's "
                  "type needs MLA attention");
  }
  if (e.first_dense_layers != 0 || e.layer_interval != 1) {
    return NoType("Mixtral has experts in every block; this model has dense blocks "
                  "(model.moe.first_dense_layers / layer_interval)");
  }
  if (m.qkv_bias) return NoType("Mixtral has no q/k/v biases");
  return std::string("mixtral");
}

void RopeScalingField(JsonWriter& w, const RopeScaling& r) {
  w.Key("rope_scaling");
  if (r.type == RopeScalingType::kNone) {
    w.Null();
    return;
  }
  w.BeginObject().Key("rope_type").String(RopeScalingName(r.type));
  w.Key("factor").Double(Decimal(r.factor));
  if (r.type == RopeScalingType::kLlama3) {
    w.Key("low_freq_factor").Double(Decimal(r.low_freq_factor));
    w.Key("high_freq_factor").Double(Decimal(r.high_freq_factor));
    w.Key("original_max_position_embeddings").Int(r.original_max_position);
  }
  w.EndObject();
}

void Gpt2Fields(JsonWriter& w, const ModelConfig& m) {
  w.Key("architectures").BeginArray().String("GPT2LMHeadModel").EndArray();
  w.Key("model_type").String("gpt2");
  w.Key("vocab_size").Int(m.vocab_size);
  w.Key("n_positions").Int(m.max_seq_len);
  w.Key("n_ctx").Int(m.max_seq_len);
  w.Key("n_layer").Int(m.num_layers);
  w.Key("n_embd").Int(m.hidden_size);
  w.Key("n_head").Int(m.num_heads);
  w.Key("n_inner");
  if (m.ffn_size() == 4 * m.hidden_size) {
    w.Null();  // HF's rule: 4 * n_embd
  } else {
    w.Int(m.ffn_size());
  }
  w.Key("activation_function").String("gelu_new");
  w.Key("layer_norm_epsilon").Double(Decimal(m.norm_eps));
  w.Key("tie_word_embeddings").Bool(m.tie_embeddings);
  w.Key("initializer_range").Double(Decimal(m.init_std));
}

void LlamaFields(JsonWriter& w, const ModelConfig& m, const std::string& type) {
  static constexpr struct {
    const char* type;
    const char* architecture;
  } kArchitectures[] = {{"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"},
                        {"qwen2", "Qwen2ForCausalLM"}, {"mixtral", "MixtralForCausalLM"},
                        {"qwen2_moe", "Qwen2MoeForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"},
                        {"qwen3_moe", "Qwen3MoeForCausalLM"}};
  for (const auto& a : kArchitectures) {
    if (type == a.type) w.Key("architectures").BeginArray().String(a.architecture).EndArray();
  }
  w.Key("model_type").String(type);
  w.Key("vocab_size").Int(m.vocab_size);
  w.Key("max_position_embeddings").Int(m.max_seq_len);
  w.Key("num_hidden_layers").Int(m.num_layers);
  w.Key("hidden_size").Int(m.hidden_size);
  w.Key("num_attention_heads").Int(m.num_heads);
  w.Key("num_key_value_heads").Int(m.kv_heads());
  const bool qwen3 = type == "qwen3" || type == "qwen3_moe";
  // Qwen3's head_dim defaults to 128 in transformers, not hidden_size / heads: always written.
  if (m.head_dim > 0 || qwen3) w.Key("head_dim").Int(m.head_size());
  // Mixtral's intermediate_size is each expert's width (its blocks have no dense MLP).
  w.Key("intermediate_size").Int(type == "mixtral" ? m.expert_ffn() : m.ffn_size());
  w.Key("hidden_act").String("silu");
  w.Key("rms_norm_eps").Double(Decimal(m.norm_eps));
  w.Key("rope_theta").Double(Decimal(m.rope_theta));
  RopeScalingField(w, m.rope_scaling);
  w.Key("tie_word_embeddings").Bool(m.tie_embeddings);
  w.Key("initializer_range").Double(Decimal(m.init_std));
  if (type == "llama" || qwen3) w.Key("attention_bias").Bool(false);
  if (type == "llama") w.Key("mlp_bias").Bool(false);
  if (type == "mistral" || type == "mixtral") {
    w.Key("sliding_window");
    if (m.sliding_window > 0) {
      w.Int(m.sliding_window);
    } else {
      w.Null();
    }
  }
  if (type == "qwen2" || type == "qwen2_moe" || qwen3) {
    // Every layer windowed (max_window_layers 0) or none.
    w.Key("use_sliding_window").Bool(m.sliding_window > 0);
    w.Key("sliding_window").Int(m.sliding_window > 0 ? m.sliding_window : m.max_seq_len);
    w.Key("max_window_layers").Int(m.sliding_window > 0 ? 0 : m.num_layers);
  }
  if (type == "mixtral") {
    w.Key("num_local_experts").Int(m.moe.num_experts);
    w.Key("num_experts_per_tok").Int(m.moe.top_k);
    w.Key("router_aux_loss_coef").Double(Decimal(m.moe.aux_loss));
  }
  if (type == "qwen2_moe" || type == "qwen3_moe") {
    const MoeConfig& e = m.moe;
    w.Key("num_experts").Int(e.num_experts);
    w.Key("num_experts_per_tok").Int(e.top_k);
    w.Key("moe_intermediate_size").Int(m.expert_ffn());
    if (type == "qwen2_moe") {
      w.Key("shared_expert_intermediate_size").Int(e.shared_experts * m.expert_ffn());
    }
    w.Key("norm_topk_prob").Bool(e.normalize_gates);
    w.Key("decoder_sparse_step").Int(e.layer_interval);
    w.Key("mlp_only_layers").BeginArray().EndArray();
    w.Key("router_aux_loss_coef").Double(Decimal(e.aux_loss));
  }
}

}  // namespace

Result<std::string> HfConfigJson(const ModelConfig& m, std::string_view torch_dtype,
                                 bool routing_bias) {
  JsonWriter w;
  w.BeginObject();
  if (m.family == ModelFamily::kGpt2) {
    if (m.moe.enabled()) return NoType("GPT-2-family experts have no Hugging Face model type");
    if (m.sliding_window > 0) return NoType("GPT-2 has no sliding window");
    Gpt2Fields(w, m);
  } else {
    ASSIGN_OR_RETURN(std::string type, LlamaType(m, routing_bias));
    LlamaFields(w, m, type);
  }
  w.Key("torch_dtype").String(torch_dtype);
  w.EndObject();
  return w.str();
}

}  // namespace tessera
