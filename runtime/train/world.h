// runtime/train/world.h — the ranks a training job runs on: MPI setup when the job needs it,
// the world-size check, and the process groups of the device mesh.
//
// Owns: the MpiSession (when MPI is used), the world communicator and the ProcessGroups.
// MPI is initialised only when the job is launched by mpirun (comm/mpi.h ReadLauncherEnv) or
// the config asks for more than one rank; a plain `tessera train` never touches MPI, so it
// starts as fast as before. The world-size check uses the launcher's variables, which every
// rank sees before MPI_Init, so a layout that does not fit fails on every rank before any work
// (and before MPI_Init: no rank can hang waiting for a peer that already gave up).
// Thread-safety: create and destroy on the main thread; communicators per comm/communicator.h.
#pragma once

#include <memory>
#include <optional>

#include "comm/communicator.h"
#include "comm/mpi.h"
#include "comm/process_groups.h"
#include "runtime/core/status.h"
#include "runtime/train/config.h"

namespace tessera {

// InvalidArgument naming both numbers when the layout's dp*tp*pp*ep differs from the number
// of ranks that were started (1 without mpirun).
Status CheckWorldSize(const Config& config, const LauncherEnv& launcher);

class World {
 public:
  // Checks the world size, then (when needed) initialises MPI, duplicates the world
  // communicator with comm.timeout_s and builds the mesh's process groups. A single-process
  // job gets a World without communicators.
  static Result<std::unique_ptr<World>> Create(const Config& config);
  ~World();  // groups and communicators first, then MPI_Finalize

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  bool uses_mpi() const { return session_ != nullptr; }
  // The group that reduces dense gradients and partitions ZeRO state (dp x ep; = dp for
  // ep = 1); null in a single-process job.
  Communicator* dense_dp() const;
  // Expert parallelism (parallel.ep): this rank's ep group (the ranks holding the other
  // experts of its dp index, tp rank and stage) and its expert-data-parallel group (the dp
  // ranks holding the same experts); null in a single-process job.
  Communicator* ep() const;
  Communicator* expert_dp() const;
  // This rank's tensor-parallel group (consecutive world ranks, comm/device_mesh.h); null in a
  // single-process job. Size 1 when parallel.tp is 1.
  Communicator* tp() const;
  // This rank's pipeline group (the ranks of its dp replica and tp rank at every stage; its
  // rank is the stage); null in a single-process job. Size 1 when parallel.pp is 1.
  Communicator* pp() const;
  Communicator* world() const { return world_.get(); }

 private:
  World() = default;
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<MpiSession> session_;
  std::unique_ptr<Communicator> world_;
  std::optional<ProcessGroups> groups_;
};

}  // namespace tessera
