// runtime/chaos/job_processes.h — the processes of a running job, seen from outside.
//
// Owns: discovery of a job's rank processes through /proc (the ranks of `tessera train` whose
// command line names the run's out_dir, keyed by OMPI_COMM_WORLD_RANK from their environment),
// their resident memory, and the duty-cycle "slow" fault. This is how an operator's tools see
// a job: no cooperation from the runtime is needed or trusted.
// Thread-safety: free functions; RankSlower is driven from one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>

namespace tessera {

// rank -> pid of the live (not zombie, not exiting) `tessera train` processes whose argv
// contains `marker` (the run's out_dir). Empty when none is running.
std::map<int, pid_t> FindRankPids(const std::string& marker);

// VmRSS of `pid` in MiB; 0 if it is gone.
double ResidentMiB(pid_t pid);

// Makes one rank a straggler without killing it: SIGSTOP for `stop_ms`, SIGCONT for `run_ms`,
// repeated while Tick() is called until `until`; then SIGCONT for good. Heartbeats still flow
// between the stops, so the supervisor must see a straggler, not a failure.
class RankSlower {
 public:
  RankSlower(pid_t pid, std::chrono::steady_clock::time_point until, int stop_ms = 60, int run_ms = 40);
  // Advances the duty cycle; returns false once finished (the rank is left running).
  bool Tick(std::chrono::steady_clock::time_point now);
  void Finish();  // SIGCONT now and stop

 private:
  pid_t pid_;
  std::chrono::steady_clock::time_point until_, next_;
  std::chrono::milliseconds stop_, run_;
  bool stopped_ = false;
  bool done_ = false;
};

}  // namespace tessera
