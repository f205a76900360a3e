// runtime/kernels/measuring_backend.cc — MeasuringBackend (measuring_backend.h): every op
// does nothing, by design (the pass only counts bytes).
#include "runtime/kernels/measuring_backend.h"

namespace tessera {

Arena MeasuringBackend::MakeArena(MemoryKind kind, size_t capacity_bytes, MemoryTracker* tracker) {
  if (sizing_) return Arena::Sizing(kind, capacity_bytes, tracker, device_);
  return Arena::Measuring(kind, device_);
}

void MeasuringBackend::Round(DType dtype, float* x, int64_t n) {}

void MeasuringBackend::ConvertFromF32(DType dtype, const float* src, void* dst, int64_t n) {}

void MeasuringBackend::ConvertToF32(DType dtype, const void* src, float* dst, int64_t n) {}

void MeasuringBackend::Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                            float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                            float beta, float* C, int64_t ldc) {}

void MeasuringBackend::LinearForward(float* out, const float* inp, const float* weight,
                                     const float* bias, int64_t N, int64_t C, int64_t OC) {}

void MeasuringBackend::LinearBackward(float* d_inp, float* d_weight, float* d_bias,
                                      const float* d_out, const float* inp, const float* weight,
                                      int64_t N, int64_t C, int64_t OC) {}

void MeasuringBackend::EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                                        const float* wpe, int64_t B, int64_t T, int64_t C) {}

void MeasuringBackend::EmbeddingBackward(float* d_wte, float* d_wpe, const float* d_out,
                                         const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                         int64_t V) {}

void MeasuringBackend::LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                        const float* weight, const float* bias, int64_t N,
                                        int64_t C, float eps) {}

void MeasuringBackend::LayerNormBackward(float* d_inp, float* d_weight, float* d_bias,
                                         const float* d_out, const float* inp, const float* weight,
                                         const float* mean, const float* rstd, int64_t N,
                                         int64_t C) {}

void MeasuringBackend::RmsNormForward(float* out, float* rstd, const float* inp,
                                      const float* weight, int64_t N, int64_t C, float eps) {}

void MeasuringBackend::RmsNormBackward(float* d_inp, float* d_weight, const float* d_out,
                                       const float* inp, const float* weight, const float* rstd,
                                       int64_t N, int64_t C) {}

void MeasuringBackend::HeadRmsNormForward(float* qkv, float* qk_in, float* rstd, const float* w_q,
                                          const float* w_k, int64_t N, int64_t NH, int64_t NKV,
                                          int64_t HS, float eps) {}

void MeasuringBackend::HeadRmsNormBackward(float* d_qkv, float* d_w_q, float* d_w_k,
                                           const float* qk_in, const float* w_q, const float* w_k,
                                           const float* rstd, int64_t N, int64_t NH, int64_t NKV,
                                           int64_t HS) {}

void MeasuringBackend::GeluForward(float* out, const float* inp, int64_t n) {}

void MeasuringBackend::GeluBackward(float* d_inp, const float* d_out, const float* inp, int64_t n) {
}

void MeasuringBackend::SwigluForward(float* out, const float* inp, int64_t N, int64_t H) {}

void MeasuringBackend::SwigluBackward(float* d_inp, const float* d_out, const float* inp, int64_t N,
                                      int64_t H) {}

void MeasuringBackend::Add(float* out, const float* a, const float* b, int64_t n) {}

void MeasuringBackend::AddInPlace(float* acc, const float* x, int64_t n) {}

void MeasuringBackend::RopeForward(float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                   int64_t HS, const RopeParams& rope, int64_t pos_offset) {}

void MeasuringBackend::RopeBackward(float* d_qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                    int64_t HS, const RopeParams& rope, int64_t pos_offset) {}

void MeasuringBackend::AttentionForward(float* out, float* att, const float* qkv, int64_t B,
                                        int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                        int64_t window) {}

void MeasuringBackend::AttentionBackward(float* d_qkv, float* scratch, const float* d_out,
                                         const float* qkv, const float* att, int64_t B, int64_t T,
                                         int64_t NH, int64_t NKV, int64_t HS) {}

double MeasuringBackend::ClassifierForwardBackward(float* losses, float* d_x, float* d_weight,
                                                   const float* x, const float* weight,
                                                   const int32_t* targets, int64_t N, int64_t C,
                                                   int64_t V, float loss_scale,
                                                   float* logits_scratch, int64_t chunk_rows) {
  return 0.0;
}

void MeasuringBackend::AddBias(float* out, const float* bias, int64_t N, int64_t OC) {}

void MeasuringBackend::AddPositions(float* out, const float* wpe, int64_t row_begin, int64_t rows,
                                    int64_t T, int64_t C) {}

void MeasuringBackend::VocabEmbeddingForward(float* out, const int32_t* tokens,
                                             const float* wte_local, int64_t vocab_begin,
                                             int64_t vocab_rows, int64_t N, int64_t C) {}

void MeasuringBackend::VocabEmbeddingBackward(float* d_wte_local, const float* d_out,
                                              const int32_t* tokens, int64_t vocab_begin,
                                              int64_t vocab_rows, int64_t N, int64_t C) {}

double MeasuringBackend::VocabParallelClassifier(float* losses, float* d_x, float* d_weight,
                                                 const float* x, const float* weight,
                                                 const int32_t* targets, int64_t N, int64_t C,
                                                 int64_t V_local, int64_t V_real,
                                                 int64_t vocab_begin, float loss_scale,
                                                 float* logits_scratch, int64_t chunk_rows,
                                                 CombineFn combine, void* combine_ctx) {
  return 0.0;
}

// MoE: the routing writes tensors (null here), the plan is empty, statistics unchanged.
void MeasuringBackend::MoeRoute(const MoeRouterSpec&, const float*, const float*, float*,
                                int32_t*, float*, int64_t) {}
void MeasuringBackend::MoeRouteBackward(const MoeRouterSpec&, const float*, const int32_t*,
                                        const float*, float*, int64_t) {}
int64_t MeasuringBackend::MoePlan(const int32_t*, const float*, int64_t, int64_t, int64_t E,
                                  int64_t, int32_t*, int32_t*, int64_t* offset, int64_t*) {
  for (int64_t e = 0; e <= E; ++e) offset[e] = 0;
  return 0;
}
void MeasuringBackend::MoeGather(float*, const float*, const int32_t*, int64_t, int64_t) {}
void MeasuringBackend::MoeGatherBackward(float*, const float*, const int32_t*, int64_t, int64_t,
                                         int64_t) {}
void MeasuringBackend::MoeCombine(float*, const float*, const float*, const int32_t*, int64_t,
                                  int64_t, int64_t) {}
void MeasuringBackend::MoeCombineBackward(float*, float*, const float*, const float*,
                                          const float*, const int32_t*, int64_t, int64_t,
                                          int64_t) {}
void MeasuringBackend::GatedAddForward(float*, const float*, const float*, int64_t, int64_t) {}
void MeasuringBackend::GatedAddBackward(float*, float*, const float*, const float*, const float*,
                                        int64_t, int64_t) {}
void MeasuringBackend::MoeBalanceStats(const MoeRouterSpec&, const float*, const float*,
                                       const int32_t*, int64_t, double*, double*, double*) {}
void MeasuringBackend::MoeAuxBackward(const MoeRouterSpec&, const float*, const float*,
                                      const MoeAuxGrad&, float*, int64_t) {}

}  // namespace tessera
