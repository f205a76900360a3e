// runtime/kernels/cuda/embedding.cu — token (and learned position) embeddings, whole and
// vocab-parallel, forward and backward.
// Backward is a scatter: several tokens may add to one row of d_wte. Without atomics, a
// thread owns one column and walks the tokens in order, so each (row, column) is summed in
// token order, the CPU's order: the bits equal the CPU's. The price is parallelism of C
// threads per call; d_wte's scatter is a small part of a step (one N x C pass).
#include "runtime/kernels/cuda/device_util.cuh"
#include "runtime/kernels/cuda/launch.h"

namespace tessera::cuda {
namespace {

__global__ void EmbeddingForwardKernel(float* out, const int32_t* tokens, const float* wte,
                                       const float* wpe, int64_t T, int64_t C, int64_t n) {
  for (int64_t e = GridStart(); e < n; e += GridStride()) {
    const int64_t i = e / C, c = e % C;
    float v = wte[static_cast<int64_t>(tokens[i]) * C + c];
    if (wpe != nullptr) v += wpe[(i % T) * C + c];
    out[e] = v;
  }
}

// Tokens outside [vocab_begin, vocab_begin + vocab_rows) are skipped (the whole table:
// begin 0, rows V).
__global__ void ScatterRowsKernel(float* d_wte, const float* d_out, const int32_t* tokens,
                                  int64_t vocab_begin, int64_t vocab_rows, int64_t N, int64_t C) {
  const int64_t c = GridStart();
  if (c >= C) return;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
    if (row < 0 || row >= vocab_rows) continue;
    d_wte[row * C + c] += d_out[i * C + c];
  }
}

// d_wpe[t] += sum over b of d_out[b, t], the batch summed in order first, then added once.
__global__ void PositionGradKernel(float* d_wpe, const float* d_out, int64_t B, int64_t T,
                                   int64_t C) {
  for (int64_t e = GridStart(); e < T * C; e += GridStride()) {
    float sum = 0.0f;
    for (int64_t b = 0; b < B; ++b) sum += d_out[b * T * C + e];
    d_wpe[e] += sum;
  }
}

__global__ void VocabEmbeddingForwardKernel(float* out, const int32_t* tokens,
                                            const float* wte_local, int64_t vocab_begin,
                                            int64_t vocab_rows, int64_t C, int64_t n) {
  for (int64_t e = GridStart(); e < n; e += GridStride()) {
    const int64_t i = e / C, c = e % C;
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
    out[e] = row >= 0 && row < vocab_rows ? wte_local[row * C + c] : 0.0f;
  }
}

void ScatterRows(cudaStream_t s, float* d_wte, const float* d_out, const int32_t* tokens,
                 int64_t vocab_begin, int64_t vocab_rows, int64_t N, int64_t C) {
  if (N == 0 || C == 0) return;
  ScatterRowsKernel<<<BlocksFor(C, 128), 128, 0, s>>>(d_wte, d_out, tokens, vocab_begin,
                                                      vocab_rows, N, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void EmbeddingForward(cudaStream_t s, float* out, const int32_t* tokens, const float* wte,
                      const float* wpe, int64_t B, int64_t T, int64_t C) {
  const int64_t n = B * T * C;
  if (n == 0) return;
  EmbeddingForwardKernel<<<BlocksFor(n), kThreads, 0, s>>>(out, tokens, wte, wpe, T, C, n);
  CUDA_CHECK_LAUNCH();
}

void EmbeddingBackward(cudaStream_t s, float* d_wte, float* d_wpe, const float* d_out,
                       const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t V) {
  if (d_wte != nullptr) ScatterRows(s, d_wte, d_out, tokens, 0, V, B * T, C);
  if (d_wpe != nullptr && T * C > 0) {
    PositionGradKernel<<<BlocksFor(T * C), kThreads, 0, s>>>(d_wpe, d_out, B, T, C);
    CUDA_CHECK_LAUNCH();
  }
}

void VocabEmbeddingForward(cudaStream_t s, float* out, const int32_t* tokens,
                           const float* wte_local, int64_t vocab_begin, int64_t vocab_rows,
                           int64_t N, int64_t C) {
  const int64_t n = N * C;
  if (n == 0) return;
  VocabEmbeddingForwardKernel<<<BlocksFor(n), kThreads, 0, s>>>(out, tokens, wte_local,
                                                                vocab_begin, vocab_rows, C, n);
  CUDA_CHECK_LAUNCH();
}

void VocabEmbeddingBackward(cudaStream_t s, float* d_wte_local, const float* d_out,
                            const int32_t* tokens, int64_t vocab_begin, int64_t vocab_rows,
                            int64_t N, int64_t C) {
  ScatterRows(s, d_wte_local, d_out, tokens, vocab_begin, vocab_rows, N, C);
}

}  // namespace tessera::cuda
