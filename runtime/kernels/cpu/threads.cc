// runtime/kernels/cpu/threads.cc
#include "runtime/kernels/cpu/threads.h"

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

}  // namespace tessera::cpu
