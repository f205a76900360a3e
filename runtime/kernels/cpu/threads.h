// runtime/kernels/cpu/threads.h — one thread pool for OpenBLAS and our OpenMP loops.
// OpenBLAS is linked in its OpenMP flavour, so both share libgomp's pool; setting the count
// here sets it for both. Call before any kernel; not thread-safe against running kernels.
#pragma once

#include <string>

namespace tessera::cpu {

// n <= 0 means OpenMP's default (OMP_NUM_THREADS if set, else all cores). Returns the
// number in effect.
int SetNumThreads(int n);
int NumThreads();

// For the environment fingerprint: OpenBLAS's build configuration and the kernel core it
// selected at run time, and the OpenMP version (yyyymm) the kernels were compiled against.
std::string BlasConfig();
std::string BlasCoreName();
int OpenMpVersion();

}  // namespace tessera::cpu
