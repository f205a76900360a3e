// models/hf_config.cc — config.json to ModelConfig, family by family (hf_config.h).
#include "models/hf_config.h"

#include <filesystem>

#include "runtime/core/file_util.h"
#include "runtime/core/yaml_reader.h"

namespace tessera {
namespace {

constexpr uint64_t kMaxConfigJsonBytes = uint64_t{1} << 20;

std::string N(int64_t v) { return std::to_string(v); }

// Reads fields of one config.json into an intake, recording which model.* key each decided.
// The first type error is kept (later reads are no-ops) and returned by status().
class FieldReader {
 public:
  FieldReader(const JsonValue& c, const std::string& where, HfModelIntake* out)
      : c_(c), where_(where), out_(out) {}

  const JsonValue* Get(const char* hf) const {
    const JsonValue* v = c_.Find(hf);
    return v == nullptr || v->is_null() ? nullptr : v;
  }
  bool Has(const char* hf) const { return Get(hf) != nullptr; }

  // An integer field (required unless `fallback` is given) into *out, recorded as `key`.
  void Int(const char* hf, const char* key, int64_t* out, std::optional<int64_t> fallback = {}) {
    const JsonValue* v = Get(hf);
    if (v == nullptr && fallback) {  // absent: the family's default decides, as in HF
      *out = *fallback;
      return Record(key, Absent(hf).c_str(), N(*out));
    }
    if (v == nullptr) return Fail(std::string(hf) + ": missing (an integer)");
    if (!v->is_integer() || v->as_int() < 0) return Fail(std::string(hf) + ": expected a non-negative integer");
    *out = v->as_int();
    Record(key, hf, N(*out));
  }
  void Float(const char* hf, const char* key, float* out, std::optional<float> fallback = {}) {
    const JsonValue* v = Get(hf);
    if (v == nullptr && fallback) {
      *out = *fallback;
      return Record(key, Absent(hf).c_str(), FormatYamlFloat(*out));
    }
    if (v == nullptr) return Fail(std::string(hf) + ": missing (a number)");
    if (!v->is_number()) return Fail(std::string(hf) + ": expected a number");
    *out = static_cast<float>(v->as_double());
    Record(key, hf, FormatYamlFloat(*out));
  }
  void Bool(const char* hf, const char* key, bool* out, bool fallback) {
    const JsonValue* v = Get(hf);
    *out = fallback;
    if (v != nullptr && !v->is_bool()) return Fail(std::string(hf) + ": expected true or false");
    if (v != nullptr) *out = v->as_bool();
    Record(key, v != nullptr ? hf : Absent(hf).c_str(), *out ? "true" : "false");
  }
  // A training coefficient the file suggests (router_aux_loss_coef): taken when the YAML
  // leaves the key out, never a conflict.
  void Suggested(const char* hf, const char* key, float* out) {
    const JsonValue* v = Get(hf);
    if (v == nullptr) return;
    if (!v->is_number()) return Fail(std::string(hf) + ": expected a number");
    *out = static_cast<float>(v->as_double());
    out_->fields.push_back({key, hf, FormatYamlFloat(*out), /*suggested=*/true});
  }
  // A field's value as text for messages ("null" when absent).
  std::string Text(const char* hf) const {
    const JsonValue* v = Get(hf);
    if (v == nullptr) return "null";
    if (v->is_string()) return "\"" + v->as_string() + "\"";
    if (v->is_bool()) return v->as_bool() ? "true" : "false";
    if (v->is_integer()) return N(v->as_int());
    if (v->is_number()) return FormatYamlFloat(static_cast<float>(v->as_double()));
    return v->is_array() ? "a list" : "an object";
  }
  bool True(const char* hf) const {
    const JsonValue* v = Get(hf);
    return v != nullptr && v->is_bool() && v->as_bool();
  }
  std::string String(const char* hf) const {
    const JsonValue* v = Get(hf);
    return v != nullptr && v->is_string() ? v->as_string() : std::string();
  }
  void Missing(std::string what) { out_->missing.push_back(std::move(what)); }
  void Record(const char* key, const char* hf, std::string value) {
    out_->fields.push_back({key, hf, std::move(value)});
  }
  static std::string Absent(const char* hf) { return std::string(hf) + " (absent: the default)"; }
  Status status() const { return error_; }

 private:
  void Fail(const std::string& what) {
    if (error_.ok()) error_ = DataLoss(where_ + ": " + what);
  }
  const JsonValue& c_;
  const std::string& where_;
  HfModelIntake* out_;
  Status error_ = Status::Ok();
};

void ReadGpt2(FieldReader& r, ModelConfig& m) {
  m.family = ModelFamily::kGpt2;
  r.Int("vocab_size", "model.vocab_size", &m.vocab_size);
  r.Int("n_positions", "model.max_seq_len", &m.max_seq_len);
  r.Int("n_layer", "model.num_layers", &m.num_layers);
  r.Int("n_embd", "model.hidden_size", &m.hidden_size);
  r.Int("n_head", "model.num_heads", &m.num_heads);
  r.Int("n_inner", "model.ffn_hidden_size", &m.ffn_hidden_size, 0);  // null: 4 * n_embd
  r.Float("layer_norm_epsilon", "model.norm_eps", &m.norm_eps, 1e-5f);
  r.Bool("tie_word_embeddings", "model.tie_embeddings", &m.tie_embeddings, true);
  const std::string act = r.String("activation_function");
  if (!act.empty() && act != "gelu_new" && act != "gelu_pytorch_tanh") {
    r.Missing("activation_function=\"" + act + "\": Tessera's GPT-2 MLP uses the tanh GELU "
              "(gelu_new / gelu_pytorch_tanh)");
  }
  if (r.True("scale_attn_by_inverse_layer_idx")) {
    r.Missing("scale_attn_by_inverse_layer_idx=true: Tessera scales attention by 1/sqrt(head size) only");
  }
  if (r.True("reorder_and_upcast_attn")) {
    r.Missing("reorder_and_upcast_attn=true: not modelled (Tessera's attention is fp32 already; "
              "the flag changes the order of scaling)");
  }  r.Record("model.sliding_window", "model_type", "0");  // GPT-2 attends to its whole context
}

// rope_scaling: llama3 (Llama 3.1+) and linear are computed (runtime/kernels/rope_params.h);
// dynamic, yarn, longrope and others are named as missing.
void ReadRopeScaling(FieldReader& r, ModelConfig& m) {
  RopeScaling& s = m.rope_scaling;
  const JsonValue* rs = r.Get("rope_scaling");
  if (rs == nullptr) {
    r.Record("model.rope_scaling.type", "rope_scaling", "none");
    return;
  }
  const JsonValue* kind = rs->is_object() ? rs->Find("rope_type") : nullptr;
  if (kind == nullptr && rs->is_object()) kind = rs->Find("type");
  const std::string type = kind != nullptr && kind->is_string() ? kind->as_string() : "";
  auto number = [&](const char* field, float* out) {
    const JsonValue* v = rs->Find(field);
    if (v == nullptr || !v->is_number()) {
      r.Missing("rope_scaling." + std::string(field) + ": missing or not a number (rope_type \"" + type + "\")");
      return;
    }
    *out = static_cast<float>(v->as_double());
  };
  if (type == "linear" || type == "llama3") {
    s.type = type == "linear" ? RopeScalingType::kLinear : RopeScalingType::kLlama3;
    number("factor", &s.factor);
    r.Record("model.rope_scaling.type", "rope_scaling.rope_type", type);
    r.Record("model.rope_scaling.factor", "rope_scaling.factor", FormatYamlFloat(s.factor));
    if (type == "llama3") {
      number("low_freq_factor", &s.low_freq_factor);
      number("high_freq_factor", &s.high_freq_factor);
      float original = 0;
      number("original_max_position_embeddings", &original);
      s.original_max_position = static_cast<int64_t>(original);
      r.Record("model.rope_scaling.low_freq_factor", "rope_scaling.low_freq_factor",
               FormatYamlFloat(s.low_freq_factor));
      r.Record("model.rope_scaling.high_freq_factor", "rope_scaling.high_freq_factor",
               FormatYamlFloat(s.high_freq_factor));
      r.Record("model.rope_scaling.original_max_position",
               "rope_scaling.original_max_position_embeddings", N(s.original_max_position));
    }
    return;
  }
  r.Missing("rope_scaling with rope_type \"" + type + "\": Tessera computes plain RoPE and the "
            "linear and llama3 scalings");
}

// Sliding-window attention. Mistral and Mixtral: every layer when sliding_window is set.
// Qwen2 family: only with use_sliding_window, and then the layers from max_window_layers on
// (transformers' layer_types); Tessera's window is the same in every layer, so a split is
// on the checklist. A window that covers max_position_embeddings is no window.
void ReadSlidingWindow(FieldReader& r, ModelConfig& m, const std::string& type) {
  const bool mistral = type == "mistral" || type == "mixtral";
  const JsonValue* w = r.Get("sliding_window");
  const int64_t window = w != nullptr && w->is_integer() && w->as_int() > 0 ? w->as_int() : 0;
  m.sliding_window = 0;
  if (mistral ? window == 0 : !r.True("use_sliding_window") || window == 0) {
    return r.Record("model.sliding_window", mistral ? "sliding_window" : "use_sliding_window", "0");
  }
  if (window >= m.max_seq_len) {
    return r.Record("model.sliding_window", "sliding_window (covers max_position_embeddings)", "0");
  }
  if (!mistral) {
    const JsonValue* first = r.Get("max_window_layers");
    const int64_t from = first != nullptr && first->is_integer() ? first->as_int() : 0;
    if (from >= m.num_layers) {
      return r.Record("model.sliding_window", "max_window_layers (no layer windowed)", "0");
    }
    if (from > 0) {
      return r.Missing("sliding window from layer max_window_layers=" + N(from) + " of " +
                       N(m.num_layers) + " on: Tessera's model.sliding_window applies to every "
                       "layer or none");
    }
  }
  m.sliding_window = window;
  r.Record("model.sliding_window", "sliding_window", N(window));
}

// The fields every Llama-family config shares (llama, mistral, qwen2, mixtral, qwen2_moe,
// qwen3, qwen3_moe), and what of theirs Tessera lacks.
void ReadLlamaBase(FieldReader& r, ModelConfig& m, const std::string& type) {
  m.family = ModelFamily::kLlama;
  r.Int("vocab_size", "model.vocab_size", &m.vocab_size);
  r.Int("max_position_embeddings", "model.max_seq_len", &m.max_seq_len);
  r.Int("num_hidden_layers", "model.num_layers", &m.num_layers);
  r.Int("hidden_size", "model.hidden_size", &m.hidden_size);
  r.Int("num_attention_heads", "model.num_heads", &m.num_heads);
  r.Int("num_key_value_heads", "model.num_kv_heads", &m.num_kv_heads, m.num_heads);
  // Mixtral's intermediate_size is its experts' width (ReadMixtral): its blocks have no dense
  // MLP, so model.ffn_hidden_size stays the YAML's (unused) and cannot disagree.
  if (type != "mixtral") r.Int("intermediate_size", "model.ffn_hidden_size", &m.ffn_hidden_size);
  r.Float("rms_norm_eps", "model.norm_eps", &m.norm_eps, 1e-6f);
  r.Float("rope_theta", "model.rope_theta", &m.rope_theta, 10000.0f);
  r.Bool("tie_word_embeddings", "model.tie_embeddings", &m.tie_embeddings, false);
  const std::string act = r.String("hidden_act");
  if (!act.empty() && act != "silu") {
    r.Missing("hidden_act=\"" + act + "\": Tessera's Llama-family MLP is SwiGLU (silu)");
  }
  // An explicit head_dim (Qwen3, Mistral-Nemo): 0 when it is hidden_size / heads anyway.
  // Qwen3's default is 128 in transformers, not hidden_size / heads.
  r.Int("head_dim", "model.head_dim", &m.head_dim,
        type == "qwen3" || type == "qwen3_moe" ? 128 : 0);
  if (m.num_heads > 0 && m.head_dim * m.num_heads == m.hidden_size) m.head_dim = 0;
  ReadRopeScaling(r, m);
  if (r.True("attention_bias")) {
    r.Missing("attention_bias=true: biases on the q/k/v AND o projections; Tessera's Llama family "
              "has q/k/v biases only (model.qkv_bias, Qwen2's)");
  }
  if (r.True("mlp_bias")) r.Missing("mlp_bias=true: MLP biases; Tessera's Llama family has none");
  // Qwen2 and Qwen2-MoE always bias q, k and v (no config field says so).
  m.qkv_bias = type == "qwen2" || type == "qwen2_moe";
  r.Record("model.qkv_bias", "model_type", m.qkv_bias ? "true" : "false");
  // Qwen3 and Qwen3-MoE always norm every q and k head (no config field says so).
  m.qk_norm = type == "qwen3" || type == "qwen3_moe";
  r.Record("model.qk_norm", "model_type", m.qk_norm ? "true" : "false");
  ReadSlidingWindow(r, m, type);
}

void ReadMixtral(FieldReader& r, ModelConfig& m) {
  MoeConfig& e = m.moe;
  r.Int("num_local_experts", "model.moe.num_experts", &e.num_experts);
  r.Int("num_experts_per_tok", "model.moe.top_k", &e.top_k);
  r.Int("intermediate_size", "model.moe.expert_ffn_size", &e.expert_ffn_size);
  e.score = RouterScore::kSoftmax;
  e.normalize_gates = true;
  r.Suggested("router_aux_loss_coef", "model.moe.aux_loss", &e.aux_loss);
}

// Qwen2-MoE and Qwen3-MoE: experts of moe_intermediate_size every decoder_sparse_step blocks
// (except mlp_only_layers), top-k gates renormalised when norm_topk_prob.
void ReadQwenMoe(FieldReader& r, ModelConfig& m, const std::string& type) {
  MoeConfig& e = m.moe;
  r.Int("num_experts", "model.moe.num_experts", &e.num_experts);
  r.Int("num_experts_per_tok", "model.moe.top_k", &e.top_k);
  r.Int("moe_intermediate_size", "model.moe.expert_ffn_size", &e.expert_ffn_size);
  r.Bool("norm_topk_prob", "model.moe.normalize_gates", &e.normalize_gates, type == "qwen3_moe");
  r.Int("decoder_sparse_step", "model.moe.layer_interval", &e.layer_interval, 1);
  r.Suggested("router_aux_loss_coef", "model.moe.aux_loss", &e.aux_loss);
  e.score = RouterScore::kSoftmax;
  // HF puts an MoE block where (layer + 1) % decoder_sparse_step == 0; Tessera's rule is
  // (layer - first_dense_layers) % interval == 0: the same blocks when first_dense_layers =
  // interval - 1.
  e.first_dense_layers = e.layer_interval > 0 ? e.layer_interval - 1 : 0;
  if (e.first_dense_layers > 0) {
    r.Record("model.moe.first_dense_layers", "decoder_sparse_step", N(e.first_dense_layers));
  }
  if (const JsonValue* only = r.Get("mlp_only_layers"); only != nullptr && only->is_array() &&
                                                         !only->items().empty()) {
    r.Missing("mlp_only_layers=" + r.Text("mlp_only_layers") + ": dense blocks at chosen places; "
              "Tessera's dense blocks are the first model.moe.first_dense_layers");
  }
  // Qwen2-MoE's shared expert: shared_expert_intermediate_size wide, its output gated by
  // sigmoid(h . shared_expert_gate); Tessera's is shared_experts x expert_ffn_size wide.
  const JsonValue* shared = type == "qwen2_moe" ? r.Get("shared_expert_intermediate_size") : nullptr;
  const int64_t width = shared != nullptr && shared->is_integer() ? shared->as_int() : 0;
  if (width > 0 && (e.expert_ffn_size <= 0 || width % e.expert_ffn_size != 0)) {
    r.Missing("shared_expert_intermediate_size=" + N(width) + " is not a multiple of "
              "moe_intermediate_size=" + N(e.expert_ffn_size) + ": Tessera's shared experts are "
              "model.moe.shared_experts x expert_ffn_size wide");
  } else if (width > 0) {
    e.shared_experts = width / e.expert_ffn_size;
    e.shared_expert_gate = true;
    r.Record("model.moe.shared_experts", "shared_expert_intermediate_size", N(e.shared_experts));
    r.Record("model.moe.shared_expert_gate", "model_type", "true");
  } else {
    r.Record("model.moe.shared_experts", "shared_expert_intermediate_size (none)", "0");
  }
}

// The keys an intake sets, with how to read and copy each.
struct KeyAccess {
  const char* key;
  std::string (*text)(const ModelConfig&);
  void (*copy)(const ModelConfig&, ModelConfig*);
};

#define TESSERA_INT_KEY(name, member)                                                  \
  {name, [](const ModelConfig& m) { return N(m.member); },                            \
   [](const ModelConfig& f, ModelConfig* t) { t->member = f.member; }}
#define TESSERA_FLOAT_KEY(name, member)                                                \
  {name, [](const ModelConfig& m) { return FormatYamlFloat(m.member); },              \
   [](const ModelConfig& f, ModelConfig* t) { t->member = f.member; }}
#define TESSERA_BOOL_KEY(name, member)                                                 \
  {name, [](const ModelConfig& m) { return std::string(m.member ? "true" : "false"); }, \
   [](const ModelConfig& f, ModelConfig* t) { t->member = f.member; }}

const KeyAccess kKeys[] = {
    {"model.family", [](const ModelConfig& m) { return std::string(ModelFamilyName(m.family)); },
     [](const ModelConfig& f, ModelConfig* t) { t->family = f.family; }},
    TESSERA_INT_KEY("model.vocab_size", vocab_size),
    TESSERA_INT_KEY("model.max_seq_len", max_seq_len),
    TESSERA_INT_KEY("model.num_layers", num_layers),
    TESSERA_INT_KEY("model.hidden_size", hidden_size),
    TESSERA_INT_KEY("model.num_heads", num_heads),
    // By effect: 0 is hidden_size / num_heads.
    {"model.head_dim", [](const ModelConfig& m) { return N(m.head_size()); },
     [](const ModelConfig& f, ModelConfig* t) { t->head_dim = f.head_dim; }},
    // Compared by effect: 0 means "the rule" (num_heads; 4C or Llama's 8C/3), as the file's
    // absent field does.
    {"model.num_kv_heads", [](const ModelConfig& m) { return N(m.kv_heads()); },
     [](const ModelConfig& f, ModelConfig* t) { t->num_kv_heads = f.num_kv_heads; }},
    {"model.ffn_hidden_size", [](const ModelConfig& m) { return N(m.ffn_size()); },
     [](const ModelConfig& f, ModelConfig* t) { t->ffn_hidden_size = f.ffn_hidden_size; }},
    TESSERA_FLOAT_KEY("model.norm_eps", norm_eps),
    TESSERA_FLOAT_KEY("model.rope_theta", rope_theta),
    TESSERA_BOOL_KEY("model.tie_embeddings", tie_embeddings),
    TESSERA_INT_KEY("model.sliding_window", sliding_window),
    TESSERA_BOOL_KEY("model.qkv_bias", qkv_bias),
    TESSERA_BOOL_KEY("model.qk_norm", qk_norm),
    TESSERA_INT_KEY("model.moe.num_experts", moe.num_experts),
    TESSERA_INT_KEY("model.moe.top_k", moe.top_k),
    TESSERA_INT_KEY("model.moe.expert_ffn_size", moe.expert_ffn_size),
    TESSERA_INT_KEY("model.moe.layer_interval", moe.layer_interval),
    TESSERA_INT_KEY("model.moe.shared_experts", moe.shared_experts),
    TESSERA_BOOL_KEY("model.moe.shared_expert_gate", moe.shared_expert_gate),
    TESSERA_INT_KEY("model.moe.first_dense_layers", moe.first_dense_layers),
    TESSERA_BOOL_KEY("model.moe.normalize_gates", moe.normalize_gates),
    TESSERA_FLOAT_KEY("model.moe.aux_loss", moe.aux_loss),
    {"model.moe.score", [](const ModelConfig& m) { return std::string(RouterScoreName(m.moe.score)); },
     [](const ModelConfig& f, ModelConfig* t) { t->moe.score = f.moe.score; }},
    {"model.rope_scaling.type",
     [](const ModelConfig& m) { return std::string(RopeScalingName(m.rope_scaling.type)); },
     [](const ModelConfig& f, ModelConfig* t) { t->rope_scaling.type = f.rope_scaling.type; }},
    TESSERA_FLOAT_KEY("model.rope_scaling.factor", rope_scaling.factor),
    TESSERA_FLOAT_KEY("model.rope_scaling.low_freq_factor", rope_scaling.low_freq_factor),
    TESSERA_FLOAT_KEY("model.rope_scaling.high_freq_factor", rope_scaling.high_freq_factor),
    TESSERA_INT_KEY("model.rope_scaling.original_max_position", rope_scaling.original_max_position),
};

#undef TESSERA_INT_KEY
#undef TESSERA_FLOAT_KEY
#undef TESSERA_BOOL_KEY

const KeyAccess* FindKey(const std::string& key) {
  for (const KeyAccess& k : kKeys) {
    if (key == k.key) return &k;
  }
  return nullptr;
}

}  // namespace

std::string ModelKeyText(const ModelConfig& m, const std::string& key) {
  const KeyAccess* k = FindKey(key);
  return k != nullptr ? k->text(m) : std::string();
}

void CopyModelKey(const ModelConfig& from, ModelConfig* to, const std::string& key) {
  if (const KeyAccess* k = FindKey(key)) k->copy(from, to);
}

std::string SupportedHfModelTypes() {
  return "gpt2, llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe";
}

Result<HfModelIntake> MapHfConfig(const JsonValue& c, const std::string& where) {
  if (!c.is_object()) return DataLoss(where + ": expected a JSON object (a Hugging Face config.json)");
  HfModelIntake out;
  out.path = where;
  const JsonValue* type = c.Find("model_type");
  if (type == nullptr || !type->is_string()) {
    return DataLoss(where + ": model_type: missing (every Hugging Face config.json names its "
                    "model type; Tessera reads " + SupportedHfModelTypes() + ")");
  }
  out.model_type = type->as_string();
  const std::string& t = out.model_type;
  FieldReader r(c, where, &out);
  ModelConfig& m = out.model;
  if (t == "gpt2") {
    ReadGpt2(r, m);
  } else if (t == "llama" || t == "mistral" || t == "qwen2" || t == "qwen3" || t == "mixtral" ||
             t == "qwen2_moe" || t == "qwen3_moe") {
    ReadLlamaBase(r, m, t);
    if (t == "mixtral") ReadMixtral(r, m);
    if (t == "qwen2_moe" || t == "qwen3_moe") ReadQwenMoe(r, m, t);
  } else if (t == "deepseek_v2" || t == "deepseek_v3") {
    out.missing.push_back("multi-head latent attention (MLA: kv_lora_rank=" + r.Text("kv_lora_rank") +
                          ", q_lora_rank=" + r.Text("q_lora_rank") +
                          "): Tessera has multi-head and grouped-query attention");
    out.missing.push_back("the " + t + " architecture as a whole: its MoE routing (sigmoid scores, "
                          "groups, routing bias, shared experts) exists as model.moe, but its "
                          "config.json is not mapped; supported model types: " +
                          SupportedHfModelTypes());
  } else {
    out.missing.push_back("model_type \"" + t + "\": not a family Tessera knows (supported: " +
                          SupportedHfModelTypes() + ")");
  }
  RETURN_IF_ERROR(r.status());
  m.family = t == "gpt2" ? ModelFamily::kGpt2 : ModelFamily::kLlama;
  // Always decided by the file: the family, and whether there are experts (a dense model has
  // none, whatever the YAML's model.moe says).
  out.fields.insert(out.fields.begin(), {"model.family", "model_type", ModelFamilyName(m.family)});
  if (!m.moe.enabled()) {
    out.fields.push_back({"model.moe.num_experts", "model_type", "0"});
  } else {
    out.fields.push_back({"model.moe.score", "model_type", RouterScoreName(m.moe.score)});
  }
  if (out.missing.empty()) {
    if (std::optional<ModelConfigProblem> p = m.Check()) {
      return DataLoss(where + ": the model it describes breaks a rule of Tessera's (" +
                      p->keys.front() + ": " + p->problem + ")");
    }
  }
  return out;
}

Result<HfModelIntake> ReadHfConfig(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string file = fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string() : path;
  ASSIGN_OR_RETURN(std::string text, ReadInputFile(file, kMaxConfigJsonBytes, "Hugging Face config.json"));
  auto json = ParseJson(text);
  if (!json.ok()) return DataLoss(file + ": not JSON: " + json.status().message());
  return MapHfConfig(*json, file);
}

std::string HfConfigBeside(const std::string& init_from) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (init_from.empty()) return "";
  const fs::path p(init_from);
  const fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
  const fs::path config = (dir.empty() ? fs::path(".") : dir) / "config.json";
  return fs::is_regular_file(config, ec) ? config.string() : "";
}

std::string DescribeHfFields(const HfModelIntake& intake) {
  std::string out;
  for (const HfField& f : intake.fields) {
    out += "  " + f.key + ": " + f.value + "    # " + f.hf_field + "\n";
  }
  return out;
}

}  // namespace tessera
