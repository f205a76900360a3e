// models/transformer.cc — the decoder-only transformer of transformer.h (GPT-2 and Llama).
//
// Owns: validation of the model shape, the parameter/gradient buffers (unless a ParamStore is
// given) and their named views, deterministic init, and one training step: embeddings ->
// blocks (block.h) -> final norm -> fused LM head + cross-entropy -> backward in reverse.
// Weights and gradients are reached only through a ParamStore, unit by unit, in the order of
// param_store.h: the caller's, or FlatStore over the model's own buffers. Every pointer into a
// unit is the unit's base plus a unit-relative offset fixed at Create (BlockLayout for blocks).
// Activations and workspace come from two arenas whose capacities a measuring pass learns at
// Create for (B, T) and the policy; that pass makes no store calls (null weights, no
// arithmetic).
// Thread-safety: one thread drives a model (transformer.h).
#include "models/transformer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>

#include "models/block.h"
#include "models/param_layout.h"
#include "models/tensor_parallel.h"
#include "runtime/kernels/cpu/convert.h"
#include "runtime/kernels/cpu/ops.h"

namespace tessera {
namespace {

// The LM head's logits are materialised for at most this many floats at a time (64 MiB), in
// chunks of 64..256 rows: few chunks keep the d_weight accumulation (a pass over the whole
// (V, C) gradient per chunk) cheap, and GEMMs of >= 64 rows stay efficient.
constexpr int64_t kLogitsScratchFloats = int64_t{16} << 20;

std::string Num(int64_t v) { return std::to_string(v); }

// Refuses shapes whose buffers cannot exist on this machine, before any size is computed in
// int64 (where products like B*NH*T*T of absurd configs would overflow) or allocated (where
// running out of memory would abort). The estimate, in double, is an upper bound of what the
// measuring pass will ask for: parameters and gradients (unless a store holds them), activations
// kept under the `none` policy (about 16 floats per token per C plus the MLP width and
// attention probabilities), and the logits scratch.
Status CheckFitsInMemory(const ModelConfig& c, int64_t B, int64_t T, bool owns_params) {
  const double C = c.hidden_size, L = c.num_layers, V = c.vocab_size, F = c.ffn_size();
  const double NH = c.num_heads, HS = C / NH, NKV = c.kv_heads(), tokens = double(B) * T;
  const double per_layer = C * (NH + 2 * NKV) * HS + NH * HS * C + 3 * C * F + 4 * C;
  const double params = L * per_layer + V * C * (c.tie_embeddings ? 1 : 2) + c.max_seq_len * C;
  const double acts = L * tokens * (16 * C + 3 * F) + L * B * NH * double(T) * T + tokens * 4 * C;
  const double bytes = 4.0 * ((owns_params ? 2 * params : 0.0) + acts) + 4.0 * kLogitsScratchFloats;
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

Status Validate(const ModelConfig& c, int64_t B, int64_t T, const ModelOptions& options) {
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
  const DType act = options.activation_dtype;
  if (act != DType::kF32 && act != DType::kBF16 && act != DType::kF16) {
    return bad("activation dtype " + std::string(DTypeName(act)) + " is not f32, bf16 or f16");
  }
  if (options.contexts < 1) return bad("contexts=" + std::to_string(options.contexts) + " must be >= 1");
  if (options.partition != nullptr) {
    const ModelPartition& p = *options.partition;
    const int tp_size = options.tp != nullptr ? options.tp->size() : 1;
    const int tp_rank = options.tp != nullptr ? options.tp->rank() : 0;
    if (p.tp_size() != tp_size || p.tp_rank() != tp_rank) {
      return bad("the partition is for tp rank " + std::to_string(p.tp_rank()) + " of " +
                 std::to_string(p.tp_size()) + ", the tp group says " + std::to_string(tp_rank) +
                 " of " + std::to_string(tp_size));
    }
    if (options.chunk < 0 || options.chunk >= static_cast<int>(p.chunks().size())) {
      return bad("chunk " + std::to_string(options.chunk) + " of a partition with " +
                 std::to_string(p.chunks().size()) + " chunks");
    }
  } else if (options.chunk != 0) {
    return bad("chunk " + std::to_string(options.chunk) + " without a partition");
  }
  if (options.tp != nullptr && options.tp->size() > 1) {
    const int tp = options.tp->size();
    RETURN_IF_ERROR(ValidateTensorParallel(c, tp));
    if (options.sequence_parallel && (B * T) % tp != 0) {
      return InvalidArgument("parallel.sequence_parallel: the micro-batch's " + Num(B * T) +
                             " tokens (micro_batch_size " + Num(B) + " x seq_len " + Num(T) +
                             ") do not divide among parallel.tp=" + std::to_string(tp) +
                             " ranks");
    }
  }
  return CheckFitsInMemory(c, B, T, options.store == nullptr);
}

// The store of a model without one: units are ranges of its own flat buffers, and a unit's
// GradsDone reports that range to the grad-ready hook (transformer.h).
class FlatStore final : public ParamStore {
 public:
  FlatStore(float* params, float* grads, const std::vector<int64_t>* bounds,
            const Transformer::GradReadyCallback* grad_ready)
      : params_(params), grads_(grads), bounds_(bounds), grad_ready_(grad_ready) {}
  const float* Acquire(int unit) override { return params_ + (*bounds_)[unit]; }
  void Release(int unit) override {}
  float* Grads(int unit) override { return grads_ + (*bounds_)[unit]; }
  void GradsDone(int unit) override {
    const int64_t begin = (*bounds_)[unit], end = (*bounds_)[unit + 1];
    if (*grad_ready_ && end > begin) (*grad_ready_)(begin, end);
  }

 private:
  float* params_;
  float* grads_;
  const std::vector<int64_t>* bounds_;
  const Transformer::GradReadyCallback* grad_ready_;
};

// base + offset, null for a null base (measuring step) or an absent parameter (offset < 0).
template <typename T>
T* At(T* base, int64_t offset) {
  return base == nullptr || offset < 0 ? nullptr : base + offset;
}

class TransformerImpl final : public Transformer {
 public:
  TransformerImpl(const ModelConfig& config, int64_t B, int64_t T, MemoryTracker* tracker,
                  const ModelOptions& options);

  void InitRandom(uint64_t seed) override;
  double ForwardBackward(const int32_t* inputs, const int32_t* targets,
                         float grad_scale) override {
    return Step(inputs, targets, grad_scale, /*backward=*/true);
  }
  double Forward(const int32_t* inputs, const int32_t* targets) override {
    return Step(inputs, targets, 0.0f, /*backward=*/false);
  }
  double ForwardStage(int ctx, const int32_t* inputs, const int32_t* targets, const float* x_in,
                      float* x_out) override;
  void BackwardStage(int ctx, const float* d_out, float* d_in, float grad_scale) override;
  int64_t stage_rows() const override { return Rows(); }
  int contexts() const override { return static_cast<int>(ctx_.size()); }
  const PipelineChunk& chunk() const override { return chunk_; }
  void ZeroGrads() override {
    if (!grads_.empty()) std::memset(grads_.data(), 0, grads_.nbytes());
  }
  void SetGradReadyCallback(GradReadyCallback callback) override {
    TESSERA_CHECK_MSG(own_store_ != nullptr || !callback,
                      "a model with a ParamStore reports finished gradients via GradsDone");
    grad_ready_ = std::move(callback);
  }

  const ModelConfig& config() const override { return config_; }
  int64_t batch_size() const override { return B_; }
  int64_t seq_len() const override { return T_; }
  std::span<Parameter> parameters() override { return params_; }
  Tensor flat_params() override { return flat_params_; }
  Tensor flat_grads() override { return grads_; }
  int64_t num_params() const override { return bounds_.back(); }
  DType activation_dtype() const override { return act_dtype_; }
  const ModelPartition& partition() const override { return *partition_; }
  Status comm_status() const override { return tp_ ? tp_->status() : Status::Ok(); }
  // PaLM's estimate (Chowdhery et al. 2022, appendix B): 6 FLOPs per matmul weight per token
  // (2 forward, 4 backward) plus 12 * L * C * T for the attention scores and their use
  // (QK^T and att@V: 2*T*C FLOPs each per token and layer forward, twice that backward), at
  // the sequence length T of Create.
  double TrainFlopsPerToken() const override {
    return (6.0 * static_cast<double>(MatmulParams(config_)) +
            12.0 * static_cast<double>(config_.num_layers * config_.hidden_size * T_)) /
           partition_->tp_size();
  }

 private:
  void LayOutParameters();
  void BindBlocks();
  void MeasureArenas();
  void CheckTokens(const int32_t* inputs, const int32_t* targets) const;
  double Step(const int32_t* inputs, const int32_t* targets, float grad_scale, bool backward);
  // Uses context ctx for the pass that follows (its activation arena, saved tensors).
  StepArenas Begin(int ctx);
  void ForwardBody(StepArenas& arenas, const int32_t* inputs, const float* x_in);
  // d_h: dL/dh on top of the workspace at d_h_mark (last chunk only; empty otherwise).
  void BackwardBody(StepArenas& arenas, const int32_t* inputs, const Tensor& d_h,
                    size_t d_h_mark, const Tensor& d_res);
  double HeadPass(StepArenas& arenas, const int32_t* targets, float grad_scale, int64_t counted,
                  float* d_h);
  // Checks the token ids (CHECK failure when out of range) and counts the counted targets.
  int64_t Counted(const int32_t* inputs, const int32_t* targets) const;
  bool holds_unit(int u) const { return bounds_[u + 1] > bounds_[u]; }
  // Rounds n activations (or gradients) at x to act_dtype_; nothing for fp32.
  void Round(float* x, int64_t n) const {
    if (act_dtype_ != DType::kF32) cpu::RoundTo(act_dtype_, x, n);
  }

  // Store calls of a step. A measuring step (live == false) makes none: its weight and
  // gradient bases are null.
  // Units are chunk-relative here (0 embeddings, 1 + l block layer_begin + l, blocks + 1 the
  // final unit); a caller's store numbers the rank's units, chunk after chunk: unit_base_.
  const float* Acquire(bool live, int unit) {
    return live ? store_->Acquire(unit_base_ + unit) : nullptr;
  }
  void Release(bool live, int unit) {
    if (live) store_->Release(unit_base_ + unit);
  }
  void Prefetch(bool live, int unit) {
    if (live && unit >= 0 && unit < num_units() && holds_unit(unit)) {
      store_->Prefetch(unit_base_ + unit);
    }
  }
  float* Grads(bool live, int unit) { return live ? store_->Grads(unit_base_ + unit) : nullptr; }
  void GradsDone(bool live, int unit) {
    if (live) store_->GradsDone(unit_base_ + unit);
  }
  int num_units() const { return static_cast<int>(bounds_.size()) - 1; }
  int final_unit() const { return static_cast<int>(n_blocks_) + 1; }
  // Rows of the residual stream on this rank (N, or N/tp under sequence parallelism).
  int64_t Rows() const { return tp_ ? tp_->LocalRows(B_ * T_) : B_ * T_; }
  void EmbedForward(StepArenas& arenas, const int32_t* inputs, const float* embed);
  void EmbedBackward(StepArenas& arenas, const int32_t* inputs, const float* d_res,
                     float* embed_grads);
  void FinalNormBackward(StepArenas& arenas, float* d_res, const float* d_h, float* grads);
  double Head(StepArenas& arenas, const int32_t* targets, float loss_scale, const float* head_w,
              float* head_grads, float* d_h, Tensor& losses, Tensor& logits);

  ModelConfig config_;
  std::optional<ModelPartition> own_partition_;  // when ModelOptions gave none
  const ModelPartition* partition_;  // the rank's layout; this model runs its chunk `chunk_`
  int chunk_index_;
  PipelineChunk chunk_;
  int64_t n_blocks_;    // blocks of this chunk
  int unit_base_ = 0;   // the chunk's first unit in a caller's store
  std::unique_ptr<TensorParallel> tp_;  // tp >= 2 only
  int64_t B_, T_;
  MemoryTracker* tracker_;
  DType act_dtype_;
  DecoderBlock block_;
  int64_t chunk_rows_ = 0;

  Arena param_arena_, grad_arena_, ws_;
  Tensor flat_params_, grads_;  // (num_params); empty with a caller's store
  std::vector<Parameter> params_;
  std::unordered_map<std::string, int> index_;
  std::vector<int64_t> bounds_;  // the chunk's unit bounds, relative to its first element

  // The store every step goes through: the caller's, or own_store_ over the flat buffers.
  ParamStore* store_ = nullptr;
  std::unique_ptr<FlatStore> own_store_;
  GradReadyCallback grad_ready_;  // reported by own_store_

  // Unit-relative offsets (elements) of the weights a step reads, -1 when absent.
  std::vector<BlockLayout> block_layout_;  // per block, relative to unit 1 + l
  int64_t wte_off_ = -1, wpe_off_ = -1;    // unit 0
  int64_t lnf_w_off_ = -1, lnf_b_off_ = -1;  // unit L + 1
  int64_t head_off_ = -1;  // in unit 0 (tied) or L + 1
  // Base of unit L + 1 while it is acquired (from the final norm to its backward).
  const float* final_base_ = nullptr;

  // One micro-batch's activations, from its forward to its backward. A pipeline stage keeps
  // several (ModelOptions::contexts); the whole-model step uses context 0.
  struct Context {
    Arena act = Arena::Measuring(MemoryKind::kActivations);
    std::vector<Tensor> resid;      // blocks+1 x (Rows, C): the chunk's input, each block's output
    std::vector<BlockSaved> saved;  // per block, what the policy keeps
    struct {
      Tensor out;   // (Rows, C) h = final_norm(x_L), the LM head's input
      Tensor mean;  // (Rows)    GPT-2 only
      Tensor rstd;  // (Rows)
    } final;
    const int32_t* inputs = nullptr;   // a stage forward's token ids, for its backward
    const int32_t* targets = nullptr;  // and targets (the last chunk's recomputed head)
  };
  std::vector<Context> ctx_;
  Context* cur_ = nullptr;  // the context of the pass being run
};

// The block's dimensions on this rank: under tp its share of the heads and MLP width.
// Validate() has checked the split.
ModelPartition MakePartition(const ModelConfig& config, Communicator* tp) {
  auto p = tp != nullptr ? ModelPartition::Create(config, tp->size(), tp->rank())
                         : ModelPartition::Create(config, 1, 0);
  TESSERA_CHECK_MSG(p.ok(), "%s", p.status().ToString().c_str());
  return std::move(*p);
}

BlockDims MakeDims(const ModelConfig& c, int64_t B, int64_t T, DType act_dtype,
                   TensorParallel* tp) {
  const int t = tp != nullptr ? tp->size() : 1;
  BlockDims d;
  d.family = c.family;
  d.B = B;
  d.T = T;
  d.C = c.hidden_size;
  d.NH = c.num_heads / t;
  d.NKV = c.kv_heads() / t;
  d.HS = c.head_size();
  d.F = c.ffn_size() / t;
  d.tp = tp;
  d.eps = c.norm_eps;
  d.rope_theta = c.rope_theta;
  d.act_dtype = act_dtype;
  return d;
}

TransformerImpl::TransformerImpl(const ModelConfig& config, int64_t B, int64_t T,
                                 MemoryTracker* tracker, const ModelOptions& options)
    : config_(config),
      own_partition_(options.partition == nullptr
                         ? std::optional<ModelPartition>(MakePartition(config, options.tp))
                         : std::nullopt),
      partition_(options.partition != nullptr ? options.partition : &*own_partition_),
      chunk_index_(options.chunk),
      chunk_(partition_->chunks()[options.chunk]),
      n_blocks_(chunk_.layer_end - chunk_.layer_begin),
      tp_(options.tp != nullptr && options.tp->size() > 1
              ? std::make_unique<TensorParallel>(options.tp, options.sequence_parallel)
              : nullptr),
      B_(B),
      T_(T),
      tracker_(tracker),
      act_dtype_(options.activation_dtype),
      block_(MakeDims(config, B, T, options.activation_dtype, tp_.get())),
      param_arena_(Arena::Measuring(MemoryKind::kParameters)),
      grad_arena_(Arena::Measuring(MemoryKind::kGradients)),
      ws_(Arena::Measuring(MemoryKind::kWorkspace)),
      ctx_(static_cast<size_t>(std::max(1, options.contexts))) {
  // Equal chunks of at most `rows` rows.
  const int64_t rows = std::clamp<int64_t>(kLogitsScratchFloats / config.vocab_size, 64, 256);
  const int64_t chunks = (B * T + rows - 1) / rows;
  chunk_rows_ = (B * T + chunks - 1) / chunks;
  store_ = options.store;
  if (store_ != nullptr) unit_base_ = partition_->chunk_unit_begin(chunk_index_);
  LayOutParameters();
  BindBlocks();
  MeasureArenas();
}

// Named views at their flat offsets. Without a caller's store the model allocates the flat
// buffers and serves them through own_store_; with one, the views keep shape but no data.
void TransformerImpl::LayOutParameters() {
  {
    const std::vector<int64_t>& all = partition_->unit_bounds();
    const int first = partition_->chunk_unit_begin(chunk_index_);
    const int units = partition_->chunk_num_units(chunk_index_);
    bounds_.clear();
    for (int u = 0; u <= units; ++u) bounds_.push_back(all[first + u] - all[first]);
  }
  const int64_t chunk_begin = partition_->unit_bounds()[partition_->chunk_unit_begin(chunk_index_)];
  const int64_t total = bounds_.back();
  if (store_ == nullptr) {
    const size_t bytes = static_cast<size_t>(total) * sizeof(float);
    param_arena_ = Arena(MemoryKind::kParameters, bytes, tracker_);
    grad_arena_ = Arena(MemoryKind::kGradients, bytes, tracker_);
    flat_params_ = param_arena_.Allocate(DType::kF32, {total});
    grads_ = grad_arena_.Allocate(DType::kF32, {total});
    own_store_ = std::make_unique<FlatStore>(flat_params_.f32(), grads_.f32(), &bounds_,
                                             &grad_ready_);
    store_ = own_store_.get();
  }

  int64_t offset = 0;
  params_.reserve(partition_->params().size());
  for (const TpParam& tp : partition_->params()) {
    if (tp.chunk != chunk_index_) continue;
    const ParamDecl& d = tp.local;
    TESSERA_CHECK(tp.local_offset - chunk_begin == offset);
    Parameter p;
    p.kind = d.kind;
    p.hf_transposed = d.hf_transposed;
    p.offset = offset;
    float* value = flat_params_.empty() ? nullptr : flat_params_.f32() + offset;
    float* grad = grads_.empty() ? nullptr : grads_.f32() + offset;
    p.value = Tensor(value, DType::kF32, d.shape);
    p.grad = Tensor(grad, DType::kF32, d.shape);
    p.spec = ShardSpec::Whole(d.name, d.shape);
    p.spec.global_shape = tp.global_shape;
    // Each parameter lies inside its (chunk-relative) unit.
    const int u = d.unit - partition_->chunk_unit_begin(chunk_index_);
    TESSERA_CHECK(bounds_[u] <= offset && offset + d.shape.numel() <= bounds_[u + 1]);
    index_[d.name] = static_cast<int>(params_.size());
    params_.push_back(std::move(p));
    offset += d.shape.numel();
  }
  TESSERA_CHECK(offset == total);
}

void TransformerImpl::BindBlocks() {
  auto find = [&](const std::string& name) -> Parameter& {
    auto it = index_.find(name);
    TESSERA_CHECK_MSG(it != index_.end(), "no parameter %s", name.c_str());
    return params_[it->second];
  };
  // Offset of a parameter relative to the start of `unit`, which must hold it.
  auto rel = [&](const std::string& name, int unit) -> int64_t {
    const Parameter& p = find(name);
    TESSERA_CHECK_MSG(bounds_[unit] <= p.offset && p.offset + p.numel() <= bounds_[unit + 1],
                      "%s is not in unit %d", name.c_str(), unit);
    return p.offset - bounds_[unit];
  };
  // Fused GEMMs read several adjacent parameters as one matrix.
  auto check_adjacent = [&](const std::string& a, const std::string& b) {
    const Parameter& pa = find(a);
    TESSERA_CHECK(pa.offset + pa.numel() == find(b).offset);
  };

  const bool gpt2 = config_.family == ModelFamily::kGpt2;
  for (int64_t j = 0; j < n_blocks_; ++j) {
    const int unit = static_cast<int>(1 + j);
    const int64_t i = chunk_.layer_begin + j;  // the global layer: parameter names
    BlockLayout b;
    if (gpt2) {
      const std::string p = "h." + std::to_string(i) + ".";
      b.norm1_w = rel(p + "ln_1.weight", unit);
      b.norm1_b = rel(p + "ln_1.bias", unit);
      b.qkv_w = rel(p + "attn.c_attn.weight", unit);
      b.qkv_b = rel(p + "attn.c_attn.bias", unit);
      b.proj_w = rel(p + "attn.c_proj.weight", unit);
      b.proj_b = rel(p + "attn.c_proj.bias", unit);
      b.norm2_w = rel(p + "ln_2.weight", unit);
      b.norm2_b = rel(p + "ln_2.bias", unit);
      b.fc_w = rel(p + "mlp.c_fc.weight", unit);
      b.fc_b = rel(p + "mlp.c_fc.bias", unit);
      b.out_w = rel(p + "mlp.c_proj.weight", unit);
      b.out_b = rel(p + "mlp.c_proj.bias", unit);
    } else {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      check_adjacent(p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight");
      check_adjacent(p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight");
      check_adjacent(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight");
      b.norm1_w = rel(p + "input_layernorm.weight", unit);
      b.qkv_w = rel(p + "self_attn.q_proj.weight", unit);
      b.proj_w = rel(p + "self_attn.o_proj.weight", unit);
      b.norm2_w = rel(p + "post_attention_layernorm.weight", unit);
      b.fc_w = rel(p + "mlp.gate_proj.weight", unit);
      b.out_w = rel(p + "mlp.down_proj.weight", unit);
    }
    block_layout_.push_back(b);
  }
  const std::string emb = gpt2 ? "wte.weight" : "model.embed_tokens.weight";
  const std::string fin = gpt2 ? "ln_f" : "model.norm";
  const int last = final_unit();
  if (holds_unit(0)) {  // the embeddings (first chunk) or their copy (tied, last chunk)
    wte_off_ = rel(emb, 0);
    if (gpt2) wpe_off_ = rel("wpe.weight", 0);
  }
  if (chunk_.last) {
    if (gpt2) lnf_b_off_ = rel(fin + ".bias", last);
    lnf_w_off_ = rel(fin + ".weight", last);
    head_off_ = config_.tie_embeddings ? rel(emb, 0) : rel("lm_head.weight", last);
  }
}

// Runs a training step and an evaluation step on measuring arenas (no arithmetic), then
// reserves real arenas of the larger of the two peaks.
// Runs each kind of pass the model will make (a training step and an evaluation step for the
// whole model; a stage forward and backward for any chunk) on measuring arenas (no arithmetic),
// then reserves real arenas of the largest peaks: one activation arena per context.
void TransformerImpl::MeasureArenas() {
  size_t act_bytes = 0, ws_bytes = 0;
  auto measured = [&] {
    act_bytes = std::max(act_bytes, ctx_[0].act.peak());
    ws_bytes = std::max(ws_bytes, ws_.peak());
    ctx_[0].act = Arena::Measuring(MemoryKind::kActivations);
    ws_ = Arena::Measuring(MemoryKind::kWorkspace);
  };
  if (chunk_.first && chunk_.last) {
    Step(nullptr, nullptr, 1.0f, /*backward=*/true);
    measured();
    Step(nullptr, nullptr, 0.0f, /*backward=*/false);
    measured();
  }
  ForwardStage(0, nullptr, nullptr, nullptr, nullptr);
  BackwardStage(0, nullptr, nullptr, 1.0f);
  measured();
  for (Context& c : ctx_) c.act = Arena(MemoryKind::kActivations, act_bytes, tracker_);
  ws_ = Arena(MemoryKind::kWorkspace, ws_bytes, tracker_);
}

void TransformerImpl::InitRandom(uint64_t seed) {
  TESSERA_CHECK_MSG(own_store_ != nullptr,
                    "a model with a ParamStore has no parameters to init: use InitParameterRange");
  const int64_t begin = partition_->unit_bounds()[partition_->chunk_unit_begin(chunk_index_)];
  partition_->InitRange(seed, begin, begin + num_params(), flat_params_.f32());
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

StepArenas TransformerImpl::Begin(int ctx) {
  TESSERA_CHECK(ctx >= 0 && ctx < static_cast<int>(ctx_.size()));
  cur_ = &ctx_[static_cast<size_t>(ctx)];
  cur_->act.Release(0);
  ws_.Release(0);
  return StepArenas{&cur_->act, &ws_};
}

// Forward through the chunk: the embeddings (first chunk) or the previous stage's output x_in
// (Rows, C), the blocks, and (last chunk) the final norm. Fills the context's resid, saved and
// final (h = final_norm(x_L), what the LM head reads). The last chunk leaves its final unit
// acquired (final_base_): the untied head and the final norm's backward read it.
void TransformerImpl::ForwardBody(StepArenas& arenas, const int32_t* inputs, const float* x_in) {
  const bool live = arenas.live();
  const int64_t C = config_.hidden_size, L = n_blocks_;
  Context& x = *cur_;
  // x0 = embed[tokens] (+ wpe[t]); x_{l+1} = block_l(x_l)
  x.resid.assign(L + 1, Tensor());
  x.saved.assign(L, BlockSaved());
  const int64_t R = Rows();
  x.resid[0] = x.act.Allocate(DType::kF32, {R, C});
  if (chunk_.first) {
    const float* embed = Acquire(live, 0);
    EmbedForward(arenas, inputs, embed);
    Release(live, 0);
  } else if (live) {
    std::memcpy(x.resid[0].f32(), x_in, static_cast<size_t>(R * C) * sizeof(float));
  }
  for (int64_t l = 0; l < L; ++l) {
    const int unit = static_cast<int>(1 + l);
    x.resid[l + 1] = x.act.Allocate(DType::kF32, {R, C});
    const float* weights = Acquire(live, unit);
    Prefetch(live, unit + 1);  // the next block, or the final norm after the last
    // Evaluation places tensors as training does, so it fits the same arenas; it simply does
    // not read back what was kept.
    block_.Forward(arenas, config_.recompute, x.resid[l].f32(), x.resid[l + 1].f32(), x.saved[l],
                   block_layout_[l].Weights(weights));
    Release(live, unit);
  }
  if (!chunk_.last) return;
  // h = final_norm(x_L)
  x.final.out = x.act.Allocate(DType::kF32, {R, C});
  x.final.mean = config_.family == ModelFamily::kGpt2 ? x.act.Allocate(DType::kF32, {R}) : Tensor();
  x.final.rstd = x.act.Allocate(DType::kF32, {R});
  final_base_ = Acquire(live, final_unit());
  if (!live) return;
  if (config_.family == ModelFamily::kGpt2) {
    cpu::LayerNormForward(x.final.out.f32(), x.final.mean.f32(), x.final.rstd.f32(),
                          x.resid[L].f32(), At(final_base_, lnf_w_off_),
                          At(final_base_, lnf_b_off_), R, C, config_.norm_eps);
  } else {
    cpu::RmsNormForward(x.final.out.f32(), x.final.rstd.f32(), x.resid[L].f32(),
                        At(final_base_, lnf_w_off_), R, C, config_.norm_eps);
  }
  Round(x.final.out.f32(), R * C);
}

// x0 = embed[tokens] (+ wpe[t]) into the context's resid[0]. Under tp each rank looks up the tokens of its
// vocabulary rows (zeros elsewhere), the Exit region sums the partial rows over tp (SP:
// reduce-scatter to this rank's rows), then the positions are added once.
void TransformerImpl::EmbedForward(StepArenas& arenas, const int32_t* inputs,
                                   const float* embed) {
  const bool live = arenas.live();
  const int64_t N = B_ * T_, C = config_.hidden_size, R = Rows();
  float* x0 = cur_->resid[0].f32();
  if (!tp_) {
    if (live) {
      cpu::EmbeddingForward(x0, inputs, At(embed, wte_off_), At(embed, wpe_off_), B_, T_, C);
      Round(x0, N * C);
    }
    return;
  }
  const size_t mark = ws_.Mark();
  Tensor partial = tp_->sequence_parallel() ? ws_.Allocate(DType::kF32, {N, C}) : cur_->resid[0];
  if (live) {
    cpu::VocabEmbeddingForward(partial.f32(), inputs, At(embed, wte_off_),
                               partition_->vocab_begin(), partition_->vocab_per_rank(), N, C);
    tp_->ExitForward(partial.f32(), x0, N, C);
    if (wpe_off_ >= 0) cpu::AddPositions(x0, At(embed, wpe_off_), tp_->RowBegin(N), R, T_, C);
    Round(x0, R * C);
  }
  ws_.Release(mark);
}

// Backward of EmbedForward from d_res (Rows(), C): needs no weights. Under tp the Exit
// region's dual gathers the rows (SP), each rank scatters into its vocabulary rows, and every
// rank computes the (replicated) position gradient from all rows.
void TransformerImpl::EmbedBackward(StepArenas& arenas, const int32_t* inputs,
                                    const float* d_res, float* embed_grads) {
  const bool live = arenas.live();
  const int64_t N = B_ * T_, C = config_.hidden_size, V = config_.vocab_size;
  if (!tp_) {
    if (live) {
      cpu::EmbeddingBackward(At(embed_grads, wte_off_), At(embed_grads, wpe_off_), d_res,
                             inputs, B_, T_, C, V);
    }
    return;
  }
  const size_t mark = ws_.Mark();
  Tensor full = tp_->sequence_parallel() ? ws_.Allocate(DType::kF32, {N, C}) : Tensor();
  if (live) {
    const float* d_full = tp_->ExitBackward(d_res, full.f32(), N, C);
    cpu::VocabEmbeddingBackward(At(embed_grads, wte_off_), d_full, inputs,
                                partition_->vocab_begin(), partition_->vocab_per_rank(), N, C);
    if (wpe_off_ >= 0) {
      cpu::EmbeddingBackward(nullptr, At(embed_grads, wpe_off_), d_full, inputs, B_, T_, C, V);
    }
  }
  ws_.Release(mark);
}

// h = final_norm(x_L) backward: d_res (Rows(), C) written from d_h. Under sequence
// parallelism the norm's gradients of this rank's rows are summed over tp before they are
// accumulated into `grads` (unit L + 1).
void TransformerImpl::FinalNormBackward(StepArenas& arenas, float* d_res, const float* d_h,
                                        float* grads) {
  const bool live = arenas.live();
  const int64_t R = Rows(), C = config_.hidden_size, L = n_blocks_;
  const bool sp = tp_ && tp_->sequence_parallel();
  const size_t mark = ws_.Mark();
  Tensor partial = sp ? ws_.Allocate(DType::kF32, {2 * C}) : Tensor();
  if (live) {
    float* g_w = At(grads, lnf_w_off_);
    float* g_b = At(grads, lnf_b_off_);
    if (sp) {
      std::memset(partial.f32(), 0, partial.nbytes());
      g_w = partial.f32();
      g_b = partial.f32() + C;
    }
    const float* w = At(final_base_, lnf_w_off_);
    if (config_.family == ModelFamily::kGpt2) {
      cpu::LayerNormBackward(d_res, g_w, g_b, d_h, cur_->resid[L].f32(), w, cur_->final.mean.f32(),
                             cur_->final.rstd.f32(), R, C);
    } else {
      cpu::RmsNormBackward(d_res, g_w, d_h, cur_->resid[L].f32(), w, cur_->final.rstd.f32(), R, C);
    }
    if (sp) {
      tp_->SumInPlace(partial.f32(), 2 * C);
      cpu::AddInPlace(At(grads, lnf_w_off_), partial.f32(), C);
      if (lnf_b_off_ >= 0) cpu::AddInPlace(At(grads, lnf_b_off_), partial.f32() + C, C);
    }
    Round(d_res, R * C);
  }
  ws_.Release(mark);
}

// LM head + cross-entropy over all N rows, fused with its backward when d_h is non-null
// (d_h (Rows(), C) = dL/dh). Returns the loss sum. Under tp the head is vocab-parallel: the
// norm output enters through the Enter region (SP: gathered), the classifier reduces its
// softmax statistics over tp, and the partial d_h is summed by the Enter region's dual.
// `losses` (N) and `logits` (the chunk scratch) are the caller's workspace tensors.
double TransformerImpl::Head(StepArenas& arenas, const int32_t* targets, float loss_scale,
                             const float* head_w, float* head_grads, float* d_h,
                             Tensor& losses, Tensor& logits) {
  const bool live = arenas.live();
  const int64_t N = B_ * T_, C = config_.hidden_size, V = config_.vocab_size;
  if (!tp_) {
    if (!live) return 0.0;
    return cpu::ClassifierForwardBackward(losses.f32(), d_h, At(head_grads, head_off_),
                                          cur_->final.out.f32(), At(head_w, head_off_), targets, N,
                                          C, V, loss_scale, logits.f32(), chunk_rows_);
  }
  const bool sp = tp_->sequence_parallel();
  Tensor h_full = sp ? ws_.Allocate(DType::kF32, {N, C}) : Tensor();
  Tensor d_full = sp && d_h != nullptr ? ws_.Allocate(DType::kF32, {N, C}) : Tensor();
  if (!live) return 0.0;
  const float* h = tp_->EnterForward(cur_->final.out.f32(), h_full.f32(), N, C);
  float* d_partial = d_h == nullptr ? nullptr : sp ? d_full.f32() : d_h;
  const int64_t vp = partition_->vocab_per_rank(), vb = partition_->vocab_begin();
  const int64_t real = std::clamp<int64_t>(V - vb, 0, vp);
  const double sum = cpu::VocabParallelClassifier(
      losses.f32(), d_partial, At(head_grads, head_off_), h, At(head_w, head_off_), targets, N,
      C, vp, real, vb, loss_scale, logits.f32(), chunk_rows_, &TensorParallel::Combine,
      tp_.get());
  if (d_h != nullptr) tp_->EnterBackward(d_partial, d_h, N, C);
  return sum;
}

// Backward from d_h = dL/dh to the embeddings; d_res (N, C) is the residual-stream gradient.
// d_h sits on top of the workspace at `d_h_mark`: it is released once the final norm has read
// it, so the blocks reuse its bytes. Unit L + 1 is acquired on entry and released here.
void TransformerImpl::BackwardBody(StepArenas& arenas, const int32_t* inputs, const Tensor& d_h,
                                   size_t d_h_mark, const Tensor& d_res) {
  const bool live = arenas.live();
  Context& x = *cur_;
  if (chunk_.last) {
    // h = final_norm(x_L)
    float* final_grads = Grads(live, final_unit());
    FinalNormBackward(arenas, d_res.f32(), d_h.f32(), final_grads);
    GradsDone(live, final_unit());
    Release(live, final_unit());
    final_base_ = nullptr;
    ws_.Release(d_h_mark);
  }
  // x_{l+1} = block_l(x_l)
  for (int64_t l = n_blocks_ - 1; l >= 0; --l) {
    const int unit = static_cast<int>(1 + l);
    const float* weights = Acquire(live, unit);
    if (l > 0) Prefetch(live, unit - 1);  // unit 0 is not acquired by backward
    float* grads = Grads(live, unit);
    block_.Backward(arenas, config_.recompute, d_res.f32(), x.resid[l].f32(), x.saved[l],
                    block_layout_[l].Weights(weights), block_layout_[l].Grads(grads));
    GradsDone(live, unit);
    Release(live, unit);
  }
  if (chunk_.first) {
    // x0 = embed[tokens] (+ wpe[t]): needs no weights
    float* embed_grads = Grads(live, 0);
    EmbedBackward(arenas, inputs, d_res.f32(), embed_grads);
    GradsDone(live, 0);
  } else if (holds_unit(0)) {
    GradsDone(live, 0);  // the tied copy: only the LM head wrote its gradient
  }
}

// The LM head + cross-entropy over the context's h for the `counted` tokens: the loss sum.
// With d_h it is fused with its backward: d_h = dL/dh scaled for the mean over counted tokens
// and the caller's grad_scale, the head's weight gradient accumulated. The head's weights:
// unit 0's token table when tied (acquired here), else in the final unit (acquired already).
double TransformerImpl::HeadPass(StepArenas& arenas, const int32_t* targets, float grad_scale,
                                 int64_t counted, float* d_h) {
  const bool live = arenas.live();
  const int64_t N = B_ * T_, V = config_.vocab_size;
  const size_t head_mark = ws_.Mark();
  Tensor losses = ws_.Allocate(DType::kF32, {N});
  Tensor logits =
      ws_.Allocate(DType::kF32, {chunk_rows_, tp_ ? partition_->vocab_per_rank() : V});
  const float loss_scale =
      counted > 0 ? static_cast<float>(static_cast<double>(grad_scale) / counted) : 0.0f;
  const bool tied = config_.tie_embeddings;
  const int head_unit = tied ? 0 : final_unit();
  const float* head_base = tied ? Acquire(live, 0) : final_base_;
  float* head_grads = d_h != nullptr ? Grads(live, head_unit) : nullptr;
  const double loss_sum = Head(arenas, targets, loss_scale, head_base, head_grads, d_h, losses,
                               logits);
  if (tied) Release(live, 0);
  ws_.Release(head_mark);
  return loss_sum;
}

int64_t TransformerImpl::Counted(const int32_t* inputs, const int32_t* targets) const {
  CheckTokens(inputs, targets);
  int64_t counted = 0;
  for (int64_t i = 0; i < B_ * T_; ++i) counted += targets[i] >= 0;
  return counted;
}

double TransformerImpl::Step(const int32_t* inputs, const int32_t* targets, float grad_scale,
                             bool backward) {
  TESSERA_CHECK_MSG(chunk_.first && chunk_.last,
                    "a pipeline chunk runs ForwardStage / BackwardStage, not whole steps");
  StepArenas arenas = Begin(0);
  const bool live = arenas.live();
  const int64_t C = config_.hidden_size;
  const int64_t counted = live ? Counted(inputs, targets) : 0;

  ForwardBody(arenas, inputs, nullptr);

  // LM head + cross-entropy, fused with its backward.
  Tensor d_res = backward ? ws_.Allocate(DType::kF32, {Rows(), C}) : Tensor();
  const size_t d_h_mark = ws_.Mark();
  Tensor d_h = backward ? ws_.Allocate(DType::kF32, {Rows(), C}) : Tensor();
  const double loss_sum =
      HeadPass(arenas, targets, grad_scale, counted, backward ? d_h.f32() : nullptr);

  if (backward) {
    BackwardBody(arenas, inputs, d_h, d_h_mark, d_res);
  } else {
    Release(live, final_unit());
    final_base_ = nullptr;
  }
  ws_.Release(0);
  return counted > 0 ? loss_sum / static_cast<double>(counted) : 0.0;
}

// A pipeline stage's forward: the activations stay in context ctx for BackwardStage. The last
// chunk computes the loss (forward only: its backward recomputes the head, so the store sees
// gradient requests only inside BackwardStage, whatever the schedule).
double TransformerImpl::ForwardStage(int ctx, const int32_t* inputs, const int32_t* targets,
                                     const float* x_in, float* x_out) {
  StepArenas arenas = Begin(ctx);
  const bool live = arenas.live();
  cur_->inputs = inputs;
  cur_->targets = targets;
  const int64_t counted = live ? Counted(inputs, targets) : 0;
  ForwardBody(arenas, inputs, x_in);
  double loss_sum = 0.0;
  if (chunk_.last) {
    loss_sum = HeadPass(arenas, targets, 0.0f, counted, nullptr);
    Release(live, final_unit());
    final_base_ = nullptr;
  } else if (live) {
    std::memcpy(x_out, cur_->resid[n_blocks_].f32(),
                static_cast<size_t>(Rows() * config_.hidden_size) * sizeof(float));
  }
  ws_.Release(0);
  return counted > 0 ? loss_sum / static_cast<double>(counted) : 0.0;
}

void TransformerImpl::BackwardStage(int ctx, const float* d_out, float* d_in, float grad_scale) {
  TESSERA_CHECK(ctx >= 0 && ctx < static_cast<int>(ctx_.size()));
  cur_ = &ctx_[static_cast<size_t>(ctx)];
  ws_.Release(0);
  StepArenas arenas{&cur_->act, &ws_};
  const bool live = arenas.live();
  const int64_t R = Rows(), C = config_.hidden_size;
  Tensor d_res = ws_.Allocate(DType::kF32, {R, C});
  const size_t d_h_mark = ws_.Mark();
  Tensor d_h;
  if (chunk_.last) {
    // The head again, now fused with its backward (the same bits as the forward's loss).
    const int64_t counted = live ? Counted(cur_->inputs, cur_->targets) : 0;
    final_base_ = Acquire(live, final_unit());
    d_h = ws_.Allocate(DType::kF32, {R, C});
    HeadPass(arenas, cur_->targets, grad_scale, counted, d_h.f32());
  } else if (live) {
    std::memcpy(d_res.f32(), d_out, static_cast<size_t>(R * C) * sizeof(float));
  }
  BackwardBody(arenas, cur_->inputs, d_h, d_h_mark, d_res);
  if (!chunk_.first && live) {
    std::memcpy(d_in, d_res.f32(), static_cast<size_t>(R * C) * sizeof(float));
  }
  ws_.Release(0);
}

}  // namespace

Result<std::unique_ptr<Transformer>> Transformer::Create(const ModelConfig& config, int64_t B,
                                                         int64_t T, MemoryTracker* tracker,
                                                         const ModelOptions& options) {
  RETURN_IF_ERROR(Validate(config, B, T, options));
  return std::unique_ptr<Transformer>(new TransformerImpl(config, B, T, tracker, options));
}

}  // namespace tessera
