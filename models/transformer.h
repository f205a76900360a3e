// models/transformer.h — a decoder-only transformer (GPT-2 or Llama family) with explicit
// forward and backward, built from a ModelConfig for a fixed micro-batch shape (B, T).
//
// Owns: the activation and workspace arenas sized by a measuring pass for (B, T) and the
// recomputation policy; and, unless a ParamStore is given (ModelOptions), the parameter and
// gradient buffers (one contiguous fp32 buffer each).
// With a store (param_store.h) the model owns no parameters or gradients: every step reads the
// weights of one unit at a time from store->Acquire and accumulates into store->Grads, in the
// order param_store.h fixes; the trainer decides where they live (sharded, low precision...).
// Without one the model uses an internal store over its flat buffers, so both paths run the
// same code and give the same bits.
// Thread-safety: one thread drives a model; kernels parallelise inside.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "models/model_config.h"
#include "models/moe.h"
#include "models/partition.h"
#include "models/param_store.h"
#include "models/parameter.h"
#include "runtime/core/dtype.h"
#include "runtime/core/memory.h"
#include "runtime/core/status.h"
#include "runtime/kernels/backend.h"

namespace tessera {

struct ModelOptions {
  // The backend every kernel of a step runs on (runtime/kernels/backend.h), outliving the
  // model; its device's memory holds the activation and workspace arenas. Null: the CPU fp32
  // reference (a CpuBackend the model owns).
  Backend* backend = nullptr;
  // Where parameters come from and gradients go (param_store.h); null: the model owns flat
  // fp32 buffers. The store must outlive the model. Create never calls it (its measuring pass
  // runs no arithmetic), so it may become ready after Create.
  ParamStore* store = nullptr;
  // kBF16 / kF16: activations are rounded to this type as a GPU would store them (block.h
  // lists which) and the ones kept for backward are stored in it (activation_store.h: half
  // the activation arena); the residual gradient is rounded after each block and the final
  // norm backward. Compute, the logits and the loss stay fp32 (as autocast does); whether the
  // GEMMs multiply in bf16 is the backend's choice. kF32: no rounding.
  DType activation_dtype = DType::kF32;
  // Tensor parallelism: this rank's tp group (null or size 1: none). The model then holds
  // only this rank's share of every parameter (models/partition.h: local shapes, global
  // names), runs column/row-parallel blocks, a vocab-parallel embedding and a vocab-parallel
  // LM head + cross-entropy that never gathers the logits (tensor_parallel.h has the
  // communication regions). Must outlive the model; every tp rank drives its model in step.
  Communicator* tp = nullptr;
  // Expert parallelism: this rank's ep group (null or size 1: none). Its MoE blocks then hold
  // only their E/ep routed experts (the partition's, which must be for this ep rank) and send
  // their token rows to the experts' ranks and back (expert_parallel.h); every ep rank drives
  // its model in step. Must outlive the model.
  Communicator* ep = nullptr;
  // parallel.sequence_parallel: with tp >= 2 the residual stream, norms and biases run on
  // B*T/tp rows per rank (B*T must divide by tp); ignored without tp.
  bool sequence_parallel = false;
  // Pipeline parallelism: the rank's layout (models/partition.h: tp share and chunks; must
  // match `tp`, outlive the model) and which of its chunks this model runs. Null: the whole
  // model at this tp rank. A chunk that is not the whole model only runs ForwardStage /
  // BackwardStage; its store units are the rank's (partition->chunk_unit_begin(chunk) + the
  // chunk-relative unit of param_store.h).
  const ModelPartition* partition = nullptr;
  int chunk = 0;
  // Activation sets kept at once (a pipeline schedule's micro-batches in flight), each its own
  // activation arena of the measured size. >= 1.
  int contexts = 1;
  // A dry construction (runtime/train/memory_plan.h): `backend` is a sizing backend, so the
  // arenas are booked and not held, and this machine's memory is not the limit (the plan
  // checks against the ranks' own).
  bool sizing = false;
};

// Training FLOPs per token of one tp rank's share of the model at sequence length T: PaLM's
// estimate (Chowdhery et al. 2022, appendix B), 6 FLOPs per matmul weight per token (2
// forward, 4 backward) plus 12 * L * C * T for the attention scores and their use (QK^T and
// att@V: 2*T*C FLOPs each per token and layer forward, twice that backward). The MoE blocks'
// router and experts are whole on every tp rank (moe.h), so their share is not divided by tp.
// A frozen base (finetune.lora) computes no weight gradients: 4 FLOPs per frozen weight, 6
// per adapter weight. Recomputation is not counted (model FLOPs, as MFU counts them).
double TrainFlopsPerToken(const ModelConfig& config, int64_t T, int tp, bool frozen_base);

class Transformer {
 public:
  // Validates the config (heads divide hidden, kv heads divide heads, T <= max_seq_len) and the
  // options (activation_dtype f32 / bf16 / f16; tp divides the heads, kv heads and MLP width;
  // B*T divisible by tp under sequence parallelism), allocates every buffer (not the parameters and
  // gradients when options.store is set). Parameters are zero until InitRandom or a weights
  // load.
  static Result<std::unique_ptr<Transformer>> Create(const ModelConfig& config, int64_t B,
                                                     int64_t T, MemoryTracker* tracker,
                                                     const ModelOptions& options = {});
  virtual ~Transformer() = default;

  // GPT-2-style init: weights ~ N(0, init_std), residual output projections scaled by
  // 1/sqrt(2 * num_layers), biases 0, norm weights 1. Deterministic from `seed`; element i
  // equals InitParameterRange(config, seed, i, i + 1) (param_layout.h), which is how a
  // trainer with a store inits (under tp: partition().InitRange, the one-rank model's values). With a store: a CHECK failure.
  virtual void InitRandom(uint64_t seed) = 0;

  // One micro-batch: inputs(B,T) and targets(B,T) token ids (targets < 0 are ignored).
  // Runs forward and backward, ACCUMULATES parameter gradients scaled by grad_scale (the
  // trainer passes 1/grad_accum_steps), returns the mean loss over counted tokens.
  virtual double ForwardBackward(const int32_t* inputs, const int32_t* targets,
                                 float grad_scale) = 0;
  // finetune.lora.dropout: the mask stream of the next training forward (ForwardBackward or
  // ForwardStage; a stage's backward and recomputation redraw the masks its forward drew).
  // 0, the default, drops nothing; Forward (evaluation) never drops. The trainer gives each
  // micro-batch of the global batch its own key, so every layout draws the same masks.
  virtual void SetDropoutKey(uint64_t key) = 0;
  // Forward only (evaluation): mean loss over counted tokens. With a store it makes the same
  // Acquire / Release / Prefetch calls as ForwardBackward and never asks for gradients.
  virtual double Forward(const int32_t* inputs, const int32_t* targets) = 0;

  // ---- Pipeline stages (ModelOptions::partition / chunk / contexts) ----
  // One micro-batch's forward through this model's chunk into activation context `ctx`
  // (0 .. contexts()-1), kept until BackwardStage(ctx) (a schedule holds several). `inputs`
  // and `targets` (B*T token ids; every stage passes them: the first chunk embeds the inputs,
  // the last computes the loss) must stay valid until that BackwardStage. x_in (stage_rows(),
  // C): the previous stage's output (not read by the first chunk); x_out: this chunk's output
  // (written unless it is the last chunk). Returns the mean loss over counted tokens on the
  // last chunk, 0 elsewhere. Store calls: only Acquire / Prefetch / Release (as Forward).
  virtual double ForwardStage(int ctx, const int32_t* inputs, const int32_t* targets,
                              const float* x_in, float* x_out) = 0;
  // Backward of ForwardStage(ctx): d_out (stage_rows(), C) is dL/d(x_out) (not read by the last
  // chunk, which starts from its loss, scaled like ForwardBackward's by grad_scale / counted
  // tokens: it recomputes the head fused with its backward); d_in gets dL/d(x_in) (not written
  // by the first chunk). Accumulates the chunk's parameter gradients with the store calls of
  // ForwardBackward's backward half, units of this chunk only. Any whole-model step (Forward,
  // ForwardBackward) reuses context 0.
  virtual void BackwardStage(int ctx, const float* d_out, float* d_in, float grad_scale) = 0;
  // Rows of the activations exchanged between stages: B*T, or B*T/tp under sequence
  // parallelism (each tp rank sends its own rows to the same tp rank of the next stage).
  virtual int64_t stage_rows() const = 0;
  virtual int contexts() const = 0;

  // Zeroes the flat gradient buffer. With a store: nothing (the store decides what Grads(u)
  // holds).
  virtual void ZeroGrads() = 0;

  // Data-parallel hook: during ForwardBackward, called with an element range [begin, end) of
  // the flat gradient buffer as soon as the gradients in it are final for this micro-batch,
  // so a trainer can start reducing them while backward goes on. One call per unit
  // (param_store.h), in the order units finish: unit L+1 (the final norm, with the untied LM
  // head), each block from the last to the first, then unit 0, the embeddings (last: a tied
  // embedding also collects the LM head's gradient). The ranges of one ForwardBackward cover
  // [0, num_params) exactly once. Called on the driving thread; an empty function turns it
  // off. Forward() never calls it. With a store, setting a non-empty callback is a CHECK
  // failure (the store's GradsDone is the hook).
  using GradReadyCallback = std::function<void(int64_t begin, int64_t end)>;
  virtual void SetGradReadyCallback(GradReadyCallback callback) = 0;

  virtual const ModelConfig& config() const = 0;
  virtual int64_t batch_size() const = 0;  // B of every micro-batch this model was built for
  virtual int64_t seq_len() const = 0;     // T of every micro-batch
  // Every parameter in flat order (param_layout.h). With a store, value and grad are empty()
  // (null data) but keep their shape, so name, kind, offset, numel() and shape still hold.
  virtual std::span<Parameter> parameters() = 0;
  virtual Tensor flat_params() = 0;   // (num_params) all parameters, contiguous; store: empty
  virtual Tensor flat_grads() = 0;    // (num_params) gradients at the same offsets; store: empty
  virtual int64_t num_params() const = 0;
  virtual DType activation_dtype() const = 0;
  // Training FLOPs per token (forward + backward) for MFU: 6 * matmul params + attention;
  // under tensor parallelism this rank's share (the global figure / tp).
  virtual double TrainFlopsPerToken() const = 0;
  // The layout of this rank's parameters relative to the one-rank model (tp = 1: identity).
  virtual const ModelPartition& partition() const = 0;
  // The first failed tensor-parallel collective of a step, else OK: after one the step's
  // results are garbage and the caller must end the job (tensor_parallel.h).
  virtual Status comm_status() const = 0;

  // The MoE blocks this model runs (model.moe; empty for a dense model), in layer order: each
  // one's balancing bias (the trainer updates it after a step) and the routing statistics its
  // training forwards recorded (the trainer reports and resets them). Evaluation records
  // nothing: Forward never does, and a pipeline evaluation turns RecordRouting off around its
  // ForwardStage calls. moe_layer_ids()[i] is the global layer of moe_layers()[i].
  virtual std::span<MoeLayerState> moe_layers() = 0;
  virtual std::vector<int64_t> moe_layer_ids() const = 0;
  // Whether ForwardStage / ForwardBackward record routing statistics (default true).
  virtual void RecordRouting(bool on) = 0;

  // What the last Forward computed, layer by layer, as fp32 (rows, cols) copies: "embeddings",
  // per block "layers.{i}.attention" (the residual stream after the attention sublayer; kept
  // by recompute none and selective only, skipped under full) and "layers.{i}.mlp" (after the
  // MLP or MoE sublayer: the block's output), "final_norm", and "logits" (final_norm times
  // the LM head, computed here on the model's backend). For `tessera validate`: a whole model
  // on one rank (tp 1, one chunk; a CHECK failure otherwise), after Forward.
  struct LayerOutput {
    std::string name;
    int64_t rows = 0, cols = 0;
    std::vector<float> values;
  };
  virtual std::vector<LayerOutput> LayerOutputs() = 0;
};

}  // namespace tessera
