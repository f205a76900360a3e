// runtime/kernels/cpu/convert.h — bulk conversions between fp32 and the 16-bit float types, and
// the finiteness check mixed precision needs.
//
// Every function gives, element for element, exactly the bits of the scalar conversions in
// runtime/core/dtype.h (F32ToBf16 / F32ToF16: round to nearest, ties to even; f16 overflow
// becomes ±inf; NaN stays a quiet NaN of the same sign), for every input, but runs as
// vectorisable branch-free loops, multithreaded with OpenMP. Elementwise, so the result does
// not depend on the thread count. Thread-safety: pure functions of their arguments; buffers
// must not overlap unless stated.
#pragma once

#include <cstdint>

#include "runtime/core/dtype.h"

namespace tessera::cpu {

// x[i] = the fp32 value of x[i] rounded to `dtype` (kBF16 or kF16), in place: what a value
// stored in that type and read back would be. kF32: nothing to do. (kI32 is a CHECK failure.)
void RoundTo(DType dtype, float* x, int64_t n);

// dst[i] = src[i] in `dtype` (kF32: a copy; kBF16 / kF16: uint16_t bit patterns, rounded).
void ConvertFromF32(DType dtype, const float* src, void* dst, int64_t n);

// dst[i] = src[i] (in `dtype`: kF32, kBF16 or kF16) as fp32. Exact.
void ConvertToF32(DType dtype, const void* src, float* dst, int64_t n);

// True when no element is ±inf or NaN.
bool AllFinite(const float* x, int64_t n);

}  // namespace tessera::cpu
