// models/block.h — one decoder block of a GPT-2 or Llama transformer, with explicit forward and
// backward and the activation-recomputation policy.
//
//   GPT-2:  mid = x + proj(attn(qkv(LayerNorm1(x))))          biases on every linear
//           out = mid + fc_out(gelu_tanh(fc(LayerNorm2(mid))))
//   Llama:  mid = x + o_proj(attn(rope(qkv(RMSNorm1(x)))))    grouped kv heads; no biases but
//                                                             Qwen2's q/k/v ones (qkv_bias)
//           out = mid + down(silu(gate(n)) * up(n)),  n = RMSNorm2(mid)
// The qkv projection is ONE GEMM producing the packed [q | k | v] rows the attention kernel
// reads (the q/k/v weights are adjacent in the parameter buffer); Llama's gate and up
// projections are one GEMM producing [gate | up] rows for the SwiGLU kernel.
//
// Owns: nothing but its dimensions. Kernels run on the step's backend (StepContext, runtime/
// kernels/backend.h) and tensors come from its two arenas: what backward needs lives in
// `activations` for the whole step, temporaries live in `workspace` under stack discipline
// (every function releases what it took before returning). The measuring pass is the same
// code on a MeasuringBackend with measuring arenas: nothing here asks which pass it is in.
// Thread-safety: const methods, one thread drives a step; kernels parallelise inside.
// Invariant: every policy runs the same kernels on the same inputs in the same order, so
// gradients are bit-identical under none / selective / full.
//
// Tensor parallelism (BlockDims::tp): qkv and fc are column-parallel (this rank's heads and
// MLP columns), proj and out row-parallel: their partial products are summed over tp by the
// Exit region (all-reduce, or reduce-scatter under sequence parallelism) BEFORE the bias is
// added once, and the norm outputs reach qkv / fc through the Enter region (copy, or
// all-gather). Backward runs the duals (tensor_parallel.h). Under sequence parallelism the
// norm outputs are kept as row shards and gathered again in backward (what saves the
// activation memory), and the gradients of the norms and the row-parallel biases, computed
// from this rank's rows only, are summed over tp once per block backward.
// Without tp the code path is the one-rank path bit for bit (biases fused into the GEMM).
//
// Low-precision activations (BlockDims::act_dtype = kBF16 / kF16): what the block keeps for
// backward in the activations arena is STORED in the low type (activation_store.h: half the
// bytes), while kernels compute in fp32 on workspace copies. Every activation is rounded to
// the low type right after the op that produces it: norm outputs, qkv (after RoPE),
// attention probabilities and output, each projection's output, the residual sums (mid, the
// block output), fc_out and the activation output; the stored bits are those rounded values,
// so reading them back is exact. Norm statistics (mean, rstd) stay fp32. Recomputation
// rounds the same way, so gradients stay bit-identical across policies. Backward rounds the
// residual gradient d_res once per block, on return; the gradients inside a block stay fp32.
#pragma once

#include <cstdint>

#include "models/model_config.h"
#include "models/moe.h"
#include "models/tensor_parallel.h"
#include "runtime/core/dtype.h"
#include "runtime/core/memory.h"
#include "runtime/core/tensor.h"
#include "runtime/kernels/backend.h"

namespace tessera {

struct BlockDims {
  ModelFamily family = ModelFamily::kGpt2;
  int64_t B = 0, T = 0;  // micro-batch shape
  int64_t C = 0;         // hidden size
  int64_t NH = 0;        // query heads
  int64_t NKV = 0;       // key/value heads (== NH for GPT-2)
  int64_t HS = 0;        // head size
  int64_t F = 0;         // MLP width (ffn_size)
  float eps = 1e-5f;     // norm epsilon
  RopeParams rope;       // llama: RoPE's base and long-context scaling
  int64_t window = 0;    // attention's sliding window (model.sliding_window), 0 = none
  bool qk_norm = false;  // RMSNorm of each q and k head before RoPE (model.qk_norm, Qwen3)
  DType act_dtype = DType::kF32;  // activations are stored in / rounded to this type
  // Tensor parallelism (tensor_parallel.h), null without. NH, NKV and F are then THIS rank's
  // heads and MLP width (models/partition.h); under sequence parallelism the residual stream
  // (x, out, mid, norm outputs) holds rows() = N/tp rows.
  TensorParallel* tp = nullptr;
  // An MoE block (model.moe): the MLP sublayer is the mixture of experts of moe.h.
  bool has_moe = false;
  MoeDims moe;
  // finetune.lora (models/lora.h): the adapters' rank r (0: none) and scale alpha / r.
  int64_t lora_rank = 0;
  float lora_scale = 0.0f;
  float lora_dropout = 0.0f;  // finetune.lora.dropout on the adapters' input

  int64_t N() const { return B * T; }
  // Rows of the residual stream on this rank: N, or N/tp under sequence parallelism.
  int64_t rows() const { return tp != nullptr ? tp->LocalRows(N()) : N(); }
  int64_t qkv_dim() const { return (NH + 2 * NKV) * HS; }
  int64_t attn_dim() const { return NH * HS; }
  // Width of the first MLP projection: F (GPT-2 fc) or 2F (Llama [gate | up]).
  int64_t fc_dim() const { return family == ModelFamily::kLlama ? 2 * F : F; }
  bool gpt2() const { return family == ModelFamily::kGpt2; }
};

// finetune.lora: the adapters of one of the block's four GEMMs (LoraSite order: qkv, proj,
// fc, out), THIS rank's part of each (models/lora.h): A (r, in_local), B (rows, r), adding to
// output rows [row0, row0 + rows) of the site's GEMM (local rows).
inline constexpr int kLoraSites = 4;
inline constexpr int kMaxLoraPerSite = 3;  // q, k, v
struct LoraSiteWeights {
  int n = 0;
  const float* A[kMaxLoraPerSite] = {};
  const float* B[kMaxLoraPerSite] = {};
  int64_t row0[kMaxLoraPerSite] = {}, rows[kMaxLoraPerSite] = {};
};
struct LoraSiteGrads {
  float* A[kMaxLoraPerSite] = {};
  float* B[kMaxLoraPerSite] = {};
};

// Views of one block's parameters (nn.Linear layout, weight (out, in)). Biases and norm biases
// are null for Llama.
struct BlockWeights {
  const float* norm1_w = nullptr;  // (C)
  const float* norm1_b = nullptr;  // (C)
  const float* qkv_w = nullptr;    // (QKV, C)  [q | k | v] rows
  const float* qkv_b = nullptr;    // (QKV)
  const float* q_norm_w = nullptr; // (HS) qk_norm: every query head's RMSNorm weight
  const float* k_norm_w = nullptr; // (HS) qk_norm: every key head's
  const float* proj_w = nullptr;   // (C, NH*HS) attention output projection
  const float* proj_b = nullptr;   // (C)
  const float* norm2_w = nullptr;  // (C)
  const float* norm2_b = nullptr;  // (C)
  const float* fc_w = nullptr;     // (fc_dim, C) GPT-2 c_fc, Llama [gate | up] rows
  const float* fc_b = nullptr;     // (fc_dim)
  const float* out_w = nullptr;    // (C, F) GPT-2 mlp.c_proj, Llama down_proj
  const float* out_b = nullptr;    // (C)
  MoeWeights moe;                  // an MoE block's router and experts (fc/out null)
  LoraSiteWeights lora[kLoraSites];  // finetune.lora adapters per site
};

// The matching gradients (accumulated, +=), same shapes, same nulls.
struct BlockGrads {
  float* norm1_w = nullptr;
  float* norm1_b = nullptr;
  float* qkv_w = nullptr;
  float* qkv_b = nullptr;
  float* q_norm_w = nullptr;
  float* k_norm_w = nullptr;
  float* proj_w = nullptr;
  float* proj_b = nullptr;
  float* norm2_w = nullptr;
  float* norm2_b = nullptr;
  float* fc_w = nullptr;
  float* fc_b = nullptr;
  float* out_w = nullptr;
  float* out_b = nullptr;
  MoeGrads moe;
  LoraSiteGrads lora[kLoraSites];
};

// Where a site's adapters lie relative to the block's adapter unit (param_store.h).
struct LoraSiteLayout {
  int n = 0;
  int64_t A[kMaxLoraPerSite] = {}, B[kMaxLoraPerSite] = {};
  int64_t row0[kMaxLoraPerSite] = {}, rows[kMaxLoraPerSite] = {};
};

// Where each field of BlockWeights / BlockGrads lies relative to a base pointer (the start of
// the block's unit, param_store.h), in elements; -1 for a null field. Parameters and gradients
// share offsets, so one layout serves both, whichever buffer (flat or a store's) holds them.
struct BlockLayout {
  int64_t norm1_w = -1, norm1_b = -1, qkv_w = -1, qkv_b = -1, proj_w = -1, proj_b = -1,
          norm2_w = -1, norm2_b = -1, fc_w = -1, fc_b = -1, out_w = -1, out_b = -1,
          q_norm_w = -1, k_norm_w = -1;
  // An MoE block: the router and shared experts in the block's unit, the routed experts
  // relative to the base of its expert unit (param_store.h).
  int64_t router = -1, shared_fc_w = -1, shared_fc_b = -1, shared_out_w = -1,
          shared_out_b = -1, shared_gate = -1;
  int64_t experts_fc_w = -1, experts_fc_b = -1, experts_out_w = -1, experts_out_b = -1;
  LoraSiteLayout lora[kLoraSites];  // relative to the block's adapter unit

  // Views at base + offset, the routed experts' at expert_base + offset, the adapters' at
  // adapter_base + offset (all null when the base is null: a measuring step reads no weights;
  // a frozen unit's gradient base is null too, and so are its gradient views).
  BlockWeights Weights(const float* base, const float* expert_base = nullptr,
                       const float* adapter_base = nullptr) const;
  BlockGrads Grads(float* base, float* expert_base = nullptr,
                   float* adapter_base = nullptr) const;
};

// What one step runs on: the backend of its kernels and its two arenas (the backend's). A
// MeasuringBackend with measuring arenas runs the same calls and allocations with no
// arithmetic, which measures the capacities a real step needs.
struct StepContext {
  Backend* backend = nullptr;
  Arena* activations = nullptr;  // kept for backward, whole step
  Arena* workspace = nullptr;    // temporaries, stack discipline
  // Backward: the factor the loss's gradient is scaled by (the micro-batch's grad_scale), which
  // the auxiliary losses of MoE blocks (moe.h) apply to theirs.
  float loss_grad_scale = 0.0f;
  // finetune.lora.dropout: the stream of this micro-batch's and block's masks (set per block
  // by the model; the same in forward, recompute and backward); 0 = no dropout (evaluation).
  uint64_t dropout_key = 0;
};

// What the attention sublayer's backward needs.
// Tensors kept in the activations arena are of the activation dtype; those a policy keeps in
// the workspace are fp32 (activation_store.h).
struct AttentionSaved {
  Tensor norm_out;   // (N, C)        input of the qkv projection
  Tensor norm_mean;  // (N)           LayerNorm mean (GPT-2 only)
  Tensor norm_rstd;  // (N)           1 / std (LayerNorm) or 1 / rms (RMSNorm)
  Tensor qkv;        // (N, QKV)      packed [q | k | v], after RoPE for Llama
  Tensor qk_in;      // (N, NH+NKV, HS) qk_norm: the q and k heads before their norms (fp32)
  Tensor qk_rstd;    // (N*(NH+NKV))  qk_norm: their 1 / rms
  Tensor lora_qkv;   // (N, n*r)      finetune.lora: x A^T of the qkv adapters (fp32)
  Tensor lora_proj;  // (N, r)        of the attention output's adapter, summed over tp
  Tensor att;        // (B, NH, T, T) softmax probabilities, or a device's row statistics
                     //   (Backend::AttentionSavedFloats)           [selective: recomputed]
  Tensor att_out;    // (N, NH*HS)    heads concatenated, input of proj [selective: recomputed]
};

// What the MLP sublayer's backward needs.
struct MlpSaved {
  Tensor norm_out;   // (N, C)        input of fc
  Tensor norm_mean;  // (N)           GPT-2 only
  Tensor norm_rstd;  // (N)
  Tensor fc_out;     // (N, fc_dim)   pre-activation: GELU input or [gate | up]
  Tensor act_out;    // (N, F)        activation output, input of out  [selective: recomputed]
  Tensor lora_fc;    // (N, n*r)      finetune.lora: x A^T of the fc adapters (fp32)
  Tensor lora_out;   // (N, r)        of the out projection's adapter, summed over tp
};

struct BlockSaved {
  Tensor mid;  // (N, C) x + attention(x): the MLP's input and residual
  AttentionSaved attn;
  MlpSaved mlp;  // an MoE block: norm_out, norm_mean and norm_rstd only
  MoeSaved moe;  // an MoE block's mixture of experts
};

class DecoderBlock {
 public:
  explicit DecoderBlock(const BlockDims& dims) : d_(dims), moe_(dims.moe) {}

  // out(rows,C) = block(x(rows,C)); x and out are kept tensors of the caller (activations
  // arena: the activation dtype). `keep` decides what of `saved` is kept in the activations
  // arena (kNone: everything; kSelective: all but att, att_out, act_out; kFull: nothing — the
  // caller keeps x). Workspace taken here is released before returning. out must not alias x.
  // An MoE block takes its layer's state (moe.h: the balancing bias it reads, the statistics
  // it records when `record_moe`).
  void Forward(StepContext& step, RecomputePolicy keep, const Tensor& x, const Tensor& out,
               BlockSaved& saved, const BlockWeights& w, MoeLayerState* moe = nullptr,
               bool record_moe = true) const;

  // d_res(N,C): on entry dL/d(out), on return dL/dx. `x` and `saved` are what Forward was given
  // and filled under the same policy; what the policy dropped is recomputed into workspace.
  // Parameter gradients are accumulated into `g`. d_res is rounded to act_dtype on return.
  void Backward(StepContext& step, RecomputePolicy keep, float* d_res, const Tensor& x,
                const BlockSaved& saved, const BlockWeights& w, const BlockGrads& g,
                MoeLayerState* moe = nullptr) const;

  const BlockDims& dims() const { return d_; }

 private:
  // The forward computation. Tensors backward needs come from `kept`, the others from
  // `dropped`; what stays in the workspace is not released (the attention's fp32 copies
  // are). With out == nullptr the last projection is skipped (a full-recompute pass needs
  // everything but the block's output).
  void Compute(StepContext& step, Arena& kept, Arena& dropped, const Tensor& x,
               const Tensor* out, BlockSaved& s, const BlockWeights& w, MoeLayerState* moe,
               bool record_moe) const;
  // The MoE block's second sublayer: out = mid + moe(norm2(mid)) (out null: not written).
  void MoeSublayer(StepContext& step, Arena& kept, Arena& dropped, const float* mid,
                   const Tensor* out, BlockSaved& s, const BlockWeights& w, MoeLayerState& moe,
                   bool record) const;
  void MoeBackward(StepContext& step, RecomputePolicy keep, float* d_res, const BlockSaved& s,
                   const BlockWeights& w, const BlockGrads& g) const;
  void AllocNorm(const StepContext& step, Arena& a, Tensor& out, Tensor& mean,
                 Tensor& rstd) const;
  // Tensor-parallel pieces (see the file comment); without tp they are the plain kernels.
  const float* Gathered(Arena& ws, const float* norm_out) const;
  // A row-parallel site with its adapter (lora.n == 0: none; `u`: its saved x A^T).
  void RowParallel(StepContext& step, float* out, const float* inp, const float* w,
                   const float* b, int64_t K, int lora_site, const LoraSiteWeights& lora,
                   float* u) const;
  void RowParallelBackward(StepContext& step, float* d_inp, float* g_w, float* g_b,
                           const float* d_out, const float* inp, const float* w, int64_t K,
                           int lora_site, const LoraSiteWeights& lora, const LoraSiteGrads& lg,
                           const float* u) const;
  // ---- finetune.lora (block_lora.cc; models/lora.h has the math) ----
  // Saved x A^T of a site: (N, n*r) fp32 in `a`, or an empty tensor without adapters.
  Tensor LoraAlloc(Arena& a, const LoraSiteWeights& lora) const;
  // Column site (0: qkv, 2: fc): u = drop(x) A^T per adapter, y[:, rows] += s u B^T
  // (y: (N, ldy), x: (N, K)).
  void LoraColumnForward(StepContext& step, int site, float* y, int64_t ldy, const float* x,
                         int64_t K, const LoraSiteWeights& lora, float* u) const;
  // Its backward from dy (N, ldy): B's and A's gradients accumulated, d_x += drop'(du A).
  void LoraColumnBackward(StepContext& step, int site, float* d_x, const float* dy, int64_t ldy,
                          const float* x, int64_t K, const LoraSiteWeights& lora,
                          const LoraSiteGrads& lg, const float* u) const;
  // Row site (1: proj, 3: out): u = drop(x) A^T (N, r) summed over tp; y += s u B^T on tp
  // rank 0 only (y: the partial product the site's tp sum adds, (N, C)).
  void LoraRowInput(StepContext& step, int site, float* u, const float* x, int64_t K,
                    const LoraSiteWeights& lora) const;
  void LoraRowForward(Backend& be, float* y, const float* u, const LoraSiteWeights& lora) const;
  // From the site's full output gradient d_full (N, C): gradients accumulated, d_x += du A.
  void LoraRowBackward(StepContext& step, int site, float* d_x, const float* d_full,
                       const float* x, int64_t K, const LoraSiteWeights& lora,
                       const LoraSiteGrads& lg, const float* u) const;
  // The input of adapter j of `site` under dropout: x itself (no dropout, or evaluation) or
  // a workspace copy with the mask applied (the caller releases it). x holds columns
  // [col0, col0 + K) of a ld-wide input (a row-parallel site's tp slice).
  const float* LoraInput(StepContext& step, int site, int j, const float* x, int64_t K) const;
  // d_x += drop'(dx_drop): the mask of LoraInput applied to dx_drop (overwritten) then added.
  void LoraInputBackward(StepContext& step, int site, int j, float* d_x, float* dx_drop,
                         int64_t K) const;
  // Backward's tp sum of the column sites' A gradients (partial per rank): points lg's A at a
  // zeroed workspace buffer; LoraSumPartials then sums it over tp and adds it to g.
  Tensor LoraPartials(StepContext& step, const BlockWeights& w, BlockGrads& gs) const;
  void LoraSumPartials(StepContext& step, const BlockWeights& w, const Tensor& partial,
                       const BlockGrads& g) const;
  void EnterBackward(float* d_full, float* d_local) const;
  void NormForward(Backend& be, float* out, const Tensor& mean, const Tensor& rstd,
                   const float* x, const float* w, const float* b) const;
  // d_x(N,C) written from d_out(N,C).
  void NormBackward(Backend& be, float* d_x, float* d_w, float* d_b, const float* d_out,
                    const float* x, const float* w, const Tensor& mean, const Tensor& rstd) const;
  // Rounds n elements at x to act_dtype; nothing for kF32.
  void Round(Backend& be, float* x, int64_t n) const;
  // The activation and the attention core, their outputs committed (activation_store.h;
  // forward and recompute). Each returns its (act_out / att_out) fp32 values.
  float* Activation(const StepContext& step, const Tensor& act_out, const float* fc_out) const;
  Tensor SavedAttention(const StepContext& step, Arena& arena) const;
  float* AttentionCore(const StepContext& step, const Tensor& att_out, const Tensor& att,
                       const float* qkv) const;
  void MlpBackward(StepContext& step, float* d_res, const BlockSaved& s, const Tensor& act_out,
                   const BlockWeights& w, const BlockGrads& g) const;
  void AttentionBackward(StepContext& step, float* d_res, const float* x, const float* qkv,
                         const BlockSaved& s, const Tensor& att, const Tensor& att_out,
                         const BlockWeights& w, const BlockGrads& g) const;

  BlockDims d_;
  MoeLayer moe_;  // used when d_.has_moe
};

}  // namespace tessera
