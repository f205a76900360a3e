// runtime/kernels/cpu/bench.cc — see bench.h.
#include "runtime/kernels/cpu/bench.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/core/dtype.h"
#include "runtime/kernels/cpu/bf16_gemm.h"

namespace tessera::cpu {
namespace {

// Best GFLOP/s of `run` (an M x N x K product) over `repeats` timed calls after one warm-up.
template <typename Run>
double BestGflops(int64_t M, int64_t N, int64_t K, int repeats, const Run& run) {
  run();  // warm-up: page faults, buffer allocation, thread start-up, oneDNN's JIT
  double best_s = 0.0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best_s = r == 0 ? s : std::min(best_s, s);
  }
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  return best_s > 0.0 ? flops / best_s / 1e9 : 0.0;
}

}  // namespace

double MeasureSgemmGflops(int64_t M, int64_t N, int64_t K, int repeats) {
  TESSERA_CHECK(M >= 1 && N >= 1 && K >= 1 && repeats >= 1);
  // Non-trivial values (not zeros) so no BLAS shortcut or denormal path skews the timing.
  std::vector<float> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(K * N)),
      c(static_cast<size_t>(M * N), 0.0f);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.02f - 0.06f;
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(M),
                static_cast<blasint>(N), static_cast<blasint>(K), 1.0f, a.data(),
                static_cast<blasint>(K), b.data(), static_cast<blasint>(N), 0.0f, c.data(),
                static_cast<blasint>(N));
  };
  return BestGflops(M, N, K, repeats, run);
}

double MeasurePeakSgemmGflops() { return MeasureSgemmGflops(2048, 2048, 2048, 3); }

double MeasureBf16GemmGflops(int64_t M, int64_t N, int64_t K, int repeats) {
  TESSERA_CHECK(M >= 1 && N >= 1 && K >= 1 && repeats >= 1);
  // The same values as the sgemm measurement, as bf16.
  std::vector<uint16_t> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(K * N));
  std::vector<float> c(static_cast<size_t>(M * N), 0.0f);
  for (size_t i = 0; i < a.size(); ++i) a[i] = F32ToBf16(static_cast<float>(i % 13) * 0.01f - 0.06f);
  for (size_t i = 0; i < b.size(); ++i) b[i] = F32ToBf16(static_cast<float>(i % 7) * 0.02f - 0.06f);
  auto run = [&] {
    GemmBf16(false, false, M, N, K, a.data(), K, b.data(), N, false, c.data(), N);
  };
  return BestGflops(M, N, K, repeats, run);
}

double MeasurePeakBf16GemmGflops() { return MeasureBf16GemmGflops(2048, 2048, 2048, 3); }

}  // namespace tessera::cpu
