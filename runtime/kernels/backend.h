// runtime/kernels/backend.h — the compute-backend seam: every kernel a model runs, by op name,
// behind one interface, so call sites stay backend-neutral (llm.c's `matmul_forward` whether
// CPU or CUDA) and a new backend (CUDA, CPU bf16) is one class, tested against the reference.
//
// Implementations:
//   CpuBackend        (cpu_backend.h)       the CPU fp32 reference: forwards to cpu/ops.h and
//                                           cpu/convert.h, bit for bit.
//   MeasuringBackend  (measuring_backend.h) the measuring pass that sizes a model's arenas:
//                                           its kernels do nothing and its arenas only count,
//                                           so the model code runs the same calls in both
//                                           passes and never asks which one it is in.
// Contract of every op: the one of cpu/ops.h (shapes, `+=` into parameter gradients, `=` into
// input gradients, null gradient pointers skip work, deterministic order), on memory of this
// backend's device(). The ops take pointers and int64_t shapes as ops.h does, on fp32 values:
// activations stored in a low type (bf16 / fp16) are widened by the model before an op reads
// them and narrowed after (models/activation_store.h, through Round / ConvertFromF32 /
// ConvertToF32), and a backend that computes in a low type (CpuBf16Backend) narrows the
// operands it multiplies itself; an op taking low-type tensors directly is added per op when
// a backend gains by it.
// Cost: one virtual call per op (per layer and micro-batch), nothing per element.
//
// Streams and events (runtime/core/stream.h): ops are enqueued on the backend's current
// stream (stream(), SetStream); Record / Wait / Synchronize order work across streams and
// with the host. On CPU every op completes before it returns, so they are no-ops there; a
// device backend uses them to overlap copies, compute and communication (comm's Work takes
// the same handles).
// Thread-safety: one thread drives a backend (the model's); kernels parallelise inside.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/core/dtype.h"
#include "runtime/core/memory.h"
#include "runtime/core/stream.h"
#include "runtime/core/tensor.h"
#include "runtime/kernels/moe_routing.h"
#include "runtime/kernels/rope_params.h"

namespace tessera {

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- Device, memory, ordering --------------------------------------------------------
  virtual Device device() const = 0;
  // "cpu-fp32", "measuring": for banners and test names.
  virtual const char* name() const = 0;
  // An arena of `capacity_bytes` in this backend's device memory (a measuring backend: a
  // measuring arena, which only counts). The model's activation and workspace arenas come
  // from here, so they belong to the device its kernels run on.
  virtual Arena MakeArena(MemoryKind kind, size_t capacity_bytes, MemoryTracker* tracker) = 0;
  // The stream ops are enqueued on (initially the default stream).
  virtual Stream stream() const = 0;
  virtual void SetStream(Stream s) = 0;
  // An event after everything enqueued on `s` so far.
  virtual Event Record(Stream s) = 0;
  // Work enqueued on `s` after this call starts only once `e` has completed (host not blocked).
  virtual void Wait(Stream s, Event e) = 0;
  // Blocks the host until `e` has completed.
  virtual void Synchronize(Event e) = 0;

  // ---- Memory operations on device memory ----------------------------------------------
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;
  // Between host memory and this backend's device memory (on CPU: both a memcpy). Upload is
  // ordered on the current stream and `host_src` may be reused once it returns; Download
  // waits for the work enqueued before it and returns with `host_dst` filled (a measuring
  // backend: neither touches memory).
  virtual void Upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void Download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void Zero(void* dst, size_t bytes) = 0;
  // x(n) rounded in place to `dtype` (kBF16 / kF16; kF32: unchanged), as cpu::RoundTo.
  virtual void Round(DType dtype, float* x, int64_t n) = 0;
  virtual void ConvertFromF32(DType dtype, const float* src, void* dst, int64_t n) = 0;
  virtual void ConvertToF32(DType dtype, const void* src, float* dst, int64_t n) = 0;

  // ---- GEMM and Linear -------------------------------------------------------------------
  virtual void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                    float* C, int64_t ldc) = 0;
  virtual void LinearForward(float* out, const float* inp, const float* weight,
                             const float* bias, int64_t N, int64_t C, int64_t OC) = 0;
  virtual void LinearBackward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                              const float* inp, const float* weight, int64_t N, int64_t C,
                              int64_t OC) = 0;

  // ---- Embeddings ------------------------------------------------------------------------
  virtual void EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                                const float* wpe, int64_t B, int64_t T, int64_t C) = 0;
  virtual void EmbeddingBackward(float* d_wte, float* d_wpe, const float* d_out,
                                 const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                 int64_t V) = 0;

  // ---- Normalisation ---------------------------------------------------------------------
  virtual void LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                const float* weight, const float* bias, int64_t N, int64_t C,
                                float eps) = 0;
  virtual void LayerNormBackward(float* d_inp, float* d_weight, float* d_bias,
                                 const float* d_out, const float* inp, const float* weight,
                                 const float* mean, const float* rstd, int64_t N,
                                 int64_t C) = 0;
  virtual void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight,
                              int64_t N, int64_t C, float eps) = 0;
  virtual void RmsNormBackward(float* d_inp, float* d_weight, const float* d_out,
                               const float* inp, const float* weight, const float* rstd,
                               int64_t N, int64_t C) = 0;
  // Qwen3's q/k norms: RMSNorm over every head of the q and k parts of packed [q | k | v] rows
  // (N rows of (NH + 2*NKV) * HS), in place, q heads with w_q (HS), k heads with w_k (HS).
  // Saves the pre-norm values `qk_in` (N, NH + NKV, HS) and `rstd` (N * NH for q, then
  // N * NKV for k). Backward: d_qkv's q and k parts become the pre-norm gradients; d_w_q and
  // d_w_k accumulate (+=).
  virtual void HeadRmsNormForward(float* qkv, float* qk_in, float* rstd, const float* w_q,
                                  const float* w_k, int64_t N, int64_t NH, int64_t NKV,
                                  int64_t HS, float eps) = 0;
  virtual void HeadRmsNormBackward(float* d_qkv, float* d_w_q, float* d_w_k, const float* qk_in,
                                   const float* w_q, const float* w_k, const float* rstd,
                                   int64_t N, int64_t NH, int64_t NKV, int64_t HS) = 0;

  // ---- Activations and residual ------------------------------------------------------------
  virtual void GeluForward(float* out, const float* inp, int64_t n) = 0;
  virtual void GeluBackward(float* d_inp, const float* d_out, const float* inp, int64_t n) = 0;
  virtual void SwigluForward(float* out, const float* inp, int64_t N, int64_t H) = 0;
  virtual void SwigluBackward(float* d_inp, const float* d_out, const float* inp, int64_t N,
                              int64_t H) = 0;
  virtual void Add(float* out, const float* a, const float* b, int64_t n) = 0;
  virtual void AddInPlace(float* acc, const float* x, int64_t n) = 0;
  // LoRA's input dropout, cpu::Dropout's contract (runtime/kernels/cpu/ops.h).
  virtual void Dropout(float* out, const float* x, int64_t rows, int64_t cols, int64_t col0,
                       int64_t ld_index, float p, uint64_t key) = 0;

  // ---- Rotary embedding and attention -----------------------------------------------------
  virtual void RopeForward(float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                           int64_t HS, const RopeParams& rope, int64_t pos_offset) = 0;
  virtual void RopeBackward(float* d_qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                            int64_t HS, const RopeParams& rope, int64_t pos_offset) = 0;
  // What AttentionForward saves in `att`: the softmax probabilities, which a model may store
  // in its activation dtype (the CPU's), or statistics of the backend's own that must stay
  // fp32, unrounded (a device's log-sum-exps).
  virtual bool AttentionSavesProbabilities() const { return true; }
  // The floats of AttentionForward's `att` and of AttentionBackward's `scratch`, by contract:
  // B*NH*T*T each where the probabilities are saved; otherwise one log-sum-exp per query row
  // plus one float (the window travels with them) and one sum per query row. A device thus
  // never holds a T x T buffer (Llama 8B at T = 4096: 2 GiB per layer and micro-batch row).
  int64_t AttentionSavedFloats(int64_t B, int64_t NH, int64_t T) const {
    return AttentionSavesProbabilities() ? B * NH * T * T : B * NH * T + 1;
  }
  int64_t AttentionScratchFloats(int64_t B, int64_t NH, int64_t T) const {
    return AttentionSavesProbabilities() ? B * NH * T * T : B * NH * T;
  }
  // window: 0 = causal; W > 0 = each query sees its W most recent keys (itself included).
  virtual void AttentionForward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                                int64_t NH, int64_t NKV, int64_t HS, int64_t window) = 0;
  virtual void AttentionBackward(float* d_qkv, float* scratch, const float* d_out,
                                 const float* qkv, const float* att, int64_t B, int64_t T,
                                 int64_t NH, int64_t NKV, int64_t HS) = 0;

  // ---- Classifier (LM head + cross-entropy) -------------------------------------------------
  // Returns the loss sum over counted rows (a measuring backend: 0).
  virtual double ClassifierForwardBackward(float* losses, float* d_x, float* d_weight,
                                           const float* x, const float* weight,
                                           const int32_t* targets, int64_t N, int64_t C,
                                           int64_t V, float loss_scale, float* logits_scratch,
                                           int64_t chunk_rows) = 0;

  // ---- Tensor-parallel pieces ----------------------------------------------------------------
  virtual void AddBias(float* out, const float* bias, int64_t N, int64_t OC) = 0;
  virtual void AddPositions(float* out, const float* wpe, int64_t row_begin, int64_t rows,
                            int64_t T, int64_t C) = 0;
  virtual void VocabEmbeddingForward(float* out, const int32_t* tokens, const float* wte_local,
                                     int64_t vocab_begin, int64_t vocab_rows, int64_t N,
                                     int64_t C) = 0;
  virtual void VocabEmbeddingBackward(float* d_wte_local, const float* d_out,
                                      const int32_t* tokens, int64_t vocab_begin,
                                      int64_t vocab_rows, int64_t N, int64_t C) = 0;
  // `combine(ctx, values, n, max)` reduces across the tp ranks (cpu/ops.h); a measuring
  // backend never calls it.
  using CombineFn = void (*)(void* ctx, float* values, int64_t n, bool max);
  virtual double VocabParallelClassifier(float* losses, float* d_x, float* d_weight,
                                         const float* x, const float* weight,
                                         const int32_t* targets, int64_t N, int64_t C,
                                         int64_t V_local, int64_t V_real, int64_t vocab_begin,
                                         float loss_scale, float* logits_scratch,
                                         int64_t chunk_rows, CombineFn combine,
                                         void* combine_ctx) = 0;
  // ---- Mixture of experts (moe_routing.h has the routing rules, cpu/moe.h each contract) ----
  // MoeRoute's bias(E) is host memory (the trainer's balancing state); a device backend
  // uploads it.
  virtual void MoeRoute(const MoeRouterSpec& spec, const float* logits, const float* bias,
                        float* scores, int32_t* expert, float* gate, int64_t R) = 0;
  virtual void MoeRouteBackward(const MoeRouterSpec& spec, const float* scores,
                                const int32_t* expert, const float* d_gate, float* d_logits,
                                int64_t R) = 0;
  // The plan's offset(E + 1) and counts(E) are host memory the caller reads to loop over the
  // experts (a device backend copies them back); a measuring backend writes an empty plan
  // (offsets 0, counts unchanged) and returns 0.
  virtual int64_t MoePlan(const int32_t* expert, const float* scores, int64_t R, int64_t k,
                          int64_t E, int64_t capacity, int32_t* row_of, int32_t* token_of_row,
                          int64_t* offset, int64_t* counts) = 0;
  virtual void MoeGather(float* rows, const float* x, const int32_t* token_of_row, int64_t n,
                         int64_t C) = 0;
  virtual void MoeGatherBackward(float* d_x, const float* d_rows, const int32_t* row_of,
                                 int64_t R, int64_t k, int64_t C) = 0;
  virtual void MoeCombine(float* out, const float* y, const float* gate, const int32_t* row_of,
                          int64_t R, int64_t k, int64_t C) = 0;
  virtual void MoeCombineBackward(float* d_y, float* d_gate, const float* d_out, const float* y,
                                  const float* gate, const int32_t* row_of, int64_t R,
                                  int64_t k, int64_t C) = 0;
  // out(R,C) += sigmoid(logit[t]) * x[t] (Qwen2-MoE's gated shared expert); backward writes
  // d_x = sigmoid(logit) * d_out and d_logit[t] = sigmoid' * <d_out[t], x[t]>.
  virtual void GatedAddForward(float* out, const float* x, const float* logit, int64_t R,
                               int64_t C) = 0;
  virtual void GatedAddBackward(float* d_x, float* d_logit, const float* d_out, const float* x,
                                const float* logit, int64_t R, int64_t C) = 0;
  // probs_sum, counts and z_sum are host memory (measuring: unchanged).
  virtual void MoeBalanceStats(const MoeRouterSpec& spec, const float* logits,
                               const float* scores, const int32_t* expert, int64_t R,
                               double* probs_sum, double* counts, double* z_sum) = 0;
  // aux's coefficient arrays are host memory (the model computes them from the statistics);
  // a device backend uploads them.
  virtual void MoeAuxBackward(const MoeRouterSpec& spec, const float* logits,
                              const float* scores, const MoeAuxGrad& aux, float* d_logits,
                              int64_t R) = 0;
};

}  // namespace tessera
