// runtime/core/exit_codes.h — the one table of process exit codes.
//
// A rank's exit code tells the supervisor (issue 5) what happened and whether a restart can
// help. Keep this the only place these numbers are written, and the only place that maps a
// Status to a code (ExitCodeFor) or a code to words (FinalExitReason, FinalOutcome): commands,
// the supervisor and tessera chaos call these instead of keeping tables of their own.
// Thread-safety: pure functions.
#pragma once

#include "runtime/core/status.h"

namespace tessera {

enum ExitCode : int {
  kExitOk = 0,                 // finished
  kExitRestartable = 1,        // a failure a restart may cure (I/O hiccup, internal error)
  kExitUsage = 2,              // bad command line: do not restart
  kExitBadConfig = 3,          // config rejected: do not restart
  kExitBadInput = 4,           // data / weights file missing or malformed: do not restart
  kExitCorruptCheckpoint = 5,  // checkpoint failed verification: pick an older one
  kExitCommTimeout = 6,        // a collective's bounded wait expired: restart
  kExitStopped = 7,            // stopped on request (preemption) after saving
  kExitGaveUp = 8,             // tessera launch: restart budget or crash-loop guard exhausted
  kExitChaosFailed = 9,        // tessera chaos: the run did not hold (weights, checkpoints,
                               //   detection or completion; see its report)
  kExitNonFinite = 10,         // training produced NaN/Inf (train.on_nonfinite): stopped at the
                               //   last healthy state; a restart would diverge the same way
  kExitDiverged = 11,          // tessera validate: a layer differs from the reference beyond
                               //   its tolerance
};

// Codes a restart cannot cure: the same command line, config, input or checkpoints would fail
// the same way (tessera launch gives up on them at once).
inline bool IsFinalExitCode(int code) {
  return code == kExitUsage || code == kExitBadConfig || code == kExitBadInput ||
         code == kExitCorruptCheckpoint || code == kExitNonFinite;
}

// Why a final code is final, for the supervisor's messages and report.
inline const char* FinalExitReason(int code) {
  switch (code) {
    case kExitUsage: return "bad command line";
    case kExitBadConfig: return "bad config";
    case kExitBadInput: return "bad config or input";
    case kExitCorruptCheckpoint: return "no usable checkpoint";
    case kExitNonFinite: return "non-finite training: NaN/Inf loss or gradient norm";
    default: return "a failure a restart may cure";
  }
}

// The run's table: a Status that ends a command while it runs (kInvalidArgument ->
// kExitBadConfig, kNotFound -> kExitBadInput, kTimeout -> kExitCommTimeout, ...).
inline int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument: return kExitBadConfig;
    case StatusCode::kNotFound:
    case StatusCode::kDataLoss:
    case StatusCode::kOutOfRange: return kExitBadInput;
    case StatusCode::kTimeout: return kExitCommTimeout;
    case StatusCode::kCorruptCheckpoint: return kExitCorruptCheckpoint;
    case StatusCode::kNonFinite: return kExitNonFinite;
    default: return kExitRestartable;
  }
}

// What a command was doing when a Status ended it: the same code means different things in
// different phases (a missing file is the config's fault while loading it, the input's while
// opening data; damaged bytes in a checkpoint mean "pick an older one").
enum class ExitPhase {
  kRun,                // ExitCodeFor's table
  kConfig,             // loading the config (and the layout it asks for): kInvalidArgument and
                       //   kNotFound -> kExitBadConfig
  kInput,              // opening data, weights, checkpoints or output paths: whatever is not a
                       //   timeout, an I/O error or a corrupt checkpoint -> kExitBadInput
  kCheckpointVerify,   // reading a checkpoint to check it: kDataLoss -> kExitCorruptCheckpoint,
                       //   else ExitCodeFor's table
  kCheckpointExport,   // reading a checkpoint to export it: kDataLoss -> kExitCorruptCheckpoint,
                       //   else kExitBadInput
  kSupervise,          // tessera launch before or between incarnations: kInvalidArgument ->
                       //   kExitBadConfig, else kExitRestartable
};

inline int ExitCodeFor(const Status& s, ExitPhase phase) {
  const StatusCode c = s.code();
  if (c == StatusCode::kOk) return kExitOk;
  switch (phase) {
    case ExitPhase::kRun: return ExitCodeFor(s);
    case ExitPhase::kConfig:
    case ExitPhase::kInput:
      // A timeout or an I/O error may pass on a restart, whatever the phase; a run with no
      // usable checkpoint says so with its own code.
      if (c == StatusCode::kTimeout || c == StatusCode::kIoError || c == StatusCode::kCorruptCheckpoint) {
        return ExitCodeFor(s);
      }
      if (phase == ExitPhase::kInput) return kExitBadInput;
      if (c == StatusCode::kInvalidArgument || c == StatusCode::kNotFound) return kExitBadConfig;
      return ExitCodeFor(s);
    case ExitPhase::kCheckpointVerify:
      return c == StatusCode::kDataLoss ? kExitCorruptCheckpoint : ExitCodeFor(s);
    case ExitPhase::kCheckpointExport:
      return c == StatusCode::kDataLoss ? kExitCorruptCheckpoint : kExitBadInput;
    case ExitPhase::kSupervise:
      return c == StatusCode::kInvalidArgument ? kExitBadConfig : kExitRestartable;
  }
  return kExitRestartable;
}

// The supervisor report's outcome for a job that ended with a final code (IsFinalExitCode):
// "failed" (no usable checkpoint), "diverged" (non-finite), else "bad_config".
inline const char* FinalOutcome(int code) {
  return code == kExitCorruptCheckpoint ? "failed" : code == kExitNonFinite ? "diverged" : "bad_config";
}

}  // namespace tessera
