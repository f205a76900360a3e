// comm/nccl_reduce.h — the device half of the NCCL backend's rank-ordered reductions: after the
// contributions of every rank have been gathered (rows of one buffer, rank 0's first), one
// kernel combines them element by element in rank order with comm/reduce.h's numerics (an fp32
// or i32 accumulator, one rounding to the element type at the end, kAvg divides by the ranks),
// so a rank-ordered reduction on GPUs gives the bits of the MPI backend's on the same finite
// data (a NaN result is a NaN on both, not necessarily the same NaN: x86 and CUDA make
// different ones).
// Compiled when the NCCL backend and CMake's CUDA language are both on.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/core/dtype.h"

namespace tessera {

// How the rows combine (ReduceOp's values, which this C++17 header cannot name: nvcc compiles it).
enum class RowOp { kSum, kAvg, kMax };

// dst[i] = rows[0][i] op rows[1][i] op ... rows[nrows-1][i], row r at gathered + r * row_stride
// elements of `dtype`; enqueued on `s`. dst may alias a row.
cudaError_t ReduceGatheredRows(cudaStream_t s, DType dtype, RowOp op, const void* gathered,
                               int nrows, int64_t row_stride, void* dst, int64_t n);

}  // namespace tessera
