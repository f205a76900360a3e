// optimizer/optimizer_config.h — AdamW and learning-rate schedule settings, as typed config.
// Filled and validated by runtime/train/config.cc from `optimizer:` and `schedule:`. Plain data.
#pragma once

#include <cstdint>

namespace tessera {

struct AdamWConfig {
  float lr = 1e-3f;            // optimizer.lr: peak learning rate, > 0
  float beta1 = 0.9f;          // optimizer.beta1: first-moment decay, [0, 1)
  float beta2 = 0.95f;         // optimizer.beta2: second-moment decay, [0, 1)
  float eps = 1e-8f;           // optimizer.eps: denominator guard, > 0
  float weight_decay = 0.1f;   // optimizer.weight_decay: decoupled decay per step (x lr), >= 0
  bool decay_norms = false;    // optimizer.decay_norms: apply weight decay to norm weights
  bool decay_biases = false;   // optimizer.decay_biases: apply weight decay to biases
  bool decay_embeddings = false;  // optimizer.decay_embeddings: ... to embedding tables
  float grad_clip = 1.0f;      // optimizer.grad_clip: max global L2 grad norm; 0 = off
};

enum class LrDecay { kCosine, kLinear, kConstant };

struct LrScheduleConfig {
  int64_t warmup_steps = 0;    // schedule.warmup_steps: linear ramp 0 -> lr over these steps, >= 0
  LrDecay decay = LrDecay::kCosine;  // schedule.decay: cosine | linear | constant
  float min_lr_ratio = 0.1f;   // schedule.min_lr_ratio: floor as a fraction of lr, [0, 1]
  int64_t decay_steps = 0;     // schedule.decay_steps: step where the floor is reached;
                               //   0 = the run's total steps
};

const char* LrDecayName(LrDecay d);

}  // namespace tessera
