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

// Inline twins of F16ToF32 / F32ToF16 (runtime/core/dtype.h) for the reduction loops. The
// dtype.cc versions are out of line and branchy (ldexp, nearbyint): an f16 reduction through
// them ran at ~1/10 of bf16's speed, slower than the network. These compute every case and
// select, so the compiler vectorises the loops. Bit-identical to dtype.h for every input, NaN
// payloads included (comm_fake_test checks all 2^16 halves and a stride through the floats;
// all 2^32 floats were compared once when they were written); like dtype.cc's nearbyint they
// assume the default round-to-nearest FP mode.
namespace reduce_detail {
// Branch-free select: m is all ones or all zeros. Written as masks rather than ?: so that the
// compiler cannot sink a case's FP arithmetic into a branch (which blocks vectorisation).
inline uint32_t SelectBits(uint32_t m, uint32_t a, uint32_t b) { return (a & m) | (b & ~m); }
inline uint32_t MaskIf(bool c) { return 0u - static_cast<uint32_t>(c); }
}  // namespace reduce_detail

inline float F16ToF32Fast(uint16_t h) {
  using reduce_detail::MaskIf, reduce_detail::SelectBits;
  constexpr uint32_t kExpMask = 0x7c00u << 13;  // the f16 exponent field at the f32 position
  constexpr float kMagic = 0x1p-14f;            // the smallest normal f16
  const uint32_t bits = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exp = bits & kExpMask;
  const uint32_t normal = bits + ((127u - 15u) << 23);     // rebias
  const uint32_t inf_nan = normal + ((128u - 16u) << 23);  // exponent all ones, payload kept
  // Zero/subnormal: read as 2^-14 * (1 + m/1024), then subtract 2^-14 (exact).
  const uint32_t sub = std::bit_cast<uint32_t>(std::bit_cast<float>(normal + (1u << 23)) - kMagic);
  const uint32_t out = SelectBits(MaskIf(exp == kExpMask), inf_nan,
                                  SelectBits(MaskIf(exp == 0), sub, normal));
  return std::bit_cast<float>(out | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

inline uint16_t F32ToF16Fast(float f) {
  using reduce_detail::MaskIf, reduce_detail::SelectBits;
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  // >= 65536, inf or NaN (NaN: quiet, payload dropped, as in dtype.cc).
  const uint32_t big = SelectBits(MaskIf(abs > 0x7f800000u), 0x7e00u, 0x7c00u);
  // Below 2^-14: adding 0.5 lines the f16 subnormal ulp (2^-24) up with the f32 ulp, so the FP
  // add itself rounds to nearest even.
  const uint32_t sub = std::bit_cast<uint32_t>(std::bit_cast<float>(abs) + 0.5f) - (126u << 23);
  // Normal: rebias and round to nearest even on the 13 dropped bits; a carry past 65504 lands
  // on the inf encoding.
  const uint32_t normal = (abs + ((15u - 127u) << 23) + 0xfffu + ((abs >> 13) & 1u)) >> 13;
  const uint32_t out = SelectBits(MaskIf(abs >= (143u << 23)), big,
                                  SelectBits(MaskIf(abs < (113u << 23)), sub, normal));
  return static_cast<uint16_t>(out | sign);
}

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
