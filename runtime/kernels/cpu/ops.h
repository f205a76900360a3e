// runtime/kernels/cpu/ops.h — the CPU backend: forward and backward of every transformer op.
//
// Contract for every function here:
//  - fp32, row-major, contiguous unless a stride argument says otherwise.
//  - Backward functions ACCUMULATE (+=) into parameter gradients (d_weight, d_bias), so
//    micro-batches add up, and WRITE (=) input gradients (d_inp), unless noted.
//    A null gradient pointer means "not needed": skip that work.
//  - Deterministic: the reduction order is fixed and does not depend on thread timing, so the
//    same inputs give the same bits on every run with the same thread count.
//  - Multi-threaded with OpenMP (one pool shared with OpenBLAS, see threads.h).
// Dimension letters: N rows (= B*T tokens), C channels, OC output channels, V vocabulary,
// B batch, T sequence, NH query heads, NKV key/value heads, HS head size.
// Shapes are given beside each pointer. Reference formulas are in the .cc files.
#pragma once

#include <cstdint>

#include "runtime/kernels/rope_params.h"

namespace tessera::cpu {

// ---- GEMM -------------------------------------------------------------------------------
// C(M,N) = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T. Leading dimensions are the
// row strides of the matrices as stored. Thin wrapper over cblas_sgemm.
void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc);

// ---- Linear (nn.Linear convention: weight is (OC, C)) -----------------------------------
// out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC); bias may be null.
void LinearForward(float* out, const float* inp, const float* weight, const float* bias,
                   int64_t N, int64_t C, int64_t OC);
// d_inp(N,C) = d_out @ weight (written; skipped if null);
// d_weight(OC,C) += d_out^T @ inp; d_bias(OC) += column sums of d_out (skipped if null).
void LinearBackward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                    const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC);

// ---- Embeddings -------------------------------------------------------------------------
// out(B*T,C) = wte[tokens] (+ wpe[t] if wpe is non-null: learned positions, GPT-2).
void EmbeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                      int64_t B, int64_t T, int64_t C);
// d_wte(V,C) += scatter of d_out by token; d_wpe(maxT,C) += sum over batch (if non-null).
// Deterministic: rows of d_wte are accumulated in token order regardless of threads.
void EmbeddingBackward(float* d_wte, float* d_wpe, const float* d_out, const int32_t* tokens,
                       int64_t B, int64_t T, int64_t C, int64_t V);

// ---- Normalisation ------------------------------------------------------------------------
// LayerNorm over the last dim: out = (x - mean) * rstd * weight + bias. Saves mean(N), rstd(N).
void LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, int64_t N, int64_t C, float eps);
void LayerNormBackward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                       const float* inp, const float* weight, const float* mean,
                       const float* rstd, int64_t N, int64_t C);
// RMSNorm (Llama): out = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps). Saves rstd(N).
void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                    int64_t C, float eps);
void RmsNormBackward(float* d_inp, float* d_weight, const float* d_out, const float* inp,
                     const float* weight, const float* rstd, int64_t N, int64_t C);
// Where row i of C elements starts in a buffer: i * C (contiguous), or in groups of `per` rows
// `stride` apart -- e.g. the q heads of packed [q | k | v] rows: per = NH, stride = QKV.
struct NormRows {
  int64_t per = 1, stride = 0;  // stride 0: contiguous
  int64_t At(int64_t i, int64_t C) const {
    return stride == 0 ? i * C : (i / per) * stride + (i % per) * C;
  }
};
// RMSNorm over rows laid out as `*_rows` say (the same arithmetic as RmsNormForward/Backward,
// which are these with contiguous rows). Outputs may alias inputs row for row.
void RmsNormForwardRows(float* out, NormRows out_rows, float* rstd, const float* inp,
                        NormRows in_rows, const float* weight, int64_t N, int64_t C, float eps);
void RmsNormBackwardRows(float* d_inp, NormRows d_inp_rows, float* d_weight, const float* d_out,
                         NormRows d_out_rows, const float* inp, NormRows in_rows,
                         const float* weight, const float* rstd, int64_t N, int64_t C);

// ---- Activations --------------------------------------------------------------------------
// GELU, tanh approximation (GPT-2's "gelu_new"). n elements.
void GeluForward(float* out, const float* inp, int64_t n);
void GeluBackward(float* d_inp, const float* d_out, const float* inp, int64_t n);
// SwiGLU (Llama): inp(N, 2H) holds [gate | up] per row; out(N,H) = silu(gate) * up.
void SwigluForward(float* out, const float* inp, int64_t N, int64_t H);
// d_inp(N, 2H) = [d_gate | d_up] (written).
void SwigluBackward(float* d_inp, const float* d_out, const float* inp, int64_t N, int64_t H);

// ---- Residual -----------------------------------------------------------------------------
// out = a + b (out may alias a or b).
void Add(float* out, const float* a, const float* b, int64_t n);
// acc += x.
void AddInPlace(float* acc, const float* x, int64_t n);

// ---- Dropout (LoRA's, models/lora.h) -------------------------------------------------------
// out(rows, cols) = x * keep / (1 - p) (out may alias x), where element (i, j) is kept when
// draw number i * ld_index + col0 + j of the counter-based stream `key` (runtime/core/random.h:
// Rng(key, that number).NextFloat()) is >= p. The mask is a pure function of (key, element
// index), so a tensor-parallel rank holding columns [col0, col0 + cols) of a ld_index-wide
// input draws the one-rank model's mask, and backward redraws forward's.
void Dropout(float* out, const float* x, int64_t rows, int64_t cols, int64_t col0,
             int64_t ld_index, float p, uint64_t key);

// ---- Rotary position embedding (Llama, Hugging Face "rotate_half" convention) ------------
// qkv(B*T, (NH + 2*NKV)*HS) holds [q heads | k heads | v heads] per token. Rotates q and k of
// token t (position t + pos_offset) in place: for i < HS/2, with a = pos * inv_freq[i]
// (rope_params.h: theta^(-2i/HS), scaled for long contexts):
//   x[i]        = x[i] cos a - x[i+HS/2] sin a
//   x[i+HS/2]   = x[i+HS/2] cos a + x[i] sin a.   v is untouched.
void RopeForward(float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                 const RopeParams& rope, int64_t pos_offset);
// The inverse rotation, applied in place to d_qkv (rotation is orthogonal: backward = R^T).
void RopeBackward(float* d_qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                  const RopeParams& rope, int64_t pos_offset);

// ---- Causal self-attention with grouped-query heads --------------------------------------
// qkv(B*T, (NH+2*NKV)*HS) as above (after RoPE for Llama). Query head h uses kv head
// h / (NH/NKV). Scale 1/sqrt(HS), causal mask; with window W > 0 query i sees keys
// i-W+1 .. i only (Mistral's sliding window). Writes out(B*T, NH*HS) (heads concatenated)
// and saves att(B, NH, T, T) = softmax probabilities (zero outside the mask).
void AttentionForward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                      int64_t NH, int64_t NKV, int64_t HS, int64_t window);
// d_qkv(B*T, (NH+2*NKV)*HS) written. `scratch` holds at least B*NH*T*T floats. Any mask
// the forward used is in att (its zeros), so backward takes no window.
void AttentionBackward(float* d_qkv, float* scratch, const float* d_out, const float* qkv,
                       const float* att, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                       int64_t HS);

// ---- Classifier: LM head fused with softmax cross-entropy ---------------------------------
// logits(N,V) = x(N,C) @ weight(V,C)^T, loss_i = logsumexp(logits_i) - logits_i[target_i].
// Processes rows in chunks of `chunk_rows` through `logits_scratch` (chunk_rows * V floats),
// so the full (N,V) logits never exist. Writes losses(N). Targets < 0 are ignored (loss 0,
// no gradient). Returns the sum of losses over non-ignored rows.
// If d_x is non-null this is forward + backward in one pass with d_loss_i = loss_scale
// (usually 1 / number of counted tokens): writes d_x(N,C), accumulates d_weight(V,C).
double ClassifierForwardBackward(float* losses, float* d_x, float* d_weight, const float* x,
                                 const float* weight, const int32_t* targets, int64_t N,
                                 int64_t C, int64_t V, float loss_scale, float* logits_scratch,
                                 int64_t chunk_rows);

// ---- Tensor parallelism (vocab_parallel.cc) ----------------------------------------------
// out(N,OC) += bias(OC) on every row (a row-parallel layer adds its bias once, after the
// partial products are reduced).
void AddBias(float* out, const float* bias, int64_t N, int64_t OC);
// out[i] += wpe[(row_begin + i) % T] for i < rows: learned positions of rows row_begin ..
// of a flattened (B*T) batch (a sequence-parallel shard starts mid-batch).
void AddPositions(float* out, const float* wpe, int64_t row_begin, int64_t rows, int64_t T,
                  int64_t C);
// Vocab-parallel embedding: this rank holds rows [vocab_begin, vocab_begin + vocab_rows) of
// the table. out(N,C) = wte_local[token - vocab_begin] for tokens in that range, 0 otherwise
// (the sum over ranks is the full lookup).
void VocabEmbeddingForward(float* out, const int32_t* tokens, const float* wte_local,
                           int64_t vocab_begin, int64_t vocab_rows, int64_t N, int64_t C);
// d_wte_local += scatter of d_out(N,C) rows whose token is in this rank's range, in token
// order (deterministic, as EmbeddingBackward).
void VocabEmbeddingBackward(float* d_wte_local, const float* d_out, const int32_t* tokens,
                            int64_t vocab_begin, int64_t vocab_rows, int64_t N, int64_t C);

// Vocab-parallel LM head + cross-entropy (Megatron's): this rank holds rows [vocab_begin,
// vocab_begin + V_local) of the head weight; only the first `V_real` of them are real
// vocabulary (the rest pad the vocabulary to a multiple of tp: their logits are left out).
// The full (N, V) logits are never gathered: per chunk of rows, `combine(values, n, max)`
// must reduce n floats across the tp ranks in place (max when `max`, else sum) and leave the
// same bits on every rank; it is called twice per chunk (row maxima, then [sum exp | target
// logit] pairs), in the same order on every rank. Returns the sum of losses over counted rows
// (the same on every rank). Backward (d_x non-null): d_x(N,C) = d_logits_local @ weight_local
// is this rank's PARTIAL input gradient (the caller sums it over tp), d_weight(V_local, C) +=
// d_logits_local^T @ x. Scratch: chunk_rows * V_local floats.
using CombineFn = void (*)(void* ctx, float* values, int64_t n, bool max);
double VocabParallelClassifier(float* losses, float* d_x, float* d_weight, const float* x,
                               const float* weight, const int32_t* targets, int64_t N,
                               int64_t C, int64_t V_local, int64_t V_real, int64_t vocab_begin,
                               float loss_scale, float* logits_scratch, int64_t chunk_rows,
                               CombineFn combine, void* combine_ctx);

}  // namespace tessera::cpu
