// comm/nccl_unavailable.cc — the NCCL entry points of a build without CUDA/NCCL: they say so.
#include "comm/nccl.h"

namespace tessera {

bool NcclBackendBuilt() { return false; }

std::string NcclVersionString() { return "not built"; }

Status NcclAvailable() {
  return FailedPrecondition("this build has no NCCL backend (CUDA toolkit or NCCL not found, "
                            "or TESSERA_NCCL=OFF)");
}

Result<std::unique_ptr<Communicator>> NcclWorld(const MpiSession&, const CommOptions&, int) {
  return NcclAvailable();
}

}  // namespace tessera
