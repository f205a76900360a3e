// runtime/kernels/cpu/threads.h — one thread pool for OpenBLAS and our OpenMP loops, and the
// floating-point mode its threads compute in.
// OpenBLAS is linked in its OpenMP flavour, so both share libgomp's pool; setting the count
// here sets it for both. Call before any kernel, from the thread that will call the kernels
// (libgomp gives each calling thread its own pool); not thread-safe against running kernels.
//
// Subnormals: the kernels compute with subnormal floats flushed to zero (runtime/core/
// float_mode.h: results below FLT_MIN become 0, such inputs read as 0), on the calling thread
// and on every pool thread, because a diverging run otherwise fills sgemm operands with them
// and, on cores that take a microcode assist per such instruction, slows to a crawl. Normal
// training never meets one, so its bits are unchanged. SetNumThreads puts every thread it
// configures in the pool's mode, so a thread the pool adds later computes like the others.
#pragma once

#include <string>

#include "runtime/kernels/cpu/thread_count.h"

namespace tessera::cpu {

// n <= 0 means OpenMP's default (OMP_NUM_THREADS if set, else all cores). Also sets the pool's
// floating-point mode (flush subnormals unless SetFlushSubnormals(false) chose otherwise) on
// the calling thread and on each of the n pool threads. Returns the number in effect.
int SetNumThreads(int n);
int NumThreads();

// The count this process should run with (thread_count.h: train.threads, else OMP_NUM_THREADS,
// else the cores divided by the ranks on this host, else every core), applied through
// SetNumThreads. Returns the choice, so that the banner can say where the number came from.
ThreadChoice SetThreadsForConfig(int config_threads);

// The pool's mode, applied now to the calling thread and every pool thread, and by every later
// SetNumThreads. true (the default) flushes subnormals; false restores IEEE gradual underflow,
// for benchmarks and tests that compare the two. Not thread-safe against running kernels.
void SetFlushSubnormals(bool on);
// True when the calling thread and each of the NumThreads() pool threads flush subnormals.
bool PoolFlushesSubnormals();

// For the environment fingerprint: OpenBLAS's build configuration and the kernel core it
// selected at run time, and the OpenMP version (yyyymm) the kernels were compiled against.
std::string BlasConfig();
std::string BlasCoreName();
int OpenMpVersion();

}  // namespace tessera::cpu
