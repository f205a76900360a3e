// runtime/train/expert_split_state.h — a rank's parameter state under expert parallelism
// (parallel.ep > 1).
//
// Dense parameters (embeddings, attention, norms, routers, shared experts, the head) are the
// same on every rank of the dense group (dp x ep ranks, comm/device_mesh.h kDpEp): their
// gradients are reduced and their ZeRO state partitioned over it, as without experts. A
// rank's routed experts (its E/ep of every MoE block, models/partition.h) are replicated only
// over the expert-data-parallel group (the dp ranks holding the same experts, kDp): their
// gradients are reduced and their ZeRO 1-3 state partitioned over that group. So the state is
// two ParamShards (param_shards.h) over the same units, each owning one kind (the other
// kind's units are empty in it), behind one ParamState whose flat offsets are the model's
// local layout.
// Figures that span both: the gradient norm adds the dense sum (over the dense group) and the
// experts' sums of every ep rank (gathered over kEp, added in ep rank order), so every rank
// gets the same number (not the segmented bits of a one-rank run: the sums are grouped
// differently). GatherFull hands the dense values from the dense root to the other ep ranks
// of its dp index (a broadcast over kEp) so each of them holds its whole local model.
// Failures: the parts' own (status()), and the ep group's (kept here): the trainer checks
// status() and ends the job, as with ParamShards.
// Not thread-safe: the trainer's thread drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/train/param_shards.h"
#include "runtime/train/param_state.h"
#include "runtime/train/unit_subset.h"

namespace tessera {

class ExpertSplitState final : public ParamState {
 public:
  // `bounds`: the model's local unit bounds; options.expert_units: which units hold routed
  // experts; `ranges`: the local decay ranges. `dense_dp`: the dense group and `expert_dp`:
  // the expert-data-parallel group (each null when it has one rank); `ep`: the
  // expert-parallel group (size >= 2).
  static Result<std::unique_ptr<ExpertSplitState>> Create(
      const ParamShardsOptions& options, const AdamWConfig& adamw, std::vector<int64_t> bounds,
      const std::vector<ParamRange>& ranges, Communicator* dense_dp, Communicator* expert_dp,
      Communicator* ep, MemoryTracker* tracker);

  Status Load(const Fill& fill) override;
  void BeginStep() override;
  void BeginMicroBatch(int64_t micro) override;
  Status FinishGradients() override;
  // = GradSumOfSquaresExcluding({}).
  Result<double> GradSumOfSquares() override;
  Result<double> GradSumOfSquaresExcluding(
      const std::vector<std::pair<int64_t, int64_t>>& exclude) override;
  std::span<float> ReducedGrads(int unit) override;
  void ScaleGradients(float factor) override;
  Status Step(float lr, float grad_scale = 1.0f) override;
  // Only root 0: every rank at dp index 0 gets its n local values, the others nothing.
  Result<std::vector<float>> GatherFull(int root) override;
  std::vector<SaveSpan> SaveSpans() const override;
  Status LoadMoments(const Fill& fill_m, const Fill& fill_v, int64_t adamw_step) override;
  std::vector<const OffloadFile*> OffloadFiles() const override;
  int64_t adamw_step() const override { return dense_.shards->adamw_step(); }
  const Status& status() const override;
  std::string Describe() const override;

  // ParamStore (models/param_store.h): each unit goes to the part that owns it.
  const float* Acquire(int unit) override { return Owner(unit).shards->Acquire(unit); }
  void Release(int unit) override { Owner(unit).shards->Release(unit); }
  void Prefetch(int unit) override { Owner(unit).shards->Prefetch(unit); }
  float* Grads(int unit) override { return Owner(unit).shards->Grads(unit); }
  void GradsDone(int unit) override { Owner(unit).shards->GradsDone(unit); }

 private:
  // One kind's state and where its flat elements lie: unit u is part flat [bounds[u],
  // bounds[u + 1]) and model flat [model_bounds_[u], ...) (empty when the other kind's).
  struct Part {
    std::unique_ptr<ParamShards> shards;
    UnitSubset units;
  };
  ExpertSplitState() = default;
  Part& Owner(int unit) { return is_expert_[static_cast<size_t>(unit)] ? experts_ : dense_; }
  Status Fail(const Status& s);

  std::vector<bool> is_expert_;
  Part dense_, experts_;
  Communicator* expert_dp_ = nullptr;
  Communicator* ep_ = nullptr;
  Status status_ = Status::Ok();
};

}  // namespace tessera
