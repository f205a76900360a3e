// runtime/kernels/cpu/thread_count.h — how many pool threads this process should run, and why.
//
// Owns the rule, as a pure function over its inputs (ChooseThreads), and the one place that
// reads those inputs from the process (ThreadInputsFromEnvironment). Nothing here touches the
// pool: threads.h applies the count. Order of precedence, first that applies:
//   1. train.threads > 0 (the config, or --set): the user chose;
//   2. OMP_NUM_THREADS (its first value, when it is a positive integer): the standard way to
//      share a machine between processes, honoured as OpenMP itself would;
//   3. under a launcher that says how many ranks share this host (Open MPI's
//      OMPI_COMM_WORLD_LOCAL_SIZE > 1): the host's cores divided by those ranks, at least 1 —
//      as torchrun defaults to one thread per process — and no more than the cores the rank
//      is bound to (mpirun binds each rank to a core when they do not outnumber the cores, and
//      binds nothing when oversubscribed). Without it, N ranks on C cores would each spin C
//      threads: 4 ranks of configs/tiny.yaml on 2 cores took 220 s for what one rank trains
//      in 6 s;
//   4. every core this process may run on (its affinity mask, as OpenMP's own default).
// The result is never below 1. Thread-safety: ChooseThreads is pure; the environment reader
// only reads (getenv, sched_getaffinity).
#pragma once

#include <optional>
#include <string>

namespace tessera::cpu {

struct ThreadInputs {
  int cores = 1;        // CPUs this process may run on (its affinity mask), >= 1
  int host_cores = 0;   // CPUs online on this host; values below `cores` read as `cores`
  int local_ranks = 1;  // ranks of the job on this host (OMPI_COMM_WORLD_LOCAL_SIZE), 1 if unknown
  std::optional<std::string> omp_num_threads;  // OMP_NUM_THREADS as set, unset = nullopt
  int config_threads = 0;                      // train.threads; 0 = choose
};

struct ThreadChoice {
  int count = 1;       // pool threads, >= 1
  bool per_rank = false;  // several ranks share this host (the banner says "per rank")
  std::string reason;  // where the count came from, e.g. "2 cores / 2 ranks on this host"

  // For the banner: "1 per rank (2 cores / 2 ranks on this host)", "2 (all 2 cores)".
  std::string Describe() const;
};

ThreadChoice ChooseThreads(const ThreadInputs& in);

// The inputs of this process: its affinity mask's CPU count, the host's online CPUs,
// OMPI_COMM_WORLD_LOCAL_SIZE and
// OMP_NUM_THREADS from the environment, and `config_threads` as given.
ThreadInputs ThreadInputsFromEnvironment(int config_threads);

}  // namespace tessera::cpu
