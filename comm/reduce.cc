// comm/reduce.cc — host reductions; see reduce.h.
//
// The two 16-bit float types (bf16, f16) share one templated path: they differ only in how a
// value widens to fp32 and rounds back (HalfTraits below), so their numerics cannot drift apart.
#include "comm/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/core/check.h"

namespace tessera {
namespace {

// NaN wins, as in a max that must not hide a diverged rank.
inline float MaxF(float a, float b) { return (b > a || std::isnan(b)) ? b : a; }

// Widening and round-to-nearest-even narrowing of one 16-bit float format.
struct Bf16Traits {
  static float ToF32(uint16_t h) { return Bf16ToF32(h); }
  static uint16_t FromF32(float f) { return F32ToBf16(f); }
};
struct F16Traits {
  static float ToF32(uint16_t h) { return F16ToF32(h); }
  // Values beyond the f16 range (|x| >= 65520 after rounding) become +-inf, as IEEE rounding does.
  static uint16_t FromF32(float f) { return F32ToF16(f); }
};

bool IsHalf(DType t) { return t == DType::kBF16 || t == DType::kF16; }

// acc (op)= src widened to fp32; the first contribution is copied.
template <typename H>
void AccumulateHalf(float* acc, const uint16_t* s, int64_t n, bool first, bool max) {
  if (first) {
    for (int64_t k = 0; k < n; ++k) acc[k] = H::ToF32(s[k]);
  } else if (max) {
    for (int64_t k = 0; k < n; ++k) acc[k] = MaxF(acc[k], H::ToF32(s[k]));
  } else {
    for (int64_t k = 0; k < n; ++k) acc[k] += H::ToF32(s[k]);
  }
}

// d = round(acc / div): the single rounding of the rank-order path.
template <typename H>
void NarrowHalf(const float* acc, uint16_t* d, int64_t n, float div) {
  if (div != 1.0f) {
    for (int64_t k = 0; k < n; ++k) d[k] = H::FromF32(acc[k] / div);
  } else {
    for (int64_t k = 0; k < n; ++k) d[k] = H::FromF32(acc[k]);
  }
}

void AccumulateHalfDyn(DType t, float* acc, const uint16_t* s, int64_t n, bool first, bool max) {
  if (t == DType::kBF16) {
    AccumulateHalf<Bf16Traits>(acc, s, n, first, max);
  } else {
    AccumulateHalf<F16Traits>(acc, s, n, first, max);
  }
}

void NarrowHalfDyn(DType t, const float* acc, uint16_t* d, int64_t n, float div) {
  if (t == DType::kBF16) {
    NarrowHalf<Bf16Traits>(acc, d, n, div);
  } else {
    NarrowHalf<F16Traits>(acc, d, n, div);
  }
}

// d = round(d (op) s) element-wise: one rounding per pairwise combine (MPI's user op).
template <typename H>
void CombineHalf(uint16_t* d, const uint16_t* s, int64_t n, bool max) {
  // Two loops rather than a select per element: each vectorises on its own.
  if (max) {
    for (int64_t k = 0; k < n; ++k) d[k] = H::FromF32(MaxF(H::ToF32(d[k]), H::ToF32(s[k])));
  } else {
    for (int64_t k = 0; k < n; ++k) d[k] = H::FromF32(H::ToF32(d[k]) + H::ToF32(s[k]));
  }
}

template <typename H>
void DivideHalf(uint16_t* d, int64_t n, float div) {
  for (int64_t k = 0; k < n; ++k) d[k] = H::FromF32(H::ToF32(d[k]) / div);
}

}  // namespace

RankOrderAccumulator::RankOrderAccumulator(DType dtype, ReduceOp op, int64_t n)
    : dtype_(dtype), op_(op), n_(n) {
  TESSERA_CHECK(dtype == DType::kF32 || IsHalf(dtype) || dtype == DType::kI32);
  if (dtype == DType::kI32) {
    i_.resize(static_cast<size_t>(n));
  } else {
    f_.resize(static_cast<size_t>(n));
  }
}

void RankOrderAccumulator::Add(const void* src) {
  const bool first = count_++ == 0;
  const bool max = op_ == ReduceOp::kMax;
  if (dtype_ == DType::kI32) {
    const int32_t* s = static_cast<const int32_t*>(src);
    if (first) {
      std::memcpy(i_.data(), s, static_cast<size_t>(n_) * 4);
    } else if (max) {
      for (int64_t k = 0; k < n_; ++k) i_[k] = s[k] > i_[k] ? s[k] : i_[k];
    } else {
      // Unsigned add: wraps like the MPI backends instead of being UB on overflow.
      for (int64_t k = 0; k < n_; ++k) {
        i_[k] = static_cast<int32_t>(static_cast<uint32_t>(i_[k]) + static_cast<uint32_t>(s[k]));
      }
    }
  } else if (dtype_ == DType::kF32) {
    const float* s = static_cast<const float*>(src);
    if (first) {
      std::memcpy(f_.data(), s, static_cast<size_t>(n_) * 4);
    } else if (max) {
      for (int64_t k = 0; k < n_; ++k) f_[k] = MaxF(f_[k], s[k]);
    } else {
      for (int64_t k = 0; k < n_; ++k) f_[k] += s[k];
    }
  } else {
    AccumulateHalfDyn(dtype_, f_.data(), static_cast<const uint16_t*>(src), n_, first, max);
  }
}

void RankOrderAccumulator::Finish(void* dst) const {
  TESSERA_CHECK(count_ > 0);
  const bool avg = op_ == ReduceOp::kAvg;
  const float div = avg ? static_cast<float>(count_) : 1.0f;
  if (dtype_ == DType::kI32) {
    std::memcpy(dst, i_.data(), static_cast<size_t>(n_) * 4);
  } else if (dtype_ == DType::kF32) {
    float* d = static_cast<float*>(dst);
    for (int64_t k = 0; k < n_; ++k) d[k] = avg ? f_[k] / div : f_[k];
  } else {
    NarrowHalfDyn(dtype_, f_.data(), static_cast<uint16_t*>(dst), n_, div);
  }
}

void ReduceRows(DType dtype, ReduceOp op, const void* const* rows, int nrows, void* dst,
                int64_t n) {
  TESSERA_CHECK(nrows >= 1);
  constexpr int64_t kTile = 2048;  // 8 KiB of accumulators: stays in L1
  const bool max = op == ReduceOp::kMax;
  const float div = op == ReduceOp::kAvg ? static_cast<float>(nrows) : 1.0f;
  if (dtype == DType::kI32) {
    // Sum/max are exact in i32 (wrapping), so the order cannot matter: one pass per row.
    int32_t acc[kTile];
    for (int64_t b = 0; b < n; b += kTile) {
      const int64_t len = std::min(kTile, n - b);
      std::memcpy(acc, static_cast<const int32_t*>(rows[0]) + b, static_cast<size_t>(len) * 4);
      for (int r = 1; r < nrows; ++r) CombineInPlace(dtype, op, acc, static_cast<const int32_t*>(rows[r]) + b, len);
      std::memcpy(static_cast<int32_t*>(dst) + b, acc, static_cast<size_t>(len) * 4);
    }
    return;
  }
  float acc[kTile];
  for (int64_t b = 0; b < n; b += kTile) {
    const int64_t len = std::min(kTile, n - b);
    if (dtype == DType::kF32) {
      const float* r0 = static_cast<const float*>(rows[0]) + b;
      for (int64_t k = 0; k < len; ++k) acc[k] = r0[k];
      for (int r = 1; r < nrows; ++r) {
        const float* s = static_cast<const float*>(rows[r]) + b;
        if (max) {
          for (int64_t k = 0; k < len; ++k) acc[k] = MaxF(acc[k], s[k]);
        } else {
          for (int64_t k = 0; k < len; ++k) acc[k] += s[k];
        }
      }
      float* d = static_cast<float*>(dst) + b;
      if (div != 1.0f) {
        for (int64_t k = 0; k < len; ++k) d[k] = acc[k] / div;
      } else {
        for (int64_t k = 0; k < len; ++k) d[k] = acc[k];
      }
    } else {
      TESSERA_CHECK(IsHalf(dtype));
      for (int r = 0; r < nrows; ++r) {
        AccumulateHalfDyn(dtype, acc, static_cast<const uint16_t*>(rows[r]) + b, len,
                          /*first=*/r == 0, max);
      }
      NarrowHalfDyn(dtype, acc, static_cast<uint16_t*>(dst) + b, len, div);
    }
  }
}

void CombineInPlace(DType dtype, ReduceOp op, void* dst, const void* src, int64_t n) {
  const bool max = op == ReduceOp::kMax;
  if (dtype == DType::kF32) {
    float* d = static_cast<float*>(dst);
    const float* s = static_cast<const float*>(src);
    for (int64_t k = 0; k < n; ++k) d[k] = max ? MaxF(d[k], s[k]) : d[k] + s[k];
  } else if (dtype == DType::kBF16) {
    CombineHalf<Bf16Traits>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, max);
  } else if (dtype == DType::kF16) {
    CombineHalf<F16Traits>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, max);
  } else {
    TESSERA_CHECK(dtype == DType::kI32);
    int32_t* d = static_cast<int32_t*>(dst);
    const int32_t* s = static_cast<const int32_t*>(src);
    for (int64_t k = 0; k < n; ++k) {
      d[k] = max ? (s[k] > d[k] ? s[k] : d[k])
                 : static_cast<int32_t>(static_cast<uint32_t>(d[k]) + static_cast<uint32_t>(s[k]));
    }
  }
}

void DivideInPlace(DType dtype, void* buf, int64_t n, int divisor) {
  const float div = static_cast<float>(divisor);
  if (dtype == DType::kF32) {
    float* d = static_cast<float*>(buf);
    for (int64_t k = 0; k < n; ++k) d[k] /= div;
  } else if (dtype == DType::kBF16) {
    DivideHalf<Bf16Traits>(static_cast<uint16_t*>(buf), n, div);
  } else {
    TESSERA_CHECK(dtype == DType::kF16);
    DivideHalf<F16Traits>(static_cast<uint16_t*>(buf), n, div);
  }
}

}  // namespace tessera
