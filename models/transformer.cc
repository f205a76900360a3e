// models/transformer.cc — the decoder-only transformer of transformer.h (GPT-2 and Llama).
//
// Owns: validation of the model shape, the parameter/gradient buffers (unless a ParamStore is
// given) and their named views, deterministic init, and one training step: embeddings ->
// blocks (block.h) -> final norm -> fused LM head + cross-entropy -> backward in reverse.
// Weights and gradients are reached only through a ParamStore, unit by unit, in the order of
// param_store.h: the caller's, or FlatStore over the model's own buffers. Every pointer into a
// unit is the unit's base plus a unit-relative offset fixed at Create (BlockLayout for blocks).
// Kernels run on the model's backend (ModelOptions::backend, runtime/kernels/backend.h).
// Activations and workspace come from two arenas of that backend whose capacities a measuring
// pass learns at Create for (B, T) and the policy: the same code on a MeasuringBackend and a
// MeasuringStore (no store calls, null weights, no arithmetic, no tp communication).
// The implementation class lives in transformer_impl.h; its tensor-parallel embedding / head /
// final norm and the pipeline stage passes are in transformer_stage.cc.
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

#include "models/activation_store.h"
#include "models/lora.h"
#include "models/block.h"
#include "models/param_layout.h"
#include "models/tensor_parallel.h"
#include "models/transformer_impl.h"
#include "runtime/core/random.h"
#include "runtime/kernels/cpu_backend.h"

namespace tessera {
namespace transformer_internal {

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
Status CheckFitsInMemory(const ModelConfig& c, int64_t B, int64_t T, bool owns_params, int ep) {
  const double C = c.hidden_size, L = c.num_layers, V = c.vocab_size, F = c.ffn_size();
  const double NH = c.num_heads, HS = static_cast<double>(c.head_size()), NKV = c.kv_heads();
  const double tokens = double(B) * T;
  const double per_layer = C * (NH + 2 * NKV) * HS + NH * HS * C + 3 * C * F + 4 * C;
  double params = L * per_layer + V * C * (c.tie_embeddings ? 1 : 2) + c.max_seq_len * C;
  double acts = L * tokens * (16 * C + 3 * F) + L * B * NH * double(T) * T + tokens * 4 * C;
  if (c.moe.enabled()) {
    // Each MoE block on top: its router, shared and its E / ep routed experts (3 matrices
    // each), and the worst-case routed rows (every token's k assignments: outputs; the
    // experts' inputs, pre-activation and activation, under ep every rank's tokens choosing
    // this rank's experts) with the router's logits and scores.
    const double M = c.num_moe_layers(), E = c.moe.num_experts, Fe = c.expert_ffn();
    const double S = c.moe.shared_experts * Fe, k = c.moe.top_k, El = E / ep;
    double expert_rows = ep > 1 ? ep * tokens * std::min(k, El) : tokens * k;
    if (c.moe.capacity_factor > 0) {  // no source sends an expert more than its capacity
      expert_rows = std::min(expert_rows, ep * El * std::ceil(tokens * k / E * c.moe.capacity_factor));
    }
    params += M * (E * C + 3 * S * C + El * 3 * Fe * C);
    acts += M * (tokens * (k * C + 2 * E + 3 * S) + expert_rows * (C + 3 * Fe));
    // Under ep, one block at a time: the arrived rows and their regrouped copies (workspace).
    if (ep > 1) acts += expert_rows * 3 * C;
  }
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
  RETURN_IF_ERROR(c.Validate());
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
  const int ep_size = options.ep != nullptr ? options.ep->size() : 1;
  const int ep_rank = options.ep != nullptr ? options.ep->rank() : 0;
  if (ep_size > 1 && (!c.moe.enabled() || c.moe.num_experts % ep_size != 0)) {
    return bad("expert parallelism over " + std::to_string(ep_size) + " ranks needs experts "
               "(model.moe) in a number ep divides, got " + std::to_string(c.moe.num_experts));
  }
  if (options.partition != nullptr &&
      (options.partition->ep_size() != ep_size || options.partition->ep_rank() != ep_rank)) {
    return bad("the partition is for ep rank " + std::to_string(options.partition->ep_rank()) +
               " of " + std::to_string(options.partition->ep_size()) + ", the ep group says " +
               std::to_string(ep_rank) + " of " + std::to_string(ep_size));
  }
  if (options.tp != nullptr && options.tp->size() > 1) {
    const int tp = options.tp->size();
    RETURN_IF_ERROR(ValidateTensorParallel(c, tp));
    if (options.sequence_parallel && c.moe.enabled()) {
      return InvalidArgument("parallel.sequence_parallel: not supported with experts (model.moe) "
                             "yet: the MoE blocks run on every tp rank's full micro-batch; turn "
                             "sequence parallelism off");
    }
    if (options.sequence_parallel && (B * T) % tp != 0) {
      return InvalidArgument("parallel.sequence_parallel: the micro-batch's " + Num(B * T) +
                             " tokens (micro_batch_size " + Num(B) + " x seq_len " + Num(T) +
                             ") do not divide among parallel.tp=" + std::to_string(tp) +
                             " ranks");
    }
  }
  // A model that owns its parameters keeps them in host arenas, which a device's kernels
  // cannot read: a device backend's model reads them through a store in its memory.
  if (options.backend != nullptr && options.backend->device() != Device::kCpu &&
      options.store == nullptr && !options.sizing) {
    return bad(std::string("a model on ") + options.backend->name() +
               " reads its parameters through a ParamStore in device memory (ModelOptions::store)");
  }
  if (options.sizing) return Status::Ok();
  return CheckFitsInMemory(c, B, T, options.store == nullptr, ep_size);
}

// The block's dimensions on this rank: under tp its share of the heads and MLP width.
// Validate() has checked the split.
ModelPartition MakePartition(const ModelConfig& config, Communicator* tp, Communicator* ep) {
  auto p = ModelPartition::Create(config, tp != nullptr ? tp->size() : 1,
                                  tp != nullptr ? tp->rank() : 0, {},
                                  ep != nullptr ? ep->size() : 1, ep != nullptr ? ep->rank() : 0);
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
  d.rope = RopeParams{c.rope_theta, c.rope_scaling};
  d.window = c.sliding_window;
  d.qk_norm = c.qk_norm;
  d.act_dtype = act_dtype;
  if (c.lora.enabled()) {
    d.lora_rank = c.lora.rank;
    d.lora_scale = c.lora.scale();
    d.lora_dropout = c.lora.dropout;
  }
  return d;
}

// The dims of an MoE block: the dense block's, with the mixture of experts in place of the MLP.
BlockDims MakeMoeDims(const ModelConfig& c, int64_t B, int64_t T, DType act_dtype,
                      TensorParallel* tp, ExpertParallel* ep) {
  BlockDims d = MakeDims(c, B, T, act_dtype, tp);
  if (!c.moe.enabled()) return d;
  d.has_moe = true;
  d.moe = MoeDims::Of(c, B, T, act_dtype);
  d.moe.ep = ep;
  return d;
}

TransformerImpl::TransformerImpl(const ModelConfig& config, int64_t B, int64_t T,
                                 MemoryTracker* tracker, const ModelOptions& options)
    : config_(config),
      own_partition_(options.partition == nullptr
                         ? std::optional<ModelPartition>(MakePartition(config, options.tp, options.ep))
                         : std::nullopt),
      partition_(options.partition != nullptr ? options.partition : &*own_partition_),
      chunk_index_(options.chunk),
      chunk_(partition_->chunks()[options.chunk]),
      n_blocks_(chunk_.layer_end - chunk_.layer_begin),
      tp_(options.tp != nullptr && options.tp->size() > 1
              ? std::make_unique<TensorParallel>(options.tp, options.sequence_parallel)
              : nullptr),
      ep_(options.ep != nullptr && options.ep->size() > 1
              ? std::make_unique<ExpertParallel>(options.ep)
              : nullptr),
      own_backend_(options.backend == nullptr ? std::make_unique<CpuBackend>() : nullptr),
      backend_(options.backend != nullptr ? options.backend : own_backend_.get()),
      pass_backend_(backend_),
      B_(B),
      T_(T),
      tracker_(tracker),
      act_dtype_(options.activation_dtype),
      block_(MakeDims(config, B, T, options.activation_dtype, tp_.get())),
      moe_block_(MakeMoeDims(config, B, T, options.activation_dtype, tp_.get(), ep_.get())),
      param_arena_(Arena::Measuring(MemoryKind::kParameters)),
      grad_arena_(Arena::Measuring(MemoryKind::kGradients)),
      ws_(Arena::Measuring(MemoryKind::kWorkspace)),
      ctx_(static_cast<size_t>(std::max(1, options.contexts))) {
  // Equal chunks of at most `rows` rows.
  const int64_t rows = std::clamp<int64_t>(kLogitsScratchFloats / config.vocab_size, 64, 256);
  const int64_t chunks = (B * T + rows - 1) / rows;
  chunk_rows_ = (B * T + chunks - 1) / chunks;
  store_ = options.store;
  frozen_base_ = config.lora.enabled() && store_ != nullptr;
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
    p.spec = tp.tensor;
    // Each parameter lies inside its (chunk-relative) unit.
    const int u = d.unit - partition_->chunk_unit_begin(chunk_index_);
    TESSERA_CHECK(bounds_[u] <= offset && offset + d.shape.numel() <= bounds_[u + 1]);
    index_[d.name] = static_cast<int>(params_.size());
    params_.push_back(std::move(p));
    offset += d.shape.numel();
  }
  TESSERA_CHECK(offset == total);
}

Parameter& TransformerImpl::Find(const std::string& name) {
  auto it = index_.find(name);
  TESSERA_CHECK_MSG(it != index_.end(), "no parameter %s", name.c_str());
  return params_[it->second];
}

// Offset of a parameter relative to the start of `unit`, which must hold it.
int64_t TransformerImpl::Rel(const std::string& name, int unit) {
  const Parameter& p = Find(name);
  TESSERA_CHECK_MSG(bounds_[unit] <= p.offset && p.offset + p.numel() <= bounds_[unit + 1],
                    "%s is not in unit %d", name.c_str(), unit);
  return p.offset - bounds_[unit];
}

// Fused GEMMs read several adjacent parameters as one matrix.
void TransformerImpl::CheckAdjacent(const std::string& a, const std::string& b) {
  const Parameter& pa = Find(a);
  TESSERA_CHECK(pa.offset + pa.numel() == Find(b).offset);
}

void TransformerImpl::BindBlocks() {
  const bool gpt2 = config_.family == ModelFamily::kGpt2;
  for (int64_t j = 0; j < n_blocks_; ++j) {
    const int unit = static_cast<int>(1 + j);
    const int64_t i = chunk_.layer_begin + j;  // the global layer: parameter names
    BlockLayout b;
    BindAttention(i, unit, b);
    if (config_.is_moe_layer(i)) {
      BindMoeBlock(i, unit, b);
    } else if (gpt2) {
      const std::string p = "h." + std::to_string(i) + ".";
      b.fc_w = Rel(p + "mlp.c_fc.weight", unit);
      b.fc_b = Rel(p + "mlp.c_fc.bias", unit);
      b.out_w = Rel(p + "mlp.c_proj.weight", unit);
      b.out_b = Rel(p + "mlp.c_proj.bias", unit);
    } else {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      CheckAdjacent(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight");
      b.fc_w = Rel(p + "mlp.gate_proj.weight", unit);
      b.out_w = Rel(p + "mlp.down_proj.weight", unit);
    }
    if (!config_.is_moe_layer(i)) {
      expert_unit_.push_back(-1);
      moe_index_.push_back(-1);
    }
    BindAdapters(i, b);
    block_layout_.push_back(b);
  }
  const std::string emb = gpt2 ? "wte.weight" : "model.embed_tokens.weight";
  const std::string fin = gpt2 ? "ln_f" : "model.norm";
  const int last = final_unit();
  if (holds_unit(0)) {  // the embeddings (first chunk) or their copy (tied, last chunk)
    wte_off_ = Rel(emb, 0);
    if (gpt2) wpe_off_ = Rel("wpe.weight", 0);
  }
  if (chunk_.last) {
    if (gpt2) lnf_b_off_ = Rel(fin + ".bias", last);
    lnf_w_off_ = Rel(fin + ".weight", last);
    head_off_ = config_.tie_embeddings ? Rel(emb, 0) : Rel("lm_head.weight", last);
  }
}

// Block i's adapters: the chunk's adapter units follow its expert units, one per block
// (partition.h). A target's local rows are its global ones over tp (column sites: every
// target divides evenly, as its heads and MLP columns do).
void TransformerImpl::BindAdapters(int64_t i, BlockLayout& b) {
  if (!config_.lora.enabled()) {
    adapter_unit_.push_back(-1);
    return;
  }
  const int64_t n_moe = config_.moe_layers_before(chunk_.layer_end) -
                        config_.moe_layers_before(chunk_.layer_begin);
  const int unit = static_cast<int>(n_blocks_ + 2 + n_moe + (i - chunk_.layer_begin));
  adapter_unit_.push_back(unit);
  const int64_t t = tp_ ? tp_->size() : 1;
  for (const LoraTarget& target : LoraTargetsOf(config_, i)) {
    LoraSiteLayout& site = b.lora[static_cast<int>(target.site)];
    TESSERA_CHECK(site.n < kMaxLoraPerSite);
    const std::string p = BlockPrefix(config_, i) + target.module;
    site.A[site.n] = Rel(p + ".lora_A.weight", unit);
    site.B[site.n] = Rel(p + ".lora_B.weight", unit);
    site.row0[site.n] = target.column() ? target.row0 / t : 0;
    site.rows[site.n] = target.column() ? target.out / t : target.out;
    ++site.n;
  }
}

// Block i's norms and attention (every block has them).
void TransformerImpl::BindAttention(int64_t i, int unit, BlockLayout& b) {
  if (config_.family == ModelFamily::kGpt2) {
    const std::string p = "h." + std::to_string(i) + ".";
    b.norm1_w = Rel(p + "ln_1.weight", unit);
    b.norm1_b = Rel(p + "ln_1.bias", unit);
    b.qkv_w = Rel(p + "attn.c_attn.weight", unit);
    b.qkv_b = Rel(p + "attn.c_attn.bias", unit);
    b.proj_w = Rel(p + "attn.c_proj.weight", unit);
    b.proj_b = Rel(p + "attn.c_proj.bias", unit);
    b.norm2_w = Rel(p + "ln_2.weight", unit);
    b.norm2_b = Rel(p + "ln_2.bias", unit);
  } else {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    CheckAdjacent(p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight");
    CheckAdjacent(p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight");
    b.norm1_w = Rel(p + "input_layernorm.weight", unit);
    b.qkv_w = Rel(p + "self_attn.q_proj.weight", unit);
    if (config_.qkv_bias) {
      CheckAdjacent(p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias");
      CheckAdjacent(p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias");
      b.qkv_b = Rel(p + "self_attn.q_proj.bias", unit);
    }
    if (config_.qk_norm) {
      b.q_norm_w = Rel(p + "self_attn.q_norm.weight", unit);
      b.k_norm_w = Rel(p + "self_attn.k_norm.weight", unit);
    }
    b.proj_w = Rel(p + "self_attn.o_proj.weight", unit);
    b.norm2_w = Rel(p + "post_attention_layernorm.weight", unit);
  }
}

// An MoE block's router and shared experts (in its unit) and routed experts (in its expert
// unit: the chunk's units after its final unit, one per MoE block in layer order,
// partition.h); also its MoeLayerState.
void TransformerImpl::BindMoeBlock(int64_t i, int unit, BlockLayout& b) {
  const int expert_unit =
      static_cast<int>(n_blocks_ + 2 + (config_.moe_layers_before(i) -
                                        config_.moe_layers_before(chunk_.layer_begin)));
  expert_unit_.push_back(expert_unit);
  moe_index_.push_back(static_cast<int>(moe_states_.size()));
  moe_states_.emplace_back(config_.moe.num_experts);
  moe_layer_ids_.push_back(i);
  const bool shared = config_.moe.shared_experts > 0;
  if (config_.family == ModelFamily::kGpt2) {
    const std::string p = "h." + std::to_string(i) + ".mlp.";
    b.router = Rel(p + "router.weight", unit);
    if (shared) {
      b.shared_fc_w = Rel(p + "shared_experts.c_fc.weight", unit);
      b.shared_fc_b = Rel(p + "shared_experts.c_fc.bias", unit);
      b.shared_out_w = Rel(p + "shared_experts.c_proj.weight", unit);
      b.shared_out_b = Rel(p + "shared_experts.c_proj.bias", unit);
    }
    b.experts_fc_w = Rel(p + "experts.c_fc.weight", expert_unit);
    b.experts_fc_b = Rel(p + "experts.c_fc.bias", expert_unit);
    b.experts_out_w = Rel(p + "experts.c_proj.weight", expert_unit);
    b.experts_out_b = Rel(p + "experts.c_proj.bias", expert_unit);
  } else {
    const std::string p = "model.layers." + std::to_string(i) + ".mlp.";
    b.router = Rel(p + "gate.weight", unit);
    if (shared) {
      const std::string s = "model.layers." + std::to_string(i) + "." + SharedExpertPrefix(config_);
      CheckAdjacent(s + "gate_proj.weight", s + "up_proj.weight");
      b.shared_fc_w = Rel(s + "gate_proj.weight", unit);
      b.shared_out_w = Rel(s + "down_proj.weight", unit);
      if (config_.moe.shared_expert_gate) b.shared_gate = Rel(p + "shared_expert_gate.weight", unit);
    }
    b.experts_fc_w = Rel(p + "experts.gate_up_proj", expert_unit);
    b.experts_out_w = Rel(p + "experts.down_proj", expert_unit);
  }
}

std::vector<int64_t> TransformerImpl::moe_layer_ids() const { return moe_layer_ids_; }

// Runs each kind of pass the model will make (a training step and an evaluation step for the
// whole model; a stage forward and backward for any chunk) on a MeasuringBackend (its kernels
// do nothing, its arenas only count) with a MeasuringStore and the tp regions silent, then
// reserves the backend's arenas of the largest peaks: one activation arena per context.
void TransformerImpl::MeasureArenas() {
  MeasuringBackend measuring(*backend_);
  MeasuringStore no_store;
  ParamStore* store = std::exchange(store_, &no_store);
  pass_backend_ = &measuring;
  if (tp_) tp_->set_measuring(true);
  if (ep_) ep_->set_measuring(true);
  size_t act_bytes = 0, ws_bytes = 0;
  auto measured = [&] {
    act_bytes = std::max(act_bytes, ctx_[0].act.peak());
    ws_bytes = std::max(ws_bytes, ws_.peak());
    ctx_[0].act = measuring.MakeArena(MemoryKind::kActivations, 0, nullptr);
    ws_ = measuring.MakeArena(MemoryKind::kWorkspace, 0, nullptr);
  };
  measured();  // start from the measuring backend's arenas
  if (chunk_.first && chunk_.last) {
    Step(nullptr, nullptr, 1.0f, /*backward=*/true);
    measured();
    Step(nullptr, nullptr, 0.0f, /*backward=*/false);
    measured();
  }
  ForwardStage(0, nullptr, nullptr, nullptr, nullptr);
  BackwardStage(0, nullptr, nullptr, 1.0f);
  measured();
  if (tp_) tp_->set_measuring(false);
  if (ep_) ep_->set_measuring(false);
  pass_backend_ = backend_;
  store_ = store;
  for (Context& c : ctx_) {
    c.act = backend_->MakeArena(MemoryKind::kActivations, act_bytes, tracker_);
  }
  ws_ = backend_->MakeArena(MemoryKind::kWorkspace, ws_bytes, tracker_);
  for (MoeLayerState& m : moe_states_) m.ResetStats();  // the measuring passes routed nothing
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

StepContext TransformerImpl::Begin(int ctx) {
  TESSERA_CHECK(ctx >= 0 && ctx < static_cast<int>(ctx_.size()));
  cur_ = &ctx_[static_cast<size_t>(ctx)];
  cur_->act.Release(0);
  ws_.Release(0);
  cur_->dropout_key = dropout_key_;
  return StepContext{pass_backend_, &cur_->act, &ws_};
}

uint64_t TransformerImpl::BlockDropoutKey(int64_t l) const {
  if (cur_->dropout_key == 0) return 0;
  return StreamKey(cur_->dropout_key, static_cast<uint64_t>(chunk_.layer_begin + l));
}

// Forward through the chunk: the embeddings (first chunk) or the previous stage's output x_in
// (Rows, C), the blocks, and (last chunk) the final norm. Fills the context's resid, saved and
// final (h = final_norm(x_L), what the LM head reads). The last chunk leaves its final unit
// acquired (final_base_): the untied head and the final norm's backward read it.
void TransformerImpl::ForwardBody(StepContext& step, const int32_t* inputs, const float* x_in) {
  Backend& be = *step.backend;
  const int64_t C = config_.hidden_size, L = n_blocks_;
  Context& x = *cur_;
  // x0 = embed[tokens] (+ wpe[t]); x_{l+1} = block_l(x_l)
  x.resid.assign(L + 1, Tensor());
  x.saved.assign(L, BlockSaved());
  const int64_t R = Rows();
  const ActivationStore store(act_dtype_);
  x.resid[0] = store.Keep(step, x.act, {R, C});
  if (chunk_.first) {
    const float* embed = Acquire(0);
    EmbedForward(step, inputs, embed);
    Release(0);
  } else {
    store.Store(step, x.resid[0], x_in);
  }
  for (int64_t l = 0; l < L; ++l) {
    const int unit = static_cast<int>(1 + l), experts = expert_unit_[l];
    const int adapters = adapter_unit_[l];
    x.resid[l + 1] = store.Keep(step, x.act, {R, C});
    const float* weights = Acquire(unit);
    const float* expert_weights = experts >= 0 ? Acquire(experts) : nullptr;
    const float* adapter_weights = adapters >= 0 ? Acquire(adapters) : nullptr;
    Prefetch(unit + 1);  // the next block, or the final norm after the last
    // Evaluation places tensors as training does, so it fits the same arenas; it simply does
    // not read back what was kept.
    step.dropout_key = BlockDropoutKey(l);
    BlockOf(l).Forward(step, config_.recompute, x.resid[l], x.resid[l + 1], x.saved[l],
                       block_layout_[l].Weights(weights, expert_weights, adapter_weights),
                       MoeStateOf(l), record_moe_);
    if (adapters >= 0) Release(adapters);
    if (experts >= 0) Release(experts);
    Release(unit);
  }
  if (!chunk_.last) return;
  // h = final_norm(x_L)
  x.final.out = store.Keep(step, x.act, {R, C});
  x.final.mean = config_.family == ModelFamily::kGpt2 ? x.act.Allocate(DType::kF32, {R}) : Tensor();
  x.final.rstd = x.act.Allocate(DType::kF32, {R});
  final_base_ = Acquire(final_unit());
  const size_t mark = ws_.Mark();
  const float* x_L = store.Read(step, x.resid[L]);
  float* h = store.Working(step, x.final.out);
  if (config_.family == ModelFamily::kGpt2) {
    be.LayerNormForward(h, x.final.mean.f32(), x.final.rstd.f32(), x_L,
                        At(final_base_, lnf_w_off_), At(final_base_, lnf_b_off_), R, C,
                        config_.norm_eps);
  } else {
    be.RmsNormForward(h, x.final.rstd.f32(), x_L, At(final_base_, lnf_w_off_), R, C,
                      config_.norm_eps);
  }
  store.Commit(step, x.final.out, h);
  ws_.Release(mark);
}

// Backward from d_h = dL/dh to the embeddings; d_res (N, C) is the residual-stream gradient.
// d_h sits on top of the workspace at `d_h_mark`: it is released once the final norm has read
// it, so the blocks reuse its bytes. Unit L + 1 is acquired on entry and released here.
void TransformerImpl::BackwardBody(StepContext& step, const int32_t* inputs, const Tensor& d_h,
                                   size_t d_h_mark, const Tensor& d_res) {
  Context& x = *cur_;
  if (chunk_.last) {
    // h = final_norm(x_L)
    float* final_grads = Grads(final_unit());
    FinalNormBackward(step, d_res.f32(), d_h.f32(), final_grads);
    GradsDone(final_unit());
    Release(final_unit());
    final_base_ = nullptr;
    ws_.Release(d_h_mark);
  }
  // x_{l+1} = block_l(x_l)
  for (int64_t l = n_blocks_ - 1; l >= 0; --l) {
    const int unit = static_cast<int>(1 + l), experts = expert_unit_[l];
    const int adapters = adapter_unit_[l];
    const float* weights = Acquire(unit);
    const float* expert_weights = experts >= 0 ? Acquire(experts) : nullptr;
    const float* adapter_weights = adapters >= 0 ? Acquire(adapters) : nullptr;
    if (l > 0) Prefetch(unit - 1);  // unit 0 is not acquired by backward
    // A frozen unit (finetune.lora's base) has no gradient buffer: its views are null and
    // the kernels skip those gradients.
    float* grads = Grads(unit);
    float* expert_grads = experts >= 0 ? Grads(experts) : nullptr;
    float* adapter_grads = adapters >= 0 ? Grads(adapters) : nullptr;
    step.dropout_key = BlockDropoutKey(l);
    BlockOf(l).Backward(step, config_.recompute, d_res.f32(), x.resid[l], x.saved[l],
                        block_layout_[l].Weights(weights, expert_weights, adapter_weights),
                        block_layout_[l].Grads(grads, expert_grads, adapter_grads),
                        MoeStateOf(l));
    if (adapters >= 0) {
      GradsDone(adapters);
      Release(adapters);
    }
    if (experts >= 0) {
      GradsDone(experts);
      Release(experts);
    }
    GradsDone(unit);
    Release(unit);
  }
  if (chunk_.first) {
    // x0 = embed[tokens] (+ wpe[t]): needs no weights, and computes nothing but their
    // gradients (none when frozen)
    float* embed_grads = Grads(0);
    if (!frozen_base_) EmbedBackward(step, inputs, d_res.f32(), embed_grads);
    GradsDone(0);
  } else if (holds_unit(0)) {
    GradsDone(0);  // the tied copy: only the LM head wrote its gradient
  }
}

TransformerImpl::TokenIds TransformerImpl::StageTokens(StepContext& step, const int32_t* inputs,
                                                       const int32_t* targets) {
  if (step.backend->device() == Device::kCpu) return {inputs, targets};
  const int64_t n = B_ * T_;
  Tensor d_inputs = step.activations->Allocate(DType::kI32, {n});
  Tensor d_targets = step.activations->Allocate(DType::kI32, {n});
  const size_t bytes = static_cast<size_t>(n) * sizeof(int32_t);
  if (inputs != nullptr) step.backend->Upload(d_inputs.data(), inputs, bytes);
  if (targets != nullptr) step.backend->Upload(d_targets.data(), targets, bytes);
  return {static_cast<const int32_t*>(d_inputs.data()),
          static_cast<const int32_t*>(d_targets.data())};
}

int64_t TransformerImpl::Counted(const int32_t* inputs, const int32_t* targets) const {
  if (inputs == nullptr) return 0;
  CheckTokens(inputs, targets);
  int64_t counted = 0;
  for (int64_t i = 0; i < B_ * T_; ++i) counted += targets[i] >= 0;
  return counted;
}

double TransformerImpl::Step(const int32_t* inputs, const int32_t* targets, float grad_scale,
                             bool backward) {
  TESSERA_CHECK_MSG(chunk_.first && chunk_.last,
                    "a pipeline chunk runs ForwardStage / BackwardStage, not whole steps");
  StepContext step = Begin(0);
  step.loss_grad_scale = grad_scale;
  if (!backward) cur_->dropout_key = 0;  // evaluation drops nothing
  record_moe_ = backward && record_routing_;  // evaluation records no routing statistics
  const int64_t C = config_.hidden_size;
  const int64_t counted = Counted(inputs, targets);
  const TokenIds ids = StageTokens(step, inputs, targets);

  ForwardBody(step, ids.inputs, nullptr);

  // LM head + cross-entropy, fused with its backward.
  Tensor d_res = backward ? ws_.Allocate(DType::kF32, {Rows(), C}) : Tensor();
  const size_t d_h_mark = ws_.Mark();
  Tensor d_h = backward ? ws_.Allocate(DType::kF32, {Rows(), C}) : Tensor();
  const double loss_sum =
      HeadPass(step, ids.targets, grad_scale, counted, backward ? d_h.f32() : nullptr);

  if (backward) {
    BackwardBody(step, ids.inputs, d_h, d_h_mark, d_res);
  } else {
    Release(final_unit());
    final_base_ = nullptr;
  }
  ws_.Release(0);
  record_moe_ = record_routing_;
  return counted > 0 ? loss_sum / static_cast<double>(counted) : 0.0;
}

}  // namespace transformer_internal

double TrainFlopsPerToken(const ModelConfig& config, int64_t T, int tp, bool frozen_base) {
  const double moe = static_cast<double>(MoeMatmulParams(config));
  const double adapters = static_cast<double>(LoraParams(config));
  const double w = frozen_base ? 4.0 : 6.0;
  return (w * (static_cast<double>(MatmulParams(config)) - moe - adapters) + 6.0 * adapters +
          12.0 * static_cast<double>(config.num_layers * config.num_heads * config.head_size() * T)) /
             tp +
         w * moe;
}

using transformer_internal::TransformerImpl;

Result<std::unique_ptr<Transformer>> Transformer::Create(const ModelConfig& config, int64_t B,
                                                         int64_t T, MemoryTracker* tracker,
                                                         const ModelOptions& options) {
  RETURN_IF_ERROR(transformer_internal::Validate(config, B, T, options));
  return std::unique_ptr<Transformer>(new TransformerImpl(config, B, T, tracker, options));
}

}  // namespace tessera
