// optimizer/loss_scale.h — dynamic loss scaling for fp16 training (PyTorch GradScaler's and
// DeepSpeed's policy).
//
// The loss (hence every gradient) is multiplied by scale() before backward so that small fp16
// gradients do not flush to zero; the optimizer sees gradients divided by it again. When a
// step's gradients hold an inf or NaN (fp16 overflow), the step is skipped and the scale is
// multiplied by backoff_factor (not below min_scale); after growth_interval consecutive good
// steps it is multiplied by growth_factor (not above max_scale). Scales stay powers of two
// when the factors and the initial scale are, so unscaling is exact.
// Plain value type; the checkpoint saves scale() and good_steps() and restores them with
// Restore.
#pragma once

#include <cstdint>

#include "runtime/core/status.h"

namespace tessera {

struct LossScaleConfig {
  bool dynamic = true;            // false: the scale stays at `initial` (static scaling)
  double initial = 65536.0;       // 2^16, > 0
  double growth_factor = 2.0;     // > 1
  double backoff_factor = 0.5;    // (0, 1)
  int64_t growth_interval = 1000; // good steps before growing, >= 1
  double min_scale = 1.0;         // > 0
  double max_scale = 16777216.0;  // 2^24 (fp16's largest finite value is 65504)
};

// OK when the fields are in the ranges above and, for dynamic scaling, min_scale <= initial
// <= max_scale. For the config loader; LossScaler CHECKs it.
Status ValidateLossScaleConfig(const LossScaleConfig& config);

class LossScaler {
 public:
  explicit LossScaler(const LossScaleConfig& config);

  double scale() const { return scale_; }
  // Records the outcome of a step whose gradients were (not) all finite. Returns true when the
  // step must be skipped (found_overflow), after updating the scale. Static scaling skips
  // overflowing steps too (they would write inf/NaN into the weights); only the scale stays.
  bool Update(bool found_overflow);

  int64_t good_steps() const { return good_steps_; }   // consecutive finite steps
  int64_t skipped_steps() const { return skipped_; }   // total skipped so far
  // Values a checkpoint saved: scale > 0, good_steps >= 0, skipped >= 0 (CHECKs; the loader
  // validates what it read first).
  void Restore(double scale, int64_t good_steps, int64_t skipped);

 private:
  LossScaleConfig config_;
  double scale_;
  int64_t good_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace tessera
