// runtime/train/pipeline.h — runs one optimizer step's micro-batches through this rank's
// pipeline chunks in the configured schedule (pipeline_schedule.h), sending activations to the
// next virtual stage and their gradients back, point to point with bounded waits.
//
// Owns: the point-to-point communicators, the send buffers and the assignment of micro-batches
// to the chunks' activation contexts; never the models or the parameter state.
// Channels: 2 * virtual_stages duplicates of the pp group. Activations leaving virtual stage vs
// (this rank's chunk c) travel on forward channel c, gradients arriving at chunk c on backward
// channel c. Each (channel, sender, receiver) then carries exactly one link between two
// virtual stages, in micro-batch order on both sides (every schedule runs a chunk's forwards,
// and its backwards, in micro-batch order), so the k-th message is always the k-th micro-batch
// and nothing needs tags.
// Waits: receives block (bounded by comm.timeout_s: a dead neighbour is a kTimeout naming the
// group, never a hang); sends are asynchronous, their buffers kept until they complete.
// Gradients: BeginMicroBatch(k) on the parameter state before each chunk's backward of micro k
// (param_shards.h), so accumulation over micro-batches adds the same per-unit sums in the same
// order as one rank. Tied embeddings: after the dp reduction, SyncTiedEmbeddings sums the first
// stage's embedding gradient and the last stage's copy's, so both copies take the same step.
// One stage (pp = 1, one chunk: the whole model): the same executor runs the one-stage case
// of 1F1B, F0 B0 F1 B1 ..., with no channels; each forward and the backward right after it
// are one fused pass of the model (Transformer::ForwardBackward, as the trainer ran them
// before: the same bits), so the trainer drives every layout through this one object.
// Thread-safety: the trainer's thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "models/transformer.h"
#include "runtime/core/status.h"
#include "runtime/train/param_state.h"
#include "runtime/train/pipeline_schedule.h"

namespace tessera {

struct PipelineOptions {
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int pp = 1;              // stages (ranks along pp)
  int stage = 0;           // this rank's
  int virtual_stages = 1;  // chunks per rank
  int micro_batches = 1;   // m: micro-batches per optimizer step on this rank
  // This rank's first micro-batch in the step's global batch (dp rank x m): micro k's
  // dropout masks come from StreamKey(step key, first_micro + k), the same in every layout.
  int64_t first_micro = 0;
};

// Activation contexts chunk c needs: the most micro-batches whose forward on that chunk has run
// and whose backward has not, over the schedule (Transformer ModelOptions::contexts).
std::vector<int> PipelineContextsPerChunk(const PipelineOptions& options);

struct PipelineStats {
  double busy_seconds = 0;  // inside ForwardStage / BackwardStage, last step
  double step_seconds = 0;  // the whole TrainStep, last step
  // The same summed over every step but the first (warm-up: first touches, connections).
  double total_busy_seconds = 0, total_step_seconds = 0;
  int64_t steps = 0;
  // 1 - busy / step over the steps after the first: this rank's idle share of the pipelined
  // passes (bubble + communication + stage imbalance).
  double mean_idle_fraction() const {
    return total_step_seconds > 0 ? 1.0 - total_busy_seconds / total_step_seconds : 0;
  }
};

class PipelineRunner {
 public:
  // `pp`: this rank's pipeline group (rank == stage; null for one stage, options.pp == 1 and
  // one chunk); `chunks`: this rank's models in chunk order, each with
  // PipelineContextsPerChunk contexts (one stage: any); `shards`: their parameter state (a
  // store whose units are the rank's partition). All must outlive the runner. Collective over
  // pp (the channel splits). `before_micro_batch` (may be empty), one stage only: runs before
  // each micro-batch's fused pass (the trainer reports its phase there).
  static Result<std::unique_ptr<PipelineRunner>> Create(const PipelineOptions& options,
                                                        Communicator* pp,
                                                        std::vector<Transformer*> chunks,
                                                        ParamState* shards,
                                                        std::function<void()> before_micro_batch = {});
  ~PipelineRunner();

  // Forward and backward of the step's m micro-batches: micro k's token ids at
  // inputs/targets + k * B * T (every stage passes all of them). Gradients are accumulated
  // into `shards` (after shards->BeginStep; FinishGradients is the caller's). Returns the sum
  // of the micro-batches' mean losses on the rank holding the last virtual stage, 0 elsewhere.
  // A failed transfer or collective comes back as its Status (the job must end).
  // `dropout_key`: the step's dropout stream (finetune.lora.dropout; 0 = none): each forward
  // gets its micro-batch's key (Transformer::SetDropoutKey), reset to 0 afterwards.
  Result<double> TrainStep(const int32_t* inputs, const int32_t* targets, float grad_scale,
                           uint64_t dropout_key = 0);

  // Forward only of one micro-batch through every virtual stage (evaluation): the mean loss on
  // the rank holding the last virtual stage, 0 elsewhere. One stage: the model's Forward.
  Result<double> Forward(const int32_t* inputs, const int32_t* targets);

  // Tied embeddings with pp > 1: adds the last stage's reduced gradient of its embedding copy
  // and the first stage's of the embeddings (the same units, the same ZeRO pieces), on both.
  // Call after shards->FinishGradients(), before the norm. No-op elsewhere.
  Status SyncTiedEmbeddings();

  const PipelineStats& stats() const { return stats_; }

 private:
  PipelineRunner(const PipelineOptions& options, std::vector<Transformer*> chunks,
                 ParamState* shards);
  // Peers and channels of chunk c's virtual stage.
  bool first_vs(int c) const { return c == 0 && options_.stage == 0; }
  bool last_vs(int c) const {
    return c == options_.virtual_stages - 1 && options_.stage == options_.pp - 1;
  }
  int prev_rank() const { return (options_.stage + options_.pp - 1) % options_.pp; }
  int next_rank() const { return (options_.stage + 1) % options_.pp; }
  // The chunk (on prev_rank) of the virtual stage before chunk c's.
  int prev_chunk(int c) const { return options_.stage > 0 ? c : c - 1; }
  Status Send(Communicator& channel, const float* data, int peer);
  Status Recv(Communicator& channel, float* data, int peer);
  Status DrainSends();
  // Made without a pp group: the whole model on this rank (options pp = 1, one chunk).
  bool one_stage() const { return pp_ == nullptr; }
  // The one-stage walk of the schedule: each forward fused with its backward.
  Result<double> TrainOneStage(const int32_t* inputs, const int32_t* targets, float grad_scale,
                               double* busy);
  Result<double> TrainStages(const int32_t* inputs, const int32_t* targets, float grad_scale,
                             double* busy);
  // The parameter state's and the model's errors after a pass.
  Status PassStatus(const Transformer& model) const;
  // Micro k's dropout key of this step (0 when the step has none).
  uint64_t MicroKey(int k) const;

  uint64_t step_key_ = 0;  // TrainStep's dropout_key while it runs
  PipelineOptions options_;
  std::vector<Transformer*> chunks_;
  ParamState* shards_;
  Communicator* pp_ = nullptr;
  std::vector<std::unique_ptr<Communicator>> forward_, backward_;  // per chunk
  std::unique_ptr<Communicator> embedding_;  // tied: first <-> last stage
  std::vector<PipeOp> ops_;
  int64_t elems_ = 0;  // floats per activation message: stage_rows * C
  int64_t tokens_ = 0;  // B * T
  std::vector<float> recv_;  // one incoming message
  struct PendingSend {
    std::unique_ptr<Work> work;
    std::vector<float> buffer;
  };
  std::deque<PendingSend> sends_;
  std::vector<std::vector<float>> free_buffers_;
  std::function<void()> before_micro_batch_;
  PipelineStats stats_;
};

}  // namespace tessera
