// models/param_layout.cc — parameter lists of the GPT-2 and Llama families, their units and
// their initial values (param_layout.h).
#include "models/param_layout.h"

#include <algorithm>
#include <cmath>

#include "models/lora.h"
#include "runtime/core/check.h"
#include "runtime/core/random.h"

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
    d.unit = unit;
    out.push_back(std::move(d));
  }
  void Matrix(std::string name, Shape shape, InitRule init = InitRule::kNormal,
              bool hf_transposed = false) {
    Add(std::move(name), shape, ParamKind::kMatrix, init, hf_transposed);
  }
  void Bias(std::string name, int64_t n) { Add(std::move(name), {n}, ParamKind::kBias, InitRule::kZeros); }
  // The tensor-parallel split of the parameter declared last (partition.h).
  void Split(TpSplit split, int64_t blocks = 1) {
    out.back().tp_split = split;
    out.back().tp_blocks = blocks;
  }
  // The token embedding (vocab-parallel), tied to the LM head when `tied`.
  void TokenEmbedding(std::string name, Shape shape, bool tied) {
    Add(std::move(name), shape, ParamKind::kEmbedding, InitRule::kNormal);
    Split(TpSplit::kVocab);
    out.back().tied = tied;
  }
  void LmHead(int64_t V, int64_t C) {
    Matrix("lm_head.weight", {V, C});
    Split(TpSplit::kVocab);
  }
  void NormWeight(std::string name, int64_t n) {
    Add(std::move(name), {n}, ParamKind::kNorm, InitRule::kOnes);
  }
  // GPT-2 LayerNorm: weight and bias (HF names "<prefix>.weight", "<prefix>.bias").
  void LayerNorm(const std::string& prefix, int64_t n) {
    NormWeight(prefix + ".weight", n);
    Bias(prefix + ".bias", n);
  }

  // A routed expert weight: (E, rows, cols), on the expert axis, in the current unit.
  void Expert(std::string name, Shape shape, InitRule init) {
    Add(std::move(name), shape, shape.rank() == 2 ? ParamKind::kBias : ParamKind::kMatrix, init);
    out.back().expert = true;
  }

  std::vector<ParamDecl> out;
  int unit = 0;  // of the next Add (param_store.h): 0 embeddings, 1 + l block l, L + 1 the rest
};

// The MoE half of block i's unit (after its second norm): the router and the shared experts.
// Shared experts are one MLP of width S = shared_experts * expert_ffn (gpt2: c_fc, c_proj with
// biases; llama: gate_proj, up_proj adjacent, then down_proj). Whole on every tp rank.
void DeclareRouterAndShared(const ModelConfig& c, const std::string& p, Declarer& d) {
  const int64_t C = c.hidden_size, E = c.moe.num_experts;
  const int64_t S = c.moe.shared_experts * c.expert_ffn();
  const bool gpt2 = c.family == ModelFamily::kGpt2;
  d.Matrix(p + (gpt2 ? "mlp.router.weight" : "mlp.gate.weight"), {E, C});
  if (S == 0) return;
  if (gpt2) {
    d.Matrix(p + "mlp.shared_experts.c_fc.weight", {S, C});
    d.Bias(p + "mlp.shared_experts.c_fc.bias", S);
    d.Matrix(p + "mlp.shared_experts.c_proj.weight", {C, S}, InitRule::kResidualNormal);
    d.Bias(p + "mlp.shared_experts.c_proj.bias", C);
  } else {
    const std::string shared = SharedExpertPrefix(c);
    d.Matrix(p + shared + "gate_proj.weight", {S, C});
    d.Matrix(p + shared + "up_proj.weight", {S, C});
    d.Matrix(p + shared + "down_proj.weight", {C, S}, InitRule::kResidualNormal);
    if (c.moe.shared_expert_gate) d.Matrix(p + "mlp.shared_expert_gate.weight", {1, C});
  }
}

// The routed experts of every MoE block, each block's in its own unit after the final unit,
// stacked on the expert axis: gpt2 c_fc (E, Fe, C) + bias (E, Fe), c_proj (E, C, Fe) + bias
// (E, C); llama gate_up_proj (E, 2Fe, C) with each expert's [gate | up] rows (one GEMM per
// expert, as the dense [gate | up]), down_proj (E, C, Fe).
void DeclareExperts(const ModelConfig& c, Declarer& d) {
  const int64_t C = c.hidden_size, E = c.moe.num_experts, Fe = c.expert_ffn();
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (!c.is_moe_layer(i)) continue;
    d.unit = ExpertUnit(c, i);
    if (c.family == ModelFamily::kGpt2) {
      const std::string p = "h." + std::to_string(i) + ".mlp.experts.";
      d.Expert(p + "c_fc.weight", {E, Fe, C}, InitRule::kNormal);
      d.Expert(p + "c_fc.bias", {E, Fe}, InitRule::kZeros);
      d.Expert(p + "c_proj.weight", {E, C, Fe}, InitRule::kResidualNormal);
      d.Expert(p + "c_proj.bias", {E, C}, InitRule::kZeros);
    } else {
      const std::string p = "model.layers." + std::to_string(i) + ".mlp.experts.";
      d.Expert(p + "gate_up_proj", {E, 2 * Fe, C}, InitRule::kNormal);
      d.Expert(p + "down_proj", {E, C, Fe}, InitRule::kResidualNormal);
    }
  }
}

// finetune.lora: every base parameter frozen, then each block's adapters in its adapter unit
// (models/lora.h), A then B per target in site order.
void DeclareAdapters(const ModelConfig& c, Declarer& d) {
  if (!c.lora.enabled()) return;
  for (ParamDecl& p : d.out) p.frozen = true;
  const int64_t r = c.lora.rank;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    d.unit = AdapterUnit(c, i);
    for (const LoraTarget& t : LoraTargetsOf(c, i)) {
      const std::string p = BlockPrefix(c, i) + t.module;
      d.Matrix(p + ".lora_A.weight", {r, t.in}, InitRule::kLoraA);
      if (!t.column()) d.Split(TpSplit::kCols);  // a row-parallel site's input columns
      d.Matrix(p + ".lora_B.weight", {t.out, r}, InitRule::kZeros);
      if (t.column()) d.Split(TpSplit::kRows, t.tp_blocks);  // the site's output rows
    }
  }
}

void DeclareGpt2(const ModelConfig& c, Declarer& d) {
  const int64_t C = c.hidden_size, F = c.ffn_size(), V = c.vocab_size;
  d.TokenEmbedding("wte.weight", {V, C}, c.tie_embeddings);
  d.Add("wpe.weight", {c.max_seq_len, C}, ParamKind::kEmbedding, InitRule::kNormal);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    d.unit = static_cast<int>(1 + i);
    const std::string p = "h." + std::to_string(i) + ".";
    d.LayerNorm(p + "ln_1", C);
    d.Matrix(p + "attn.c_attn.weight", {3 * C, C}, InitRule::kNormal, true);
    d.Split(TpSplit::kRows, 3);  // [q | k | v]: each rank takes its heads of all three
    d.Bias(p + "attn.c_attn.bias", 3 * C);
    d.Split(TpSplit::kRows, 3);
    d.Matrix(p + "attn.c_proj.weight", {C, C}, InitRule::kResidualNormal, true);
    d.Split(TpSplit::kCols);
    d.Bias(p + "attn.c_proj.bias", C);  // added after the tp sum: whole
    d.LayerNorm(p + "ln_2", C);
    if (c.is_moe_layer(i)) {
      DeclareRouterAndShared(c, p, d);
      continue;
    }
    d.Matrix(p + "mlp.c_fc.weight", {F, C}, InitRule::kNormal, true);
    d.Split(TpSplit::kRows);
    d.Bias(p + "mlp.c_fc.bias", F);
    d.Split(TpSplit::kRows);
    d.Matrix(p + "mlp.c_proj.weight", {C, F}, InitRule::kResidualNormal, true);
    d.Split(TpSplit::kCols);
    d.Bias(p + "mlp.c_proj.bias", C);
  }
  d.unit = static_cast<int>(c.num_layers + 1);
  d.LayerNorm("ln_f", C);
  if (!c.tie_embeddings) d.LmHead(V, C);
  DeclareExperts(c, d);
  DeclareAdapters(c, d);
}

void DeclareLlama(const ModelConfig& c, Declarer& d) {
  const int64_t C = c.hidden_size, F = c.ffn_size(), V = c.vocab_size;
  const int64_t HS = c.head_size(), NH = c.num_heads, NKV = c.kv_heads();
  d.TokenEmbedding("model.embed_tokens.weight", {V, C}, c.tie_embeddings);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    d.unit = static_cast<int>(1 + i);
    const std::string p = "model.layers." + std::to_string(i) + ".";
    d.NormWeight(p + "input_layernorm.weight", C);
    d.Matrix(p + "self_attn.q_proj.weight", {NH * HS, C});  // q, k, v adjacent: one GEMM
    d.Split(TpSplit::kRows);
    d.Matrix(p + "self_attn.k_proj.weight", {NKV * HS, C});
    d.Split(TpSplit::kRows);
    d.Matrix(p + "self_attn.v_proj.weight", {NKV * HS, C});
    d.Split(TpSplit::kRows);
    if (c.qkv_bias) {  // Qwen2: q, k, v biases adjacent too, fused into the same GEMM
      d.Bias(p + "self_attn.q_proj.bias", NH * HS);
      d.Split(TpSplit::kRows);
      d.Bias(p + "self_attn.k_proj.bias", NKV * HS);
      d.Split(TpSplit::kRows);
      d.Bias(p + "self_attn.v_proj.bias", NKV * HS);
      d.Split(TpSplit::kRows);
    }
    if (c.qk_norm) {  // Qwen3: one weight for every q head, one for every k head (whole on tp ranks)
      d.NormWeight(p + "self_attn.q_norm.weight", HS);
      d.NormWeight(p + "self_attn.k_norm.weight", HS);
    }
    d.Matrix(p + "self_attn.o_proj.weight", {C, NH * HS}, InitRule::kResidualNormal);
    d.Split(TpSplit::kCols);
    d.NormWeight(p + "post_attention_layernorm.weight", C);
    if (c.is_moe_layer(i)) {
      DeclareRouterAndShared(c, p, d);
      continue;
    }
    d.Matrix(p + "mlp.gate_proj.weight", {F, C});  // gate, up adjacent: one GEMM
    d.Split(TpSplit::kRows);
    d.Matrix(p + "mlp.up_proj.weight", {F, C});
    d.Split(TpSplit::kRows);
    d.Matrix(p + "mlp.down_proj.weight", {C, F}, InitRule::kResidualNormal);
    d.Split(TpSplit::kCols);
  }
  d.unit = static_cast<int>(c.num_layers + 1);
  d.NormWeight("model.norm.weight", C);
  if (!c.tie_embeddings) d.LmHead(V, C);
  DeclareExperts(c, d);
  DeclareAdapters(c, d);
}

}  // namespace

std::string SharedExpertPrefix(const ModelConfig& c) {
  return c.moe.shared_expert_gate ? "mlp.shared_expert." : "mlp.shared_experts.";
}

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
  int64_t n = 0, experts = 0;
  for (const ParamDecl& p : DeclareParameters(config)) {
    if (p.kind != ParamKind::kMatrix && !p.tied) continue;
    (p.expert ? experts : n) += p.shape.numel();
  }
  // A token goes through top_k of the num_experts routed experts.
  if (experts > 0) n += experts / config.moe.num_experts * config.moe.top_k;
  return n;
}

int64_t MoeMatmulParams(const ModelConfig& config) {
  if (!config.moe.enabled()) return 0;
  const int64_t C = config.hidden_size, E = config.moe.num_experts, Fe = config.expert_ffn();
  const int64_t S = config.moe.shared_experts * Fe;
  const int64_t fc = config.family == ModelFamily::kGpt2 ? 1 : 2;  // llama: [gate | up]
  const int64_t per_layer = E * C + (fc + 1) * S * C + config.moe.top_k * (fc + 1) * Fe * C;
  return per_layer * config.num_moe_layers();
}

int NumUnits(const ModelConfig& config) {
  const int64_t adapters = config.lora.enabled() ? config.num_layers : 0;
  return static_cast<int>(config.num_layers + 2 + config.num_moe_layers() + adapters);
}

int AdapterUnit(const ModelConfig& config, int64_t layer) {
  TESSERA_CHECK(config.lora.enabled() && 0 <= layer && layer < config.num_layers);
  return static_cast<int>(config.num_layers + 2 + config.num_moe_layers() + layer);
}

int ExpertUnit(const ModelConfig& config, int64_t layer) {
  TESSERA_CHECK(config.is_moe_layer(layer));
  return static_cast<int>(config.num_layers + 2 + config.moe_layers_before(layer));
}

std::vector<int64_t> UnitBounds(const ModelConfig& config) {
  const int units = NumUnits(config);
  std::vector<int64_t> bounds(units + 1, 0);
  // Declarations come in unit order: bounds[u + 1] accumulates the sizes of units <= u.
  for (const ParamDecl& p : DeclareParameters(config)) bounds[p.unit + 1] += p.shape.numel();
  for (int u = 0; u < units; ++u) {
    TESSERA_CHECK(bounds[u + 1] > 0);
    bounds[u + 1] += bounds[u];
  }
  return bounds;
}

namespace {

// Elements per independently seeded init work item (lets init run in parallel, same bits).
constexpr int64_t kInitChunk = 4096;

}  // namespace

void InitParameterRange(const ModelConfig& config, uint64_t seed, int64_t begin, int64_t end,
                        float* out) {
  TESSERA_CHECK(0 <= begin && begin <= end);
  const double std_all = config.init_std;
  const double std_resid = std_all / std::sqrt(2.0 * static_cast<double>(config.num_layers));
  // Work items: pieces of at most kInitChunk elements of one parameter, within [begin, end).
  struct Item {
    uint64_t key;       // the parameter's stream
    bool constant;      // kZeros / kOnes: `fill`; otherwise sd * N(0, 1)
    double sd;
    float fill;
    int64_t first;      // element index within the parameter
    int64_t count;
    float* dst;
  };
  std::vector<Item> items;
  const std::vector<ParamDecl> decls = DeclareParameters(config);
  int64_t offset = 0;
  for (size_t i = 0; i < decls.size() && offset < end; ++i) {
    const int64_t n = decls[i].shape.numel();
    const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
    if (lo < hi) {
      const InitRule rule = decls[i].init;
      Item it;
      it.key = StreamKey(seed, kInitStream, i);
      it.constant = rule == InitRule::kZeros || rule == InitRule::kOnes;
      it.sd = rule == InitRule::kResidualNormal ? std_resid : std_all;
      if (rule == InitRule::kLoraA) it.sd = 1.0 / std::sqrt(3.0 * static_cast<double>(decls[i].shape[1]));
      it.fill = rule == InitRule::kOnes ? 1.0f : 0.0f;
      for (int64_t j = lo; j < hi; j += kInitChunk) {
        it.first = j - offset;
        it.count = std::min(hi, j + kInitChunk) - j;
        it.dst = out + (j - begin);
        items.push_back(it);
      }
    }
    offset += n;
  }
  // The loop stops once past `end`, so offset < end only when end exceeds the parameters.
  TESSERA_CHECK_MSG(end <= offset, "init range end %ld beyond the %ld parameters",
                    static_cast<long>(end), static_cast<long>(offset));
  const int64_t num_items = static_cast<int64_t>(items.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < num_items; ++k) {
    const Item& it = items[k];
    if (it.constant) {
      std::fill(it.dst, it.dst + it.count, it.fill);
      continue;
    }
    // Element j is draw j of the parameter's stream, whichever item computes it.
    Rng rng(it.key, static_cast<uint64_t>(2 * it.first));
    for (int64_t j = 0; j < it.count; ++j) it.dst[j] = static_cast<float>(it.sd * rng.NextNormal());
  }
}

}  // namespace tessera
