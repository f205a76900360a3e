// tools/supervised_rank.h — a rank of `tessera train` under `tessera launch`: the RunLink
// (runtime/train/run_link.h) backed by the control-plane client.
//
// Owns: the ControlClient (connection, heartbeat thread), the catalog sink that relays the
// coordinator's catalog writes to the supervisor, and the fault hooks.
// FromEnvironment reads the variables the supervisor sets (runtime/supervisor/rank_env.h);
// without TESSERA_CONTROL_PORT the rank is standalone and gets no link (null, not an error).
// Every variable is validated before connecting; an error names the variable and what it
// should hold (the caller exits kExitRestartable: a launcher bug or a race, never the config).
// Heartbeats carry the step and phase the trainer publishes, overridden from the comm layer's
// activity (comm/activity.h): phase "collective" while a thread waits on a collective, and the
// count of launched operations as the collective sequence number, and the rank's recent step
// time outside waits for collectives (compute_ms: per step, wall time between two SetStep calls
// minus the comm layer's wait time over it; published as the mean of the last 8 steps; the
// supervisor's straggler signal).
// Stop: the supervisor said stop, or the connection to it is gone (then the job is being torn
// down anyway and a save is the best this rank can do).
//
// Fault hooks — FOR TESTS AND `tessera chaos` ONLY (nothing sets them by default). The chaos
// hook plan (TESSERA_CHAOS_HOOKS, tools/chaos_hooks.h) is loaded before connecting, a malformed
// one failing startup like a bad variable; its file system goes to the checkpointer.
// TESSERA_FAULT_HANG / TESSERA_FAULT_CRASH = "RANK:STEP[:INCARNATION]" (a bad format fails at
// startup). On that rank, when SetStep reports STEP steps completed (in every incarnation that
// gets there, including right after a resume at STEP — or only in incarnation INCARNATION when
// given, so a restarted job can get past the fault), SetStep never returns (hang: the training thread
// sleeps forever before its next collective while the heartbeat thread goes on) or the
// process kills itself with SIGKILL (crash).
//
// Thread-safety: the RunLink calls come from the training thread; the client's own thread
// sets the requests. Shutdown once, from the thread that ends the process.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "runtime/core/status.h"
#include "runtime/supervisor/control_client.h"
#include "runtime/train/run_link.h"
#include "tools/chaos_hooks.h"

namespace tessera {

// A fault hook's target: the rank and the completed-step count it fires at.
struct FaultPoint {
  int rank = 0;
  int64_t step = 0;
  int64_t incarnation = -1;  // -1: every incarnation
};

// What the supervisor's environment says, validated.
struct SupervisedRankEnv {
  std::string address;
  uint16_t port = 0;
  std::string control_socket;  // kEnvControlSocket; empty when unset (TCP only)
  std::string secret;
  std::string run_id;
  int64_t incarnation = 0;
  int heartbeat_ms = 200;
  std::optional<FaultPoint> fault_hang, fault_crash;
};

// Reads and validates the variables of rank_env.h through `get` (getenv in production):
// nullopt when kEnvControlPort is unset; kInvalidArgument naming the variable when one is
// missing or malformed.
using EnvGetter = const char* (*)(const char*);
Result<std::optional<SupervisedRankEnv>> ReadSupervisedRankEnv(EnvGetter get);

class SupervisedRank final : public RunLink {
 public:
  // Null (no error) when the rank is not supervised. Connects and sends hello; errors from
  // validation or the connection are returned (the rank must not train unsupervised when a
  // supervisor expects it).
  static Result<std::unique_ptr<SupervisedRank>> FromEnvironment(int rank, int world_size);
  ~SupervisedRank() override;  // without Shutdown: closes without bye (an abnormal end)

  void SetStep(int64_t steps_done) override;
  void SetPhase(TrainPhase phase) override;
  bool TakeCheckpointRequest() override;
  bool StopRequested() override;
  CatalogSink* catalog() override;
  // The chaos hooks' file system when TESSERA_CHAOS_HOOKS names a plan, else null (the real one).
  FileSystem* checkpoint_file_system() override;
  OffloadFaults* offload_faults() override;
  int64_t incarnation() const override { return env_.incarnation; }

  // Sends bye {exit_code} (clamped to 0..255) and closes. Call right before the process ends
  // with that code (before AbortJob too). Idempotent.
  Status Shutdown(int exit_code);

 private:
  class RelayCatalog;
  SupervisedRank(int rank, SupervisedRankEnv env);
  bool FaultFires(const std::optional<FaultPoint>& fault, int64_t steps_done) const;

  const int rank_;
  const SupervisedRankEnv env_;
  std::unique_ptr<ControlClient> client_;
  std::unique_ptr<RelayCatalog> catalog_;
  std::unique_ptr<ChaosHooks> chaos_hooks_;  // null unless `tessera chaos` set a plan
  std::atomic<bool> told_lost_{false};
  // The step boundary SetStep saw last (training thread only): when, and the comm layer's wait
  // total then. The next SetStep turns the difference into the finished step's compute time.
  bool have_step_start_ = false;
  std::chrono::steady_clock::time_point step_start_;
  int64_t step_start_wait_ns_ = 0;
  // Compute times of the last kComputeWindowSteps completed steps, ns, oldest first; their mean
  // is the published compute_ms.
  static constexpr size_t kComputeWindowSteps = 8;
  std::deque<int64_t> recent_compute_ns_;
};

}  // namespace tessera
