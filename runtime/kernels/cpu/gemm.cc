// runtime/kernels/cpu/gemm.cc — Gemm and Linear (nn.Linear layout) on OpenBLAS.
//
// Owns: Gemm, LinearForward, LinearBackward (declared in ops.h). Gemm is the one wrapper of
// cblas_sgemm: every kernel calls it, so K == 0 and the int64 -> blasint range check live here.
// Threads: the matrix products are single multithreaded cblas_sgemm calls made outside any
// OpenMP region, so OpenBLAS uses the whole libgomp pool; our own loops (bias broadcast,
// d_bias column sums) are OpenMP loops in between.
// Determinism: OpenBLAS partitions sgemm over M and N, never over K, so with a fixed thread
// count each output element has a fixed summation order. d_bias sums rows in index order per
// channel (parallel over channel blocks), which does not even depend on the thread count.
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu {
namespace {

// blasint is int32 in the usual OpenBLAS build (int64 only with INTERFACE64); a larger size
// would be silently truncated by the cast, so refuse it loudly instead.
void CheckFitsBlasint(int64_t v, const char* what, int64_t M, int64_t N, int64_t K) {
  TESSERA_CHECK_MSG(v <= static_cast<int64_t>(std::numeric_limits<blasint>::max()),
                    "Gemm: %s=%lld exceeds the BLAS integer limit %lld (M=%lld N=%lld K=%lld); "
                    "split the product or build OpenBLAS with INTERFACE64",
                    what, static_cast<long long>(v),
                    static_cast<long long>(std::numeric_limits<blasint>::max()),
                    static_cast<long long>(M), static_cast<long long>(N),
                    static_cast<long long>(K));
}

}  // namespace

void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  TESSERA_CHECK(M >= 0 && N >= 0 && K >= 0);
  CheckFitsBlasint(M, "M", M, N, K);
  CheckFitsBlasint(N, "N", M, N, K);
  CheckFitsBlasint(K, "K", M, N, K);
  CheckFitsBlasint(lda, "lda", M, N, K);
  CheckFitsBlasint(ldb, "ldb", M, N, K);
  CheckFitsBlasint(ldc, "ldc", M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    // Empty product: C = beta * C. (Not every BLAS handles K == 0 the same way.)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
              static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

// out = inp @ weight^T + bias
void LinearForward(float* out, const float* inp, const float* weight, const float* bias,
                   int64_t N, int64_t C, int64_t OC) {
  float beta = 0.0f;
  if (bias != nullptr) {
    // Broadcast the bias into out, then let sgemm add the product (beta = 1): one pass over
    // out fewer than adding the bias afterwards.
#pragma omp parallel for schedule(static) if (N * OC >= vec::kMinParallelElems)
    for (int64_t i = 0; i < N; ++i) std::memcpy(out + i * OC, bias, OC * sizeof(float));
    beta = 1.0f;
  }
  Gemm(false, true, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

void LinearBackward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                    const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC) {
  // d_inp(N,C) = d_out(N,OC) @ weight(OC,C)   (written)
  if (d_inp != nullptr) Gemm(false, false, N, C, OC, 1.0f, d_out, OC, weight, C, 0.0f, d_inp, C);
  // d_weight(OC,C) += d_out^T(OC,N) @ inp(N,C)
  if (d_weight != nullptr)
    Gemm(true, false, OC, C, N, 1.0f, d_out, OC, inp, C, 1.0f, d_weight, C);
  // d_bias(OC) += sum_i d_out[i, :], rows summed in order per channel.
  if (d_bias != nullptr) {
    vec::AddColumnSums(d_bias, d_out, N, OC, [](float v) { return v; });
  }
}

}  // namespace tessera::cpu
