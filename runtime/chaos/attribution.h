// runtime/chaos/attribution.h — which evidence the runtime left for each injected fault: the
// pure half of a chaos verdict's "every fault detected" check.
//
// Owns: the structured evidence a chaos run collects from the supervisor (events.jsonl lines
// and report.json failures, read through the parsers below), what the campaign knows of each
// fault it injected, and AttributeFaults — events in, per-fault outcomes out. No clock, no
// files, no processes: the campaign (campaign.cc) gathers the inputs, this decides.
// Matching reads only the supervisor's machine-readable fields (event kind and ranks; a
// failure's kind, ranks and exit code; times), never its human-readable messages.
//
// Rules (times are the supervisor's wall clock, the host's, like the injection times):
// - each piece of evidence explains one fault only; faults claim it in schedule order;
// - kill_rank, kill_in_checkpoint: the first unclaimed failure within kill_within_s after the
//   injection that names the rank (or names nobody: mpirun's own exit may not);
// - kill_host: the same, naming any rank of the host (under load only the first to go may be
//   named);
// - stop_rank: the same within heartbeat_timeout_s + 10 s (heartbeat_timeout or stall);
// - slow_rank: a "straggler" event naming the rank, up to 10 s after its window ends;
// - corrupt_shard, truncate_shard: a "ckpt_corrupt" event after the injection; the restart
//   the fault forced (a failure naming rank 0, which the campaign killed) gives its recovery;
// - io_error: a "ckpt_save_failed" event up to 30 s after its window ends; the checkpointer's
//   own stops (rank_exit with exit code kExitRestartable, up to 5 s after the window) are its
//   restarts: their steps lost add up and the last one's resumption is its recovery;
// - preempt: a "preempt" event; recovery at the first "progress" after the next "launch";
// - lose_host: like a kill, naming any rank (a lost host takes the job down, and the first
//   connection to close is often a healthy host's);
// - partition: the same within heartbeat_timeout_s + 10 s (the link is silent, not closed);
// - slow_link: handled ("ridden through") when no failure at all falls between the injection
//   and 10 s after its window; any failure there means it was not.
// A fault never injected keeps its note; one injected without matching evidence is not
// detected ("no detection found in the supervisor's events"). Failures no fault claims are
// listed (a false detection, or a fault's side effect).
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chaos/chaos_report.h"
#include "runtime/chaos/scenario.h"
#include "runtime/core/status.h"

namespace tessera {

// One line of the supervisor's events.jsonl.
struct SupervisorEvent {
  double unix_s = 0;
  std::string kind;       // "launch", "progress", "straggler", "ckpt_corrupt", "preempt", ...
  std::vector<int> ranks;  // the ranks it is about (a straggler's); empty: none named
  std::string message;     // for people: never matched on
};

// A failure as the supervisor's report.json recorded it, in wall-clock terms.
struct ReportedFailure {
  std::string kind;        // "rank_exit", "connection_lost", "heartbeat_timeout", "stall", ...
  std::vector<int> ranks;  // blamed; empty: nobody named
  int exit_code = -1;      // the blamed rank's own exit code, -1 unknown
  std::string detail;      // for people: never matched on
  double detected_unix = 0;
  double resumed_unix = -1;  // first step after the restart; -1 never
  int64_t steps_lost = 0;
};

// What the campaign knows of one planned fault at the end of the run.
struct InjectedFault {
  int id = 0;
  FaultKind kind = FaultKind::kKillRank;
  std::vector<int> ranks;  // the ranks it hit: the rank, or the host's; empty for preempt,
                           //   checkpoint damage and io_error on every rank
  bool injected = false;
  double injected_unix = 0;
  int64_t injected_step = -1;
  double active_until_unix = 0;  // slow_rank, io_error: end of the window
  std::string target;            // as shown in the report ("rank 2", ...); empty: the plan's
  std::string planned;           // PlannedFault::ToString, the target when nothing else is known
  std::string note;              // why it was not injected, anything odd
};

struct AttributionOptions {
  double start_unix = 0;             // the chaos run's start: outcomes' times are after it
  double heartbeat_timeout_s = 10;   // the supervisor's --heartbeat-timeout
};

struct Attribution {
  std::vector<FaultOutcome> faults;          // one per InjectedFault, in order
  std::vector<ReportedFailure> unexplained;  // failures no fault claimed, in report order
};

Attribution AttributeFaults(const std::vector<InjectedFault>& faults,
                            const std::vector<SupervisorEvent>& events,
                            const std::vector<ReportedFailure>& failures,
                            const AttributionOptions& options);

// One events.jsonl line. An error when it is not JSON (kDataLoss, from the parser) or lacks
// unix_s, kind or message (kInvalidArgument); "ranks" is optional.
Result<SupervisorEvent> ParseSupervisorEvent(std::string_view line);

// The supervisor's report.json: its failures (times made absolute with start_unix_s) and its
// typical step time (step_s; 0 when absent or not positive). kDataLoss when it is not JSON;
// no failures when it lacks start_unix_s or failures.
struct LaunchReport {
  std::vector<ReportedFailure> failures;
  double step_s = 0;
};
Result<LaunchReport> ParseLaunchReport(std::string_view json);

}  // namespace tessera
