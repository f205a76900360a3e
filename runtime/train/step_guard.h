// runtime/train/step_guard.h — the per-step verdict on a step's loss and gradient norm:
// apply the update, skip it, or stop the run, before anything changes the parameters.
//
// Owns the policy of train.on_nonfinite / max_nonfinite_skips and of loss-spike detection
// (train.spike_zscore / spike_window / spike_action), and the state they keep across steps
// (the count of consecutive non-finite skips, the window of recent losses), which is saved
// with every checkpoint so a resumed run decides exactly as an uninterrupted one would.
//
//   - A planned skip: fp16 with dynamic loss scaling, a finite loss and a non-finite gradient
//     norm while the scale can still back off — the loss scaler's job, not divergence.
//   - Non-finite: a NaN/Inf loss or gradient norm otherwise. stop: kStop at once. skip: the
//     update is skipped; more than max_nonfinite_skips in a row is kStop.
//   - Spike (finite, window full, spike_zscore > 0): z = (loss - mean) / std over the window
//     (population statistics, summed in window order: deterministic). z > spike_zscore is
//     reported; with spike_action skip the update is skipped too. Every finite loss then joins
//     the window, evicting the oldest — spikes too, as llm.c's detector does: after a genuine
//     change of level the window follows within spike_window steps instead of freezing and
//     skipping every later step.
// Every rank sees the same loss and norm (both are reduced before this), so every rank reaches
// the same verdict with no communication. Pure logic, no clock, no I/O; single-threaded.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "runtime/train/config.h"

namespace tessera {

class StepGuard {
 public:
  enum class Verdict { kApply, kSkipPlanned, kSkipNonFinite, kSkipSpike, kStop };
  struct Decision {
    Verdict verdict = Verdict::kApply;
    bool spike = false;      // the loss was more than spike_zscore deviations above the mean
    double zscore = 0;       // meaningful when the window was full (has_zscore)
    bool has_zscore = false;
    std::string reason;      // kStop / skips: one line saying why, for the user
  };

  explicit StepGuard(const TrainConfig& config);

  // `planned_overflow_possible`: fp16 dynamic loss scaling whose scale can still back off.
  Decision Decide(double loss, double grad_norm, bool planned_overflow_possible);

  int64_t nonfinite_streak() const { return streak_; }
  std::vector<double> loss_window() const { return {window_.begin(), window_.end()}; }
  // State from a checkpoint; a window longer than spike_window keeps its newest values.
  void Restore(int64_t nonfinite_streak, const std::vector<double>& loss_window);

 private:
  bool SpikeDetection() const { return zscore_ > 0; }

  NonFinitePolicy policy_;
  int64_t max_skips_;
  double zscore_;
  size_t window_size_;
  SpikeAction spike_action_;
  int64_t streak_ = 0;         // consecutive non-finite steps skipped
  std::deque<double> window_;  // oldest first
};

const char* StepVerdictName(StepGuard::Verdict v);

}  // namespace tessera
