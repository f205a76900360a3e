// runtime/kernels/cpu/rope.cc — rotary position embedding, Hugging Face "rotate_half" layout.
//
// Owns: RopeForward, RopeBackward (ops.h).
// Numerics follow transformers' LlamaRotaryEmbedding in fp32: inv_freq[i] from
// RopeInverseFrequencies (theta^(-2i/HS) and its scaling, computed in double, then rounded to
// fp32), angle = float(pos) * inv_freq[i] as an fp32 product, cos/sin of that fp32 angle.
// Position of token t is t + pos_offset.
// Threads: a (T, HS/2) cos/sin table is built once per call (serially: T*HS/2 sincos is tiny
// next to the rotation), then tokens are rotated in parallel; each element is independent,
// so results do not depend on the thread count.
#include <cmath>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu {
namespace {

// Rotates q and k heads of every token; sign = +1 forward (R), -1 backward (R^T).
void Rotate(float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
            const RopeParams& rope, int64_t pos_offset, float sign) {
  TESSERA_CHECK_MSG(HS % 2 == 0, "RoPE needs an even head size, got %lld",
                    static_cast<long long>(HS));
  const int64_t half = HS / 2;
  const std::vector<float> inv_freq = RopeInverseFrequencies(HS, rope);
  std::vector<float> cos_table(T * half), sin_table(T * half);  // (T, HS/2)
  for (int64_t t = 0; t < T; ++t) {
    const float pos = static_cast<float>(t + pos_offset);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      cos_table[t * half + i] = std::cos(angle);
      sin_table[t * half + i] = sign * std::sin(angle);
    }
  }
  const int64_t row = (NH + 2 * NKV) * HS;
  const int64_t rotated_heads = NH + NKV;  // q heads then k heads are adjacent
  const int64_t N = B * T;
#pragma omp parallel for schedule(static) if (N * rotated_heads * HS >= vec::kMinParallelElems)
  for (int64_t n = 0; n < N; ++n) {
    const float* c = cos_table.data() + (n % T) * half;
    const float* s = sin_table.data() + (n % T) * half;
    for (int64_t h = 0; h < rotated_heads; ++h) {
      float* x = qkv + n * row + h * HS;
      float* y = x + half;
      for (int64_t i = 0; i < half; ++i) {
        const float a = x[i], b = y[i];
        x[i] = a * c[i] - b * s[i];
        y[i] = b * c[i] + a * s[i];
      }
    }
  }
}

}  // namespace

// x[i] = x[i] cos - x[i+HS/2] sin;  x[i+HS/2] = x[i+HS/2] cos + x[i] sin
void RopeForward(float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                 const RopeParams& rope, int64_t pos_offset) {
  Rotate(qkv, B, T, NH, NKV, HS, rope, pos_offset, 1.0f);
}

// R^T: the same rotation by -angle (cos even, sin odd).
void RopeBackward(float* d_qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                  const RopeParams& rope, int64_t pos_offset) {
  Rotate(d_qkv, B, T, NH, NKV, HS, rope, pos_offset, -1.0f);
}

}  // namespace tessera::cpu
