// runtime/kernels/cuda_unavailable.cc — the CUDA backend's entry points in a build without it
// (no nvcc at configure time, or TESSERA_CUDA=OFF): they say so.
#include "runtime/kernels/cuda_backend.h"

namespace tessera {

bool CudaBackendBuilt() { return false; }

Status CudaAvailable() {
  return FailedPrecondition("this build has no CUDA backend (nvcc not found at configure time, "
                            "or TESSERA_CUDA=OFF)");
}

Result<CudaDeviceInfo> CudaDevice(int) { return CudaAvailable(); }

int CudaDeviceCount() { return 0; }

Status CublasLoadable() { return CudaAvailable(); }

Result<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions&) {
  return CudaAvailable();
}

}  // namespace tessera
