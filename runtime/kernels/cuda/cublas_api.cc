// runtime/kernels/cuda/cublas_api.cc — LoadCublas (cublas_api.h): dlopen of libcublas by its
// soname (so LD_LIBRARY_PATH and the executable's run path decide, as for a linked library),
// then by the path the build found it at.
#include "runtime/kernels/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>

namespace tessera {
namespace {

#define TESSERA_CUBLAS_STR2(x) #x
#define TESSERA_CUBLAS_STR(x) TESSERA_CUBLAS_STR2(x)  // expands the macro first: "cublasCreate_v2"

Result<void*> OpenLibrary() {
  std::string tried;
  for (const char* name : {TESSERA_CUBLAS_SONAME, TESSERA_CUBLAS_PATH}) {
    if (*name == '\0') continue;  // no file found at configure time: dlopen("") is the program
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
    const char* why = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (why != nullptr ? why : name);
  }
  return NotFound("cuBLAS could not be loaded (" + tried +
                  "): install the CUDA toolkit's libcublas, or add its folder to LD_LIBRARY_PATH");
}

template <typename Fn>
Status Resolve(void* lib, const char* symbol, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (out == nullptr) {
    return NotFound(std::string("cuBLAS has no entry point ") + symbol + " (built against " +
                    TESSERA_CUBLAS_SONAME + "; is an older libcublas first on the library path?)");
  }
  return Status::Ok();
}

Result<CublasApi> Load() {
  ASSIGN_OR_RETURN(void* lib, OpenLibrary());  // kept open for the process's life
  CublasApi api;
#define TESSERA_CUBLAS_RESOLVE(field, fn) \
  RETURN_IF_ERROR(Resolve(lib, TESSERA_CUBLAS_STR(fn), api.field))
  TESSERA_CUBLAS_RESOLVE(create, cublasCreate);
  TESSERA_CUBLAS_RESOLVE(destroy, cublasDestroy);
  TESSERA_CUBLAS_RESOLVE(set_workspace, cublasSetWorkspace);
  TESSERA_CUBLAS_RESOLVE(set_math_mode, cublasSetMathMode);
  TESSERA_CUBLAS_RESOLVE(set_stream, cublasSetStream);
  TESSERA_CUBLAS_RESOLVE(sgemm, cublasSgemm);
  TESSERA_CUBLAS_RESOLVE(gemm_ex, cublasGemmEx);
  TESSERA_CUBLAS_RESOLVE(status_string, cublasGetStatusString);
#undef TESSERA_CUBLAS_RESOLVE
  return api;
}

}  // namespace

Result<const CublasApi*> LoadCublas() {
  static const Result<CublasApi> loaded = Load();
  if (!loaded.ok()) return loaded.status();
  return &*loaded;
}

}  // namespace tessera
