// runtime/train/run_link.h — what a training run tells the process that supervises it, and
// what it is asked in return.
//
// Owns: the seam only. runtime/train cannot see the supervisor (it sits above this layer);
// `tessera train` under `tessera launch` passes an implementation backed by the control-plane
// client (tools/supervised_rank.h); a standalone `tessera train` passes one backed by its
// signal handlers (tools/signal_link.h: SIGTERM/SIGINT stop, SIGUSR1 checkpoint now); tests
// pass fakes or none (null: no requests at all).
//
// Contract with the trainer:
// - SetStep/SetPhase are called on the training thread at every step boundary and phase
//   change; they must be cheap (an atomic store) and never block.
// - Requests (checkpoint now, stop) arrive asynchronously and may reach ranks at different
//   moments; the trainer samples them at each step boundary and AGREES on them across ranks
//   (a max-reduction of the flags) before acting, so every rank saves and stops after the
//   same step.
// - checkpoint_file_system(): where the checkpointer's writes go (tests and chaos only).
// - catalog(): non-null under a supervisor — the checkpoint coordinator writes its catalog
//   records there instead of opening the RocksDB catalog (the supervisor is the single
//   writer). Null: the coordinator opens the catalog itself.
// Thread-safety: implementations must allow the request queries from the training thread
// while their own threads set them.
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/catalog.h"
#include "optimizer/offload_file.h"
#include "runtime/core/file_util.h"

namespace tessera {

enum class TrainPhase { kIdle, kForward, kBackward, kOptimizer, kCheckpoint, kEval };

class RunLink {
 public:
  virtual ~RunLink() = default;
  // Optimizer steps completed so far (the resumed step right after a resume).
  virtual void SetStep(int64_t steps_done) = 0;
  virtual void SetPhase(TrainPhase phase) = 0;
  // Whether a checkpoint was requested since the last call (clears the request).
  virtual bool TakeCheckpointRequest() = 0;
  // Whether the run should save and stop: the supervisor said stop, or it is gone. Sticky.
  virtual bool StopRequested() = 0;
  virtual CatalogSink* catalog() = 0;
  // The file system checkpoint writes go through; null = the real one. `tessera chaos` hands
  // ranks one that can fail writes or kill the rank midway (tools/chaos_hooks.h).
  virtual FileSystem* checkpoint_file_system() { return nullptr; }
  // Fault hooks at the optimizer's offload file I/O (optimizer.offload: nvme); null = none.
  // `tessera chaos` hands ranks one that can fail reads and writes or kill the rank midway.
  virtual OffloadFaults* offload_faults() { return nullptr; }
  // Who asked, for the run's messages: "the supervisor's request", "SIGTERM", ...
  virtual std::string RequestSource() const { return "the supervisor's request"; }
  // The supervisor's incarnation of the job this rank belongs to (0 the first start); -1
  // without one.
  virtual int64_t incarnation() const { return -1; }
};

}  // namespace tessera
