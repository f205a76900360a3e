// runtime/kernels/cpu/onednn_matmul.h — private to the CPU backend (and its tests): one
// matrix product through oneDNN's matmul primitive, with primitives cached per shape.
//
// Owns: the one oneDNN engine and stream of the process, and the cache of matmul primitives
// keyed by everything that shapes one (transposes, sizes, strides, data types, bias, +=, and
// the thread count, which oneDNN bakes into its blocking). Creating a primitive costs
// milliseconds (oneDNN searches its implementations and JIT-compiles a kernel); running one of
// the shapes a model repeats then costs only the product.
// Callers: bf16_gemm.cc (the bf16 path) and tests/kernels (which also run the same plumbing
// with fp32 operands, so that layouts, transposes, += and bias are checked on CPUs where
// oneDNN refuses bf16). oneDNN's headers stay inside onednn_matmul.cc.
// Threads: oneDNN is Debian's OpenMP build, so a product runs on the libgomp pool that
// OpenBLAS and our loops use, with NumThreads() threads (threads.h), in the pool's
// floating-point mode. Thread-safety: the cache is guarded by a mutex; a product may run on
// any thread. Determinism: a cached primitive has a fixed partition of the work over a fixed
// thread count, so the same inputs give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

namespace tessera::cpu::onednn {

// C(M,N) (= or +=) op(A)(M,K) @ op(B)(K,N) (+ bias(N) on every row), op(X) = X or X^T.
// Leading dimensions are row strides as stored (A is (K,M) in memory when trans_a).
struct MatmulSpec {
  bool trans_a = false;
  bool trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  DType ab_dtype = DType::kBF16;  // A and B: kBF16 (uint16_t bit patterns) or kF32
  DType c_dtype = DType::kF32;    // C: kF32 or kBF16 (the fp32 result rounded once)
  bool has_bias = false;          // bias is fp32
  bool accumulate = false;        // C += ... (oneDNN's sum post-op) instead of C = ...
};

// Runs the product. Errors (kFailedPrecondition) when oneDNN has no implementation for the
// spec on this CPU (the usual case: bf16 on a CPU without AVX-512), naming the spec and
// oneDNN's own message; the first such error for a spec is not cached, so it is retried.
// Requires M, N, K >= 1 (bf16_gemm.cc handles empty products itself).
Status Matmul(const MatmulSpec& spec, const void* A, const void* B, const float* bias, void* C);

// Creates (and caches) the primitive for `spec` without running it; on success returns
// oneDNN's name of the implementation it chose (e.g. "brg:avx512_core_amx").
Result<std::string> ImplementationName(const MatmulSpec& spec);

// "oneDNN 2.6.3 (cpu runtime: OpenMP)".
std::string VersionString();

// Number of primitives in the cache (for tests of the cache).
size_t CachedPrimitives();

}  // namespace tessera::cpu::onednn
