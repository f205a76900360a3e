// comm/nccl.h — the NCCL backend's entry point (device buffers, bootstrapped through MPI).
//
// Owns: creating a Communicator whose ops run on its own CUDA stream on the current device.
// The NCCL unique id is made on rank 0 and broadcast over MPI, so an MpiSession must exist.
// Compiled in only where the CUDA toolkit and NCCL were found at configure time (TESSERA_NCCL);
// elsewhere these functions report that the backend is absent.
// Limits: ReduceOrder::kRankOrder is not supported (FailedPrecondition); i32 avg as everywhere.
// Thread-safety: per communicator.h.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/mpi.h"

namespace tessera {

// Whether this build contains the NCCL backend.
bool NcclBackendBuilt();
// "NCCL 2.21.5, CUDA runtime 13.0" where built (versions of the libraries loaded), "not built".
std::string NcclVersionString();
// OK if the backend is built and at least one GPU is usable; else why not.
Status NcclAvailable();
// A communicator over all MPI world ranks on CUDA device `device` (one rank per device).
Result<std::unique_ptr<Communicator>> NcclWorld(const MpiSession& mpi, const CommOptions& options,
                                                int device);

}  // namespace tessera
