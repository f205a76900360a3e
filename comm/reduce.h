// comm/reduce.h — element-wise reductions shared by the backends' host-side paths.
//
// Owns: the one definition of how contributions combine on the host: in rank order, in an fp32
// (or i32) accumulator, rounded to the element type once at the end (bf16 and f16 alike: round
// to nearest even; an f16 result beyond +-65504 becomes +-inf, while intermediate sums may exceed
// that range without overflowing). The fake backend and the rank-ordered MPI paths use it, which
// is what makes them bit-identical to a serial loop.
// Thread-safety: RankOrderAccumulator is a plain value; the free functions are pure.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "runtime/core/dtype.h"

namespace tessera {

// Sums (or maxes) n-element contributions in the order they are added.
class RankOrderAccumulator {
 public:
  // dtype: kF32, kBF16, kF16 or kI32 (kI32 without kAvg: the base Communicator rejects it first).
  RankOrderAccumulator(DType dtype, ReduceOp op, int64_t n);
  // The next contribution (n elements of dtype). The first one is copied exactly.
  void Add(const void* src);
  // Writes the result (divided by the number of contributions for kAvg) as dtype into dst,
  // which may alias a contribution already added.
  void Finish(void* dst) const;

 private:
  DType dtype_;
  ReduceOp op_;
  int64_t n_;
  int count_ = 0;
  std::vector<float> f_;
  std::vector<int32_t> i_;
};

// dst[i] = rows[0][i] (op) rows[1][i] (op) ... in row order, with the same numerics as
// RankOrderAccumulator (fp32/i32 accumulation, one rounding, kAvg divides by nrows). Works in
// cache-sized tiles without allocating; dst may alias any row.
void ReduceRows(DType dtype, ReduceOp op, const void* const* rows, int nrows, void* dst, int64_t n);

// dst = dst (op) src element-wise, in dtype (bf16 and f16 round after every add, so an f16 partial
// sum beyond 65504 is inf from then on). kAvg adds.
// Used as the MPI user-defined op for bf16 and f16 on the kBackend path.
void CombineInPlace(DType dtype, ReduceOp op, void* dst, const void* src, int64_t n);
// buf /= divisor element-wise (the last step of kAvg on backends that sum first); f32, bf16, f16.
void DivideInPlace(DType dtype, void* buf, int64_t n, int divisor);

}  // namespace tessera
