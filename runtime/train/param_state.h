// runtime/train/param_state.h — what the trainer, the pipeline runner and the checkpointer
// ask of a rank's parameter state, whoever holds it: the model's store (models/param_store.h)
// plus the step protocol, the gradient norm, the update and the checkpoint shares.
//
// Two implementations: ParamShards (param_shards.h: every unit's state over one data-parallel
// group) and ExpertSplitState (expert_split_state.h: under expert parallelism the dense units
// over the dense group and the expert units over the expert-data-parallel group, two
// ParamShards behind this one face). Flat offsets here are always the model's local flat
// layout (models/partition.h unit_bounds).
// Not thread-safe: the trainer's thread drives it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/param_store.h"
#include "optimizer/offload_file.h"
#include "runtime/core/status.h"

namespace tessera {

class ParamState : public ParamStore {
 public:
  // Fills out with the fp32 values of local flat elements [begin, end).
  using Fill = std::function<void(int64_t begin, int64_t end, float* out)>;
  // Reads n fp32 values of kind k (0 values, 1 exp_avg, 2 exp_avg_sq) starting `offset`
  // elements into a span: state that is not resident (optimizer.offload: nvme).
  using SpanRead = std::function<Status(int kind, int64_t offset, int64_t n, float* out)>;
  // One flat range of this rank's share of the saved state (param_shards.h SaveSpans). A kind
  // whose pointer is null lives on disk: `read` gives it, verified (from the checkpoint's
  // writer thread, before the next optimizer step).
  struct SaveSpan {
    int64_t begin = 0, end = 0;  // flat elements
    const float* values = nullptr;
    const float* exp_avg = nullptr;
    const float* exp_avg_sq = nullptr;
    SpanRead read;
  };
  ~ParamState() override = default;

  // The contracts are ParamShards' (param_shards.h), over the whole local layout.
  virtual Status Load(const Fill& fill) = 0;
  // Of Load, only the parameters that train / only the frozen ones (finetune.lora,
  // lora_state.h: a resume reads the adapters from a checkpoint, the base from where it
  // started). Without frozen parameters: Load, and nothing.
  virtual Status LoadTrainable(const Fill& fill) { return Load(fill); }
  virtual Status LoadFrozen(const Fill& fill) { return Status::Ok(); }
  virtual void BeginStep() = 0;
  virtual void BeginMicroBatch(int64_t micro) = 0;
  virtual Status FinishGradients() = 0;
  virtual Result<double> GradSumOfSquares() = 0;
  virtual Result<double> GradSumOfSquaresExcluding(
      const std::vector<std::pair<int64_t, int64_t>>& exclude) = 0;
  virtual std::span<float> ReducedGrads(int unit) = 0;
  virtual void ScaleGradients(float factor) = 0;
  virtual Status Step(float lr, float grad_scale = 1.0f) = 0;
  virtual Result<std::vector<float>> GatherFull(int root) = 0;
  virtual std::vector<SaveSpan> SaveSpans() const = 0;
  virtual Status LoadMoments(const Fill& fill_m, const Fill& fill_v, int64_t adamw_step) = 0;
  // The disk tier's files (optimizer.offload: nvme), for the run's reports; empty otherwise.
  virtual std::vector<const OffloadFile*> OffloadFiles() const { return {}; }
  virtual int64_t adamw_step() const = 0;
  virtual const Status& status() const = 0;
  virtual std::string Describe() const = 0;
};

}  // namespace tessera
