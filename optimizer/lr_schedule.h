// optimizer/lr_schedule.h — the learning rate of each step: linear warm-up, then decay.
//
// LearningRate(schedule, peak_lr, step, total_steps), with `step` the 0-based index of the step
// about to be taken, W = warmup_steps, floor = peak_lr * min_lr_ratio, and
// E = decay_steps > 0 ? decay_steps : total_steps (the step where the floor is reached):
//   step < W            : peak_lr * (step + 1) / W     (step 0 gets peak/W; step W-1 gets peak)
//   constant decay      : peak_lr                      (for every step >= W; no floor)
//   W <= step < E       : progress = (step - W) / (E - W), in [0, 1)
//       cosine          : floor + 0.5 * (peak_lr - floor) * (1 + cos(pi * progress))
//       linear          : peak_lr - (peak_lr - floor) * progress
//   step >= E           : floor                        (also when E <= W)
// Computed in double, returned as float. Pure; thread-safe.
#pragma once

#include <cstdint>

#include "optimizer/optimizer_config.h"

namespace tessera {

float LearningRate(const LrScheduleConfig& schedule, float peak_lr, int64_t step,
                   int64_t total_steps);

}  // namespace tessera
