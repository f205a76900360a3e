// runtime/supervisor/incarnation.h — one launch of a supervised job, watched to its end.
//
// Owns: for incarnation k, a fresh control server (new port, new secret), the mpirun job in
// its own process session, a FailureDetector and the loop that watches them. The loop wakes on
// every control event other than a heartbeat (a crash is seen at once) and at least every
// 10 ms; it drains the events (registrations, heartbeats, commits, catalog records, byes,
// disconnects, rejections), echoes the job's output, forwards the user's requests (stop,
// checkpoint now) and polls the job's exit and the detector. Whatever ends the incarnation,
// the job is stopped (TERM to mpirun, KILL to every process of its session after the grace)
// before RunIncarnation returns, so no process of it outlives the call.
//
// Failure attribution, in order:
//   - a rank's bye with a code no restart can cure (bad config or input, no usable
//     checkpoint): the incarnation ends with that code — the peers mpirun kills next are not
//     failures;
//   - a rank's bye with a code a restart may cure: rank_exit of that rank, except a
//     collective timeout (exit 6), which is a hang elsewhere: stall, blamed with the
//     detector's collective counts on the ranks that did not reach the collective;
//   - the detector (connection lost, heartbeat timeout, stall, startup timeout);
//   - mpirun ending non-zero: rank_exit of the ranks that closed without a bye or said a
//     non-zero one.
// After a stop request nothing is a failure: the incarnation ends as stopped, whatever the
// ranks do (a rank dying while it saves ends the stop at once instead of at the timeout).
// Thread-safety: the calling thread runs everything; the server's io thread only queues.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/supervisor/failure_detector.h"
#include "runtime/supervisor/run_log.h"
#include "runtime/supervisor/run_report.h"
#include "runtime/supervisor/supervisor.h"

namespace tessera {

// What the incarnations of one run share; owned by Supervisor::Run.
struct RunState {
  const SupervisorOptions* options = nullptr;
  RunLog* log = nullptr;
  RunReport* report = nullptr;
  // Newest committed checkpoint step (-1 none): from the commit reports while a job runs, from
  // the directories (the ground truth) between incarnations.
  int64_t newest_committed = -1;
  int64_t newest_in_memory = -1;      // the memory tier's newest step held (from its reports)
  int64_t max_step_seen = -1;         // over all incarnations
  std::vector<double> step_samples_s;  // the detectors' step times (fallback for step_s)
  double stepping_s = 0;               // wall time from first to last completed step, summed
  int64_t steps_stepped = 0;           //   over incarnations, and the steps in it
  // Requests from signal handlers (counts) and how many of them were acted on.
  const std::atomic<int>* stop_requests = nullptr;
  int stops_handled = 0;
  const std::atomic<int>* checkpoint_requests = nullptr;
  int checkpoints_handled = 0;
  // The hostfile this incarnation is launched with: the host pool's (spares held back, lost
  // hosts replaced: host_pool.h) or, without one, SupervisorOptions::hostfile.
  std::string hostfile;
  // The ranks it launches and the arguments added after SupervisorOptions::program_args:
  // the options' own, until an elastic restart shrinks the layout to the surviving hosts.
  int num_ranks = 0;
  std::vector<std::string> extra_args;
};

struct IncarnationEnd {
  enum class Kind { kFinished, kStopped, kFinalError, kFailure };
  Kind kind = Kind::kFailure;
  int exit_code = 0;               // kStopped, kFinalError: the code to end the run with
  std::optional<Failure> failure;  // kFailure
  std::string detail;              // kStopped / kFinalError: what happened
  IncarnationRecord record;
  std::string job_log;             // mpirun's output (every rank's lines)
};

// Newest committed checkpoint under `root` (-1: none, or no root). A listing only: the ranks
// verify every byte when they load and fall back past a damaged one by themselves.
int64_t NewestCommittedStep(const std::string& root);

// Launches incarnation `k` (resuming from run.newest_committed) and returns how it ended.
// Errors only when it could not be launched (control port, mpirun missing, log directory).
Result<IncarnationEnd> RunIncarnation(int64_t k, RunState& run);

}  // namespace tessera
