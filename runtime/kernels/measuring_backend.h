// runtime/kernels/measuring_backend.h — the measuring pass as a backend (backend.h): a model
// runs one step of each kind it will make on this backend to learn the capacities its arenas
// need. Its kernels do nothing and its arenas are measuring arenas (memory.h: Allocate hands
// out null tensors and counts), so the model code makes exactly the calls and allocations of a
// real step, with no `live` guards: a tensor it allocates is only ever passed to this
// backend's ops, which never touch memory. Classifiers return a loss sum of 0.
// Device: the device of the backend it measures for (arenas belong to a device even when they
// only count). Streams and events are null handles.
// Thread-safety: stateless; as backend.h.
#pragma once

#include "runtime/kernels/backend.h"

namespace tessera {

class MeasuringBackend final : public Backend {
 public:
  explicit MeasuringBackend(Device device = Device::kCpu)
      : MeasuringBackend(device, device == Device::kCpu) {}
  // `saves_probabilities`: as the backend it stands for (Backend::AttentionSavesProbabilities),
  // which sizes the attention's saved tensor and scratch.
  MeasuringBackend(Device device, bool saves_probabilities)
      : device_(device), saves_probabilities_(saves_probabilities) {}
  // The measuring pass of a model on `measured`: its device and what its attention saves.
  explicit MeasuringBackend(const Backend& measured)
      : device_(measured.device()),
        saves_probabilities_(measured.AttentionSavesProbabilities()) {}
  // A sizing backend: its arenas are sizing arenas (memory.h), so a dry construction of a
  // rank's state books on `tracker` the capacities a run on `device` would reserve.
  static MeasuringBackend Sizing(Device device = Device::kCpu) {
    return Sizing(device, device == Device::kCpu);
  }
  static MeasuringBackend Sizing(Device device, bool saves_probabilities) {
    MeasuringBackend b(device, saves_probabilities);
    b.sizing_ = true;
    return b;
  }

  Device device() const override { return device_; }
  bool AttentionSavesProbabilities() const override { return saves_probabilities_; }
  const char* name() const override { return "measuring"; }
  // A measuring arena: capacity_bytes and tracker are not used (nothing is reserved); a
  // sizing backend's books capacity_bytes on tracker.
  Arena MakeArena(MemoryKind kind, size_t capacity_bytes, MemoryTracker* tracker) override;
  Stream stream() const override { return Stream{}; }
  void SetStream(Stream s) override {}
  Event Record(Stream s) override { return Event{}; }
  void Wait(Stream s, Event e) override {}
  void Synchronize(Event e) override {}

  void Copy(void* dst, const void* src, size_t bytes) override {}
  void Zero(void* dst, size_t bytes) override {}
  void Upload(void* dst, const void* host_src, size_t bytes) override {}
  void Download(void* host_dst, const void* src, size_t bytes) override {}
  void Round(DType dtype, float* x, int64_t n) override;
  void ConvertFromF32(DType dtype, const float* src, void* dst, int64_t n) override;
  void ConvertToF32(DType dtype, const void* src, float* dst, int64_t n) override;
  void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc) override;
  void LinearForward(float* out, const float* inp, const float* weight, const float* bias,
                     int64_t N, int64_t C, int64_t OC) override;
  void LinearBackward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                      const float* inp, const float* weight, int64_t N, int64_t C,
                      int64_t OC) override;
  void EmbeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                        int64_t B, int64_t T, int64_t C) override;
  void EmbeddingBackward(float* d_wte, float* d_wpe, const float* d_out, const int32_t* tokens,
                         int64_t B, int64_t T, int64_t C, int64_t V) override;
  void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int64_t N, int64_t C, float eps) override;
  void LayerNormBackward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                         const float* inp, const float* weight, const float* mean,
                         const float* rstd, int64_t N, int64_t C) override;
  void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                      int64_t C, float eps) override;
  void RmsNormBackward(float* d_inp, float* d_weight, const float* d_out, const float* inp,
                       const float* weight, const float* rstd, int64_t N, int64_t C) override;
  void HeadRmsNormForward(float* qkv, float* qk_in, float* rstd, const float* w_q,
                          const float* w_k, int64_t N, int64_t NH, int64_t NKV, int64_t HS,
                          float eps) override;
  void HeadRmsNormBackward(float* d_qkv, float* d_w_q, float* d_w_k, const float* qk_in,
                           const float* w_q, const float* w_k, const float* rstd, int64_t N,
                           int64_t NH, int64_t NKV, int64_t HS) override;
  void GeluForward(float* out, const float* inp, int64_t n) override;
  void GeluBackward(float* d_inp, const float* d_out, const float* inp, int64_t n) override;
  void SwigluForward(float* out, const float* inp, int64_t N, int64_t H) override;
  void SwigluBackward(float* d_inp, const float* d_out, const float* inp, int64_t N,
                      int64_t H) override;
  void Add(float* out, const float* a, const float* b, int64_t n) override;
  void AddInPlace(float* acc, const float* x, int64_t n) override;
  void Dropout(float* out, const float* x, int64_t rows, int64_t cols, int64_t col0,
               int64_t ld_index, float p, uint64_t key) override {}
  void RopeForward(float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                   const RopeParams& rope, int64_t pos_offset) override;
  void RopeBackward(float* d_qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                    const RopeParams& rope, int64_t pos_offset) override;
  void AttentionForward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t NH,
                        int64_t NKV, int64_t HS, int64_t window) override;
  void AttentionBackward(float* d_qkv, float* scratch, const float* d_out, const float* qkv,
                         const float* att, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                         int64_t HS) override;
  double ClassifierForwardBackward(float* losses, float* d_x, float* d_weight, const float* x,
                                   const float* weight, const int32_t* targets, int64_t N,
                                   int64_t C, int64_t V, float loss_scale, float* logits_scratch,
                                   int64_t chunk_rows) override;
  void AddBias(float* out, const float* bias, int64_t N, int64_t OC) override;
  void AddPositions(float* out, const float* wpe, int64_t row_begin, int64_t rows, int64_t T,
                    int64_t C) override;
  void VocabEmbeddingForward(float* out, const int32_t* tokens, const float* wte_local,
                             int64_t vocab_begin, int64_t vocab_rows, int64_t N,
                             int64_t C) override;
  void VocabEmbeddingBackward(float* d_wte_local, const float* d_out, const int32_t* tokens,
                              int64_t vocab_begin, int64_t vocab_rows, int64_t N,
                              int64_t C) override;
  double VocabParallelClassifier(float* losses, float* d_x, float* d_weight, const float* x,
                                 const float* weight, const int32_t* targets, int64_t N, int64_t C,
                                 int64_t V_local, int64_t V_real, int64_t vocab_begin,
                                 float loss_scale, float* logits_scratch, int64_t chunk_rows,
                                 CombineFn combine, void* combine_ctx) override;

  void MoeRoute(const MoeRouterSpec& spec, const float* logits, const float* bias, float* scores,
                int32_t* expert, float* gate, int64_t R) override;
  void MoeRouteBackward(const MoeRouterSpec& spec, const float* scores, const int32_t* expert,
                        const float* d_gate, float* d_logits, int64_t R) override;
  int64_t MoePlan(const int32_t* expert, const float* scores, int64_t R, int64_t k, int64_t E,
                  int64_t capacity, int32_t* row_of, int32_t* token_of_row, int64_t* offset,
                  int64_t* counts) override;
  void MoeGather(float* rows, const float* x, const int32_t* token_of_row, int64_t n,
                 int64_t C) override;
  void MoeGatherBackward(float* d_x, const float* d_rows, const int32_t* row_of, int64_t R,
                         int64_t k, int64_t C) override;
  void MoeCombine(float* out, const float* y, const float* gate, const int32_t* row_of,
                  int64_t R, int64_t k, int64_t C) override;
  void MoeCombineBackward(float* d_y, float* d_gate, const float* d_out, const float* y,
                          const float* gate, const int32_t* row_of, int64_t R, int64_t k,
                          int64_t C) override;
  void GatedAddForward(float* out, const float* x, const float* logit, int64_t R,
                       int64_t C) override;
  void GatedAddBackward(float* d_x, float* d_logit, const float* d_out, const float* x,
                        const float* logit, int64_t R, int64_t C) override;
  void MoeBalanceStats(const MoeRouterSpec& spec, const float* logits, const float* scores,
                       const int32_t* expert, int64_t R, double* probs_sum, double* counts,
                       double* z_sum) override;
  void MoeAuxBackward(const MoeRouterSpec& spec, const float* logits, const float* scores,
                      const MoeAuxGrad& aux, float* d_logits, int64_t R) override;
 private:
  Device device_;
  bool saves_probabilities_;  // as the measured backend's (a device backend's: statistics)
  bool sizing_ = false;
};

}  // namespace tessera
