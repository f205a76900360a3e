// runtime/kernels/cpu/threads.cc — thread count and floating-point mode of the shared libgomp
// pool, and what the BLAS and OpenMP runtimes say about themselves. Not thread-safe against
// running kernels.
#include "runtime/kernels/cpu/threads.h"

#include <cblas.h>
#include <omp.h>

#include <atomic>

#include "runtime/core/float_mode.h"

namespace tessera::cpu {
namespace {

// The mode SetNumThreads gives the threads it configures (see SetFlushSubnormals).
std::atomic<bool> g_flush_subnormals{true};

// Sets `on` on the calling thread and on every thread of a team of NumThreads(): with
// dynamic teams off (libgomp's default) that team is exactly the pool the kernels and
// OpenBLAS use, each pool thread running one iteration of the region.
void ApplyModeToPool(bool on) {
  tessera::SetFlushSubnormals(on);
#pragma omp parallel num_threads(omp_get_max_threads())
  tessera::SetFlushSubnormals(on);
}

}  // namespace

int SetNumThreads(int n) {
  // 0 keeps OpenMP's own default: OMP_NUM_THREADS when set (the standard way to share a
  // machine between processes), else every core.
  static const int kDefault = omp_get_max_threads();
  if (n <= 0) n = kDefault;
  omp_set_num_threads(n);  // OpenBLAS (OpenMP flavour) follows the libgomp setting
  ApplyModeToPool(g_flush_subnormals.load());
  return n;
}

ThreadChoice SetThreadsForConfig(int config_threads) {
  ThreadChoice choice = ChooseThreads(ThreadInputsFromEnvironment(config_threads));
  choice.count = SetNumThreads(choice.count);
  return choice;
}

int NumThreads() { return omp_get_max_threads(); }

void SetFlushSubnormals(bool on) {
  g_flush_subnormals.store(on);
  ApplyModeToPool(on);
}

bool PoolFlushesSubnormals() {
  bool all = tessera::FlushesSubnormals();
#pragma omp parallel num_threads(omp_get_max_threads()) reduction(&& : all)
  all = all && tessera::FlushesSubnormals();
  return all;
}

std::string BlasConfig() { return openblas_get_config(); }
std::string BlasCoreName() { return openblas_get_corename(); }
int OpenMpVersion() { return _OPENMP; }

}  // namespace tessera::cpu
