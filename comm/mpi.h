// comm/mpi.h — the MPI backend's entry points: the launcher's environment, process-wide MPI setup,
// the world communicator, and ending the whole job after a communication failure.
//
// Owns: MPI_Init_thread / MPI_Finalize (MpiSession, at most one per process) and AbortJob.
// MpiCommunicator itself lives in mpi_communicator.cc: each one owns a duplicated MPI_Comm and a
// progress thread that issues its non-blocking MPI calls in order and polls them with MPI_Test
// (yielding between polls while someone waits, backing off to short sleeps when nobody does),
// so Work::Wait is a bounded condition-variable wait and overlapping compute gets progress.
// A binary linking this runs without mpirun as a singleton (world size 1).
// Buffers: host memory only (Debian's Open MPI is not CUDA-aware).
// Thread-safety: MpiSession methods from the main thread; communicators per communicator.h.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "runtime/core/status.h"

namespace tessera {

// What the launcher (mpirun/mpiexec) told this process through its environment: the only way
// to know the job's rank and size before MPI_Init (a layout check or a usage error must not
// wait for it). Open MPI sets OMPI_COMM_WORLD_{RANK,SIZE}; PMI/PMIx launchers set PMI_RANK or
// PMIX_RANK and PMI_SIZE; srun --mpi=pmix sets PMIX_RANK and SLURM_STEP_NUM_TASKS. Values
// that are not non-negative integers read as the defaults.
struct LauncherEnv {
  bool under_launcher = false;  // OMPI_COMM_WORLD_SIZE or PMI_SIZE is set, or srun's pair
  int rank = 0;                 // first of OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK; else 0
  int size = 1;                 // OMPI_COMM_WORLD_SIZE, else PMI_SIZE, else srun's; else 1
};
LauncherEnv ReadLauncherEnv();

// The MPI library's own name and version (MPI_Get_library_version's first line, e.g. "Open MPI
// v4.1.4, package: Debian OpenMPI, ..."); callable before MPI_Init.
std::string MpiLibraryVersion();

class MpiSession {
 public:
  // Initialises MPI with MPI_THREAD_MULTIPLE. Before that, defaults two Open MPI settings if the
  // environment leaves them unset: mpi_yield_when_idle=1 (oversubscribed ranks must yield, else
  // every collective costs 25-55 ms on a 2-core machine) and, without mpirun,
  // ess_singleton_isolated=1 (no helper daemon). FailedPrecondition if MPI was already
  // finalised or lacks thread support.
  static Result<std::unique_ptr<MpiSession>> Init(int* argc, char*** argv);
  // MPI_Finalize. Destroy every communicator first.
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // A communicator over all ranks (a duplicate of MPI_COMM_WORLD). Sub-groups: Split.
  Result<std::unique_ptr<Communicator>> World(const CommOptions& options) const;

 private:
  MpiSession(int rank, int size) : world_rank_(rank), world_size_(size) {}
  int world_rank_;
  int world_size_;
};

// Prints "tessera: rank R: fatal: <message>" on stderr and ends every rank of the job with
// ExitCodeFor(status) (kExitCommTimeout for a kTimeout) through MPI_Abort, which makes mpirun
// exit with that code. Without MPI initialised it just exits the process with that code. The
// way out after a failed Wait: MPI cannot cancel a collective, so the process cannot go on.
[[noreturn]] void AbortJob(const Status& status);
// The same with an explicit exit code (a caller that knows the phase decides it).
[[noreturn]] void AbortJob(const Status& status, int exit_code);

}  // namespace tessera
