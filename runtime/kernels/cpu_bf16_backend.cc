// runtime/kernels/cpu_bf16_backend.cc — bf16 Linear layers on the CPU (cpu_bf16_backend.h).
#include "runtime/kernels/cpu_bf16_backend.h"

#include <algorithm>

#include "runtime/kernels/cpu/bf16_gemm.h"
#include "runtime/kernels/cpu/convert.h"

namespace tessera {

const uint16_t* CpuBf16Backend::Narrow(int slot, const float* x, int64_t n) {
  if (x == nullptr) return nullptr;
  std::vector<uint16_t>& s = scratch_[slot];
  if (static_cast<int64_t>(s.size()) < n) s.resize(static_cast<size_t>(n));
  cpu::ConvertFromF32(DType::kBF16, x, s.data(), n);
  return s.data();
}

void CpuBf16Backend::LinearForward(float* out, const float* inp, const float* weight,
                                   const float* bias, int64_t N, int64_t C, int64_t OC) {
  cpu::LinearForwardBf16(out, Narrow(0, inp, N * C), Narrow(1, weight, OC * C), bias, N, C, OC);
}

void CpuBf16Backend::LinearBackward(float* d_inp, float* d_weight, float* d_bias,
                                    const float* d_out, const float* inp, const float* weight,
                                    int64_t N, int64_t C, int64_t OC) {
  // Each operand is narrowed only when a product reads it.
  const uint16_t* g = Narrow(0, d_out, N * OC);
  const uint16_t* a = d_weight != nullptr ? Narrow(1, inp, N * C) : nullptr;
  const uint16_t* w = d_inp != nullptr ? Narrow(2, weight, OC * C) : nullptr;
  cpu::LinearBackwardBf16(d_inp, d_weight, d_bias, g, a, w, N, C, OC);
}

double CpuBf16Backend::ClassifierForwardBackward(float* losses, float* d_x, float* d_weight,
                                                 const float* x, const float* weight,
                                                 const int32_t* targets, int64_t N, int64_t C,
                                                 int64_t V, float loss_scale,
                                                 float* logits_scratch, int64_t chunk_rows) {
  const uint16_t* xb = Narrow(0, x, N * C);
  const uint16_t* wb = Narrow(1, weight, V * C);
  std::vector<uint16_t>& d_logits = scratch_[2];
  const int64_t n = d_x != nullptr ? std::min(chunk_rows, N) * V : 0;
  if (static_cast<int64_t>(d_logits.size()) < n) d_logits.resize(static_cast<size_t>(n));
  return cpu::ClassifierForwardBackwardBf16(losses, d_x, d_weight, xb, wb, targets, N, C, V,
                                            loss_scale, logits_scratch, d_logits.data(),
                                            chunk_rows);
}

ComputeBackendChoice ChooseComputeBackend(DType activation_dtype) {
  if (activation_dtype == DType::kF32) return {std::make_unique<CpuBackend>(), "cpu-fp32"};
  const std::string storage = std::string(DTypeName(activation_dtype)) + " storage, ";
  if (activation_dtype != DType::kBF16) {
    return {std::make_unique<CpuBackend>(), "cpu-fp32: " + storage + "fp32 compute"};
  }
  const cpu::Bf16GemmChoice gemm = cpu::ActiveBf16GemmPath();
  if (gemm.path == cpu::Bf16GemmPath::kOneDnn) {
    return {std::make_unique<CpuBf16Backend>(),
            "cpu-bf16: " + storage + "bf16 GEMMs (" + gemm.description + ")"};
  }
  return {std::make_unique<CpuBackend>(),
          "cpu-fp32: " + storage + "fp32 compute (" + gemm.description + ")"};
}

}  // namespace tessera
