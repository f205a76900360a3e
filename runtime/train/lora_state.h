// runtime/train/lora_state.h — a rank's parameter state under finetune.lora: the base model
// frozen, the adapters trained.
//
// The base units (everything DeclareParameters marks frozen) are held whole on every
// data-parallel rank, as this rank's partition gives them (its tp slices, pipeline chunks),
// in fp32 or, with finetune.lora.base_dtype: bf16, rounded to bf16 (half the bytes; a unit is
// upcast into one of two unit buffers, of the largest and the second-largest unit, while the
// model uses it). They have no gradients
// (Grads returns null: the model skips their weight gradients), no optimizer state and are
// never saved: SaveSpans and the checkpoints hold the adapters only, and a resume reads the
// base again from init_from (or the seed's init).
// The adapter units (ModelPartition::adapter_units) are an ordinary ParamShards over the
// data-parallel group (unit_subset.h: the base units empty in it): ZeRO 0-3, precision,
// offload, the gradient norm and the update are its, over the adapters alone.
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

class LoraState final : public ParamState {
 public:
  // `bounds`: the model's local unit bounds; `adapter_units`: the local units that train;
  // `ranges`: the local decay ranges; `dp`: the data-parallel group or null.
  static Result<std::unique_ptr<LoraState>> Create(const ParamShardsOptions& options,
                                                   const AdamWConfig& adamw,
                                                   std::vector<int64_t> bounds,
                                                   const std::vector<ParamRange>& ranges,
                                                   const std::vector<int>& adapter_units,
                                                   bool base_bf16, Communicator* dp,
                                                   MemoryTracker* tracker);

  Status Load(const Fill& fill) override;
  Status LoadTrainable(const Fill& fill) override;
  Status LoadFrozen(const Fill& fill) override;
  void BeginStep() override { adapters_->BeginStep(); }
  void BeginMicroBatch(int64_t micro) override { adapters_->BeginMicroBatch(micro); }
  Status FinishGradients() override { return adapters_->FinishGradients(); }
  Result<double> GradSumOfSquares() override { return adapters_->GradSumOfSquares(); }
  Result<double> GradSumOfSquaresExcluding(
      const std::vector<std::pair<int64_t, int64_t>>& exclude) override;
  // Empty for a frozen unit.
  std::span<float> ReducedGrads(int unit) override;
  void ScaleGradients(float factor) override { adapters_->ScaleGradients(factor); }
  Status Step(float lr, float grad_scale = 1.0f) override;
  // Root gets the whole local model: the base as held, the adapters gathered.
  Result<std::vector<float>> GatherFull(int root) override;
  std::vector<SaveSpan> SaveSpans() const override;
  Status LoadMoments(const Fill& fill_m, const Fill& fill_v, int64_t adamw_step) override;
  std::vector<const OffloadFile*> OffloadFiles() const override { return adapters_->OffloadFiles(); }
  int64_t adamw_step() const override { return adapters_->adamw_step(); }
  const Status& status() const override { return adapters_->status(); }
  std::string Describe() const override;

  // ParamStore (models/param_store.h): adapter units go to the adapters' ParamShards.
  const float* Acquire(int unit) override;
  void Release(int unit) override;
  void Prefetch(int unit) override;
  float* Grads(int unit) override;
  void GradsDone(int unit) override;

 private:
  struct Buffer {
    int unit = -1;  // the base unit it holds upcast, -1 when free
    Tensor values;
  };
  LoraState() = default;
  // Base unit u's values as fp32 into out.
  void ReadBase(int unit, float* out) const;

  UnitSubset adapter_units_;
  std::unique_ptr<ParamShards> adapters_;
  Communicator* dp_ = nullptr;
  Backend* backend_ = nullptr;
  DType base_dtype_ = DType::kF32;
  int64_t base_elements_ = 0;
  std::vector<Arena> arenas_;
  Tensor base_;                    // the base units, packed in unit order
  std::vector<int64_t> base_at_;   // per unit: where a base unit starts in base_
  std::vector<Buffer> buffers_;  // bf16: the upcast units in use
};

}  // namespace tessera
