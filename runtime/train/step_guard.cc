// runtime/train/step_guard.cc — StepGuard (contract in step_guard.h).
#include "runtime/train/step_guard.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace tessera {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

StepGuard::StepGuard(const TrainConfig& config)
    : policy_(config.on_nonfinite),
      max_skips_(config.max_nonfinite_skips),
      zscore_(config.spike_zscore),
      window_size_(static_cast<size_t>(config.spike_window)),
      spike_action_(config.spike_action) {}

StepGuard::Decision StepGuard::Decide(double loss, double grad_norm,
                                      bool planned_overflow_possible) {
  Decision d;
  const bool loss_ok = std::isfinite(loss), norm_ok = std::isfinite(grad_norm);
  if (loss_ok && !norm_ok && planned_overflow_possible) {
    d.verdict = Verdict::kSkipPlanned;  // the loss scaler backs off; the loss is a real one
  } else if (!loss_ok || !norm_ok) {
    const std::string what = "loss " + Num(loss) + ", gradient norm " + Num(grad_norm);
    if (policy_ == NonFinitePolicy::kStop) {
      d.verdict = Verdict::kStop;
      d.reason = what + " (train.on_nonfinite: stop)";
      return d;
    }
    if (++streak_ > max_skips_) {
      d.verdict = Verdict::kStop;
      d.reason = what + ": " + std::to_string(streak_) +
                 " non-finite steps in a row, more than train.max_nonfinite_skips=" +
                 std::to_string(max_skips_);
      return d;
    }
    d.verdict = Verdict::kSkipNonFinite;
    d.reason = what + ": update skipped (" + std::to_string(streak_) + " in a row, at most " +
               std::to_string(max_skips_) + ")";
    return d;
  }
  if (SpikeDetection() && window_.size() == window_size_) {
    double sum = 0;
    for (double v : window_) sum += v;
    const double mean = sum / static_cast<double>(window_.size());
    double sq = 0;
    for (double v : window_) sq += (v - mean) * (v - mean);
    const double std_dev = std::sqrt(sq / static_cast<double>(window_.size()));
    d.has_zscore = true;
    // A window of identical losses has no spread: any higher loss is infinitely unusual.
    d.zscore = std_dev > 0 ? (loss - mean) / std_dev
                           : (loss > mean ? std::numeric_limits<double>::infinity() : 0.0);
    d.spike = d.zscore > zscore_;
    if (d.spike) {
      d.reason = "loss " + Num(loss) + " is " + Num(d.zscore) + " standard deviations above the "
                 "mean " + Num(mean) + " of the last " + std::to_string(window_.size()) + " steps";
    }
  }
  // Every finite loss joins the window, skipped or not: after a genuine change of level the
  // window follows within spike_window steps (a window that kept spikes out would freeze and
  // skip every later step).
  if (SpikeDetection()) {
    window_.push_back(loss);
    if (window_.size() > window_size_) window_.pop_front();
  }
  if (d.spike && spike_action_ == SpikeAction::kSkip) {
    d.verdict = Verdict::kSkipSpike;
    d.reason += ": update skipped (train.spike_action: skip)";
    return d;
  }
  if (d.verdict == Verdict::kApply) streak_ = 0;
  return d;
}

void StepGuard::Restore(int64_t nonfinite_streak, const std::vector<double>& loss_window) {
  streak_ = nonfinite_streak;
  window_.assign(loss_window.begin(), loss_window.end());
  while (window_.size() > window_size_) window_.pop_front();
}

const char* StepVerdictName(StepGuard::Verdict v) {
  switch (v) {
    case StepGuard::Verdict::kApply: return "apply";
    case StepGuard::Verdict::kSkipPlanned: return "skip (fp16 overflow)";
    case StepGuard::Verdict::kSkipNonFinite: return "skip (non-finite)";
    case StepGuard::Verdict::kSkipSpike: return "skip (loss spike)";
    case StepGuard::Verdict::kStop: return "stop";
  }
  return "?";
}

}  // namespace tessera
