// runtime/kernels/cuda/cublas_api.h — the cuBLAS entry points the CUDA backend calls, resolved
// from libcublas when the first CUDA backend is made.
//
// Why not link it: libcublas brings libcublasLt, whose static initializers cost about 0.4 s of
// page faults and set-up in every process that links it — every rank, test and CLI call on a
// machine with the CUDA toolkit, GPU or not. Only a process that creates a CUDA backend needs
// cuBLAS, so only that process pays.
#pragma once

#include <cublas_v2.h>

#include "runtime/core/status.h"

namespace tessera {

// cublasGemmEx with the compute type cublasComputeType_t: the library's symbol (C++ also
// sees an inline overload taking cudaDataType, which is not in the library).
using CublasGemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                          int, int, int, const void*, const void*, cudaDataType,
                                          int, const void*, cudaDataType, int, const void*, void*,
                                          cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

// cublas_v2.h spells the current entry points as macros (cublasCreate -> cublasCreate_v2):
// decltype of the macro's name is the type of the symbol it names.
struct CublasApi {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetWorkspace) set_workspace = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
  CublasGemmExFn gemm_ex = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// The table, loaded once per process (thread-safe); or why libcublas or one of its entry
// points could not be found, naming the files tried.
Result<const CublasApi*> LoadCublas();

}  // namespace tessera
