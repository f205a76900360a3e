// optimizer/lr_schedule.cc — warm-up + cosine/linear/constant decay (formulas in the header).
#include "optimizer/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "runtime/core/check.h"

namespace tessera {

float LearningRate(const LrScheduleConfig& schedule, float peak_lr, int64_t step,
                   int64_t total_steps) {
  TESSERA_CHECK(step >= 0);
  const double peak = peak_lr;
  const int64_t warmup = schedule.warmup_steps;
  if (step < warmup) {
    return static_cast<float>(peak * static_cast<double>(step + 1) / static_cast<double>(warmup));
  }
  if (schedule.decay == LrDecay::kConstant) return peak_lr;

  const double floor = peak * schedule.min_lr_ratio;
  const int64_t decay_end = schedule.decay_steps > 0 ? schedule.decay_steps : total_steps;
  if (step >= decay_end) return static_cast<float>(floor);
  // Here warmup <= step < decay_end, so the span is at least 1.
  const double progress =
      static_cast<double>(step - warmup) / static_cast<double>(decay_end - warmup);
  double lr = peak;
  switch (schedule.decay) {
    case LrDecay::kCosine:
      lr = floor + 0.5 * (peak - floor) * (1.0 + std::cos(std::numbers::pi * progress));
      break;
    case LrDecay::kLinear:
      lr = peak - (peak - floor) * progress;
      break;
    case LrDecay::kConstant:
      break;
  }
  return static_cast<float>(lr);
}

}  // namespace tessera
