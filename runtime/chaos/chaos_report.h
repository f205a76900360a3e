// runtime/chaos/chaos_report.h — what a chaos run found: per-fault outcomes, the verdict, the
// loss curve, and the three ways to show them (JSON, a terminal table, an SVG plot).
//
// Owns: the report data and pure functions over it. The campaign runner (campaign.h) fills
// it; nothing here runs processes or reads files.
//
// Verdict: the run PASSES only if (1) the final weights are bit-identical to the reference
// (and the reference existed and was readable), (2) no committed checkpoint was lost (one the
// run committed that is missing or damaged at the end without retention having deleted it or
// the scenario having damaged it on purpose), (3) every injected fault was detected, (4) the
// run finished (or, in soak mode, stopped on the soak's own request), and (5) in soak mode the
// supervisor's memory grew by at most the allowed MiB after its first minute.
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/json.h"

namespace tessera {

struct FaultOutcome {
  int id = 0;
  std::string kind;            // FaultKindName
  std::string target;          // "rank 2", "host 1 (ranks 2,3)", "step_00000040/shard_1.bin", "supervisor"
  double injected_s = -1;      // seconds after the chaos run started; -1: never injected
  int64_t injected_step = -1;  // the job's step when injected
  bool detected = false;
  std::string detected_as;     // "connection_lost", "heartbeat_timeout", "straggler", "ckpt_corrupt", ...
  double detection_s = -1;     // injected -> detected; -1 unknown
  double recovery_s = -1;      // injected -> first step completed after the restart; -1: none/never
  int64_t steps_lost = 0;      // steps redone because of it
  std::string note;            // why it was not injected / not detected, anything odd
};

struct LossPoint {
  double t_s = 0;  // seconds after the chaos run started
  int64_t step = 0;
  double loss = 0;
};

struct MemorySample {
  double t_s = 0;
  double supervisor_rss_mib = 0;
  double ranks_rss_mib = 0;  // sum over the ranks alive at the time
};

struct Verdict {
  bool weights_identical = false;
  std::string weights_detail;  // "bit-identical (1.8 MiB)", "DIFFERENT: 1234 of 442368 bytes differ", ...
  int64_t committed_checkpoints = 0;
  int64_t checkpoints_lost = 0;
  std::string checkpoints_detail;
  int faults_injected = 0;
  int faults_detected = 0;
  bool run_completed = false;   // finished (or stopped as the soak intended)
  std::string run_detail;
  bool memory_ok = true;        // soak only; true otherwise
  std::string memory_detail;
  bool passed() const;
};

struct ChaosReport {
  std::string scenario;  // path
  std::string schedule;  // one line per planned fault (PlannedFault::ToString)
  double wall_s = 0;
  double reference_wall_s = 0;  // 0 when a given reference was reused
  int64_t final_step = 0;
  double goodput = 0;           // productive step time / wall time of the chaos run
  double median_step_s = 0;
  std::vector<FaultOutcome> faults;
  std::vector<LossPoint> loss;
  std::vector<MemorySample> memory;
  Verdict verdict;
};

struct ChaosTotals {
  int injected = 0, detected = 0;
  double detection_median_s = 0, detection_max_s = 0;   // over faults with a known latency
  double recovery_median_s = 0, recovery_max_s = 0;     // over faults that caused a restart
  int64_t steps_lost = 0;
  // kind -> {injected, detected}
  std::vector<std::pair<std::string, std::pair<int, int>>> by_kind;
};

ChaosTotals ComputeChaosTotals(const ChaosReport& report);
JsonValue ChaosReportJson(const ChaosReport& report);
// The terminal view: the verdict first (PASS/FAIL and each of the five checks), then a table
// of faults (id, kind, target, step, detected as, detection, recovery, steps lost), then
// totals by kind and goodput.
std::string FormatChaosReport(const ChaosReport& report);
// Loss against wall-clock time (a polyline, broken where the job was down: a gap of more than
// 5 x the median interval between points), each fault a red vertical
// line labelled with its id and kind at its injection time, each recovery a green one at the
// first resumed step; axes with ticks; width x height pixels. Self-contained SVG 1.1.
std::string ChaosReportSvg(const ChaosReport& report, int width = 960, int height = 480);

}  // namespace tessera
