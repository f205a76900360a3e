// runtime/chaos/campaign.h — runs a chaos scenario: the job under `tessera launch` with its
// faults injected from outside, then the same job without faults, and the verdict.
//
// Owns: the chaos run's directory and processes. Layout of `out_dir`:
//   run/                 train.out_dir of the faulted run (metrics.jsonl, model.safetensors,
//                        launch/ with the supervisor's events.jsonl, report.json and logs)
//   run/ckpt/            its checkpoint.dir
//   hooks/               the rank hook plan (hooks.json) and its armed/ and fired/ markers
//   reference/           the fault-free run (kept; reused by the next chaos run of the same
//                        job: reference/job.txt records what it ran)
//   launch-<n>.log       each `tessera launch`'s output
//   chaos_report.json, chaos_report.svg
// run/ and hooks/ are recreated at every start (a stale checkpoint would be resumed).
//
// How each fault is injected (FaultKind in scenario.h): signals to the rank processes found
// through /proc (kill_rank, stop_rank, kill_host, slow_rank's SIGSTOP/SIGCONT duty cycle);
// files of a committed checkpoint damaged while every rank is frozen with SIGSTOP, then rank
// 0 killed so the restart must read them (corrupt_shard, truncate_shard); hooks armed through
// marker files the ranks check inside their checkpoint writes (kill_in_checkpoint, io_error);
// SIGTERM to `tessera launch` and a relaunch after it stops (preempt). A fault is due when
// the job reached its step or the run its time; rank faults wait until the ranks are up.
//
// How each is matched to its detection (AttributeFaults, attribution.h, over the supervisor's
// structured events and report, after the injection): a failure (connection_lost / rank_exit
// for kills, heartbeat_timeout or stall for stop_rank), a straggler event naming the rank
// (slow_rank), a ckpt_corrupt event (corrupt/truncate), a ckpt_save_failed event (io_error),
// the preempt event (preempt).
// Thread-safety: RunCampaign blocks the calling thread.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "runtime/chaos/chaos_report.h"
#include "runtime/chaos/scenario.h"
#include "runtime/core/status.h"

namespace tessera {

struct CampaignOptions {
  std::string tessera;        // the tessera binary
  std::string out_dir;        // see the layout above
  std::string reference_dir;  // a finished run's out_dir to compare with; empty = run/reuse
                              //   out_dir/reference
  FILE* out = stdout;         // progress lines; may be null
  bool echo_job = false;      // also copy the job's output to `out`
};

// Runs the scenario and returns the filled report (the verdict inside). Errors only for what
// prevents the campaign itself (out_dir not writable, the binary missing); everything that
// happens to the job is in the report.
Result<ChaosReport> RunCampaign(const Scenario& scenario, const std::vector<PlannedFault>& schedule,
                                const CampaignOptions& options);

}  // namespace tessera
