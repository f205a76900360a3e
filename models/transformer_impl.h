// models/transformer_impl.h — INTERNAL to models/transformer*.cc: the implementation class of
// transformer.h, shared by transformer.cc (layout, init, the blocks, the whole-model step) and
// transformer_stage.cc (the tensor-parallel embedding, head and final norm, and the pipeline
// stage passes). Nothing outside models/ includes it.
// Thread-safety: one thread drives a model (transformer.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/block.h"
#include "models/expert_parallel.h"
#include "models/lora.h"
#include "models/param_layout.h"
#include "models/tensor_parallel.h"
#include "models/transformer.h"
#include "runtime/kernels/backend.h"
#include "runtime/kernels/measuring_backend.h"

namespace tessera::transformer_internal {

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

  void SetDropoutKey(uint64_t key) override { dropout_key_ = key; }
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
  Status comm_status() const override {
    if (tp_ && !tp_->status().ok()) return tp_->status();
    return ep_ ? ep_->status() : Status::Ok();
  }
  std::span<MoeLayerState> moe_layers() override { return moe_states_; }
  std::vector<int64_t> moe_layer_ids() const override;
  void RecordRouting(bool on) override { record_routing_ = on; }
  std::vector<LayerOutput> LayerOutputs() override;
  double TrainFlopsPerToken() const override {
    return tessera::TrainFlopsPerToken(config_, T_, partition_->tp_size(), frozen_base_);
  }

 private:
  void LayOutParameters();
  void BindBlocks();
  void BindAttention(int64_t layer, int unit, BlockLayout& b);
  // Block i's LoRA adapters (finetune.lora) in its adapter unit.
  void BindAdapters(int64_t i, BlockLayout& b);
  void BindMoeBlock(int64_t layer, int unit, BlockLayout& b);
  Parameter& Find(const std::string& name);
  int64_t Rel(const std::string& name, int unit);
  void CheckAdjacent(const std::string& a, const std::string& b);
  void MeasureArenas();
  void CheckTokens(const int32_t* inputs, const int32_t* targets) const;
  // The token ids and targets (host memory, from the data pipeline) where the backend's
  // kernels read them: the same pointers on CPU; on a device backend, copies in the current
  // context's activation arena (2 * B * T int32, which the measuring pass counts too).
  struct TokenIds {
    const int32_t* inputs;
    const int32_t* targets;
  };
  TokenIds StageTokens(StepContext& step, const int32_t* inputs, const int32_t* targets);
  double Step(const int32_t* inputs, const int32_t* targets, float grad_scale, bool backward);
  // Uses context ctx for the pass that follows (its activation arena, saved tensors).
  StepContext Begin(int ctx);
  void ForwardBody(StepContext& step, const int32_t* inputs, const float* x_in);
  // d_h: dL/dh on top of the workspace at d_h_mark (last chunk only; empty otherwise).
  void BackwardBody(StepContext& step, const int32_t* inputs, const Tensor& d_h,
                    size_t d_h_mark, const Tensor& d_res);
  double HeadPass(StepContext& step, const int32_t* targets, float grad_scale, int64_t counted,
                  float* d_h);
  // Checks the token ids (CHECK failure when out of range) and counts the counted targets;
  // 0 without tokens (a measuring pass has none).
  int64_t Counted(const int32_t* inputs, const int32_t* targets) const;
  bool holds_unit(int u) const { return bounds_[u + 1] > bounds_[u]; }
  // Rounds n activations (or gradients) at x to act_dtype_; nothing for fp32.
  void Round(Backend& be, float* x, int64_t n) const {
    if (act_dtype_ != DType::kF32) be.Round(act_dtype_, x, n);
  }

  // Store calls of a step (a measuring pass runs them on a MeasuringStore: null bases).
  // Units are chunk-relative here (0 embeddings, 1 + l block layer_begin + l, blocks + 1 the
  // final unit); a caller's store numbers the rank's units, chunk after chunk: unit_base_.
  const float* Acquire(int unit) { return store_->Acquire(unit_base_ + unit); }
  void Release(int unit) { store_->Release(unit_base_ + unit); }
  void Prefetch(int unit) {
    if (unit >= 0 && unit < num_units() && holds_unit(unit)) store_->Prefetch(unit_base_ + unit);
  }
  float* Grads(int unit) { return store_->Grads(unit_base_ + unit); }
  void GradsDone(int unit) { store_->GradsDone(unit_base_ + unit); }
  int num_units() const { return static_cast<int>(bounds_.size()) - 1; }
  // Block l of the chunk: the dense or the MoE block, and its MoE state (null if dense).
  const DecoderBlock& BlockOf(int64_t l) const { return expert_unit_[l] >= 0 ? moe_block_ : block_; }
  MoeLayerState* MoeStateOf(int64_t l) {
    return moe_index_[l] >= 0 ? &moe_states_[static_cast<size_t>(moe_index_[l])] : nullptr;
  }
  int final_unit() const { return static_cast<int>(n_blocks_) + 1; }
  // Rows of the residual stream on this rank (N, or N/tp under sequence parallelism).
  int64_t Rows() const { return tp_ ? tp_->LocalRows(B_ * T_) : B_ * T_; }
  void EmbedForward(StepContext& step, const int32_t* inputs, const float* embed);
  void EmbedBackward(StepContext& step, const int32_t* inputs, const float* d_res,
                     float* embed_grads);
  void FinalNormBackward(StepContext& step, float* d_res, const float* d_h, float* grads);
  double Head(StepContext& step, const int32_t* targets, float loss_scale, const float* head_w,
              float* head_grads, float* d_h, Tensor& losses, Tensor& logits);

  ModelConfig config_;
  std::optional<ModelPartition> own_partition_;  // when ModelOptions gave none
  const ModelPartition* partition_;  // the rank's layout; this model runs its chunk `chunk_`
  int chunk_index_;
  PipelineChunk chunk_;
  int64_t n_blocks_;    // blocks of this chunk
  int unit_base_ = 0;   // the chunk's first unit in a caller's store
  std::unique_ptr<TensorParallel> tp_;  // tp >= 2 only
  std::unique_ptr<ExpertParallel> ep_;  // ep >= 2 only
  // The backend of real steps (ModelOptions::backend, or own_backend_), and the one the
  // current pass runs on: backend_, or a MeasuringBackend during MeasureArenas.
  std::unique_ptr<Backend> own_backend_;
  Backend* backend_ = nullptr;
  Backend* pass_backend_ = nullptr;
  int64_t B_, T_;
  MemoryTracker* tracker_;
  DType act_dtype_;
  DecoderBlock block_;      // a dense block
  DecoderBlock moe_block_;  // an MoE block (model.moe; unused without experts)
  int64_t chunk_rows_ = 0;

  Arena param_arena_, grad_arena_, ws_;
  Tensor flat_params_, grads_;  // (num_params); empty with a caller's store
  std::vector<Parameter> params_;
  std::unordered_map<std::string, int> index_;
  std::vector<int64_t> bounds_;  // the chunk's unit bounds, relative to its first element

  // The store every step goes through: the caller's, or own_store_ over the flat buffers.
  ParamStore* store_ = nullptr;
  // finetune.lora with a store: the base is frozen there (its Grads are null) and the
  // embedding backward, which computes nothing else, is skipped. A model owning its flat
  // buffers computes every gradient (the finite-difference checks read them all).
  bool frozen_base_ = false;
  std::unique_ptr<FlatStore> own_store_;
  GradReadyCallback grad_ready_;  // reported by own_store_

  // Unit-relative offsets (elements) of the weights a step reads, -1 when absent.
  std::vector<BlockLayout> block_layout_;  // per block, relative to unit 1 + l
  // Per block of the chunk: its chunk-relative expert unit and its index in moe_states_, or
  // -1 for a dense block.
  std::vector<int> expert_unit_, moe_index_;
  std::vector<int> adapter_unit_;  // per block: its adapter unit (finetune.lora), else -1
  std::vector<MoeLayerState> moe_states_;  // the chunk's MoE blocks, in layer order
  std::vector<int64_t> moe_layer_ids_;     // their global layers
  bool record_routing_ = true;  // RecordRouting: training forwards record statistics
  bool record_moe_ = true;      // this pass records (record_routing_, never in Forward)
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
    // A stage forward's token ids and targets for its backward (the last chunk's recomputed
    // head), where the backend reads them (StageTokens), and its counted targets.
    const int32_t* inputs = nullptr;
    const int32_t* targets = nullptr;
    int64_t counted = 0;
    uint64_t dropout_key = 0;          // its forward's SetDropoutKey (0: no dropout)
  };
  // finetune.lora.dropout: block l's mask stream in the current context, 0 for none.
  uint64_t BlockDropoutKey(int64_t l) const;
  uint64_t dropout_key_ = 0;  // SetDropoutKey: for the next training forward
  std::vector<Context> ctx_;
  Context* cur_ = nullptr;  // the context of the pass being run
};

}  // namespace tessera::transformer_internal
