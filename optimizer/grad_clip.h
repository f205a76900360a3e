// optimizer/grad_clip.h — global L2 norm of the gradients and clipping by it.
//
// Semantics are torch.nn.utils.clip_grad_norm_'s with norm_type=2 over one flat buffer:
// coef = max_norm / (norm + 1e-6), clamped to at most 1, and the gradients are multiplied by
// coef when it is below 1 (so clipping starts when norm + 1e-6 > max_norm).
// Determinism: the sum of squares is taken over fixed blocks of kNormBlock elements, each in
// double in a fixed lane order written out in grad_clip.cc (not left to the compiler), and the
// per-block partials are added in block order, so the result has the same bits for any OpenMP
// thread count.
// Thread-safety: pure functions over caller-owned buffers; each runs one OpenMP loop.
#pragma once

#include <cstdint>

namespace tessera {

// Elements per block of the norm's reduction. Part of the result's definition: changing it
// changes the last bits of the norm.
inline constexpr int64_t kNormBlock = int64_t{1} << 14;

// The blocks of the norm's reduction: partial[b] = sum of x[i]^2, in double, over block b =
// [b * kNormBlock, min(n, (b + 1) * kNormBlock)), for b < NumNormBlocks(n). SumOfSquares is
// these partials added in block order; a partitioned caller (ZeRO-2) computes the partials of
// its block-aligned slice and adds everyone's in global block order, which gives the same bits.
inline int64_t NumNormBlocks(int64_t n) { return (n + kNormBlock - 1) / kNormBlock; }
void BlockSumsOfSquares(const float* x, int64_t n, double* partial);

// The vector path of the sum of squares, chosen at run time from the CPU's features: AVX-512
// where the core and the OS have it, else AVX2. Both add the same numbers in the same order,
// so they give the same bits (tested by forcing each).
enum class NormPath { kAvx2, kAvx512 };
NormPath ActiveNormPath();
const char* NormPathName(NormPath p);  // "AVX2", "AVX-512"
// BlockSumsOfSquares on `path` (kAvx512 only where ActiveNormPath() is kAvx512).
void BlockSumsOfSquares(const float* x, int64_t n, double* partial, NormPath path);

// sum_i x[i]^2, in double. A data-parallel trainer reduces these across ranks before the sqrt.
double SumOfSquares(const float* x, int64_t n);

// sqrt(SumOfSquares(x, n)).
double GlobalL2Norm(const float* x, int64_t n);

// The factor clip_grad_norm_ multiplies gradients by: min(1, max_norm / (norm + 1e-6)).
// Returns 1 (no clipping) when max_norm <= 0 or norm is not finite.
double ClipCoefficient(double norm, double max_norm);

// The float factor clipping multiplies gradients by: ClipCoefficient rounded to float when it
// is below 1, else exactly 1 (no clipping). Passed as AdamW::Step's grad_scale, it folds the
// clipping into the optimizer's read of the gradient with the bits of ClipToNorm + Step.
float ClipScale(double norm, double max_norm);

// x[i] *= scale for i in [0, n).
void ScaleInPlace(float* x, int64_t n, float scale);

// Scales x(n) by ClipCoefficient(norm, max_norm) when that is below 1, else leaves it as is:
// the clipping half of ClipGradNorm, for a caller that computed the norm itself (across ranks)
// and holds only part of the gradient.
void ClipToNorm(float* x, int64_t n, double norm, double max_norm);

// Computes the global L2 norm of grads(n), scales grads by ClipCoefficient(norm, max_norm)
// when that is below 1, and returns the norm as it was before clipping. max_norm <= 0 turns
// clipping off (the norm is still returned). A non-finite norm (inf/NaN gradients) is returned
// untouched and the gradients are left as they are: the trainer reports or skips the step.
double ClipGradNorm(float* grads, int64_t n, double max_norm);

}  // namespace tessera
