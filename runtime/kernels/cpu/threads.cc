// runtime/kernels/cpu/threads.cc — thread count of the shared libgomp pool, and what the
// BLAS and OpenMP runtimes say about themselves. Not thread-safe against running kernels.
#include "runtime/kernels/cpu/threads.h"

#include <cblas.h>
#include <omp.h>

namespace tessera::cpu {

int SetNumThreads(int n) {
  // 0 keeps OpenMP's own default: OMP_NUM_THREADS when set (the standard way to share a
  // machine between processes), else every core.
  static const int kDefault = omp_get_max_threads();
  if (n <= 0) n = kDefault;
  omp_set_num_threads(n);  // OpenBLAS (OpenMP flavour) follows the libgomp setting
  return n;
}

int NumThreads() { return omp_get_max_threads(); }

std::string BlasConfig() { return openblas_get_config(); }
std::string BlasCoreName() { return openblas_get_corename(); }
int OpenMpVersion() { return _OPENMP; }

}  // namespace tessera::cpu
