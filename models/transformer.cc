// models/transformer.cc — the decoder-only transformer of transformer.h (GPT-2 and Llama).
//
// Owns: validation of the model shape, the parameter/gradient buffers and their named views,
// deterministic init, and one training step: embeddings -> blocks (block.h) -> final norm ->
// fused LM head + cross-entropy -> backward in reverse. Activations and workspace come from two
// arenas whose capacities a measuring pass learns at Create for (B, T) and the policy.
// Thread-safety: one thread drives a model (transformer.h).
#include "models/transformer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>

#include "models/block.h"
#include "models/param_layout.h"
#include "runtime/core/random.h"
#include "runtime/kernels/cpu/ops.h"

namespace tessera {
namespace {

// Stream id of parameter init in StreamKey(seed, kInitStream, parameter index).
constexpr uint64_t kInitStream = 0x696e6974;  // "init"
// Elements per independently seeded init chunk (lets init run in parallel, same bits).
constexpr int64_t kInitChunk = 4096;
// The LM head's logits are materialised for at most this many floats at a time (64 MiB), in
// chunks of 64..256 rows: few chunks keep the d_weight accumulation (a pass over the whole
// (V, C) gradient per chunk) cheap, and GEMMs of >= 64 rows stay efficient.
constexpr int64_t kLogitsScratchFloats = int64_t{16} << 20;

std::string Num(int64_t v) { return std::to_string(v); }

// Refuses shapes whose buffers cannot exist on this machine, before any size is computed in
// int64 (where products like B*NH*T*T of absurd configs would overflow) or allocated (where
// running out of memory would abort). The estimate, in double, is an upper bound of what the
// measuring pass will ask for: parameters and gradients, activations kept under the `none`
// policy (about 16 floats per token per C plus the MLP width and attention probabilities),
// and the logits scratch.
Status CheckFitsInMemory(const ModelConfig& c, int64_t B, int64_t T) {
  const double C = c.hidden_size, L = c.num_layers, V = c.vocab_size, F = c.ffn_size();
  const double NH = c.num_heads, HS = C / NH, NKV = c.kv_heads(), tokens = double(B) * T;
  const double per_layer = C * (NH + 2 * NKV) * HS + NH * HS * C + 3 * C * F + 4 * C;
  const double params = L * per_layer + V * C * (c.tie_embeddings ? 1 : 2) + c.max_seq_len * C;
  const double acts = L * tokens * (16 * C + 3 * F) + L * B * NH * double(T) * T + tokens * 4 * C;
  const double bytes = 4.0 * (2 * params + acts) + 4.0 * kLogitsScratchFloats;
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  if (bytes > ram) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "model: needs about %.1f GiB for parameters, gradients and activations at "
                  "micro-batch %lld x sequence %lld, but this machine has %.1f GiB",
                  bytes / 1073741824.0, static_cast<long long>(B), static_cast<long long>(T),
                  ram / 1073741824.0);
    return InvalidArgument(std::string(buf) +
                           " (reduce the model size, train.micro_batch_size or train.seq_len)");
  }
  return Status::Ok();
}

Status Validate(const ModelConfig& c, int64_t B, int64_t T) {
  auto bad = [](const std::string& m) { return InvalidArgument("model: " + m); };
  const bool gpt2 = c.family == ModelFamily::kGpt2;
  if (c.vocab_size < 2) return bad("vocab_size=" + Num(c.vocab_size) + " must be >= 2");
  if (c.num_layers < 1) return bad("num_layers=" + Num(c.num_layers) + " must be >= 1");
  if (c.hidden_size < 1) return bad("hidden_size=" + Num(c.hidden_size) + " must be >= 1");
  if (c.num_heads < 1) return bad("num_heads=" + Num(c.num_heads) + " must be >= 1");
  if (c.hidden_size % c.num_heads != 0) {
    return bad("hidden_size=" + Num(c.hidden_size) + " is not divisible by num_heads=" +
               Num(c.num_heads));
  }
  if (c.num_kv_heads < 0) return bad("num_kv_heads=" + Num(c.num_kv_heads) + " must be >= 0");
  if (c.num_heads % c.kv_heads() != 0) {
    return bad("num_kv_heads=" + Num(c.kv_heads()) + " does not divide num_heads=" +
               Num(c.num_heads));
  }
  if (gpt2 && c.kv_heads() != c.num_heads) {
    return bad("gpt2 needs num_kv_heads == num_heads (num_kv_heads=" + Num(c.kv_heads()) +
               ", num_heads=" + Num(c.num_heads) + ")");
  }
  if (!gpt2 && c.head_size() % 2 != 0) {
    return bad("llama RoPE needs an even head size (hidden_size=" + Num(c.hidden_size) +
               " / num_heads=" + Num(c.num_heads) + " = " + Num(c.head_size()) + ")");
  }
  if (c.ffn_hidden_size < 0) {
    return bad("ffn_hidden_size=" + Num(c.ffn_hidden_size) + " must be >= 0");
  }
  if (c.max_seq_len < 1) return bad("max_seq_len=" + Num(c.max_seq_len) + " must be >= 1");
  if (!(c.norm_eps > 0)) return bad("norm_eps=" + std::to_string(c.norm_eps) + " must be > 0");
  if (!gpt2 && !(c.rope_theta > 0)) {
    return bad("rope_theta=" + std::to_string(c.rope_theta) + " must be > 0");
  }
  if (!(c.init_std > 0)) return bad("init_std=" + std::to_string(c.init_std) + " must be > 0");
  if (B < 1) return bad("micro-batch size B=" + Num(B) + " must be >= 1");
  if (T < 1) return bad("sequence length T=" + Num(T) + " must be >= 1");
  if (T > c.max_seq_len) {
    return bad("sequence length T=" + Num(T) + " exceeds max_seq_len=" + Num(c.max_seq_len));
  }
  return CheckFitsInMemory(c, B, T);
}

class TransformerImpl final : public Transformer {
 public:
  TransformerImpl(const ModelConfig& config, int64_t B, int64_t T, MemoryTracker* tracker);

  void InitRandom(uint64_t seed) override;
  double ForwardBackward(const int32_t* inputs, const int32_t* targets,
                         float grad_scale) override {
    return Step(inputs, targets, grad_scale, /*backward=*/true);
  }
  double Forward(const int32_t* inputs, const int32_t* targets) override {
    return Step(inputs, targets, 0.0f, /*backward=*/false);
  }
  void ZeroGrads() override { std::memset(grads_.data(), 0, grads_.nbytes()); }
  void SetGradReadyCallback(GradReadyCallback callback) override {
    grad_ready_ = std::move(callback);
  }

  const ModelConfig& config() const override { return config_; }
  int64_t batch_size() const override { return B_; }
  int64_t seq_len() const override { return T_; }
  std::span<Parameter> parameters() override { return params_; }
  Tensor flat_params() override { return flat_params_; }
  Tensor flat_grads() override { return grads_; }
  int64_t num_params() const override { return flat_params_.numel(); }
  // PaLM's estimate (Chowdhery et al. 2022, appendix B): 6 FLOPs per matmul weight per token
  // (2 forward, 4 backward) plus 12 * L * C * T for the attention scores and their use
  // (QK^T and att@V: 2*T*C FLOPs each per token and layer forward, twice that backward), at
  // the sequence length T of Create.
  double TrainFlopsPerToken() const override {
    return 6.0 * static_cast<double>(MatmulParams(config_)) +
           12.0 * static_cast<double>(config_.num_layers * config_.hidden_size * T_);
  }

 private:
  void LayOutParameters();
  void BindBlocks();
  void MeasureArenas();
  void CheckTokens(const int32_t* inputs, const int32_t* targets) const;
  double Step(const int32_t* inputs, const int32_t* targets, float grad_scale, bool backward);
  void ForwardBody(StepArenas& arenas, const int32_t* inputs);
  void BackwardBody(StepArenas& arenas, const int32_t* inputs, const Tensor& d_h,
                    size_t d_h_mark, const Tensor& d_res);

  ModelConfig config_;
  int64_t B_, T_;
  MemoryTracker* tracker_;
  DecoderBlock block_;
  int64_t chunk_rows_ = 0;

  Arena param_arena_, grad_arena_, act_, ws_;
  Tensor flat_params_, grads_;  // (num_params)
  std::vector<Parameter> params_;
  std::vector<InitRule> init_rules_;  // per parameter
  std::unordered_map<std::string, int> index_;

  // Grad-ready hook (transformer.h) and the flat ranges it reports.
  struct Range {
    int64_t begin = 0, end = 0;
  };
  void GradReady(const StepArenas& arenas, const Range& r) const {
    if (grad_ready_ && arenas.live() && r.end > r.begin) grad_ready_(r.begin, r.end);
  }
  GradReadyCallback grad_ready_;
  std::vector<Range> block_range_;  // per block: all of its parameters
  Range embed_range_, final_norm_range_, head_range_;  // head_range_ empty when tied

  // Views used by the step.
  std::vector<BlockWeights> block_w_;
  std::vector<BlockGrads> block_g_;
  const float *wte_ = nullptr, *wpe_ = nullptr, *lnf_w_ = nullptr, *lnf_b_ = nullptr,
              *head_w_ = nullptr;
  float *d_wte_ = nullptr, *d_wpe_ = nullptr, *d_lnf_w_ = nullptr, *d_lnf_b_ = nullptr,
        *d_head_w_ = nullptr;

  // Per-step state, reallocated from the arenas each step.
  std::vector<Tensor> resid_;        // L+1 x (N, C): embeddings, then each block's output
  std::vector<BlockSaved> saved_;    // per block, what the policy keeps
  struct {
    Tensor out;   // (N, C) h = final_norm(x_L), the LM head's input
    Tensor mean;  // (N)    GPT-2 only
    Tensor rstd;  // (N)
  } final_;
};

BlockDims MakeDims(const ModelConfig& c, int64_t B, int64_t T) {
  BlockDims d;
  d.family = c.family;
  d.B = B;
  d.T = T;
  d.C = c.hidden_size;
  d.NH = c.num_heads;
  d.NKV = c.kv_heads();
  d.HS = c.head_size();
  d.F = c.ffn_size();
  d.eps = c.norm_eps;
  d.rope_theta = c.rope_theta;
  return d;
}

TransformerImpl::TransformerImpl(const ModelConfig& config, int64_t B, int64_t T,
                                 MemoryTracker* tracker)
    : config_(config),
      B_(B),
      T_(T),
      tracker_(tracker),
      block_(MakeDims(config, B, T)),
      param_arena_(Arena::Measuring(MemoryKind::kParameters)),
      grad_arena_(Arena::Measuring(MemoryKind::kGradients)),
      act_(Arena::Measuring(MemoryKind::kActivations)),
      ws_(Arena::Measuring(MemoryKind::kWorkspace)) {
  // Equal chunks of at most `rows` rows.
  const int64_t rows = std::clamp<int64_t>(kLogitsScratchFloats / config.vocab_size, 64, 256);
  const int64_t chunks = (B * T + rows - 1) / rows;
  chunk_rows_ = (B * T + chunks - 1) / chunks;
  LayOutParameters();
  BindBlocks();
  MeasureArenas();
}

void TransformerImpl::LayOutParameters() {
  std::vector<ParamDecl> decls = DeclareParameters(config_);
  int64_t total = 0;
  for (const ParamDecl& d : decls) total += d.shape.numel();
  const size_t bytes = static_cast<size_t>(total) * sizeof(float);
  param_arena_ = Arena(MemoryKind::kParameters, bytes, tracker_);
  grad_arena_ = Arena(MemoryKind::kGradients, bytes, tracker_);
  flat_params_ = param_arena_.Allocate(DType::kF32, {total});
  grads_ = grad_arena_.Allocate(DType::kF32, {total});

  int64_t offset = 0;
  params_.reserve(decls.size());
  for (ParamDecl& d : decls) {
    Parameter p;
    p.kind = d.kind;
    p.hf_transposed = d.hf_transposed;
    p.offset = offset;
    p.value = Tensor(flat_params_.f32() + offset, DType::kF32, d.shape);
    p.grad = Tensor(grads_.f32() + offset, DType::kF32, d.shape);
    p.spec = ShardSpec::Whole(d.name, d.shape);
    index_[d.name] = static_cast<int>(params_.size());
    params_.push_back(std::move(p));
    init_rules_.push_back(d.init);
    offset += d.shape.numel();
  }
}

void TransformerImpl::BindBlocks() {
  auto find = [&](const std::string& name) -> Parameter& {
    auto it = index_.find(name);
    TESSERA_CHECK_MSG(it != index_.end(), "no parameter %s", name.c_str());
    return params_[it->second];
  };
  auto w = [&](const std::string& name) -> const float* { return find(name).value.f32(); };
  auto g = [&](const std::string& name) -> float* { return find(name).grad.f32(); };
  // Fused GEMMs read several adjacent parameters as one matrix.
  auto check_adjacent = [&](const std::string& a, const std::string& b) {
    const Parameter& pa = find(a);
    TESSERA_CHECK(pa.offset + pa.numel() == find(b).offset);
  };

  const bool gpt2 = config_.family == ModelFamily::kGpt2;
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    BlockWeights bw;
    BlockGrads bg;
    // Fills both structs from the name of each field's parameter.
    auto bind = [&](const float*& wf, float*& gf, const std::string& name) {
      wf = w(name);
      gf = g(name);
    };
    if (gpt2) {
      const std::string p = "h." + std::to_string(i) + ".";
      bind(bw.norm1_w, bg.norm1_w, p + "ln_1.weight");
      bind(bw.norm1_b, bg.norm1_b, p + "ln_1.bias");
      bind(bw.qkv_w, bg.qkv_w, p + "attn.c_attn.weight");
      bind(bw.qkv_b, bg.qkv_b, p + "attn.c_attn.bias");
      bind(bw.proj_w, bg.proj_w, p + "attn.c_proj.weight");
      bind(bw.proj_b, bg.proj_b, p + "attn.c_proj.bias");
      bind(bw.norm2_w, bg.norm2_w, p + "ln_2.weight");
      bind(bw.norm2_b, bg.norm2_b, p + "ln_2.bias");
      bind(bw.fc_w, bg.fc_w, p + "mlp.c_fc.weight");
      bind(bw.fc_b, bg.fc_b, p + "mlp.c_fc.bias");
      bind(bw.out_w, bg.out_w, p + "mlp.c_proj.weight");
      bind(bw.out_b, bg.out_b, p + "mlp.c_proj.bias");
    } else {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      check_adjacent(p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight");
      check_adjacent(p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight");
      check_adjacent(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight");
      bind(bw.norm1_w, bg.norm1_w, p + "input_layernorm.weight");
      bind(bw.qkv_w, bg.qkv_w, p + "self_attn.q_proj.weight");
      bind(bw.proj_w, bg.proj_w, p + "self_attn.o_proj.weight");
      bind(bw.norm2_w, bg.norm2_w, p + "post_attention_layernorm.weight");
      bind(bw.fc_w, bg.fc_w, p + "mlp.gate_proj.weight");
      bind(bw.out_w, bg.out_w, p + "mlp.down_proj.weight");
    }
    block_w_.push_back(bw);
    block_g_.push_back(bg);
  }
  const std::string emb = gpt2 ? "wte.weight" : "model.embed_tokens.weight";
  const std::string fin = gpt2 ? "ln_f" : "model.norm";
  wte_ = w(emb);
  d_wte_ = g(emb);
  if (gpt2) {
    wpe_ = w("wpe.weight");
    d_wpe_ = g("wpe.weight");
    lnf_b_ = w(fin + ".bias");
    d_lnf_b_ = g(fin + ".bias");
  }
  lnf_w_ = w(fin + ".weight");
  d_lnf_w_ = g(fin + ".weight");
  const std::string head = config_.tie_embeddings ? emb : "lm_head.weight";
  head_w_ = w(head);
  d_head_w_ = g(head);

  // Flat ranges for the grad-ready hook, from the layout order (param_layout.h): embeddings,
  // blocks, final norm, untied head. Each group is contiguous.
  auto span_of = [&](const std::string& first, const std::string& last) {
    const Parameter& b = find(first);
    const Parameter& e = find(last);
    return Range{b.offset, e.offset + e.numel()};
  };
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    const std::string p = (gpt2 ? "h." : "model.layers.") + std::to_string(i) + ".";
    block_range_.push_back(gpt2 ? span_of(p + "ln_1.weight", p + "mlp.c_proj.bias")
                                : span_of(p + "input_layernorm.weight", p + "mlp.down_proj.weight"));
  }
  embed_range_ = span_of(emb, gpt2 ? "wpe.weight" : emb);
  final_norm_range_ = span_of(fin + ".weight", gpt2 ? fin + ".bias" : fin + ".weight");
  if (!config_.tie_embeddings) head_range_ = span_of("lm_head.weight", "lm_head.weight");
  int64_t covered = embed_range_.end - embed_range_.begin + final_norm_range_.end -
                    final_norm_range_.begin + head_range_.end - head_range_.begin;
  for (const Range& r : block_range_) covered += r.end - r.begin;
  TESSERA_CHECK(covered == flat_params_.numel());
}

// Runs a training step and an evaluation step on measuring arenas (no arithmetic), then
// reserves real arenas of the larger of the two peaks.
void TransformerImpl::MeasureArenas() {
  Step(nullptr, nullptr, 1.0f, /*backward=*/true);
  size_t act_bytes = act_.peak(), ws_bytes = ws_.peak();
  act_ = Arena::Measuring(MemoryKind::kActivations);
  ws_ = Arena::Measuring(MemoryKind::kWorkspace);
  Step(nullptr, nullptr, 0.0f, /*backward=*/false);
  act_bytes = std::max(act_bytes, act_.peak());
  ws_bytes = std::max(ws_bytes, ws_.peak());
  act_ = Arena(MemoryKind::kActivations, act_bytes, tracker_);
  ws_ = Arena(MemoryKind::kWorkspace, ws_bytes, tracker_);
}

void TransformerImpl::InitRandom(uint64_t seed) {
  const double std_all = config_.init_std;
  const double std_resid = std_all / std::sqrt(2.0 * static_cast<double>(config_.num_layers));
  for (size_t i = 0; i < params_.size(); ++i) {
    float* v = params_[i].value.f32();
    const int64_t n = params_[i].numel();
    const InitRule rule = init_rules_[i];
    if (rule == InitRule::kZeros || rule == InitRule::kOnes) {
      std::fill(v, v + n, rule == InitRule::kOnes ? 1.0f : 0.0f);
      continue;
    }
    const double sd = rule == InitRule::kResidualNormal ? std_resid : std_all;
    const uint64_t key = StreamKey(seed, kInitStream, i);
    const int64_t chunks = (n + kInitChunk - 1) / kInitChunk;
    // Element j is draw j of the parameter's stream (NextNormal takes two counters), whichever
    // thread computes it.
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * kInitChunk, end = std::min(n, begin + kInitChunk);
      Rng rng(key, static_cast<uint64_t>(2 * begin));
      for (int64_t j = begin; j < end; ++j) v[j] = static_cast<float>(sd * rng.NextNormal());
    }
  }
}

// Token ids come from the data pipeline; one out of range would read outside the embedding.
void TransformerImpl::CheckTokens(const int32_t* inputs, const int32_t* targets) const {
  const int64_t V = config_.vocab_size;
  for (int64_t i = 0; i < B_ * T_; ++i) {
    TESSERA_CHECK_MSG(inputs[i] >= 0 && inputs[i] < V, "input token %d at %ld not in [0, %ld)",
                      inputs[i], static_cast<long>(i), static_cast<long>(V));
    TESSERA_CHECK_MSG(targets[i] < V, "target token %d at %ld >= vocab_size %ld", targets[i],
                      static_cast<long>(i), static_cast<long>(V));
  }
}

// Forward through the embeddings, the blocks and the final norm: fills resid_, saved_ and
// final_ (h = final_norm(x_L), what the LM head reads).
void TransformerImpl::ForwardBody(StepArenas& arenas, const int32_t* inputs) {
  const bool live = arenas.live();
  const int64_t N = B_ * T_, C = config_.hidden_size, L = config_.num_layers;
  // x0 = embed[tokens] (+ wpe[t]); x_{l+1} = block_l(x_l)
  resid_.assign(L + 1, Tensor());
  saved_.assign(L, BlockSaved());
  resid_[0] = act_.Allocate(DType::kF32, {N, C});
  if (live) cpu::EmbeddingForward(resid_[0].f32(), inputs, wte_, wpe_, B_, T_, C);
  for (int64_t l = 0; l < L; ++l) {
    resid_[l + 1] = act_.Allocate(DType::kF32, {N, C});
    // Evaluation places tensors as training does, so it fits the same arenas; it simply does
    // not read back what was kept.
    block_.Forward(arenas, config_.recompute, resid_[l].f32(), resid_[l + 1].f32(), saved_[l],
                   block_w_[l]);
  }
  // h = final_norm(x_L)
  final_.out = act_.Allocate(DType::kF32, {N, C});
  final_.mean = config_.family == ModelFamily::kGpt2 ? act_.Allocate(DType::kF32, {N}) : Tensor();
  final_.rstd = act_.Allocate(DType::kF32, {N});
  if (!live) return;
  if (config_.family == ModelFamily::kGpt2) {
    cpu::LayerNormForward(final_.out.f32(), final_.mean.f32(), final_.rstd.f32(),
                          resid_[L].f32(), lnf_w_, lnf_b_, N, C, config_.norm_eps);
  } else {
    cpu::RmsNormForward(final_.out.f32(), final_.rstd.f32(), resid_[L].f32(), lnf_w_, N, C,
                        config_.norm_eps);
  }
}

// Backward from d_h = dL/dh to the embeddings; d_res (N, C) is the residual-stream gradient.
// d_h sits on top of the workspace at `d_h_mark`: it is released once the final norm has read
// it, so the blocks reuse its bytes.
void TransformerImpl::BackwardBody(StepArenas& arenas, const int32_t* inputs, const Tensor& d_h,
                                   size_t d_h_mark, const Tensor& d_res) {
  const int64_t N = B_ * T_, C = config_.hidden_size, L = config_.num_layers;
  // h = final_norm(x_L)
  if (arenas.live()) {
    if (config_.family == ModelFamily::kGpt2) {
      cpu::LayerNormBackward(d_res.f32(), d_lnf_w_, d_lnf_b_, d_h.f32(), resid_[L].f32(),
                             lnf_w_, final_.mean.f32(), final_.rstd.f32(), N, C);
    } else {
      cpu::RmsNormBackward(d_res.f32(), d_lnf_w_, d_h.f32(), resid_[L].f32(), lnf_w_,
                           final_.rstd.f32(), N, C);
    }
  }
  GradReady(arenas, final_norm_range_);
  ws_.Release(d_h_mark);
  // x_{l+1} = block_l(x_l)
  for (int64_t l = L - 1; l >= 0; --l) {
    block_.Backward(arenas, config_.recompute, d_res.f32(), resid_[l].f32(), saved_[l],
                    block_w_[l], block_g_[l]);
    GradReady(arenas, block_range_[l]);
  }
  // x0 = embed[tokens] (+ wpe[t])
  if (arenas.live()) {
    cpu::EmbeddingBackward(d_wte_, d_wpe_, d_res.f32(), inputs, B_, T_, C, config_.vocab_size);
  }
  GradReady(arenas, embed_range_);
}

double TransformerImpl::Step(const int32_t* inputs, const int32_t* targets, float grad_scale,
                             bool backward) {
  StepArenas arenas{&act_, &ws_};
  const bool live = arenas.live();
  const int64_t N = B_ * T_, C = config_.hidden_size, V = config_.vocab_size;
  act_.Release(0);
  ws_.Release(0);
  int64_t counted = 0;
  if (live) {
    CheckTokens(inputs, targets);
    for (int64_t i = 0; i < N; ++i) counted += targets[i] >= 0;
  }

  ForwardBody(arenas, inputs);

  // LM head + cross-entropy, fused with its backward: d_h = dL/dh, scaled for the mean over
  // counted tokens and the caller's accumulation factor.
  Tensor d_res = backward ? ws_.Allocate(DType::kF32, {N, C}) : Tensor();
  const size_t d_h_mark = ws_.Mark();
  Tensor d_h = backward ? ws_.Allocate(DType::kF32, {N, C}) : Tensor();
  const size_t head_mark = ws_.Mark();
  Tensor losses = ws_.Allocate(DType::kF32, {N});
  Tensor logits = ws_.Allocate(DType::kF32, {chunk_rows_, V});
  const float loss_scale =
      counted > 0 ? static_cast<float>(static_cast<double>(grad_scale) / counted) : 0.0f;
  double loss_sum = 0.0;
  if (live) {
    loss_sum = cpu::ClassifierForwardBackward(
        losses.f32(), backward ? d_h.f32() : nullptr, backward ? d_head_w_ : nullptr,
        final_.out.f32(), head_w_, targets, N, C, V, loss_scale, logits.f32(), chunk_rows_);
  }
  ws_.Release(head_mark);
  if (backward) GradReady(arenas, head_range_);

  if (backward) BackwardBody(arenas, inputs, d_h, d_h_mark, d_res);
  ws_.Release(0);
  return counted > 0 ? loss_sum / static_cast<double>(counted) : 0.0;
}

}  // namespace

Result<std::unique_ptr<Transformer>> Transformer::Create(const ModelConfig& config, int64_t B,
                                                         int64_t T, MemoryTracker* tracker) {
  RETURN_IF_ERROR(Validate(config, B, T));
  return std::unique_ptr<Transformer>(new TransformerImpl(config, B, T, tracker));
}

}  // namespace tessera
