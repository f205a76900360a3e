// runtime/kernels/cpu/bf16_gemm.h — matrix products and Linear layers on bf16 operands with
// fp32 accumulation, and the run-time choice of how they are computed.
//
// Owns: GemmBf16, LinearForwardBf16 / LinearBackwardBf16, and the bf16 GEMM path:
//  - kOneDnn: oneDNN's bf16 matmul, which uses AMX-BF16 or AVX512-BF16 instructions (or
//    emulates bf16 dot products with AVX-512) — where ChooseBf16Isa (cpu_features.h) finds
//    such a CPU and oneDNN accepts a bf16 matmul on it.
//  - kFp32Compute: everywhere else (AVX2 CPUs such as AMD Zen 3): operands are widened to
//    fp32 block by block (exact: every bf16 is an fp32) and multiplied with OpenBLAS sgemm.
//    "bf16 storage, fp32 compute": the memory of bf16, the speed of fp32.
// The path is chosen once, on first use (DecideBf16GemmPath; the environment variable
// TESSERA_BF16_GEMM=fp32 keeps it on fp32 compute), and can be forced (SetBf16GemmPath) so
// that tests and benchmarks run both where both exist.
//
// Contract, as ops.h's Gemm/Linear: row-major; leading dimensions are row strides as stored;
// bf16 values are uint16_t bit patterns (runtime/core/dtype.h); parameter gradients are
// accumulated (+=), input gradients written (=); a null gradient pointer skips that work.
// Results are the fp32 sums of exact bf16 products; a bf16 output is that sum rounded once
// (round to nearest even). Error per element: within about K * 2^-24 * sum_k |a_ik b_kj| of
// the exact product of the bf16 inputs (plus half a bf16 ulp for a bf16 output); the two paths
// sum in different orders, so they agree to that bound, not bit for bit.
// Determinism: on either path the same inputs, path and thread count give the same bits.
// Threads: NumThreads() threads of the shared libgomp pool (threads.h). Call outside OpenMP
// regions. Each calling thread keeps its own fp32 scratch for the fp32-compute path, reused
// across calls, of at most SetBf16ScratchFloats' budget (32 MiB by default).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/status.h"
#include "runtime/kernels/cpu/cpu_features.h"

namespace tessera::cpu {

// ---- GEMM ---------------------------------------------------------------------------------
// C(M,N) = op(A)(M,K) @ op(B)(K,N), or C += ... when `accumulate`; op(X) = X or X^T.
// A, B bf16. C fp32 (this overload) or bf16 (the next). K == 0 gives C = 0 (or C unchanged).
void GemmBf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
              int64_t lda, const uint16_t* B, int64_t ldb, bool accumulate, float* C,
              int64_t ldc);
// C stored as bf16: C = bf16(product) or bf16(fp32(C) + product), rounded once per element.
void GemmBf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
              int64_t lda, const uint16_t* B, int64_t ldb, bool accumulate, uint16_t* C,
              int64_t ldc);

// ---- Linear (nn.Linear layout: weight is (OC, C)) -----------------------------------------
// out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC): inp and weight bf16 (the layer's bf16
// copies), bias fp32 (may be null), out fp32 or (second overload) bf16, rounded once.
void LinearForwardBf16(float* out, const uint16_t* inp, const uint16_t* weight,
                       const float* bias, int64_t N, int64_t C, int64_t OC);
void LinearForwardBf16(uint16_t* out, const uint16_t* inp, const uint16_t* weight,
                       const float* bias, int64_t N, int64_t C, int64_t OC);
// d_inp(N,C) = d_out(N,OC) @ weight (written, bf16 or fp32 by overload; skipped if null);
// d_weight(OC,C) += d_out^T @ inp and d_bias(OC) += column sums of d_out, both fp32 (the
// master gradients), each skipped if null. d_bias sums rows in index order per channel, so
// it does not depend on the path or the thread count.
void LinearBackwardBf16(uint16_t* d_inp, float* d_weight, float* d_bias, const uint16_t* d_out,
                        const uint16_t* inp, const uint16_t* weight, int64_t N, int64_t C,
                        int64_t OC);
void LinearBackwardBf16(float* d_inp, float* d_weight, float* d_bias, const uint16_t* d_out,
                        const uint16_t* inp, const uint16_t* weight, int64_t N, int64_t C,
                        int64_t OC);

// ---- LM head + cross-entropy (classifier.cc) ----------------------------------------------
// ClassifierForwardBackward (ops.h) with its three products in bf16: x (N,C) and weight (V,C)
// bf16; logits fp32 in logits_scratch (chunk_rows, V); in backward the d_logits of each chunk
// are rounded to bf16 into d_logits_scratch (chunk_rows, V) before d_x (fp32, written) and
// d_weight (fp32, accumulated) are computed. Losses, softmax statistics and the returned loss
// sum are fp32/double, as in the fp32 form.
double ClassifierForwardBackwardBf16(float* losses, float* d_x, float* d_weight,
                                     const uint16_t* x, const uint16_t* weight,
                                     const int32_t* targets, int64_t N, int64_t C, int64_t V,
                                     float loss_scale, float* logits_scratch,
                                     uint16_t* d_logits_scratch, int64_t chunk_rows);

// ---- The path -----------------------------------------------------------------------------
enum class Bf16GemmPath { kFp32Compute, kOneDnn };

struct Bf16GemmChoice {
  Bf16GemmPath path = Bf16GemmPath::kFp32Compute;
  // One line for the banner, e.g. "bf16 GEMM: oneDNN AMX-BF16 (brg:avx512_core_amx)" or
  // "bf16 GEMM: fp32 compute (no bf16 instructions)".
  std::string description;
};

// The automatic choice, pure: oneDNN where the CPU has a bf16 instruction set (isa != kNone)
// and oneDNN accepted a bf16 matmul (`onednn_impl` holds its implementation's name), else
// fp32 compute, saying why (no bf16 instructions, or oneDNN's refusal).
Bf16GemmChoice DecideBf16GemmPath(Bf16Isa isa, const Result<std::string>& onednn_impl);

// Whether oneDNN runs a bf16 matmul on this CPU: the name of the implementation it picks for
// a representative Linear shape, or why not. Probed once, then remembered.
const Result<std::string>& ProbeOneDnnBf16();

// The path in effect (the automatic choice until SetBf16GemmPath) and its banner line.
Bf16GemmChoice ActiveBf16GemmPath();

// Forces `path` for every later call in the process (tests, benchmarks). kOneDnn fails with
// kFailedPrecondition, and leaves the path unchanged, where oneDNN refuses bf16 on this CPU;
// the message says why. Not thread-safe against running kernels.
Status SetBf16GemmPath(Bf16GemmPath path);
// Back to the automatic choice.
void ResetBf16GemmPath();

// The fp32-compute path's scratch budget per calling thread, in floats (default 8 Mi = 32 MiB,
// at least 12288): a product whose widened operands (and fp32 tile, for a bf16 C) exceed it
// runs block by block, at a little extra conversion and C traffic. Returns the previous
// budget. Changes summation order (so bits) for products past the budget; tests shrink it to
// exercise blocking on small shapes. Not thread-safe against running kernels.
int64_t SetBf16ScratchFloats(int64_t floats);

}  // namespace tessera::cpu
