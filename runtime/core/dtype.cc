// runtime/core/dtype.cc — dtype names and sizes (the conversions are inline in dtype.h).
#include "runtime/core/dtype.h"

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

}  // namespace tessera
