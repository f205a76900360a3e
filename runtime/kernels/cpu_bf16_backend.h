// runtime/kernels/cpu_bf16_backend.h — the CPU backend whose Linear layers multiply in bf16
// with fp32 accumulation (cpu/bf16_gemm.h: oneDNN, AMX-BF16 or AVX512-BF16 where the CPU has
// them), and so does the LM head; every other op is the fp32 reference's (cpu_backend.h).
//
// What a bf16 GEMM reads: the layer's input and weight, and in backward the output gradient,
// narrowed to bf16 (round to nearest even) into this backend's scratch. Under `precision:
// bf16` the inputs and weights already hold bf16 values (activation_store.h, the parameter
// shards' bf16 copy), so narrowing them is exact; the output gradient is rounded, as a bf16
// autocast rounds it. Products accumulate in fp32; outputs and gradients are fp32 (the model
// rounds and stores activations itself). Norms, softmax, attention, the loss and the
// optimizer stay fp32.
//
// Results differ from the fp32 reference within the bf16 GEMM bounds (bf16_gemm.h) and the
// rounding of the output gradient; they are deterministic for a given path and thread count.
// The trainer picks this backend for bf16 runs where the bf16 GEMM path is oneDNN
// (ChooseComputeBackend); on the fp32-compute path it would only add conversions, so bf16 runs
// there use the fp32 backend on bf16 storage. Tests force either path (SetBf16GemmPath).
// Thread-safety: one thread drives a backend (backend.h); the scratch is per backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/kernels/backend.h"
#include "runtime/kernels/cpu_backend.h"

namespace tessera {

class CpuBf16Backend final : public CpuBackend {
 public:
  const char* name() const override { return "cpu-bf16"; }
  void LinearForward(float* out, const float* inp, const float* weight, const float* bias,
                     int64_t N, int64_t C, int64_t OC) override;
  void LinearBackward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                      const float* inp, const float* weight, int64_t N, int64_t C,
                      int64_t OC) override;
  // The LM head's products in bf16 (cpu::ClassifierForwardBackwardBf16): x and the head
  // weight narrowed, each chunk's d_logits rounded. (The vocab-parallel head under tp keeps
  // the fp32 reference's.)
  double ClassifierForwardBackward(float* losses, float* d_x, float* d_weight, const float* x,
                                   const float* weight, const int32_t* targets, int64_t N,
                                   int64_t C, int64_t V, float loss_scale,
                                   float* logits_scratch, int64_t chunk_rows) override;

 private:
  // x(n) as bf16 in scratch slot `slot` (grown as needed); null for a null x.
  const uint16_t* Narrow(int slot, const float* x, int64_t n);

  std::vector<uint16_t> scratch_[3];
};

// The backend of a run in `activation_dtype`, and its banner line: CpuBf16Backend for bf16
// where bf16 GEMMs run on oneDNN, else the fp32 backend (with, for bf16 / fp16, the reason
// GEMMs compute in fp32), e.g.
//   "cpu-bf16: bf16 storage, bf16 GEMMs (bf16 GEMM: oneDNN AMX-BF16 (brg:avx512_core_amx))"
//   "cpu-fp32: bf16 storage, fp32 compute (bf16 GEMM: fp32 compute (no bf16 instructions))"
struct ComputeBackendChoice {
  std::unique_ptr<Backend> backend;
  std::string description;
};
ComputeBackendChoice ChooseComputeBackend(DType activation_dtype);

}  // namespace tessera
