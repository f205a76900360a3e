// runtime/kernels/cpu/bench.h — measures the machine's sgemm and bf16 GEMM throughput, so that
// `tessera bench` can print achieved figures beside peaks measured on the same machine, same run.
// Thread-safety: call from one thread, outside OpenMP regions (it runs multithreaded sgemm
// with the current pool size, see threads.h). Allocates and frees its own buffers.
#pragma once

#include <cstdint>

namespace tessera::cpu {

// Best GFLOP/s (2*M*N*K / seconds / 1e9) over `repeats` timed calls of
// C(M,N) = A(M,K) @ B(K,N) (row-major, no transposes) after one untimed warm-up call.
// Requires M, N, K >= 1 and repeats >= 1.
double MeasureSgemmGflops(int64_t M, int64_t N, int64_t K, int repeats);

// The MFU denominator used everywhere (train progress lines and tessera bench): best sgemm
// rate at 2048^3 over three runs, measured now with the current thread count (~0.3 s).
double MeasurePeakSgemmGflops();

// The same measurement for GemmBf16 (bf16_gemm.h) on the path in effect (ActiveBf16GemmPath),
// bf16 A and B, fp32 C: C(M,N) = A(M,K) @ B(K,N). Requires M, N, K >= 1 and repeats >= 1.
double MeasureBf16GemmGflops(int64_t M, int64_t N, int64_t K, int repeats);
// Best bf16 GEMM rate at 2048^3 over three runs, on the path in effect.
double MeasurePeakBf16GemmGflops();

}  // namespace tessera::cpu
