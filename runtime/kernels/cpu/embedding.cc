// runtime/kernels/cpu/embedding.cc — token (+ learned position) embeddings.
//
// Owns: EmbeddingForward, EmbeddingBackward (ops.h).
// Threads: forward is parallel over tokens. Backward is parallel over channel blocks; each
// block walks the tokens in index order, so a d_wte row hit by several tokens is accumulated
// in token order, independent of the thread count and of scheduling (no atomics, no races:
// two threads never touch the same channel).
// Invariant: token ids are in [0, V) (checked in backward, where V is known; the data layer
// validates ids before they get here).
#include <algorithm>
#include <cstring>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kChannelBlock = 64;  // floats per work item: whole cache lines per thread

}  // namespace

// out[b,t,:] = wte[tokens[b,t], :] + wpe[t, :]
void EmbeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                      int64_t B, int64_t T, int64_t C) {
  const int64_t N = B * T;
#pragma omp parallel for schedule(static) if (N * C >= vec::kMinParallelElems)
  for (int64_t i = 0; i < N; ++i) {
    float* o = out + i * C;
    const float* e = wte + static_cast<int64_t>(tokens[i]) * C;
    if (wpe == nullptr) {
      std::memcpy(o, e, C * sizeof(float));
    } else {
      const float* p = wpe + (i % T) * C;
      for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  }
}

void EmbeddingBackward(float* d_wte, float* d_wpe, const float* d_out, const int32_t* tokens,
                       int64_t B, int64_t T, int64_t C, int64_t V) {
  const int64_t N = B * T;
  if (d_wte != nullptr)
    for (int64_t i = 0; i < N; ++i)
      TESSERA_CHECK_MSG(tokens[i] >= 0 && tokens[i] < V, "token %d at %lld outside [0, %lld)",
                        tokens[i], static_cast<long long>(i), static_cast<long long>(V));
  const int64_t num_blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (N * C >= vec::kMinParallelElems)
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    const int64_t c0 = blk * kChannelBlock;
    const int64_t width = std::min(kChannelBlock, C - c0);
    // d_wte[tok] += d_out[i], tokens in order.
    if (d_wte != nullptr) {
      for (int64_t i = 0; i < N; ++i) {
        float* dst = d_wte + static_cast<int64_t>(tokens[i]) * C + c0;
        const float* src = d_out + i * C + c0;
        for (int64_t c = 0; c < width; ++c) dst[c] += src[c];
      }
    }
    // d_wpe[t] += sum_b d_out[b, t]: batch summed first (in order), then added once.
    if (d_wpe != nullptr) {
      for (int64_t t = 0; t < T; ++t) {
        float acc[kChannelBlock] = {};
        for (int64_t b = 0; b < B; ++b) {
          const float* src = d_out + (b * T + t) * C + c0;
          for (int64_t c = 0; c < width; ++c) acc[c] += src[c];
        }
        float* dst = d_wpe + t * C + c0;
        for (int64_t c = 0; c < width; ++c) dst[c] += acc[c];
      }
    }
  }
}

}  // namespace tessera::cpu
