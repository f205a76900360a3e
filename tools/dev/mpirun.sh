#!/usr/bin/env bash
# tools/dev/mpirun.sh -np N PROGRAM ARGS...: mpirun with this machine's flags (PLATFORM.md).
# Root-friendly, oversubscribed (more ranks than cores), ranks yield while waiting (without it
# a collective costs 25-55 ms on 2 cores), one BLAS/OpenMP thread per rank, shared-memory
# transport, and MPI_Abort / a dead rank ends the job at once (sigkill_timeout 0).
# Caller's environment wins for every variable it already sets.
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec mpirun --mca pml ob1 --mca btl self,vader --mca odls_base_sigkill_timeout 0 "$@"
