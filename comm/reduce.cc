// comm/reduce.cc — host reductions; see reduce.h.
#include "comm/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/core/check.h"

namespace tessera {
namespace {

// NaN wins, as in a max that must not hide a diverged rank.
inline float MaxF(float a, float b) { return (b > a || std::isnan(b)) ? b : a; }

}  // namespace

RankOrderAccumulator::RankOrderAccumulator(DType dtype, ReduceOp op, int64_t n)
    : dtype_(dtype), op_(op), n_(n) {
  TESSERA_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kI32);
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
    const uint16_t* s = static_cast<const uint16_t*>(src);
    if (first) {
      for (int64_t k = 0; k < n_; ++k) f_[k] = Bf16ToF32(s[k]);
    } else if (max) {
      for (int64_t k = 0; k < n_; ++k) f_[k] = MaxF(f_[k], Bf16ToF32(s[k]));
    } else {
      for (int64_t k = 0; k < n_; ++k) f_[k] += Bf16ToF32(s[k]);
    }
  }
}

void RankOrderAccumulator::Finish(void* dst) const {
  TESSERA_CHECK(count_ > 0);
  const bool avg = op_ == ReduceOp::kAvg;
  const float div = static_cast<float>(count_);
  if (dtype_ == DType::kI32) {
    std::memcpy(dst, i_.data(), static_cast<size_t>(n_) * 4);
  } else if (dtype_ == DType::kF32) {
    float* d = static_cast<float*>(dst);
    for (int64_t k = 0; k < n_; ++k) d[k] = avg ? f_[k] / div : f_[k];
  } else {
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t k = 0; k < n_; ++k) d[k] = F32ToBf16(avg ? f_[k] / div : f_[k]);
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
      TESSERA_CHECK(dtype == DType::kBF16);
      const uint16_t* r0 = static_cast<const uint16_t*>(rows[0]) + b;
      for (int64_t k = 0; k < len; ++k) acc[k] = Bf16ToF32(r0[k]);
      for (int r = 1; r < nrows; ++r) {
        const uint16_t* s = static_cast<const uint16_t*>(rows[r]) + b;
        if (max) {
          for (int64_t k = 0; k < len; ++k) acc[k] = MaxF(acc[k], Bf16ToF32(s[k]));
        } else {
          for (int64_t k = 0; k < len; ++k) acc[k] += Bf16ToF32(s[k]);
        }
      }
      uint16_t* d = static_cast<uint16_t*>(dst) + b;
      for (int64_t k = 0; k < len; ++k) d[k] = F32ToBf16(div != 1.0f ? acc[k] / div : acc[k]);
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
    uint16_t* d = static_cast<uint16_t*>(dst);
    const uint16_t* s = static_cast<const uint16_t*>(src);
    for (int64_t k = 0; k < n; ++k) {
      float a = Bf16ToF32(d[k]), b = Bf16ToF32(s[k]);
      d[k] = F32ToBf16(max ? MaxF(a, b) : a + b);
    }
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
  } else {
    TESSERA_CHECK(dtype == DType::kBF16);
    uint16_t* d = static_cast<uint16_t*>(buf);
    for (int64_t k = 0; k < n; ++k) d[k] = F32ToBf16(Bf16ToF32(d[k]) / div);
  }
}

}  // namespace tessera
