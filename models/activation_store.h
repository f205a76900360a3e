// models/activation_store.h — activations kept for backward in the activation dtype (bf16 /
// fp16), computed in fp32.
//
// Under `precision: bf16` every tensor a step keeps from forward to backward (the step's
// activations arena: the residual stream, the norm outputs, qkv, the attention probabilities
// and output, the MLP pre-activation and output, the final norm's output) is stored in the
// low type, so it takes half the bytes of fp32. Kernels still compute in fp32: an op writes
// its fp32 result into a workspace copy (Working), Commit rounds that copy to the low type in
// place — the value every later op reads — and stores its bits; backward reads a kept tensor
// back into a workspace copy (Read), which is exact. Because the fp32 copy holds exactly the
// stored value, the step computes the same bits as rounding fp32 buffers in place would, and
// norm statistics (mean, rstd), gradients and the loss stay fp32.
//
// Tensors kept in the workspace (recomputation, full-recompute forwards) stay fp32: they live
// for one block only, and narrowing them would cost a conversion for no memory. fp32 runs
// take no copies at all: Working and Read return the kept tensor itself.
//
// Workspace copies follow the workspace's stack discipline: the caller releases them.
// Thread-safety: a value type; one thread drives a step.
#pragma once

#include "models/block.h"

namespace tessera {

class ActivationStore {
 public:
  explicit ActivationStore(DType act_dtype) : act_dtype_(act_dtype) {}

  // A tensor for an activation kept in `arena`: in the activation dtype when `arena` is the
  // step's activations arena, fp32 otherwise.
  Tensor Keep(const StepContext& step, Arena& arena, Shape shape) const {
    const bool low = &arena == step.activations && act_dtype_ != DType::kF32;
    return arena.Allocate(low ? act_dtype_ : DType::kF32, shape);
  }

  // Where an op writes `kept`'s fp32 value: `kept` itself when fp32, else a workspace buffer
  // (uninitialised) that Commit stores from.
  float* Working(const StepContext& step, const Tensor& kept) const {
    if (kept.dtype() == DType::kF32) return kept.f32();
    return step.workspace->Allocate(DType::kF32, kept.shape()).f32();
  }

  // Rounds `working` (Working(kept)) to the activation dtype in place and, when `kept` is
  // stored low, stores its bits there (exact: the values are representable).
  void Commit(const StepContext& step, const Tensor& kept, float* working) const {
    Backend& be = *step.backend;
    if (act_dtype_ != DType::kF32) be.Round(act_dtype_, working, kept.numel());
    if (kept.dtype() != DType::kF32) be.ConvertFromF32(kept.dtype(), working, kept.data(), kept.numel());
  }

  // Commit of only the first `rows` rows of `kept` (a tensor sized for the worst case, e.g. the
  // experts' rows of models/moe.h, of which a step fills some).
  void CommitRows(const StepContext& step, const Tensor& kept, float* working,
                  int64_t rows) const {
    Commit(step, FirstRows(kept, rows), working);
  }

  // Read of only the first `rows` rows; the workspace copy is sized for all of `kept` (so the
  // measuring pass, which fills no rows, sizes the workspace for the worst case).
  const float* ReadRows(const StepContext& step, const Tensor& kept, int64_t rows) const {
    if (kept.dtype() == DType::kF32) return kept.f32();
    float* f = step.workspace->Allocate(DType::kF32, kept.shape()).f32();
    const Tensor part = FirstRows(kept, rows);
    step.backend->ConvertToF32(part.dtype(), part.data(), f, part.numel());
    return f;
  }

  // `kept`'s values as fp32: itself when fp32, else widened into a workspace buffer.
  const float* Read(const StepContext& step, const Tensor& kept) const {
    if (kept.dtype() == DType::kF32) return kept.f32();
    float* f = step.workspace->Allocate(DType::kF32, kept.shape()).f32();
    step.backend->ConvertToF32(kept.dtype(), kept.data(), f, kept.numel());
    return f;
  }

  // kept = values (already of the activation dtype: another stage's output), and back out.
  void Store(const StepContext& step, const Tensor& kept, const float* values) const {
    step.backend->ConvertFromF32(kept.dtype(), values, kept.data(), kept.numel());
  }
  void Load(const StepContext& step, const Tensor& kept, float* values) const {
    step.backend->ConvertToF32(kept.dtype(), kept.data(), values, kept.numel());
  }

  DType act_dtype() const { return act_dtype_; }

 private:
  // The first `rows` rows of t (a view).
  static Tensor FirstRows(const Tensor& t, int64_t rows) {
    const int64_t width = t.shape()[0] > 0 ? t.numel() / t.shape()[0] : 0;
    return Tensor(t.data(), t.dtype(), {rows, width}, t.device());
  }

  DType act_dtype_;
};

}  // namespace tessera
