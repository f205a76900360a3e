// runtime/chaos/scenario.h — a chaos scenario: the job to run and the faults to inject.
//
// Owns: the scenario file format (YAML), its strict parsing and the fault schedule built from
// it. A scenario names a training job (a config file, --set overrides, ranks, the groups of
// ranks that stand for hosts), the supervisor's options (the `tessera launch` flags), and
// faults: a list at chosen steps or times, and/or a random campaign (seed, mean time between
// faults, duration, kinds). BuildSchedule turns both into one list, deterministically: the
// same scenario (same seed) gives the same schedule, byte for byte (own exponential sampler
// over std::mt19937_64, no implementation-defined distributions).
//
// File format (every key optional unless marked; unknown keys are errors):
//   job:
//     config: configs/tiny.yaml     # required; relative paths: to the current directory if
//                                   #   the file exists there, else to the scenario's folder
//     ranks: 4                      # mpirun -np (default 2)
//     set: [parallel.dp=4, train.steps=200]   # --set overrides, applied in order
//     hosts: [[0, 1], [2, 3]]       # rank groups standing for hosts (kill_host); default: one
//                                   #   group per rank
//     hostfile: hosts.txt           # real hosts (tessera launch --hostfile; resolved like
//                                   #   config): for lose_host, partition, slow_link, whose
//                                   #   `host` indexes its lines; the first host runs tessera
//                                   #   launch and tessera chaos, so it is never a target
//     host_control: tools/dev/test-hosts.sh   # the program that acts on a host (required with
//                                   #   the host kinds): `P lose HOST` (every process killed,
//                                   #   link cut), `P link HOST down|up`, `P qdisc HOST SPEC` /
//                                   #   `P qdisc HOST clear`; HOST as the hostfile names it
//     bind: 10.231.0.1              # tessera launch --bind (the control plane, reachable from
//                                   #   every host)
//   supervisor:                     # tessera launch options, same names without "--"
//     heartbeat_timeout: 2          # seconds; also stall_timeout, stall_floor,
//     backoff: 0.2                  #   startup_timeout, restart_window, stop_grace,
//     max_restarts: 100             #   preempt_timeout, heartbeat_ms, crash_loop, spares,
//                                   #   elastic
//   faults:
//     - kind: kill_rank             # see FaultKind
//       at_step: 40                 # exactly one of at_step / at_time_s (seconds after start)
//       rank: 2                     # kill_rank, stop_rank, slow_rank, kill_in_checkpoint,
//                                   #   io_error (-1 = every rank); default 0
//       host: 1                     # kill_host: index into job.hosts; lose_host, partition,
//                                   #   slow_link: index into job.hostfile's hosts (>= 1)
//       duration_s: 5               # slow_rank, io_error, partition, slow_link: how long
//                                   #   (default 5)
//       qdisc: netem delay 20ms     # slow_link: the tc qdisc put on the host's link (default
//                                   #   "netem delay 20ms"; "tbf rate 10mbit burst 32kbit
//                                   #   latency 400ms" where the kernel lacks sch_netem)
//       errno: ENOSPC               # io_error: ENOSPC | EIO (default EIO)
//   random:                         # a campaign
//     seed: 7                       # required in this section
//     mean_time_between_faults_s: 5 # required, > 0
//     duration_s: 120               # required, > 0: faults are scheduled in [first_after_s,
//     first_after_s: 3              #   duration_s); default first_after_s = 3
//     kinds: [kill_rank, stop_rank] # default: every kind except preempt and the host kinds
//                                   #   (those are listed faults only)
//   soak_s: 0                       # > 0: soak mode: train until this many seconds, then
//                                   #   stop (preempt) and compare at the step reached
//   verdict:
//     max_supervisor_rss_growth_mib: 64   # soak: allowed growth after the first minute
//
// Errors: kInvalidArgument "FILE:LINE:COL: key.path: what was expected, got what", for YAML
// syntax errors too. Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/core/status.h"

namespace tessera {

enum class FaultKind {
  kKillRank,          // SIGKILL one rank (crash)
  kStopRank,          // SIGSTOP one rank (hang: heartbeats stop); SIGCONT never comes
  kSlowRank,          // SIGSTOP/SIGCONT duty cycle for duration_s: a straggler, not a failure
  kKillInCheckpoint,  // the rank SIGKILLs itself in the middle of writing its next shard
  kCorruptShard,      // flip one byte of a committed shard, then force a restart
  kTruncateShard,     // truncate a committed shard to half, then force a restart
  kIoError,           // checkpoint writes fail with errno for duration_s
  kKillHost,          // SIGKILL every rank of one host group at once
  kPreempt,           // SIGTERM to the supervisor; the chaos run launches it again
  // Across real hosts (job.hostfile, job.host_control):
  kLoseHost,   // every process of a host killed and its link cut, for good (a spare takes over)
  kPartition,  // a host's link down for duration_s, then up again
  kSlowLink,   // a tc qdisc (netem delay, tbf rate) on a host's link for duration_s: slower,
               //   not a failure
};
bool IsHostKind(FaultKind kind);  // lose_host, partition, slow_link
const char* FaultKindName(FaultKind kind);  // "kill_rank", "stop_rank", ...
Result<FaultKind> ParseFaultKind(const std::string& name);

struct FaultSpec {
  FaultKind kind = FaultKind::kKillRank;
  int64_t at_step = -1;     // >= 1, or -1 when at_time_s is used
  double at_time_s = -1;    // >= 0, or -1 when at_step is used
  int rank = 0;             // -1 = every rank (io_error only)
  int host = 0;             // kill_host
  double duration_s = 5;    // slow_rank, io_error, partition, slow_link
  std::string qdisc = "netem delay 20ms";  // slow_link
  int error_number = 5;     // io_error: EIO (5) or ENOSPC (28)
  // For corrupt_shard / truncate_shard: which byte / where, drawn from the schedule's seed so
  // a replay damages the same place.
  uint64_t damage_seed = 0;
};

struct PlannedFault {
  int id = 0;  // 1-based, in schedule order
  FaultSpec spec;
  std::string ToString() const;  // "#3 kill_rank rank 2 at step 40"
};

struct Scenario {
  std::string path;         // the scenario file
  std::string config;       // resolved path of the training config
  int ranks = 2;
  std::vector<std::string> sets;
  std::vector<std::vector<int>> hosts;  // each rank in exactly one group
  std::string hostfile;                 // resolved path; empty: one machine
  std::vector<std::string> hostfile_hosts;  // its hosts, in order
  std::string host_control;             // resolved path of the host program
  std::string bind;                     // tessera launch --bind; empty: its default
  // `tessera launch` flags, name without "--" -> value as text (validated by the launcher).
  std::map<std::string, std::string> supervisor;
  std::vector<FaultSpec> faults;
  bool has_random = false;
  uint64_t seed = 0;
  double mean_time_between_faults_s = 0;
  double duration_s = 0;
  double first_after_s = 3;
  std::vector<FaultKind> random_kinds;
  double soak_s = 0;
  double max_supervisor_rss_growth_mib = 64;
};

// Parses and validates a scenario file (ranks within hosts, ranks in range, kinds' fields).
Result<Scenario> LoadScenario(const std::string& path);

// The listed faults in file order, then the random campaign's in time order, numbered from 1.
// Deterministic. (The runner fires a fault when its trigger holds; when several are due at
// once, in id order.)
std::vector<PlannedFault> BuildSchedule(const Scenario& scenario);

}  // namespace tessera
