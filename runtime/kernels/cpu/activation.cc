// runtime/kernels/cpu/activation.cc — GELU (tanh approximation), SwiGLU, residual adds.
//
// Owns: GeluForward/Backward, SwigluForward/Backward, Add, AddInPlace, Dropout (ops.h).
// Threads: elementwise, parallel over fixed static ranges; every element is computed
// independently, so results are bitwise the same for any thread count.
// Numerics: GELU uses the identity 0.5*(1 + tanh(u)) = sigmoid(2u), so
//   gelu(x) = x * sigmoid(2u), u = sqrt(2/pi) * (x + 0.044715 x^3),
// which needs one exp (vec::ExpF, vectorisable) and has no cancellation for negative x.
// It agrees with the tanh form (torch's gelu_new) to a few fp32 ulp. Outputs may alias inputs.
#include "runtime/core/random.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

}  // namespace

// out = 0.5 x (1 + tanh(k (x + 0.044715 x^3)))
void GeluForward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluK * (x + kGeluC * x * x * x);
    out[i] = x * vec::SigmoidF(2.0f * u);
  }
}

// d/dx [x s(2u)] = s + x * s (1 - s) * 2 u',  u' = k (1 + 3 * 0.044715 x^2)
void GeluBackward(float* d_inp, const float* d_out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluK * (x + kGeluC * x * x * x);
    const float s = vec::SigmoidF(2.0f * u);
    const float du = kGeluK * (1.0f + 3.0f * kGeluC * x * x);
    d_inp[i] = d_out[i] * (s + x * s * (1.0f - s) * 2.0f * du);
  }
}

// out[i, j] = silu(gate[i, j]) * up[i, j], silu(g) = g * sigmoid(g)
void SwigluForward(float* out, const float* inp, int64_t N, int64_t H) {
#pragma omp parallel for schedule(static) if (N * H >= vec::kMinParallelElems)
  for (int64_t i = 0; i < N; ++i) {
    const float* gate = inp + i * 2 * H;
    const float* up = gate + H;
    float* o = out + i * H;
    for (int64_t j = 0; j < H; ++j) o[j] = gate[j] * vec::SigmoidF(gate[j]) * up[j];
  }
}

// d_gate = d_out * up * s (1 + g (1 - s)),  d_up = d_out * g * s
void SwigluBackward(float* d_inp, const float* d_out, const float* inp, int64_t N, int64_t H) {
#pragma omp parallel for schedule(static) if (N * H >= vec::kMinParallelElems)
  for (int64_t i = 0; i < N; ++i) {
    const float* gate = inp + i * 2 * H;
    const float* up = gate + H;
    const float* dy = d_out + i * H;
    float* d_gate = d_inp + i * 2 * H;
    float* d_up = d_gate + H;
    for (int64_t j = 0; j < H; ++j) {
      const float g = gate[j], u = up[j], d = dy[j];
      const float s = vec::SigmoidF(g);
      d_gate[j] = d * u * s * (1.0f + g * (1.0f - s));
      d_up[j] = d * g * s;
    }
  }
}

void Add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void AddInPlace(float* acc, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= vec::kMinParallelElems)
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

void Dropout(float* out, const float* x, int64_t rows, int64_t cols, int64_t col0,
             int64_t ld_index, float p, uint64_t key) {
  const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (rows * cols >= vec::kMinParallelElems)
  for (int64_t i = 0; i < rows; ++i) {
    const uint64_t first = static_cast<uint64_t>(i * ld_index + col0);
    for (int64_t j = 0; j < cols; ++j) {
      const bool keep = Rng(key, first + static_cast<uint64_t>(j)).NextFloat() >= p;
      out[i * cols + j] = keep ? x[i * cols + j] * scale : 0.0f;
    }
  }
}

}  // namespace tessera::cpu
