// runtime/core/dtype.cc — dtype names and sizes (the conversions are inline in dtype.h).
#include "runtime/core/dtype.h"

#include <algorithm>
#include <cstring>

namespace tessera {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
  }
  return 0;
}

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
  }
  return "?";
}

bool ParseDType(std::string_view n, DType* out) {
  if (n == "f32" || n == "F32") { *out = DType::kF32; return true; }
  if (n == "bf16" || n == "BF16") { *out = DType::kBF16; return true; }
  if (n == "f16" || n == "F16") { *out = DType::kF16; return true; }
  if (n == "i32" || n == "I32") { *out = DType::kI32; return true; }
  return false;
}

namespace {

// Scans `n` words of type W for one whose exponent field (mask `exp`) is all ones: NaN or Inf.
// Blocks of 256 are OR-reduced without branches (they vectorise), and only a block that holds
// one is searched element by element.
template <typename W>
int64_t FirstAllOnesExponent(const void* data, int64_t n, W exp) {
  constexpr int64_t kBlock = 256;
  for (int64_t base = 0; base < n; base += kBlock) {
    const int64_t len = std::min(kBlock, n - base);
    W words[kBlock];
    std::memcpy(words, static_cast<const char*>(data) + base * sizeof(W),
                static_cast<size_t>(len) * sizeof(W));
    bool any = false;
    for (int64_t i = 0; i < len; ++i) any |= (words[i] & exp) == exp;
    if (!any) continue;
    for (int64_t i = 0; i < len; ++i) {
      if ((words[i] & exp) == exp) return base + i;
    }
  }
  return -1;
}

}  // namespace

int64_t FirstNonFinite(const void* data, int64_t n, DType t) {
  switch (t) {
    case DType::kF32: return FirstAllOnesExponent<uint32_t>(data, n, 0x7f800000u);
    case DType::kBF16: return FirstAllOnesExponent<uint16_t>(data, n, 0x7f80u);
    case DType::kF16: return FirstAllOnesExponent<uint16_t>(data, n, 0x7c00u);
    case DType::kI32: return -1;
  }
  return -1;
}

}  // namespace tessera
