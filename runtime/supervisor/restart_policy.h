// runtime/supervisor/restart_policy.h — whether, and after how long, to relaunch a failed job.
//
// Owns: the restart budget (restarts within a sliding window), the crash-loop guard (failures
// in a row without a new committed checkpoint) and the backoff. Pure: time is passed in, no
// clock reads, so tests drive it with fake times.
//
// Rules, applied at every failure, in this order:
// - Progress: a failure is "after progress" when the newest committed checkpoint step at that
//   moment is above the one seen at the previous failure (or at construction for the first).
//   The streak is the number of failures in a row without progress between them: a failure
//   after progress starts a new streak of 1, any other adds one.
// - Crash loop: streak >= crash_loop_restarts (when > 0) -> give up: the job keeps failing
//   before it can save anything new, restarting again would only repeat it.
// - Budget: if max_restarts restarts were already granted within the last restart_window_s
//   seconds, another one would be more than max_restarts -> give up.
// - Otherwise restart after backoff_s = min(backoff_max_s, backoff_initial_s *
//   backoff_factor^(streak - 1)): it grows while failures repeat without progress and resets
//   after progress.
// Giving up grants no restart and changes no state beyond the failure itself.
//
// Thread-safety: none; owned by the supervisor loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>

#include "runtime/core/status.h"

namespace tessera {

struct RestartPolicyOptions {
  // At most this many restarts within restart_window_s seconds; one more -> give up.
  // --max-restarts, default 10, >= 0 (0: never restart).
  int max_restarts = 10;
  double restart_window_s = 3600;  // --restart-window, seconds, default 3600, > 0
  // This many failures in a row with no new committed checkpoint between them -> give up.
  // --crash-loop, default 3; 0 turns the guard off, else >= 2 (1 would give up on the first
  // failure of any run).
  int crash_loop_restarts = 3;
  // Wait before relaunching, seconds: backoff_initial_s (--backoff, default 1, >= 0) times
  // backoff_factor (default 2, >= 1) per failure in the streak, at most backoff_max_s
  // (default 30, >= backoff_initial_s).
  double backoff_initial_s = 1;
  double backoff_factor = 2;
  double backoff_max_s = 30;
};

// kInvalidArgument naming the CLI flag (--max-restarts, --restart-window, --crash-loop,
// --backoff) or the option, e.g. "--max-restarts must be >= 0, got -1".
Status ValidateRestartPolicyOptions(const RestartPolicyOptions& options);

struct RestartDecision {
  bool restart = false;
  double backoff_s = 0;  // wait this long before relaunching (restart only)
  std::string reason;    // why we give up, a full sentence with the numbers; empty on restart
};

class RestartPolicy {
 public:
  // `options` must pass ValidateRestartPolicyOptions. `initial_committed_step`: newest committed
  // checkpoint step when the run started (-1 none), the baseline for the first failure.
  explicit RestartPolicy(const RestartPolicyOptions& options, int64_t initial_committed_step = -1);

  // newest_committed_step: newest committed checkpoint step at the moment of the failure (-1
  // none).
  RestartDecision OnFailure(std::chrono::steady_clock::time_point now,
                            int64_t newest_committed_step);

  int restarts() const { return restarts_; }  // restarts granted so far
  int failures_without_progress() const { return streak_; }  // the current streak
  // Restarts granted within the window ending at `now`.
  int restarts_in_window(std::chrono::steady_clock::time_point now) const;

 private:
  RestartPolicyOptions options_;
  int64_t last_committed_step_;
  int streak_ = 0;
  int restarts_ = 0;
  std::deque<std::chrono::steady_clock::time_point> restart_times_;  // ascending
};

}  // namespace tessera
