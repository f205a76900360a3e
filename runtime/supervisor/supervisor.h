// runtime/supervisor/supervisor.h — one supervised run: launch the ranks, watch them, restart
// them from the newest committed checkpoint when one fails, and report.
//
// Owns: the run's loop over incarnations. Each incarnation gets a fresh control server (new
// port, new secret, incarnation number + 1), an mpirun job in its own process session with
// per-rank logs, and a FailureDetector. The loop ticks every ~10 ms: it drains control-plane
// events (registrations, commits, catalog writes, byes, disconnects), echoes the job's output,
// polls the job's exit, and asks the detector. On a failure it stops the whole job (TERM to
// mpirun, then KILL to every process of its session after stop_grace), records the failure,
// asks the RestartPolicy, waits out the backoff and relaunches; the ranks resume by themselves
// (resume: auto) from the newest committed checkpoint that verifies, falling back past corrupt
// ones. It ends when the job finishes, a rank reports a final error (bad config or input, no
// usable checkpoint), the policy gives up, or the user stops it (RequestStop: preemption).
//
// Catalog: with a checkpoint root the supervisor is the catalog's single writer: it opens it,
// applies the catalog records rank 0 relays, and adds the run's events (launch, failure,
// restart, stop, end). Events also go to <run_dir>/events.jsonl and, as lines, to `out`.
//
// Files under run_dir: events.jsonl (appended), report.json (the end-of-run report),
// logs/<run_id>/incarnation_<k>/{mpirun.log, 1/rank.<r>/stdout|stderr}.
//
// Threading: Run() blocks the calling thread. RequestStop/RequestCheckpoint are async-signal
// safe (a relaxed atomic store) and may be called from a signal handler or any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/supervisor/failure_detector.h"
#include "runtime/supervisor/launcher.h"
#include "runtime/supervisor/restart_policy.h"
#include "runtime/supervisor/run_report.h"

namespace tessera {

// A smaller layout for an elastic restart: how many ranks, the arguments appended to the rank
// program's (`--set parallel.dp=1 --set train.grad_accum_steps=4`), and what changed, in words.
struct ElasticLayout {
  int ranks = 0;
  std::vector<std::string> args;
  std::string description;
};

struct SupervisorOptions {
  int num_ranks = 1;            // mpirun -np
  std::string hostfile;         // optional Open MPI hostfile, validated before launch
  int spares = 0;               // the hostfile's last `spares` hosts held idle; a lost host is
                                //   replaced by one at the next restart (host_pool.h)
  // Elastic restart (`--elastic MIN_HOSTS`, 0 = off): a lost host with no spare left is dropped
  // and the job restarts on the survivors, as long as at least elastic_min_hosts remain, with
  // the layout `elastic(slots)` gives for their slots (fewer ranks, more accumulation: the
  // global batch kept; the checkpoint is resharded on load). Its error ends the run.
  int elastic_min_hosts = 0;
  std::function<Result<ElasticLayout>(int slots)> elastic;
  std::string program;          // the rank program (the tessera binary)
  std::vector<std::string> program_args;  // e.g. {"train", CONFIG, "--set", "resume=auto"}
  std::string run_dir;          // required: events, report, logs
  std::string checkpoint_root;  // the ranks' checkpoint.dir; empty: restarts start from step 0
  bool checkpoint_local = false;  // checkpoint.local: the root here is this host's part only
  int64_t target_steps = 0;     // train.steps, for the report
  std::string bind_address = "127.0.0.1";
  // The address the ranks connect to: empty = bind_address (which must then not be a
  // wildcard such as 0.0.0.0 or ::; Run refuses that).
  std::string advertise_address;
  // Where each control server makes its private Unix socket directory (control_server.h,
  // private_socket.h); the ranks on this host register there, out of reach of other users.
  // `tessera launch` passes ControlSocketParent($TMPDIR). Empty: TCP only.
  std::string control_socket_parent = "/tmp";
  int heartbeat_ms = 200;       // handed to the ranks
  DetectorOptions detector;
  RestartPolicyOptions restart;
  double stop_grace_s = 5;          // TERM -> KILL when stopping a failed job
  double preempt_timeout_s = 300;   // stop request -> the ranks must have saved and exited
  EnvList extra_env;                // more environment for the ranks (tests: fault hooks)
  std::string mpirun = "mpirun";
  // srun --mpi=pmix instead of mpirun (inside a Slurm allocation; the hostfile is then the
  // allocation's hosts, which `tessera launch` writes).
  LaunchEngine engine = LaunchEngine::kMpirun;
  std::string srun = "srun";
  FILE* out = stdout;               // event lines and the job's echoed output; may be null
  bool echo_job_output = true;      // copy mpirun's output (rank 0's progress lines) to out
};

struct SupervisorOutcome {
  int exit_code = 0;  // exit_codes.h: 0 finished, 7 stopped, 8 gave up, or the ranks' final code
  RunReport report;
};

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options);
  // Runs to the end (see the file comment). Errors only for what prevents supervising at all
  // (run_dir not writable, catalog locked by another writer, bad options); everything that
  // happens to the job is in the outcome.
  Result<SupervisorOutcome> Run();
  // Preemption: ask the ranks to checkpoint and stop; a second call stops the job at once.
  void RequestStop() { stop_requests_.fetch_add(1, std::memory_order_relaxed); }
  // Ask the ranks for a checkpoint now (they agree on the step).
  void RequestCheckpoint() { checkpoint_requests_.fetch_add(1, std::memory_order_relaxed); }

 private:
  SupervisorOptions options_;
  std::atomic<int> stop_requests_{0};
  std::atomic<int> checkpoint_requests_{0};
};

}  // namespace tessera
