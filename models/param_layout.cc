// models/param_layout.cc — parameter lists of the GPT-2 and Llama families (param_layout.h).
#include "models/param_layout.h"

namespace tessera {
namespace {

class Declarer {
 public:
  void Add(std::string name, Shape shape, ParamKind kind, InitRule init,
           bool hf_transposed = false) {
    ParamDecl d;
    d.name = std::move(name);
    d.shape = shape;
    d.kind = kind;
    d.init = init;
    d.hf_transposed = hf_transposed;
    out.push_back(std::move(d));
  }
  void Matrix(std::string name, Shape shape, InitRule init = InitRule::kNormal,
              bool hf_transposed = false) {
    Add(std::move(name), shape, ParamKind::kMatrix, init, hf_transposed);
  }
  void Bias(std::string name, int64_t n) { Add(std::move(name), {n}, ParamKind::kBias, InitRule::kZeros); }
  void NormWeight(std::string name, int64_t n) {
    Add(std::move(name), {n}, ParamKind::kNorm, InitRule::kOnes);
  }
  // GPT-2 LayerNorm: weight and bias (HF names "<prefix>.weight", "<prefix>.bias").
  void LayerNorm(const std::string& prefix, int64_t n) {
    NormWeight(prefix + ".weight", n);
    Bias(prefix + ".bias", n);
  }

  std::vector<ParamDecl> out;
};

void DeclareGpt2(const ModelConfig& c, Declarer& d) {
  const int64_t C = c.hidden_size, F = c.ffn_size(), V = c.vocab_size;
  d.Add("wte.weight", {V, C}, ParamKind::kEmbedding, InitRule::kNormal);
  d.Add("wpe.weight", {c.max_seq_len, C}, ParamKind::kEmbedding, InitRule::kNormal);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    d.LayerNorm(p + "ln_1", C);
    d.Matrix(p + "attn.c_attn.weight", {3 * C, C}, InitRule::kNormal, true);
    d.Bias(p + "attn.c_attn.bias", 3 * C);
    d.Matrix(p + "attn.c_proj.weight", {C, C}, InitRule::kResidualNormal, true);
    d.Bias(p + "attn.c_proj.bias", C);
    d.LayerNorm(p + "ln_2", C);
    d.Matrix(p + "mlp.c_fc.weight", {F, C}, InitRule::kNormal, true);
    d.Bias(p + "mlp.c_fc.bias", F);
    d.Matrix(p + "mlp.c_proj.weight", {C, F}, InitRule::kResidualNormal, true);
    d.Bias(p + "mlp.c_proj.bias", C);
  }
  d.LayerNorm("ln_f", C);
  if (!c.tie_embeddings) d.Matrix("lm_head.weight", {V, C});
}

void DeclareLlama(const ModelConfig& c, Declarer& d) {
  const int64_t C = c.hidden_size, F = c.ffn_size(), V = c.vocab_size;
  const int64_t HS = c.head_size(), NH = c.num_heads, NKV = c.kv_heads();
  d.Add("model.embed_tokens.weight", {V, C}, ParamKind::kEmbedding, InitRule::kNormal);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    d.NormWeight(p + "input_layernorm.weight", C);
    d.Matrix(p + "self_attn.q_proj.weight", {NH * HS, C});  // q, k, v adjacent: one GEMM
    d.Matrix(p + "self_attn.k_proj.weight", {NKV * HS, C});
    d.Matrix(p + "self_attn.v_proj.weight", {NKV * HS, C});
    d.Matrix(p + "self_attn.o_proj.weight", {C, NH * HS}, InitRule::kResidualNormal);
    d.NormWeight(p + "post_attention_layernorm.weight", C);
    d.Matrix(p + "mlp.gate_proj.weight", {F, C});  // gate, up adjacent: one GEMM
    d.Matrix(p + "mlp.up_proj.weight", {F, C});
    d.Matrix(p + "mlp.down_proj.weight", {C, F}, InitRule::kResidualNormal);
  }
  d.NormWeight("model.norm.weight", C);
  if (!c.tie_embeddings) d.Matrix("lm_head.weight", {V, C});
}

}  // namespace

std::vector<ParamDecl> DeclareParameters(const ModelConfig& config) {
  Declarer d;
  if (config.family == ModelFamily::kGpt2) {
    DeclareGpt2(config, d);
  } else {
    DeclareLlama(config, d);
  }
  return std::move(d.out);
}

int64_t MatmulParams(const ModelConfig& config) {
  int64_t n = 0;
  for (const ParamDecl& p : DeclareParameters(config)) {
    if (p.kind == ParamKind::kMatrix) n += p.shape.numel();
  }
  if (config.tie_embeddings) n += config.vocab_size * config.hidden_size;
  return n;
}

}  // namespace tessera
