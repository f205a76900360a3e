// runtime/kernels/cuda/cuda_check.h — what the CUDA backend does with a CUDA or cuBLAS error:
// a CHECK failure naming the call, the file and line, and the error's own text. An error
// there is a bug or a lost device, which no caller can recover from in the step it is in
// (the supervisor restarts the job from its last checkpoint), so there is no Status to pass.
#pragma once

#include <cuda_runtime.h>

#include "runtime/core/check.h"

#define CUDA_CHECK(call)                                                               \
  do {                                                                                 \
    const cudaError_t tessera_cuda_err_ = (call);                                      \
    TESSERA_CHECK_MSG(tessera_cuda_err_ == cudaSuccess, "%s failed: %s (%s)", #call,   \
                      cudaGetErrorName(tessera_cuda_err_),                             \
                      cudaGetErrorString(tessera_cuda_err_));                          \
  } while (0)

// After a <<<...>>> launch: a bad configuration surfaces here, not at the next sync.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
