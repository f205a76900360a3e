// runtime/kernels/cpu/threads.cc
#include "runtime/kernels/cpu/threads.h"

#include <omp.h>

namespace tessera::cpu {

int SetNumThreads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);  // OpenBLAS (OpenMP flavour) follows the libgomp setting
  return n;
}

int NumThreads() { return omp_get_max_threads(); }

}  // namespace tessera::cpu
