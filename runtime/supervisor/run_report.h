// runtime/supervisor/run_report.h — the end-of-run report of a supervised job: what happened
// (incarnations, failures, stragglers), the totals derived from it, and its text and JSON forms.
//
// Owns: pure data and formatting; no clock reads, no I/O. Times are seconds since the
// supervisor started.
//
// Definitions (ComputeTotals):
// - detection latency of a failure = detected_s - failed_s.
// - recovery of a failure = resumed_s - failed_s: from the failure to the first step completed
//   after the restart; failures never resumed (resumed_s < 0) are left out.
// - steps lost by a failure = step_at_failure - resume_step, at least 0; 0 when either is
//   unknown (-1).
// - step_s = wall time spent stepping / steps stepped, over the incarnations (from the first
//   completed step to the last one each saw): the typical step time, startup and restarts
//   excluded.
// - productive_s = (final_step - incarnations[0].start_step) * step_s: the step time
//   that produced the final model (0 when negative or unknown).
// - goodput = productive_s / wall_s, clamped to [0, 1] (0 when wall_s <= 0).
// Medians of an even count average the middle two; medians and maxima of nothing are 0.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/core/json.h"

namespace tessera {

struct FailureRecord {
  int64_t incarnation = 0;  // incarnation that failed
  std::string kind;         // FailureKindName(...)
  std::vector<int> ranks;
  std::string detail;    // for people; programs read the fields (kind, ranks, exit_code)
  int exit_code = -1;     // the blamed rank's own exit code when it said one (rank_exit after
                          //   a bye, stall), else -1 (killed, lost, mpirun's view only)
  double failed_s = 0;    // suspected time of the failure
  double detected_s = 0;  // when the supervisor detected it
  double resumed_s = -1;  // when the first step after the restart completed; -1 if never
  int64_t step_at_failure = -1;
  int64_t resume_step = -1;  // checkpoint step the next incarnation resumed from (-1 unknown)
  double load_s = -1;  // launch of the next incarnation -> its first step (incl. load); -1 unknown
};

struct IncarnationRecord {
  int64_t incarnation = 0;
  double launched_s = 0;
  double ended_s = -1;      // -1: still running when the report was made
  int64_t start_step = 0;   // step it resumed at (0 for a fresh run)
  int64_t last_step = -1;   // highest step it reported
  std::string outcome;      // e.g. "finished", "failed: stall", "stopped"
  // Registrations by transport: over the supervisor's Unix socket (ranks on its host) and over
  // TCP (ranks on other hosts, or a rank that could not use the socket).
  int ranks_over_unix_socket = 0;
  int ranks_over_tcp = 0;
};

struct StragglerRecord {
  int rank = 0;
  std::string detail;
  double at_s = 0;
};

struct RunReport {
  std::string run_id;
  std::string outcome;  // "finished" | "gave_up" | "stopped" | "bad_config" | "failed" (no
                        //   usable checkpoint) | "diverged" (training went non-finite)
  std::string outcome_detail;
  double wall_s = 0;
  double start_unix_s = 0;  // wall clock when the supervisor started: every *_s time above is
                            // seconds after it (tools that correlate with outside events add it)
  int64_t final_step = -1;
  int64_t target_steps = 0;
  double step_s = 0;  // see above
  std::vector<IncarnationRecord> incarnations;
  std::vector<FailureRecord> failures;
  std::vector<StragglerRecord> stragglers;
};

struct RunTotals {
  int failures = 0;
  int recovered = 0;  // failures with resumed_s >= 0
  std::map<std::string, int> failures_by_kind;
  double detection_median_s = 0, detection_max_s = 0;
  double recovery_median_s = 0, recovery_max_s = 0;
  int64_t steps_lost = 0;
  double productive_s = 0;
  double goodput = 0;
};

RunTotals ComputeTotals(const RunReport& report);

// Multi-line text for the terminal: outcome line, table of failures (kind, ranks, step,
// detected after, resumed after, steps lost), counts by kind, detection and recovery summary,
// goodput line, stragglers. Ends with a newline.
std::string FormatRunReport(const RunReport& report);

// The report with its totals under "totals" (keys as the struct members).
JsonValue RunReportJson(const RunReport& report);

}  // namespace tessera
