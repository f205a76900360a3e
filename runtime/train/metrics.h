// runtime/train/metrics.h — what a user sees of a run: the JSONL metrics file (one object per
// step), progress lines and the end-of-run summary.
//
// StepMetrics and TrainSummary are plain data filled by the trainer; the formatting here is
// the only place that decides what a progress line and a summary look like. MetricsFile appends and flushes one line per step
// so a crash loses at most the line being written. Single-threaded.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/train/moe_balance.h"

namespace tessera {

struct StepMetrics {
  int64_t step = 0;            // 1-based: steps completed
  int64_t total_steps = 0;
  double loss = 0;             // mean training loss of the step (nats/token)
  std::optional<double> floor; // best achievable loss of the data, when known
  double lr = 0;
  double grad_norm = 0;        // before clipping
  bool skipped = false;        // update skipped: an fp16 overflow under dynamic loss scaling,
                               //   a non-finite step (train.on_nonfinite: skip) or a loss spike
                               //   (train.spike_action: skip)
  bool nonfinite = false;      // the loss or gradient norm was NaN/Inf (and the step skipped)
  std::optional<double> spike_z;  // loss-spike detection on and its window full: how many
                               //   standard deviations the loss is above the window's mean
  std::optional<double> loss_scale;  // fp16: the scale this step's loss was multiplied by
  int64_t tokens = 0;          // tokens processed in this step
  int64_t total_tokens = 0;    // tokens processed so far
  double step_seconds = 0;     // wall time of this step
  double elapsed_seconds = 0;  // wall time since training started
  double tokens_per_second = 0;
  double mfu = 0;              // model FLOP/s over the measured GEMM peak, in [0, 1]
  double eta_seconds = 0;
  std::optional<double> val_loss;  // set on steps that ran an evaluation
  // MoE models (model.moe): the step's routing over the job (moe_balance.h).
  std::optional<MoeStepReport> moe;
};

// Keeps the lines of `path` (a metrics.jsonl) whose "step" is <= last_step and drops the rest,
// atomically; a missing file is fine (nothing to keep).
Status TruncateMetrics(const std::string& path, int64_t last_step);

struct TrainSummary {
  int64_t steps = 0;
  int64_t tokens = 0;
  int64_t skipped_steps = 0;
  int64_t nonfinite_steps = 0;      // of them: NaN/Inf loss or gradient norm (on_nonfinite: skip)
  int64_t spikes = 0;               // loss spikes detected (train.spike_zscore)
  double wall_seconds = 0;
  double final_loss = 0;            // mean training loss of the last `final_loss_steps` steps
  int64_t final_loss_steps = 0;
  double best_loss = 0;             // lowest single-step training loss
  std::optional<double> val_loss;   // final evaluation, when there is held-out data
  std::optional<double> floor;      // entropy floor of the data, when known
  bool stopped = false;             // ended early on a supervisor's stop (run_link.h), after
                                    //   saving: not a finished run
  std::string moe_histogram;        // FormatMoeHistogram of the last steps ("" when dense)
};

// The end-of-run block: wall time, steps, tokens, final/best/held-out loss, distance to the
// entropy floor, peak memory by kind (`memory_report`), an MoE model's per-expert histogram
// (TrainSummary::moe_histogram) and where the outputs are.
std::string FormatSummary(const TrainSummary& s, const std::string& memory_report,
                          const std::string& out_dir);

// The per-rank block of a data-parallel summary: one row per rank of peak reserved bytes by
// memory kind. `all` holds ranks x MemoryKind::kCount values, rank-major (as gathered).
std::string FormatMemoryTable(const std::vector<double>& all, int ranks);

// "1h02m", "3m07s", "12.3s".
std::string FormatDuration(double seconds);
// "step   40/600 | loss 2.3412 (floor +0.0812) | lr 2.94e-03 | gnorm 0.412 | 41.2k tok/s |
//  MFU 12.3% | ETA 52.1s"
std::string FormatProgressLine(const StepMetrics& m);

class MetricsFile {
 public:
  // Creates (truncates) `path`; its directory must exist.
  static Result<std::unique_ptr<MetricsFile>> Create(const std::string& path, bool append = false);
  ~MetricsFile();
  Status Append(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  MetricsFile(std::string path, FILE* f) : path_(std::move(path)), file_(f) {}
  std::string path_;
  FILE* file_;
};

}  // namespace tessera
