// runtime/train/param_shards.h — the data-parallel state of the parameters: where they are
// stored (replicated or ZeRO-3 partitioned, fp32 or a low-precision type), how each unit
// reaches the model (models/param_store.h), how each unit's gradients are reduced, and this
// rank's optimizer (ZeRO 0-3, fp32 master weights under mixed precision).
//
// Owns, by configuration (n = parameters, S = this rank's packed size ~ n / dp,
// shard_layout.h; "low" = bf16 or fp16):
//   parameters   zero 0-2: the full flat buffer in the parameter type (n);
//                zero 3: this rank's packed pieces in the parameter type (S)
//   gradients    zero 0/1: a full fp32 buffer (n) all-reduced in buckets during backward;
//                zero 2/3: the rank's reduced pieces only (S, fp32)
//   optimizer    ShardedAdamW over the rank's pieces (zero 0: every piece, one rank's layout);
//                with low precision it keeps the fp32 master weights (S)
//   unit buffers gathered / upcast parameters of at most four units (embeddings, final unit,
//                two alternating blocks: the one in use and the prefetched one) and, zero 2/3
//                or with accumulation, the per-unit gradient buffers of the same four slots;
//                zero 1/2: the all-gather staging, about one gradient bucket (comm.bucket_mb).
// The collectives per step (dp > 1):
//   zero 0/1  BucketedAllReduce of the fp32 gradients (grad_sync.h), launched as backward
//             finishes each bucket; zero 1 then all-gathers each unit's updated pieces
//   zero 2    each unit's gradients reduce-scattered into its owners' pieces the moment
//             backward finishes the unit (overlapping the rest of backward), then the pieces
//             all-gathered after the step as zero 1
//   zero 3    as zero 2 for gradients; each unit's parameters all-gathered just before its
//             forward and backward (the next unit prefetched while this one computes), never
//             after the step
// All reductions are ReduceOrder::kRankOrder sums, so with grad_accum_steps 1 a dp-rank run
// adds the same numbers in the same order as one rank accumulating dp micro-batches: same
// bits. Reductions in a low type (mixed_precision.reduce_dtype: low) round once more and are
// only close.
// Mixed precision on CPU: parameters are stored in the low type and upcast to fp32 for the
// kernels; each micro-batch's unit gradients are rounded to the low type (what a GPU would
// store; fp16 overflows to inf there, which the loss scaler detects) before being reduced.
// Failures: a collective that fails or times out inside the model's step or evaluation
// (Acquire, GradsDone) aborts the communicator (so every later wait returns at once) and is
// kept in status(); the trainer checks it after each micro-batch (training and evaluation)
// and ends the job. Until then the model computes on whatever the slots hold and may write
// buffers that a timed-out MPI operation still references (MPI cannot cancel): harmless only
// because the process ends (AbortJob) without reusing this object. Not thread-safe: the
// trainer's thread drives it (the comm backend moves data on its own thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "models/param_store.h"
#include "runtime/train/param_state.h"
#include "optimizer/shard_layout.h"
#include "optimizer/zero.h"
#include "runtime/core/memory.h"
#include "runtime/core/status.h"
#include "runtime/kernels/backend.h"
#include "runtime/train/grad_sync.h"

namespace tessera {

struct ParamShardsOptions {
  int zero = 0;                       // parallel.zero (0..3); 1..3 need dp > 1 to partition
  DType param_dtype = DType::kF32;    // precision: storage type of parameters
  DType reduce_dtype = DType::kF32;   // wire type of gradient reductions
  int64_t grad_accum_steps = 1;       // micro-batches per step on this rank
  int64_t bucket_elems = 1 << 22;     // zero 0/1 all-reduce bucket (elements)
  // Units besides unit 0 that hold embeddings the LM head reads while the final unit is in
  // use and whose gradient buffer stays open through the blocks' backward: a pipeline's last
  // stage's copy of tied embeddings (the first unit of its last chunk). They get the
  // embedding slot, not a block slot a block would reuse.
  std::vector<int> embedding_units;
  // Units holding an MoE block's routed experts (ModelPartition::expert_units): acquired
  // together with their block's unit, so they alternate between two slots of their own.
  std::vector<int> expert_units;
  // The compute backend whose device holds this state: it provides the arenas and converts
  // and adds the buffers (dtype conversions, gradient accumulation). Null: the CPU reference.
  Backend* backend = nullptr;
  // optimizer.offload: nvme: where the optimizer's moments (and master weights) live; the file
  // is disk->path + ".bin". Unset: in memory.
  std::optional<ShardedAdamWDisk> disk;
  // A dry construction (memory_plan.h): `backend` is a sizing MeasuringBackend and the
  // optimizer ShardedAdamW::Sizing, so every buffer is booked on the tracker and none held.
  // Such a state is only read for its accounting.
  bool sizing = false;
};

class ParamShards final : public ParamState {
 public:
  // `bounds`: the model's unit bounds (UnitBounds); `ranges`: its flat decay ranges; `dp`: the
  // data-parallel group or null for one process. Reserves every buffer (see the file comment).
  static Result<std::unique_ptr<ParamShards>> Create(const ParamShardsOptions& options,
                                                     const AdamWConfig& adamw,
                                                     std::vector<int64_t> bounds,
                                                     const std::vector<ParamRange>& ranges,
                                                     Communicator* dp, MemoryTracker* tracker);
  ~ParamShards() override;

  // Sets every parameter (and master weight) from fill(begin, end, out), which must write the
  // fp32 values of flat elements [begin, end) to out. Called with sub-ranges only. Fails only
  // with state on disk (I/O).
  Status Load(const Fill& fill) override;

  // Training step protocol: BeginStep(); for each micro-batch k: BeginMicroBatch(k), the
  // model's ForwardBackward, check status(); then FinishGradients(), GradSumOfSquares(),
  // ScaleGradients() as needed, Step(lr, grad_scale).
  void BeginStep() override;
  void BeginMicroBatch(int64_t micro) override;
  // Waits for every gradient reduction of the step. Afterwards this rank holds the reduced
  // (summed over ranks and micro-batches) gradients of its pieces.
  Status FinishGradients() override;
  // The global sum of squares of the reduced gradient (ShardLayout's segmented definition:
  // the same bits whatever dp and stage). Collective for zero 2/3.
  Result<double> GradSumOfSquares() override;
  // The sum of squares of the reduced gradient over the dp group, leaving out the flat
  // ranges `exclude` (sorted, disjoint; a tensor-parallel rank's copies of replicated
  // parameters, which tp rank 0 counts). Per-element double accumulation in flat order, then
  // the dp ranks' sums in rank order (a collective for zero 2/3): deterministic, the same on
  // every dp rank, but not the segmented bits of GradSumOfSquares.
  Result<double> GradSumOfSquaresExcluding(
      const std::vector<std::pair<int64_t, int64_t>>& exclude) override;
  // This rank's reduced gradients of unit u after FinishGradients: the whole unit (zero 0/1)
  // or its piece (zero 2/3: piece_real elements), for in-place fix-ups such as the tied
  // embedding sum across pipeline stages.
  std::span<float> ReducedGrads(int unit) override;
  // Multiplies this rank's reduced gradients by `factor` (loss-scale removal, clipping).
  void ScaleGradients(float factor) override;
  // AdamW over this rank's pieces, the rounding of master weights into low-precision
  // parameters and (zero 1/2) the all-gather of every unit's updated pieces. grad_scale: the
  // clipping coefficient folded into AdamW's read of the gradients (the bits of
  // ScaleGradients(grad_scale) then Step(lr), one pass fewer; the gradients are not written).
  Status Step(float lr, float grad_scale = 1.0f) override;
  // The full fp32 (master) weights, gathered unit by unit; every rank must call it, only
  // `root` gets the n values (the others get an empty vector).
  Result<std::vector<float>> GatherFull(int root) override;

  // ---- checkpoints (runtime/train/checkpointer.h) ----
  // This rank's share of the saved state: flat ranges with the fp32 values of the
  // parameters (master weights under mixed precision) and of both AdamW moments. The shares of
  // all ranks cover [0, num_params) exactly once: the rank's pieces of a dp-rank layout, also
  // when the state is replicated (ZeRO 0: every rank writes 1/dp of it).
  std::vector<SaveSpan> SaveSpans() const override;
  // Sets this rank's AdamW moments from fill_m / fill_v (flat ranges, as Load) and the AdamW
  // step counter; the parameters come from Load.
  Status LoadMoments(const Fill& fill_m, const Fill& fill_v, int64_t adamw_step) override;
  std::vector<const OffloadFile*> OffloadFiles() const override;
  int64_t adamw_step() const override { return optimizer_->adamw().step(); }

  // The first communication failure seen inside the model's step, else OK.
  const Status& status() const override { return status_; }
  const ShardedAdamW& optimizer() const { return *optimizer_; }
  const ShardLayout& layout() const { return layout_; }
  int zero() const { return zero_; }
  // "zero 3: 4 units/rank ..., reduce fp32, params bf16" for the startup banner.
  std::string Describe() const override;

  // ParamStore (models/param_store.h).
  const float* Acquire(int unit) override;
  void Release(int unit) override;
  void Prefetch(int unit) override;
  float* Grads(int unit) override;
  void GradsDone(int unit) override;

 private:
  struct Slot;
  ParamShards(const ParamShardsOptions& options, ShardLayout layout, Communicator* dp,
              MemoryTracker* tracker);
  Status Init(const AdamWConfig& adamw, const std::vector<ParamRange>& ranges);
  void ReserveStateBuffers();
  void ReserveSlots();
  Tensor Reserve(MemoryKind kind, DType dtype, int64_t n);
  int SlotOf(int unit) const;
  void Fail(const Status& s);
  void StartGather(int unit);
  void LaunchReduceScatter(int unit, float* grads);
  void CompleteReduceScatter(Slot& slot);
  Status AllGatherUnits();
  float* FullF32() const;                 // the full fp32 parameters (zero 0-2, fp32 storage)
  char* Storage(int64_t flat_begin) const;  // zero 0-2: address of a flat element in full_
  char* ShardStorage(int unit) const;       // zero 3: address of unit u's piece in shard_
  // Per unit: this rank's reduced gradients of its piece (piece_real elements each).
  std::vector<float*> GradPieces();

  ParamShardsOptions options_;
  ShardLayout layout_;
  Communicator* dp_;  // null: one rank
  int rank_ = 0, ranks_ = 1;
  int zero_ = 0;      // effective stage: 0 when dp == 1
  bool low_ = false;  // parameters stored in a low-precision type
  MemoryTracker* tracker_;
  Backend* backend_;  // options_.backend, or the CPU reference
  std::vector<Arena> arenas_;  // one per reserved buffer
  std::unique_ptr<ShardedAdamW> optimizer_;

  Tensor full_;          // zero 0-2: (n) parameters in param_dtype
  Tensor shard_;         // zero 3: (S) packed pieces in param_dtype
  Tensor main_grads_;    // zero 0/1: (n) fp32
  Tensor part_grads_;    // zero 2/3: (S) fp32 reduced pieces
  std::unique_ptr<BucketedAllReduce> all_reduce_;  // zero 0/1, dp > 1
  Tensor ag_send_, ag_recv_;  // zero 1/2: all-gather staging (chunk, dp * chunk)
  int64_t ag_chunk_ = 0;

  std::vector<std::unique_ptr<Slot>> slots_;  // see SlotOf
  int final_unit_ = 0;  // the last unit that holds no experts
  std::vector<float*> grads_of_;  // per unit: this micro-batch's gradient buffer, or null
  int64_t micro_ = 0;
  Status status_ = Status::Ok();
};

}  // namespace tessera
