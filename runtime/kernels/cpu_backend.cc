// runtime/kernels/cpu_backend.cc — CpuBackend (cpu_backend.h): forwards every op to cpu/.
#include "runtime/kernels/cpu_backend.h"

#include "runtime/kernels/cpu/moe.h"

#include <cstring>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu/convert.h"
#include "runtime/kernels/cpu/ops.h"

namespace tessera {

Backend& CpuReferenceBackend() {
  static CpuBackend backend;
  return backend;
}

Arena CpuBackend::MakeArena(MemoryKind kind, size_t capacity_bytes, MemoryTracker* tracker) {
  return Arena(kind, capacity_bytes, tracker);
}

// The CPU has one queue, the calling thread: only the default stream exists.
void CpuBackend::SetStream(Stream s) {
  TESSERA_CHECK_MSG(s.is_default(), "the CPU backend has only the default stream");
}

// Every op has completed when it returns, so a CPU event is complete when recorded.
void CpuBackend::Wait(Stream s, Event e) { SetStream(s); }
void CpuBackend::Synchronize(Event e) {}

void CpuBackend::Copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void CpuBackend::Zero(void* dst, size_t bytes) {
  if (bytes > 0) std::memset(dst, 0, bytes);
}

void CpuBackend::Round(DType dtype, float* x, int64_t n) { cpu::RoundTo(dtype, x, n); }

void CpuBackend::ConvertFromF32(DType dtype, const float* src, void* dst, int64_t n) {
  cpu::ConvertFromF32(dtype, src, dst, n);
}

void CpuBackend::ConvertToF32(DType dtype, const void* src, float* dst, int64_t n) {
  cpu::ConvertToF32(dtype, src, dst, n);
}

void CpuBackend::Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                      float* C, int64_t ldc) {
  cpu::Gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void CpuBackend::LinearForward(float* out, const float* inp, const float* weight, const float* bias,
                               int64_t N, int64_t C, int64_t OC) {
  cpu::LinearForward(out, inp, weight, bias, N, C, OC);
}

void CpuBackend::LinearBackward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                                const float* inp, const float* weight, int64_t N, int64_t C,
                                int64_t OC) {
  cpu::LinearBackward(d_inp, d_weight, d_bias, d_out, inp, weight, N, C, OC);
}

void CpuBackend::EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                                  const float* wpe, int64_t B, int64_t T, int64_t C) {
  cpu::EmbeddingForward(out, tokens, wte, wpe, B, T, C);
}

void CpuBackend::EmbeddingBackward(float* d_wte, float* d_wpe, const float* d_out,
                                   const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                   int64_t V) {
  cpu::EmbeddingBackward(d_wte, d_wpe, d_out, tokens, B, T, C, V);
}

void CpuBackend::LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                  const float* weight, const float* bias, int64_t N, int64_t C,
                                  float eps) {
  cpu::LayerNormForward(out, mean, rstd, inp, weight, bias, N, C, eps);
}

void CpuBackend::LayerNormBackward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                                   const float* inp, const float* weight, const float* mean,
                                   const float* rstd, int64_t N, int64_t C) {
  cpu::LayerNormBackward(d_inp, d_weight, d_bias, d_out, inp, weight, mean, rstd, N, C);
}

void CpuBackend::RmsNormForward(float* out, float* rstd, const float* inp, const float* weight,
                                int64_t N, int64_t C, float eps) {
  cpu::RmsNormForward(out, rstd, inp, weight, N, C, eps);
}

void CpuBackend::RmsNormBackward(float* d_inp, float* d_weight, const float* d_out,
                                 const float* inp, const float* weight, const float* rstd,
                                 int64_t N, int64_t C) {
  cpu::RmsNormBackward(d_inp, d_weight, d_out, inp, weight, rstd, N, C);
}

// The q heads are rows (n, h < NH) of the packed rows, the k heads follow them (NormRows: NH
// or NKV rows of HS per packed row); in qk_in the same heads are packed NH + NKV per row.
void CpuBackend::HeadRmsNormForward(float* qkv, float* qk_in, float* rstd, const float* w_q,
                                    const float* w_k, int64_t N, int64_t NH, int64_t NKV,
                                    int64_t HS, float eps) {
  const int64_t QKV = (NH + 2 * NKV) * HS, QK = (NH + NKV) * HS;
  for (int64_t n = 0; n < N; ++n) std::memcpy(qk_in + n * QK, qkv + n * QKV, QK * sizeof(float));
  cpu::RmsNormForwardRows(qkv, {NH, QKV}, rstd, qk_in, {NH, QK}, w_q, N * NH, HS, eps);
  cpu::RmsNormForwardRows(qkv + NH * HS, {NKV, QKV}, rstd + N * NH, qk_in + NH * HS, {NKV, QK},
                          w_k, N * NKV, HS, eps);
}

void CpuBackend::HeadRmsNormBackward(float* d_qkv, float* d_w_q, float* d_w_k,
                                     const float* qk_in, const float* w_q, const float* w_k,
                                     const float* rstd, int64_t N, int64_t NH, int64_t NKV,
                                     int64_t HS) {
  const int64_t QKV = (NH + 2 * NKV) * HS, QK = (NH + NKV) * HS;
  cpu::RmsNormBackwardRows(d_qkv, {NH, QKV}, d_w_q, d_qkv, {NH, QKV}, qk_in, {NH, QK}, w_q, rstd,
                           N * NH, HS);
  cpu::RmsNormBackwardRows(d_qkv + NH * HS, {NKV, QKV}, d_w_k, d_qkv + NH * HS, {NKV, QKV},
                           qk_in + NH * HS, {NKV, QK}, w_k, rstd + N * NH, N * NKV, HS);
}

void CpuBackend::GeluForward(float* out, const float* inp, int64_t n) {
  cpu::GeluForward(out, inp, n);
}

void CpuBackend::GeluBackward(float* d_inp, const float* d_out, const float* inp, int64_t n) {
  cpu::GeluBackward(d_inp, d_out, inp, n);
}

void CpuBackend::SwigluForward(float* out, const float* inp, int64_t N, int64_t H) {
  cpu::SwigluForward(out, inp, N, H);
}

void CpuBackend::SwigluBackward(float* d_inp, const float* d_out, const float* inp, int64_t N,
                                int64_t H) {
  cpu::SwigluBackward(d_inp, d_out, inp, N, H);
}

void CpuBackend::Add(float* out, const float* a, const float* b, int64_t n) {
  cpu::Add(out, a, b, n);
}

void CpuBackend::AddInPlace(float* acc, const float* x, int64_t n) { cpu::AddInPlace(acc, x, n); }
void CpuBackend::Dropout(float* out, const float* x, int64_t rows, int64_t cols, int64_t col0,
                         int64_t ld_index, float p, uint64_t key) {
  cpu::Dropout(out, x, rows, cols, col0, ld_index, p, key);
}

void CpuBackend::RopeForward(float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                             const RopeParams& rope, int64_t pos_offset) {
  cpu::RopeForward(qkv, B, T, NH, NKV, HS, rope, pos_offset);
}

void CpuBackend::RopeBackward(float* d_qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                              int64_t HS, const RopeParams& rope, int64_t pos_offset) {
  cpu::RopeBackward(d_qkv, B, T, NH, NKV, HS, rope, pos_offset);
}

void CpuBackend::AttentionForward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                                  int64_t NH, int64_t NKV, int64_t HS, int64_t window) {
  cpu::AttentionForward(out, att, qkv, B, T, NH, NKV, HS, window);
}

void CpuBackend::AttentionBackward(float* d_qkv, float* scratch, const float* d_out,
                                   const float* qkv, const float* att, int64_t B, int64_t T,
                                   int64_t NH, int64_t NKV, int64_t HS) {
  cpu::AttentionBackward(d_qkv, scratch, d_out, qkv, att, B, T, NH, NKV, HS);
}

double CpuBackend::ClassifierForwardBackward(float* losses, float* d_x, float* d_weight,
                                             const float* x, const float* weight,
                                             const int32_t* targets, int64_t N, int64_t C,
                                             int64_t V, float loss_scale, float* logits_scratch,
                                             int64_t chunk_rows) {
  return cpu::ClassifierForwardBackward(losses, d_x, d_weight, x, weight, targets, N, C, V,
                                        loss_scale, logits_scratch, chunk_rows);
}

void CpuBackend::AddBias(float* out, const float* bias, int64_t N, int64_t OC) {
  cpu::AddBias(out, bias, N, OC);
}

void CpuBackend::AddPositions(float* out, const float* wpe, int64_t row_begin, int64_t rows,
                              int64_t T, int64_t C) {
  cpu::AddPositions(out, wpe, row_begin, rows, T, C);
}

void CpuBackend::VocabEmbeddingForward(float* out, const int32_t* tokens, const float* wte_local,
                                       int64_t vocab_begin, int64_t vocab_rows, int64_t N,
                                       int64_t C) {
  cpu::VocabEmbeddingForward(out, tokens, wte_local, vocab_begin, vocab_rows, N, C);
}

void CpuBackend::VocabEmbeddingBackward(float* d_wte_local, const float* d_out,
                                        const int32_t* tokens, int64_t vocab_begin,
                                        int64_t vocab_rows, int64_t N, int64_t C) {
  cpu::VocabEmbeddingBackward(d_wte_local, d_out, tokens, vocab_begin, vocab_rows, N, C);
}

double CpuBackend::VocabParallelClassifier(float* losses, float* d_x, float* d_weight,
                                           const float* x, const float* weight,
                                           const int32_t* targets, int64_t N, int64_t C,
                                           int64_t V_local, int64_t V_real, int64_t vocab_begin,
                                           float loss_scale, float* logits_scratch,
                                           int64_t chunk_rows, CombineFn combine,
                                           void* combine_ctx) {
  return cpu::VocabParallelClassifier(losses, d_x, d_weight, x, weight, targets, N, C, V_local,
                                      V_real, vocab_begin, loss_scale, logits_scratch, chunk_rows,
                                      combine, combine_ctx);
}

void CpuBackend::MoeRoute(const MoeRouterSpec& spec, const float* logits, const float* bias,
                          float* scores, int32_t* expert, float* gate, int64_t R) {
  cpu::MoeRoute(spec, logits, bias, scores, expert, gate, R);
}
void CpuBackend::MoeRouteBackward(const MoeRouterSpec& spec, const float* scores,
                                  const int32_t* expert, const float* d_gate, float* d_logits,
                                  int64_t R) {
  cpu::MoeRouteBackward(spec, scores, expert, d_gate, d_logits, R);
}
int64_t CpuBackend::MoePlan(const int32_t* expert, const float* scores, int64_t R, int64_t k,
                            int64_t E, int64_t capacity, int32_t* row_of, int32_t* token_of_row,
                            int64_t* offset, int64_t* counts) {
  return cpu::MoePlan(expert, scores, R, k, E, capacity, row_of, token_of_row, offset, counts);
}
void CpuBackend::MoeGather(float* rows, const float* x, const int32_t* token_of_row, int64_t n,
                           int64_t C) {
  cpu::MoeGather(rows, x, token_of_row, n, C);
}
void CpuBackend::MoeGatherBackward(float* d_x, const float* d_rows, const int32_t* row_of,
                                   int64_t R, int64_t k, int64_t C) {
  cpu::MoeGatherBackward(d_x, d_rows, row_of, R, k, C);
}
void CpuBackend::MoeCombine(float* out, const float* y, const float* gate,
                            const int32_t* row_of, int64_t R, int64_t k, int64_t C) {
  cpu::MoeCombine(out, y, gate, row_of, R, k, C);
}
void CpuBackend::GatedAddForward(float* out, const float* x, const float* logit, int64_t R,
                                 int64_t C) {
  cpu::GatedAddForward(out, x, logit, R, C);
}

void CpuBackend::GatedAddBackward(float* d_x, float* d_logit, const float* d_out, const float* x,
                                  const float* logit, int64_t R, int64_t C) {
  cpu::GatedAddBackward(d_x, d_logit, d_out, x, logit, R, C);
}

void CpuBackend::MoeCombineBackward(float* d_y, float* d_gate, const float* d_out,
                                    const float* y, const float* gate, const int32_t* row_of,
                                    int64_t R, int64_t k, int64_t C) {
  cpu::MoeCombineBackward(d_y, d_gate, d_out, y, gate, row_of, R, k, C);
}
void CpuBackend::MoeBalanceStats(const MoeRouterSpec& spec, const float* logits,
                                 const float* scores, const int32_t* expert, int64_t R,
                                 double* probs_sum, double* counts, double* z_sum) {
  cpu::MoeBalanceStats(spec, logits, scores, expert, R, probs_sum, counts, z_sum);
}
void CpuBackend::MoeAuxBackward(const MoeRouterSpec& spec, const float* logits,
                                const float* scores, const MoeAuxGrad& aux, float* d_logits,
                                int64_t R) {
  cpu::MoeAuxBackward(spec, logits, scores, aux, d_logits, R);
}

}  // namespace tessera
