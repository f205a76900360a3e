// runtime/kernels/cpu/attention.cc — causal self-attention with grouped-query heads.
//
// Owns: AttentionForward, AttentionBackward (ops.h).
// Layout: qkv(B*T, R) with R = (NH + 2*NKV)*HS holds [q heads | k heads | v heads] per token;
// a head's (T, HS) matrix is read in place with leading dimension R (no copies). Query head h
// reads kv head h / (NH/NKV).
// Threads: one work item per (b, h) in forward and per (b, kv head) in backward, run by an
// OpenMP loop; each item calls Gemm (cblas_sgemm), which OpenBLAS (OpenMP flavour) runs on the
// calling thread when it is inside a parallel region. For GPT-2 shapes (T <= 256, HS = 64)
// these products are too small for a multithreaded sgemm to pay off, and B*NH items keep both
// cores busy. Determinism: an item's result depends only on its inputs; dk/dv of a kv head
// sum its query heads in increasing h inside one item, so no order depends on scheduling.
#include <cmath>
#include <cstring>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu {
namespace {

void CheckHeads(int64_t NH, int64_t NKV) {
  TESSERA_CHECK_MSG(NKV >= 1 && NH % NKV == 0, "NH=%lld is not a multiple of NKV=%lld",
                    static_cast<long long>(NH), static_cast<long long>(NKV));
}

}  // namespace

// S = scale * Q K^T; P = softmax(S masked to lo(i) <= j <= i) (saved in att); O = P V, with
// lo(i) = 0, or i - window + 1 under a sliding window. The masked entries of P are exact
// zeros, so the product with V and the backward need no mask of their own.
void AttentionForward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                      int64_t NH, int64_t NKV, int64_t HS, int64_t window) {
  CheckHeads(NH, NKV);
  const int64_t R = (NH + 2 * NKV) * HS;
  const int64_t group = NH / NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for schedule(static) if (B * NH * T * T * HS >= vec::kMinParallelElems)
  for (int64_t item = 0; item < B * NH; ++item) {
    const int64_t b = item / NH, h = item % NH, kvh = h / group;
    const float* base = qkv + b * T * R;
    const float* q = base + h * HS;
    const float* k = base + (NH + kvh) * HS;
    const float* v = base + (NH + NKV + kvh) * HS;
    float* p = att + item * T * T;  // (T, T)
    Gemm(false, true, T, T, HS, scale, q, R, k, R, 0.0f, p, T);
    for (int64_t i = 0; i < T; ++i) {
      float* row = p + i * T;
      const int64_t lo = window > 0 && i >= window ? i - window + 1 : 0;
      const float m = vec::Max(row + lo, i + 1 - lo);
      const float inv_sum = static_cast<float>(1.0 / vec::ExpShiftSum(row + lo, m, i + 1 - lo));
      for (int64_t j = 0; j < lo; ++j) row[j] = 0.0f;
      for (int64_t j = lo; j <= i; ++j) row[j] *= inv_sum;
      for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
    }
    Gemm(false, false, T, HS, T, 1.0f, p, T, v, R, 0.0f,
          out + b * T * NH * HS + h * HS, NH * HS);
  }
}

// Per query head, with dO its slice of d_out:
//   dP = dO V^T;  dV += P^T dO;  dS = P * (dP - rowsum(P * dP));
//   dQ = scale * dS K;  dK += scale * dS^T Q
void AttentionBackward(float* d_qkv, float* scratch, const float* d_out, const float* qkv,
                       const float* att, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                       int64_t HS) {
  CheckHeads(NH, NKV);
  const int64_t R = (NH + 2 * NKV) * HS;
  const int64_t group = NH / NKV;
  const int64_t ldo = NH * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for schedule(static) if (B * NH * T * T * HS >= vec::kMinParallelElems)
  for (int64_t item = 0; item < B * NKV; ++item) {
    const int64_t b = item / NKV, kvh = item % NKV;
    const float* base = qkv + b * T * R;
    float* d_base = d_qkv + b * T * R;
    const float* k = base + (NH + kvh) * HS;
    const float* v = base + (NH + NKV + kvh) * HS;
    float* dk = d_base + (NH + kvh) * HS;
    float* dv = d_base + (NH + NKV + kvh) * HS;
    // d_qkv is written (=): clear this kv head's dk, dv, then accumulate its query heads.
    for (int64_t t = 0; t < T; ++t) {
      std::memset(dk + t * R, 0, HS * sizeof(float));
      std::memset(dv + t * R, 0, HS * sizeof(float));
    }
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const float* q = base + h * HS;
      float* dq = d_base + h * HS;
      const float* d_o = d_out + b * T * ldo + h * HS;
      const float* p = att + (b * NH + h) * T * T;
      float* ds = scratch + (b * NH + h) * T * T;
      Gemm(false, true, T, T, HS, 1.0f, d_o, ldo, v, R, 0.0f, ds, T);  // dP
      Gemm(true, false, T, HS, T, 1.0f, p, T, d_o, ldo, 1.0f, dv, R);
      for (int64_t i = 0; i < T; ++i) {
        const float* p_row = p + i * T;
        float* row = ds + i * T;
        const float dot = vec::Dot(p_row, row, i + 1);
        for (int64_t j = 0; j <= i; ++j) row[j] = p_row[j] * (row[j] - dot);
        for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
      }
      Gemm(false, false, T, HS, T, scale, ds, T, k, R, 0.0f, dq, R);
      Gemm(true, false, T, HS, T, scale, ds, T, q, R, 1.0f, dk, R);
    }
  }
}

}  // namespace tessera::cpu
