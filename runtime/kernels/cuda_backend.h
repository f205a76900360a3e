// runtime/kernels/cuda_backend.h — the CUDA compute backend (backend.h) on one NVIDIA GPU, and
// how a caller finds out whether it can have one. This header names no CUDA type, so callers
// (the trainer, `tessera env`, `tessera bench`) build the same on a machine without the
// toolkit; there the factory answers FailedPrecondition (cuda_unavailable.cc).
//
// The backend (runtime/kernels/cuda/cuda_backend.cc):
//  - memory: arenas in device memory (cudaMalloc, zero-filled), reported by kind to the
//    caller's tracker like host arenas; ops take device pointers, except where backend.h
//    says host memory (the MoE routing bias and auxiliary-loss coefficients, which this
//    backend uploads; MoE plan offsets and counts and balance statistics; the classifier's
//    `combine` values, which it stages through host memory).
//  - ordering: its own non-blocking stream is the default stream; Record / Wait / Synchronize
//    are CUDA events. An Event stays valid for the next kEventRing - 1 Records.
//  - GEMMs: cuBLAS in fp32 (no TF32), or with gemm_dtype kBF16 the Linear layers and the LM
//    head multiply bf16 operands with fp32 accumulation (cublasGemmEx), as CpuBf16Backend does.
//  - every other op: its own kernels (runtime/kernels/cuda/launch.h), deterministic (no atomics),
//    within the tolerances tests/kernels/cuda_backend_test.cc states of the CPU reference.
//    The MoE dispatch plan and balance statistics run on the host through the CPU kernels
//    (their outputs are host memory by contract, and they are R * k integers).
// Thread-safety: one thread drives a backend (backend.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/core/status.h"
#include "runtime/kernels/backend.h"

namespace tessera {

struct CudaBackendOptions {
  int device = 0;                       // the CUDA device ordinal
  DType gemm_dtype = DType::kF32;       // kF32 | kBF16 (Linear layers and the LM head)
};

struct CudaDeviceInfo {
  std::string name;                     // "NVIDIA H200"
  int ordinal = 0;
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  int64_t memory_bytes = 0;
  int driver_version = 0, runtime_version = 0;  // as 13000 for 13.0
};

// Whether this build has the CUDA backend (TESSERA_CUDA at configure time).
bool CudaBackendBuilt();
// OK when the backend is built and a GPU is usable; else FailedPrecondition with the reason
// (not built; no driver; no device), which GPU tests print when they skip.
Status CudaAvailable();
Result<CudaDeviceInfo> CudaDevice(int ordinal);
int CudaDeviceCount();  // 0 where CudaAvailable() is not OK
// OK when cuBLAS can be loaded (it is loaded when the first backend is made, not linked: its
// start-up cost would fall on every process); needs no GPU. Else why not, naming the files.
Status CublasLoadable();
// A backend on options.device (made current on the calling thread).
Result<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options);

}  // namespace tessera
