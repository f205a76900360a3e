// runtime/kernels/cuda/cuda_backend.cc — CudaBackend (runtime/kernels/cuda_backend.h): device
// arenas, the stream and its events, cuBLAS GEMMs and the launchers of launch.h behind the
// backend seam; plus the availability queries.
//
// Memory the backend itself needs for a call (column-sum partials, bf16 operand copies, the
// classifier's per-row values) comes from one device scratch buffer and one pinned host
// buffer, grown on first need and kept: a training step makes the same calls every time, so
// they reach their size in the first step and never move again.
#include "runtime/kernels/cuda_backend.h"

#include <cuda_runtime.h>

#include <array>
#include <cstring>
#include <vector>

#include "runtime/kernels/cpu/moe.h"
#include "runtime/kernels/cuda/cublas_api.h"
#include "runtime/kernels/cuda/cuda_check.h"
#include "runtime/kernels/cuda/launch.h"

// For CudaBackend's members: `blas_` is its table of cuBLAS entry points (cublas_api.h).
#define CUBLAS_CHECK(call)                                                              \
  do {                                                                                  \
    const cublasStatus_t tessera_cublas_st_ = (call);                                   \
    TESSERA_CHECK_MSG(tessera_cublas_st_ == CUBLAS_STATUS_SUCCESS, "%s failed: %s", #call, \
                      blas_.status_string(tessera_cublas_st_));                          \
  } while (0)

namespace tessera {
namespace {

constexpr int kEventRing = 1024;
constexpr size_t kCublasWorkspace = 32u << 20;  // fixed, so cuBLAS picks the same kernels

cudaStream_t AsCuda(Stream s) { return reinterpret_cast<cudaStream_t>(s.handle); }
cudaEvent_t AsCuda(Event e) { return reinterpret_cast<cudaEvent_t>(e.handle); }

void FreeDevice(std::byte* p) { cudaFree(p); }

// A grown-on-demand buffer: device scratch (cudaMalloc) or pinned host staging
// (cudaMallocHost). Growing waits for `s` first, since the GPU may still read the old one.
template <cudaError_t (*Alloc)(void**, size_t), cudaError_t (*Free)(void*)>
class GrowingBuffer {
 public:
  GrowingBuffer() = default;
  GrowingBuffer(const GrowingBuffer&) = delete;
  GrowingBuffer& operator=(const GrowingBuffer&) = delete;
  ~GrowingBuffer() {
    if (p_ != nullptr) Free(p_);
  }
  void* Get(size_t bytes, cudaStream_t s) {
    if (bytes > size_) {
      CUDA_CHECK(cudaStreamSynchronize(s));
      if (p_ != nullptr) CUDA_CHECK(Free(p_));
      CUDA_CHECK(Alloc(&p_, bytes));
      size_ = bytes;
    }
    return p_;
  }

 private:
  void* p_ = nullptr;
  size_t size_ = 0;
};
cudaError_t DeviceAlloc(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
cudaError_t PinnedAlloc(void** p, size_t bytes) { return cudaMallocHost(p, bytes); }
using DeviceBuffer = GrowingBuffer<&DeviceAlloc, &cudaFree>;
using PinnedBuffer = GrowingBuffer<&PinnedAlloc, &cudaFreeHost>;

class CudaBackend final : public Backend {
 public:
  CudaBackend(const CudaBackendOptions& o, const CublasApi& blas) : options_(o), blas_(blas) {
    CUDA_CHECK(cudaSetDevice(o.device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&main_, cudaStreamNonBlocking));
    current_ = main_;
    for (cudaEvent_t& e : events_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming));
    CUBLAS_CHECK(blas_.create(&cublas_));
    CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspace));
    CUBLAS_CHECK(blas_.set_workspace(cublas_, cublas_workspace_, kCublasWorkspace));
    // fp32 GEMMs stay fp32: no TF32 unless asked for (never, here).
    CUBLAS_CHECK(blas_.set_math_mode(cublas_, CUBLAS_DEFAULT_MATH));
    CUBLAS_CHECK(blas_.set_stream(cublas_, current_));
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(main_);
    blas_.destroy(cublas_);
    cudaFree(cublas_workspace_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cudaEventDestroy(staged_);
    cudaStreamDestroy(main_);
  }

  Device device() const override { return Device::kCuda; }
  const char* name() const override {
    return options_.gemm_dtype == DType::kBF16 ? "cuda-bf16" : "cuda-fp32";
  }

  Arena MakeArena(MemoryKind kind, size_t capacity_bytes, MemoryTracker* tracker) override {
    std::byte* base = nullptr;
    if (capacity_bytes > 0) {
      const cudaError_t err = cudaMalloc(&base, capacity_bytes);
      TESSERA_CHECK_MSG(err == cudaSuccess, "cudaMalloc of %zu bytes (%s) failed: %s",
                        capacity_bytes, MemoryKindName(kind), cudaGetErrorString(err));
      // Zeroed on this backend's stream and waited for: cudaMemset would run on CUDA's legacy
      // default stream, which the non-blocking streams do not wait for, so a first Upload or
      // kernel into the arena could run before the zeroing and be overwritten by it.
      CUDA_CHECK(cudaMemsetAsync(base, 0, capacity_bytes, current_));
      CUDA_CHECK(cudaStreamSynchronize(current_));
    }
    return Arena(kind, Device::kCuda, base, capacity_bytes, &FreeDevice, tracker);
  }

  // The null handle is this backend's own stream (not CUDA's legacy default stream, which
  // would serialise against every other stream).
  Stream stream() const override {
    return current_ == main_ ? Stream{} : Stream{reinterpret_cast<uintptr_t>(current_)};
  }
  void SetStream(Stream s) override {
    current_ = s.is_default() ? main_ : AsCuda(s);
    CUBLAS_CHECK(blas_.set_stream(cublas_, current_));
  }
  Event Record(Stream s) override {
    cudaEvent_t e = events_[next_event_];
    next_event_ = (next_event_ + 1) % kEventRing;
    CUDA_CHECK(cudaEventRecord(e, Resolve(s)));
    return Event{reinterpret_cast<uintptr_t>(e)};
  }
  void Wait(Stream s, Event e) override {
    if (!e.is_null()) CUDA_CHECK(cudaStreamWaitEvent(Resolve(s), AsCuda(e), 0));
  }
  void Synchronize(Event e) override {
    if (!e.is_null()) CUDA_CHECK(cudaEventSynchronize(AsCuda(e)));
  }

  void Copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, current_));
  }
  void Upload(void* dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return;
    void* staged = Staging(bytes);
    std::memcpy(staged, host_src, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, current_));
    CUDA_CHECK(cudaEventRecord(staged_, current_));  // the next user of the buffer waits for it
  }
  void Download(void* host_dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, current_));
    CUDA_CHECK(cudaStreamSynchronize(current_));
  }
  void Zero(void* dst, size_t bytes) override {
    if (bytes > 0) CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, current_));
  }
  void Round(DType dtype, float* x, int64_t n) override { cuda::RoundTo(current_, dtype, x, n); }
  void ConvertFromF32(DType dtype, const float* src, void* dst, int64_t n) override {
    cuda::ConvertFromF32(current_, dtype, src, dst, n);
  }
  void ConvertToF32(DType dtype, const void* src, float* dst, int64_t n) override {
    cuda::ConvertToF32(current_, dtype, src, dst, n);
  }

  void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc) override {
    GemmAs(DType::kF32, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  void LinearForward(float* out, const float* inp, const float* weight, const float* bias,
                     int64_t N, int64_t C, int64_t OC) override {
    GemmAs(options_.gemm_dtype, false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
    if (bias != nullptr) cuda::AddBias(current_, out, bias, N, OC);
  }
  void LinearBackward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                      const float* inp, const float* weight, int64_t N, int64_t C,
                      int64_t OC) override {
    const DType t = options_.gemm_dtype;
    if (d_weight != nullptr) {
      GemmAs(t, true, false, OC, C, N, 1.0f, d_out, OC, inp, C, 1.0f, d_weight, C);
    }
    if (d_bias != nullptr) {
      cuda::ColumnSumAccumulate(current_, d_bias, d_out, N, OC,
                                Scratch(cuda::ColumnSumScratchFloats(OC)));
    }
    if (d_inp != nullptr) GemmAs(t, false, false, N, C, OC, 1.0f, d_out, OC, weight, C, 0.0f, d_inp, C);
  }

  void EmbeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                        int64_t B, int64_t T, int64_t C) override {
    cuda::EmbeddingForward(current_, out, tokens, wte, wpe, B, T, C);
  }
  void EmbeddingBackward(float* d_wte, float* d_wpe, const float* d_out, const int32_t* tokens,
                         int64_t B, int64_t T, int64_t C, int64_t V) override {
    cuda::EmbeddingBackward(current_, d_wte, d_wpe, d_out, tokens, B, T, C, V);
  }

  void LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                        const float* weight, const float* bias, int64_t N, int64_t C,
                        float eps) override {
    cuda::LayerNormForward(current_, out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  void LayerNormBackward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                         const float* inp, const float* weight, const float* mean,
                         const float* rstd, int64_t N, int64_t C) override {
    cuda::LayerNormBackward(current_, d_inp, d_weight, d_bias, d_out, inp, weight, mean, rstd, N,
                            C, Scratch(2 * cuda::ColumnSumScratchFloats(C)));
  }
  void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                      int64_t C, float eps) override {
    cuda::RmsNormForward(current_, out, {}, rstd, inp, {}, weight, N, C, eps);
  }
  void RmsNormBackward(float* d_inp, float* d_weight, const float* d_out, const float* inp,
                       const float* weight, const float* rstd, int64_t N, int64_t C) override {
    cuda::RmsNormBackward(current_, d_inp, {}, d_weight, d_out, {}, inp, {}, weight, rstd, N, C,
                          Scratch(cuda::ColumnSumScratchFloats(C)));
  }
  // The CPU backend's composition (cpu_backend.cc): save the pre-norm q and k parts, then
  // normalise q heads and k heads as strided rows, in place.
  void HeadRmsNormForward(float* qkv, float* qk_in, float* rstd, const float* w_q,
                          const float* w_k, int64_t N, int64_t NH, int64_t NKV, int64_t HS,
                          float eps) override {
    const int64_t QKV = (NH + 2 * NKV) * HS, QK = (NH + NKV) * HS;
    if (N == 0) return;
    CUDA_CHECK(cudaMemcpy2DAsync(qk_in, QK * sizeof(float), qkv, QKV * sizeof(float),
                                 QK * sizeof(float), N, cudaMemcpyDeviceToDevice, current_));
    cuda::RmsNormForward(current_, qkv, {NH, QKV}, rstd, qk_in, {NH, QK}, w_q, N * NH, HS, eps);
    cuda::RmsNormForward(current_, qkv + NH * HS, {NKV, QKV}, rstd + N * NH, qk_in + NH * HS,
                         {NKV, QK}, w_k, N * NKV, HS, eps);
  }
  void HeadRmsNormBackward(float* d_qkv, float* d_w_q, float* d_w_k, const float* qk_in,
                           const float* w_q, const float* w_k, const float* rstd, int64_t N,
                           int64_t NH, int64_t NKV, int64_t HS) override {
    const int64_t QKV = (NH + 2 * NKV) * HS, QK = (NH + NKV) * HS;
    float* scratch = Scratch(cuda::ColumnSumScratchFloats(HS));
    cuda::RmsNormBackward(current_, d_qkv, {NH, QKV}, d_w_q, d_qkv, {NH, QKV}, qk_in, {NH, QK},
                          w_q, rstd, N * NH, HS, scratch);
    cuda::RmsNormBackward(current_, d_qkv + NH * HS, {NKV, QKV}, d_w_k, d_qkv + NH * HS,
                          {NKV, QKV}, qk_in + NH * HS, {NKV, QK}, w_k, rstd + N * NH, N * NKV,
                          HS, scratch);
  }

  void GeluForward(float* out, const float* inp, int64_t n) override {
    cuda::GeluForward(current_, out, inp, n);
  }
  void GeluBackward(float* d_inp, const float* d_out, const float* inp, int64_t n) override {
    cuda::GeluBackward(current_, d_inp, d_out, inp, n);
  }
  void SwigluForward(float* out, const float* inp, int64_t N, int64_t H) override {
    cuda::SwigluForward(current_, out, inp, N, H);
  }
  void SwigluBackward(float* d_inp, const float* d_out, const float* inp, int64_t N,
                      int64_t H) override {
    cuda::SwigluBackward(current_, d_inp, d_out, inp, N, H);
  }
  void Add(float* out, const float* a, const float* b, int64_t n) override {
    cuda::Add(current_, out, a, b, n);
  }
  void AddInPlace(float* acc, const float* x, int64_t n) override {
    cuda::AddInPlace(current_, acc, x, n);
  }
  void Dropout(float* out, const float* x, int64_t rows, int64_t cols, int64_t col0,
               int64_t ld_index, float p, uint64_t key) override {
    cuda::Dropout(current_, out, x, rows, cols, col0, ld_index, p, key);
  }

  void RopeForward(float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                   const RopeParams& rope, int64_t pos_offset) override {
    const std::vector<float> inv_freq = RopeInverseFrequencies(HS, rope);
    cuda::RopeForward(current_, qkv, B, T, NH, NKV, HS, inv_freq.data(), pos_offset);
  }
  void RopeBackward(float* d_qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                    const RopeParams& rope, int64_t pos_offset) override {
    const std::vector<float> inv_freq = RopeInverseFrequencies(HS, rope);
    cuda::RopeBackward(current_, d_qkv, B, T, NH, NKV, HS, inv_freq.data(), pos_offset);
  }
  // `att` holds the log-sum-exps and the window here, `scratch` each query row's D: the
  // sizes backend.h gives a backend that saves no probabilities (AttentionSavedFloats), which
  // the kernels' own requirements must fit.
  bool AttentionSavesProbabilities() const override { return false; }
  void AttentionForward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                        int64_t NH, int64_t NKV, int64_t HS, int64_t window) override {
    TESSERA_CHECK(cuda::AttentionSavedFloats(B, NH, T) <= AttentionSavedFloats(B, NH, T));
    cuda::AttentionForward(current_, out, att, qkv, B, T, NH, NKV, HS, window);
  }
  void AttentionBackward(float* d_qkv, float* scratch, const float* d_out, const float* qkv,
                         const float* att, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                         int64_t HS) override {
    TESSERA_CHECK(cuda::AttentionBackwardScratchFloats(B, NH, T) <= AttentionScratchFloats(B, NH, T));
    cuda::AttentionBackward(current_, d_qkv, scratch, d_out, qkv, att, B, T, NH, NKV, HS);
  }

  double ClassifierForwardBackward(float* losses, float* d_x, float* d_weight, const float* x,
                                   const float* weight, const int32_t* targets, int64_t N,
                                   int64_t C, int64_t V, float loss_scale, float* logits_scratch,
                                   int64_t chunk_rows) override {
    return Classifier(losses, d_x, d_weight, x, weight, targets, N, C, V, V, 0, loss_scale,
                      logits_scratch, chunk_rows, nullptr, nullptr);
  }
  void AddBias(float* out, const float* bias, int64_t N, int64_t OC) override {
    cuda::AddBias(current_, out, bias, N, OC);
  }
  void AddPositions(float* out, const float* wpe, int64_t row_begin, int64_t rows, int64_t T,
                    int64_t C) override {
    cuda::AddPositions(current_, out, wpe, row_begin, rows, T, C);
  }
  void VocabEmbeddingForward(float* out, const int32_t* tokens, const float* wte_local,
                             int64_t vocab_begin, int64_t vocab_rows, int64_t N,
                             int64_t C) override {
    cuda::VocabEmbeddingForward(current_, out, tokens, wte_local, vocab_begin, vocab_rows, N, C);
  }
  void VocabEmbeddingBackward(float* d_wte_local, const float* d_out, const int32_t* tokens,
                              int64_t vocab_begin, int64_t vocab_rows, int64_t N,
                              int64_t C) override {
    cuda::VocabEmbeddingBackward(current_, d_wte_local, d_out, tokens, vocab_begin, vocab_rows,
                                 N, C);
  }
  double VocabParallelClassifier(float* losses, float* d_x, float* d_weight, const float* x,
                                 const float* weight, const int32_t* targets, int64_t N,
                                 int64_t C, int64_t V_local, int64_t V_real, int64_t vocab_begin,
                                 float loss_scale, float* logits_scratch, int64_t chunk_rows,
                                 CombineFn combine, void* combine_ctx) override {
    return Classifier(losses, d_x, d_weight, x, weight, targets, N, C, V_local, V_real,
                      vocab_begin, loss_scale, logits_scratch, chunk_rows, combine, combine_ctx);
  }

  // The balancing bias is host memory (backend.h): uploaded into scratch for the kernel.
  void MoeRoute(const MoeRouterSpec& spec, const float* logits, const float* bias, float* scores,
                int32_t* expert, float* gate, int64_t R) override {
    float* d_bias = nullptr;
    if (bias != nullptr) {
      d_bias = Scratch(spec.E);
      Upload(d_bias, bias, static_cast<size_t>(spec.E) * sizeof(float));
    }
    cuda::MoeRoute(current_, spec, logits, d_bias, scores, expert, gate, R);
  }
  void MoeRouteBackward(const MoeRouterSpec& spec, const float* scores, const int32_t* expert,
                        const float* d_gate, float* d_logits, int64_t R) override {
    cuda::MoeRouteBackward(current_, spec, scores, expert, d_gate, d_logits, R);
  }
  int64_t MoePlan(const int32_t* expert, const float* scores, int64_t R, int64_t k, int64_t E,
                  int64_t capacity, int32_t* row_of, int32_t* token_of_row, int64_t* offset,
                  int64_t* counts) override;
  void MoeGather(float* rows, const float* x, const int32_t* token_of_row, int64_t n,
                 int64_t C) override {
    cuda::MoeGather(current_, rows, x, token_of_row, n, C);
  }
  void MoeGatherBackward(float* d_x, const float* d_rows, const int32_t* row_of, int64_t R,
                         int64_t k, int64_t C) override {
    cuda::MoeGatherBackward(current_, d_x, d_rows, row_of, R, k, C);
  }
  void MoeCombine(float* out, const float* y, const float* gate, const int32_t* row_of, int64_t R,
                  int64_t k, int64_t C) override {
    cuda::MoeCombine(current_, out, y, gate, row_of, R, k, C);
  }
  void MoeCombineBackward(float* d_y, float* d_gate, const float* d_out, const float* y,
                          const float* gate, const int32_t* row_of, int64_t R, int64_t k,
                          int64_t C) override {
    cuda::MoeCombineBackward(current_, d_y, d_gate, d_out, y, gate, row_of, R, k, C);
  }
  void GatedAddForward(float* out, const float* x, const float* logit, int64_t R,
                       int64_t C) override {
    cuda::GatedAddForward(current_, out, x, logit, R, C);
  }
  void GatedAddBackward(float* d_x, float* d_logit, const float* d_out, const float* x,
                        const float* logit, int64_t R, int64_t C) override {
    cuda::GatedAddBackward(current_, d_x, d_logit, d_out, x, logit, R, C);
  }
  void MoeBalanceStats(const MoeRouterSpec& spec, const float* logits, const float* scores,
                       const int32_t* expert, int64_t R, double* probs_sum, double* counts,
                       double* z_sum) override;
  void MoeAuxBackward(const MoeRouterSpec& spec, const float* logits, const float* scores,
                      const MoeAuxGrad& aux, float* d_logits, int64_t R) override;

 private:
  cudaStream_t Resolve(Stream s) const { return s.is_default() ? main_ : AsCuda(s); }
  // The pinned staging buffer, once the last copy out of it (an Upload's, on whichever stream)
  // has finished: waiting for that copy alone, not for the whole stream, lets an Upload (the
  // MoE bias and coefficients, a mirrored parameter unit) leave queued kernels running, and
  // keeps an Upload on another stream from overwriting bytes a copy is still reading.
  void* Staging(size_t bytes) {
    CUDA_CHECK(cudaEventSynchronize(staged_));
    return pinned_.Get(bytes, current_);
  }
  float* Scratch(int64_t floats) {
    return static_cast<float*>(scratch_.Get(static_cast<size_t>(floats) * sizeof(float), current_));
  }

  void GemmAs(DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
              float* C, int64_t ldc);
  double Classifier(float* losses, float* d_x, float* d_weight, const float* x,
                    const float* weight, const int32_t* targets, int64_t N, int64_t C,
                    int64_t V_local, int64_t V_real, int64_t vocab_begin, float loss_scale,
                    float* logits, int64_t chunk_rows, CombineFn combine, void* combine_ctx);
  // Runs `combine` on n device floats through the pinned staging buffer.
  void CombineOnHost(float* values, int64_t n, bool max, CombineFn combine, void* ctx);

  CudaBackendOptions options_;
  cudaStream_t main_ = nullptr, current_ = nullptr;
  std::array<cudaEvent_t, kEventRing> events_{};
  int next_event_ = 0;
  const CublasApi& blas_;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  DeviceBuffer scratch_, bf16_operands_;
  PinnedBuffer pinned_;
  cudaEvent_t staged_ = nullptr;  // after the last copy out of pinned_
};

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same call with the
// operands swapped and the transposition flags kept. bf16: both operands are narrowed (round
// to nearest even, cuda/convert.cu) into scratch and multiplied with fp32 accumulation.
void CudaBackend::GemmAs(DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N,
                         int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                         int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (dtype != DType::kBF16) {
    CUBLAS_CHECK(blas_.sgemm(cublas_, op_b, op_a, static_cast<int>(N), static_cast<int>(M),
                             static_cast<int>(K), &alpha, B, static_cast<int>(ldb), A,
                             static_cast<int>(lda), &beta, C, static_cast<int>(ldc)));
    return;
  }
  // Elements each operand spans as stored: its rows at the leading dimension, the last row
  // only as wide as the operand (a column slice of a wider matrix ends before its last row
  // does, and reading a whole last row would run past the end of the buffer).
  auto span = [](int64_t rows, int64_t cols, int64_t ld) {
    return rows == 0 || cols == 0 ? int64_t{0} : (rows - 1) * ld + cols;
  };
  const int64_t a_elems = trans_a ? span(K, M, lda) : span(M, K, lda);
  const int64_t b_elems = trans_b ? span(N, K, ldb) : span(K, N, ldb);
  // b16 starts 256-byte aligned, as cudaMalloc's a16, so cuBLAS may pick its vectorised kernels.
  const int64_t b_offset = (a_elems + 127) / 128 * 128;
  auto* a16 = static_cast<uint16_t*>(
      bf16_operands_.Get(static_cast<size_t>(b_offset + b_elems) * sizeof(uint16_t), current_));
  uint16_t* b16 = a16 + b_offset;
  cuda::ConvertFromF32(current_, DType::kBF16, A, a16, a_elems);
  cuda::ConvertFromF32(current_, DType::kBF16, B, b16, b_elems);
  CUBLAS_CHECK(blas_.gemm_ex(cublas_, op_b, op_a, static_cast<int>(N), static_cast<int>(M),
                            static_cast<int>(K), &alpha, b16, CUDA_R_16BF, static_cast<int>(ldb),
                            a16, CUDA_R_16BF, static_cast<int>(lda), &beta, C, CUDA_R_32F,
                            static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::CombineOnHost(float* values, int64_t n, bool max, CombineFn combine,
                                void* ctx) {
  auto* host = static_cast<float*>(Staging(static_cast<size_t>(n) * sizeof(float)));
  Download(host, values, static_cast<size_t>(n) * sizeof(float));
  combine(ctx, host, n, max);
  CUDA_CHECK(cudaMemcpyAsync(values, host, static_cast<size_t>(n) * sizeof(float),
                             cudaMemcpyHostToDevice, current_));
  CUDA_CHECK(cudaStreamSynchronize(current_));  // the pinned buffer is reused next
}

// runtime/kernels/cpu/vocab_parallel.cc's algorithm, chunk by chunk; without `combine` (the
// whole vocabulary on this device) the two reductions are the identity.
double CudaBackend::Classifier(float* losses, float* d_x, float* d_weight, const float* x,
                               const float* weight, const int32_t* targets, int64_t N,
                               int64_t C, int64_t V_local, int64_t V_real, int64_t vocab_begin,
                               float loss_scale, float* logits, int64_t chunk_rows,
                               CombineFn combine, void* combine_ctx) {
  TESSERA_CHECK(chunk_rows > 0 && V_real >= 0 && V_real <= V_local);
  const DType t = options_.gemm_dtype;
  const int64_t cap = std::min(chunk_rows, N);
  float* maxima = Scratch(3 * cap);
  float* pairs = maxima + cap;
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, N - r0);
    GemmAs(t, false, true, rows, V_local, C, 1.0f, x + r0 * C, C, weight, C, 0.0f, logits,
           V_local);
    cuda::RowMax(current_, maxima, logits, rows, V_local, V_real);
    if (combine != nullptr) CombineOnHost(maxima, rows, /*max=*/true, combine, combine_ctx);
    cuda::ExpSumAndTarget(current_, pairs, logits, maxima, targets + r0, rows, V_local, V_real,
                          vocab_begin);
    if (combine != nullptr) CombineOnHost(pairs, 2 * rows, /*max=*/false, combine, combine_ctx);
    cuda::RowLoss(current_, losses + r0, pairs, maxima, targets + r0, rows);
    if (d_x == nullptr) continue;
    cuda::SoftmaxGrad(current_, logits, pairs, targets + r0, rows, V_local, V_real, vocab_begin,
                      loss_scale);
    GemmAs(t, false, false, rows, C, V_local, 1.0f, logits, V_local, weight, C, 0.0f,
           d_x + r0 * C, C);
    if (d_weight != nullptr) {
      GemmAs(t, true, false, V_local, C, rows, 1.0f, logits, V_local, x + r0 * C, C, 1.0f,
             d_weight, C);
    }
  }
  // The loss sum in row order on the host, in double, of the per-row losses as stored (fp32;
  // the CPU adds them before rounding, so the sums differ in the last bits; ignored rows: 0).
  std::vector<float> host(static_cast<size_t>(N));
  Download(host.data(), losses, host.size() * sizeof(float));
  double sum = 0.0;
  for (float l : host) sum += l;
  return sum;
}

// The plan's offsets and counts are host memory by contract and its work is a sort of R * k
// integers: it runs on the host through the CPU kernel, with the routing copied down and the
// row maps copied up.
int64_t CudaBackend::MoePlan(const int32_t* expert, const float* scores, int64_t R, int64_t k,
                             int64_t E, int64_t capacity, int32_t* row_of, int32_t* token_of_row,
                             int64_t* offset, int64_t* counts) {
  std::vector<int32_t> h_expert(static_cast<size_t>(R * k)), h_row_of(h_expert.size());
  std::vector<int32_t> h_token_of_row(h_expert.size());
  std::vector<float> h_scores(static_cast<size_t>(R * E));
  Download(h_expert.data(), expert, h_expert.size() * sizeof(int32_t));
  Download(h_scores.data(), scores, h_scores.size() * sizeof(float));
  const int64_t kept = cpu::MoePlan(h_expert.data(), h_scores.data(), R, k, E, capacity,
                                    h_row_of.data(), h_token_of_row.data(), offset, counts);
  Upload(row_of, h_row_of.data(), h_row_of.size() * sizeof(int32_t));
  Upload(token_of_row, h_token_of_row.data(), static_cast<size_t>(kept) * sizeof(int32_t));
  return kept;
}

void CudaBackend::MoeBalanceStats(const MoeRouterSpec& spec, const float* logits,
                                  const float* scores, const int32_t* expert, int64_t R,
                                  double* probs_sum, double* counts, double* z_sum) {
  std::vector<float> h_logits(static_cast<size_t>(R * spec.E)), h_scores(h_logits.size());
  std::vector<int32_t> h_expert(static_cast<size_t>(R * spec.k));
  Download(h_logits.data(), logits, h_logits.size() * sizeof(float));
  Download(h_scores.data(), scores, h_scores.size() * sizeof(float));
  Download(h_expert.data(), expert, h_expert.size() * sizeof(int32_t));
  cpu::MoeBalanceStats(spec, h_logits.data(), h_scores.data(), h_expert.data(), R, probs_sum,
                       counts, z_sum);
}

// The coefficients are host memory (backend.h): E floats, and E per sequence the R rows span,
// uploaded into scratch for the kernel.
void CudaBackend::MoeAuxBackward(const MoeRouterSpec& spec, const float* logits,
                                 const float* scores, const MoeAuxGrad& aux, float* d_logits,
                                 int64_t R) {
  if (R == 0) return;
  const int64_t sequences = aux.seq_coef != nullptr ? (aux.row0 + R - 1) / aux.T - aux.seq0 + 1 : 0;
  const int64_t switch_floats = aux.switch_coef != nullptr ? spec.E : 0;
  float* coef = Scratch(switch_floats + sequences * spec.E);
  MoeAuxGrad on_device = aux;
  if (aux.switch_coef != nullptr) {
    Upload(coef, aux.switch_coef, static_cast<size_t>(spec.E) * sizeof(float));
    on_device.switch_coef = coef;
  }
  if (aux.seq_coef != nullptr) {
    Upload(coef + switch_floats, aux.seq_coef,
           static_cast<size_t>(sequences * spec.E) * sizeof(float));
    on_device.seq_coef = coef + switch_floats;
  }
  cuda::MoeAuxBackward(current_, spec, logits, scores, on_device, d_logits, R);
}

Status DeviceCountStatus(int* count) {
  const cudaError_t err = cudaGetDeviceCount(count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return FailedPrecondition(std::string("no usable CUDA device: ") + cudaGetErrorName(err) +
                              " (" + cudaGetErrorString(err) + ")");
  }
  if (*count == 0) return FailedPrecondition("no usable CUDA device: the driver reports none");
  return Status::Ok();
}

}  // namespace

bool CudaBackendBuilt() { return true; }

Status CudaAvailable() {
  int count = 0;
  return DeviceCountStatus(&count);
}

int CudaDeviceCount() {
  int count = 0;
  return DeviceCountStatus(&count).ok() ? count : 0;
}

Status CublasLoadable() { return LoadCublas().status(); }

Result<CudaDeviceInfo> CudaDevice(int ordinal) {
  int count = 0;
  RETURN_IF_ERROR(DeviceCountStatus(&count));
  if (ordinal < 0 || ordinal >= count) {
    return InvalidArgument("CUDA device " + std::to_string(ordinal) + " does not exist (" +
                           std::to_string(count) + " present)");
  }
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal));
  CudaDeviceInfo info;
  info.name = p.name;
  info.ordinal = ordinal;
  info.compute_major = p.major;
  info.compute_minor = p.minor;
  info.multiprocessors = p.multiProcessorCount;
  info.memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
  cudaDriverGetVersion(&info.driver_version);
  cudaRuntimeGetVersion(&info.runtime_version);
  return info;
}

Result<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  if (options.gemm_dtype != DType::kF32 && options.gemm_dtype != DType::kBF16) {
    return InvalidArgument("the CUDA backend multiplies in fp32 or bf16");
  }
  RETURN_IF_ERROR(CudaDevice(options.device).status());
  ASSIGN_OR_RETURN(const CublasApi* blas, LoadCublas());
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(options, *blas));
}

}  // namespace tessera
