// optimizer/adamw.h — AdamW with decoupled weight decay on flat fp32 buffers.
//
// Owns: the first and second moments (exp_avg m, exp_avg_sq v) of every parameter element, in
// one Arena of MemoryKind::kOptimizerState, and the 1-based step counter t.
// Semantics are torch.optim.AdamW's (amsgrad=False, maximize=False), per element, with t the
// number of the step being taken (1 for the first):
//   p <- p * (1 - lr*wd)                      only inside ranges with decay = true
//   m <- b1*m + (1-b1)*g
//   v <- b2*v + (1-b2)*g*g
//   p <- p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// which is p -= lr * m_hat / (sqrt(v_hat) + eps) with eps added after bias correction, as
// PyTorch does. The decay, the Adam update and (through grad_scale) the gradient clipping
// factor are fused into one pass over memory (the loop is memory-bound); multiplying by a
// decay factor of exactly 1 outside decay ranges is exact.
// Parameters and gradients are the model's twin flat buffers (same offsets); this layer never
// sees a Parameter — the trainer describes decay with ParamRange (optimizer beside models).
// Determinism: elementwise, so the bits do not depend on the thread count or timing.
// Thread-safety: an AdamW belongs to one thread (the trainer's); Step runs an OpenMP loop.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optimizer/optimizer_config.h"
#include "runtime/core/memory.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace tessera {

// One parameter's elements [offset, offset + size) in the flat buffers, and whether weight
// decay applies to it. The trainer builds these from the model's Parameter list and the
// optimizer.decay_* options. `name` is for messages only.
struct ParamRange {
  int64_t offset = 0;
  int64_t size = 0;
  bool decay = true;
  std::string name;
};

// OK when every range has size >= 0, lies inside [0, num_params), and no two overlap (in any
// order). Elements covered by no range are updated without weight decay (e.g. padding).
Status ValidateParamRanges(const std::vector<ParamRange>& ranges, int64_t num_params);

class AdamW {
 public:
  // Elements per work item of the parallel loop. Fixed so the split never depends on the
  // thread count; 16K floats = 64 KiB of each of the four streams.
  static constexpr int64_t kChunk = int64_t{1} << 14;

  // Where the moments live: kOwn reserves them (zeroed) in an arena accounted to `tracker` (may
  // be null) as kOptimizerState; kElsewhere reserves none (the caller keeps them, e.g. on disk,
  // and steps through StepSliceWith; exp_avg() and exp_avg_sq() are then empty); kSized books
  // their bytes on `tracker` without them (a dry construction, runtime/train/memory_plan.h:
  // never stepped).
  enum class Moments { kOwn, kElsewhere, kSized };
  // `ranges` must pass ValidateParamRanges (CHECK: a bad list is a trainer bug). The step
  // counter starts at 0: no step taken yet.
  AdamW(const AdamWConfig& config, int64_t num_params, std::vector<ParamRange> ranges,
        MemoryTracker* tracker, Moments moments = Moments::kOwn);
  AdamW(AdamW&&) noexcept = default;
  AdamW& operator=(AdamW&&) noexcept = default;

  // Bytes of optimizer state for `num_params` elements (what the constructor reserves).
  static size_t StateBytes(int64_t num_params);

  // Takes step t = step() + 1 over all elements with learning rate `lr` (the scheduled value;
  // config.lr is only the peak the schedule scales), then sets step() to t.
  // params(num_params) is updated in place; grads(num_params) is read only.
  // grad_scale: the step uses grads[i] * grad_scale (a float multiply) in place of grads[i],
  // exactly the bits of ScaleInPlace(grads, n, grad_scale) followed by a step, without the
  // separate pass (gradient clipping folds its coefficient in here). The buffer is not
  // written. 1 (the default) means unscaled.
  void Step(float* params, const float* grads, float lr, float grad_scale = 1.0f);

  // The update of step `t` (>= 1) for elements [begin, end) only; does not touch step().
  // For chunked or offloaded updates: calling it over a partition of [0, num_params) with the
  // same t gives the same bits as Step.
  void StepRange(float* params, const float* grads, int64_t begin, int64_t end, float lr,
                 int64_t t, float grad_scale = 1.0f);

  // StepRange for buffers that hold elements [begin, end) only: params[0] and grads[0] are
  // element `begin` of this AdamW's coordinates (whose moments and decay ranges apply). Lets a
  // ZeRO rank step pieces living in different buffers against one packed set of moments.
  // StepRange(p, g, b, e, lr, t) == StepSlice(p + b, g + b, b, e, lr, t), bit for bit.
  void StepSlice(float* params, const float* grads, int64_t begin, int64_t end, float lr,
                 int64_t t, float grad_scale = 1.0f);
  // StepSlice with the moments of elements [begin, end) at m and v (m[0], v[0] are element
  // `begin`) instead of this AdamW's own: the step of state streamed from disk in chunks.
  void StepSliceWith(float* params, const float* grads, float* m, float* v, int64_t begin,
                     int64_t end, float lr, int64_t t, float grad_scale = 1.0f);

  // Steps taken so far (the t of the last step; 0 before the first). A checkpoint saves it
  // beside the moments and restores it with set_step.
  int64_t step() const { return step_; }
  void set_step(int64_t step);

  // Views of the moments, shape (num_params), fp32; valid while this AdamW lives. Writable so
  // a checkpoint can restore them.
  Tensor exp_avg() const { return exp_avg_; }
  Tensor exp_avg_sq() const { return exp_avg_sq_; }

  int64_t num_params() const { return num_params_; }
  const AdamWConfig& config() const { return config_; }
  // Sorted by offset.
  const std::vector<ParamRange>& ranges() const { return ranges_; }

 private:
  struct Span {
    int64_t begin;
    int64_t end;
  };

  AdamWConfig config_;
  int64_t num_params_;
  std::vector<ParamRange> ranges_;
  std::vector<Span> decay_spans_;  // the ranges with decay, sorted, non-empty
  Arena arena_;
  Tensor exp_avg_;     // (num_params) m
  Tensor exp_avg_sq_;  // (num_params) v
  int64_t step_ = 0;
};

}  // namespace tessera
