// runtime/supervisor/restart_policy.cc — see restart_policy.h for the rules.
#include "runtime/supervisor/restart_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/core/check.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace

Status ValidateRestartPolicyOptions(const RestartPolicyOptions& o) {
  if (o.max_restarts < 0) {
    return InvalidArgument("--max-restarts must be >= 0, got " + std::to_string(o.max_restarts));
  }
  if (!std::isfinite(o.restart_window_s) || o.restart_window_s <= 0) {
    return InvalidArgument("--restart-window must be > 0 seconds, got " + Num(o.restart_window_s));
  }
  if (o.crash_loop_restarts < 0 || o.crash_loop_restarts == 1) {
    return InvalidArgument("--crash-loop must be 0 (off) or >= 2, got " +
                           std::to_string(o.crash_loop_restarts));
  }
  if (!std::isfinite(o.backoff_initial_s) || o.backoff_initial_s < 0) {
    return InvalidArgument("--backoff must be >= 0 seconds, got " + Num(o.backoff_initial_s));
  }
  if (!std::isfinite(o.backoff_factor) || o.backoff_factor < 1) {
    return InvalidArgument("backoff_factor must be >= 1, got " + Num(o.backoff_factor));
  }
  if (!std::isfinite(o.backoff_max_s) || o.backoff_max_s < o.backoff_initial_s) {
    return InvalidArgument("backoff_max_s must be >= --backoff (" + Num(o.backoff_initial_s) +
                           " s), got " + Num(o.backoff_max_s));
  }
  return Status::Ok();
}

RestartPolicy::RestartPolicy(const RestartPolicyOptions& options, int64_t initial_committed_step)
    : options_(options), last_committed_step_(initial_committed_step) {
  TESSERA_CHECK(ValidateRestartPolicyOptions(options).ok());
}

int RestartPolicy::restarts_in_window(Clock::time_point now) const {
  const auto window = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.restart_window_s));
  int n = 0;
  for (Clock::time_point t : restart_times_) {
    if (now - t <= window) ++n;
  }
  return n;
}

RestartDecision RestartPolicy::OnFailure(Clock::time_point now, int64_t newest_committed_step) {
  const bool progress = newest_committed_step > last_committed_step_;
  streak_ = progress ? 1 : streak_ + 1;
  last_committed_step_ = std::max(last_committed_step_, newest_committed_step);

  // Forget restarts that slid out of the window; the deque stays small.
  const auto window = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.restart_window_s));
  while (!restart_times_.empty() && now - restart_times_.front() > window) {
    restart_times_.pop_front();
  }

  RestartDecision d;
  if (options_.crash_loop_restarts > 0 && streak_ >= options_.crash_loop_restarts) {
    d.reason = "crash loop: " + std::to_string(streak_) +
               " failures in a row without a new committed checkpoint (newest committed step " +
               std::to_string(last_committed_step_) + ", --crash-loop " +
               std::to_string(options_.crash_loop_restarts) + "); giving up";
    return d;
  }
  const int in_window = restarts_in_window(now);
  if (in_window >= options_.max_restarts) {
    d.reason = "restart budget exhausted: " + std::to_string(in_window) +
               " restarts already in the last " + Num(options_.restart_window_s) +
               " s (--max-restarts " + std::to_string(options_.max_restarts) +
               ", --restart-window " + Num(options_.restart_window_s) + " s); giving up";
    return d;
  }
  d.restart = true;
  d.backoff_s = std::min(options_.backoff_max_s,
                         options_.backoff_initial_s * std::pow(options_.backoff_factor, streak_ - 1));
  restart_times_.push_back(now);
  ++restarts_;
  return d;
}

}  // namespace tessera
