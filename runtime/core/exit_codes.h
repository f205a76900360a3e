// runtime/core/exit_codes.h — the one table of process exit codes.
//
// A rank's exit code tells the supervisor (issue 5) what happened and whether a restart can
// help. Keep this the only place these numbers are written.
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

// Maps a Status from loading input to an exit code (kInvalidArgument -> kExitBadConfig, ...).
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

}  // namespace tessera
