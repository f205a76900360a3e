// runtime/plan/step_time.h — how long one optimizer step of a layout takes on a cluster, by
// part, from FLOPs, bytes and the cluster's rates (cluster.h).
//
// The parts, per rank of the slowest pipeline stage (the one with the most blocks, the LM
// head breaking ties), per step of m = grad_accum_steps micro-batches:
//   compute     every GEMM of a block at the rate of its shape (cluster.h GemmRate): the
//               linear layers' forward, input and weight gradients (no weight gradient for a
//               frozen LoRA base) and the forward full recomputation repeats; attention's
//               per-head QK^T and PV, forward and backward (again forward under selective or
//               full recomputation; in fp32 on a CPU, whose bf16 path covers linear layers
//               only); an MoE block's router and experts at their balanced rows; the LM
//               head's classifier in its chunks of at most 256 rows
//   memory      the element-wise work at the cluster's element rate: the MLP's activation,
//               the causal softmax, the norms and residual adds, an MoE block's routed
//               activations, the vocabulary's softmax; recomputation repeats its forward half
//   tp          per block and micro-batch 2 all-reduces forward and 2 backward of the block's
//               activations (sequence parallelism: all-gather + reduce-scatter, the same
//               bytes); Tessera waits for each, so none overlaps
//   ep          per MoE block and micro-batch 2 all-to-alls forward and 2 backward of the
//               routed rows
//   pp          per micro-batch and chunk boundary the activation forward and its gradient
//               back, point to point
//   bubble      1F1B / GPipe: (pp - 1) / m of the busy time; interleaved: (pp - 1) / (v m)
//   dp          gradient reduction over the data-parallel group: ZeRO 0/1 bucketed
//               all-reduce launched during backward (only what outlasts the last
//               micro-batch's backward shows, at least one bucket); ZeRO 2 reduce-scatter per
//               unit during backward, ZeRO 1/2 an all-gather of the updated pieces after the
//               step; ZeRO 3 also all-gathers each unit before its forward and backward in
//               every micro-batch, prefetched behind the previous unit's compute
//   optimizer   AdamW over the rank's pieces: 28 bytes per element moved (+ the master
//               weights under mixed precision) / memory bandwidth; offload nvme: the state
//               file read and written at the host's NVMe bandwidth shared by its devices; cpu
//               offload on a device with a host link: gradients down and parameters up
// Collectives over g ranks move 2 (g - 1) / g of the bytes (all-reduce) or (g - 1) / g
// (all-gather, reduce-scatter, all-to-all) at the bandwidth of the slowest link the group
// spans, plus (g - 1) latencies per ring pass. Groups follow the mesh order
// (runtime/train/rank_layout.h): tp innermost, then ep, dp, and pp outermost, so a group
// stays within a host while the product of the sizes inside it fits in devices_per_host.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/partition.h"
#include "runtime/plan/cluster.h"
#include "runtime/train/config.h"

namespace tessera {

// What a pipeline stage's rank holds, for the time model: its blocks and parameters.
struct StageShape {
  int64_t blocks = 0, moe_blocks = 0;
  bool last = false;  // holds the LM head
  int64_t params = 0;         // local parameters (tp share, its experts)
  int64_t expert_params = 0;  // of which routed experts (reduced over the expert dp group)
  int64_t frozen_params = 0;  // of which a frozen LoRA base outside the experts (which LoRA
                              //   never adapts either): no gradients, no optimizer
};

// The shape of a pipeline stage holding `chunks`, from the unit sizes of the whole model's
// partition at the stage's tp and ep (models/partition.h), so a search over pipeline splits
// builds no partition per layout.
StageShape ShapeFromUnits(const ModelConfig& model, const ModelPartition& whole,
                          const std::vector<PipelineChunk>& chunks);

struct StepTime {
  double compute = 0, memory = 0, tp = 0, ep = 0, pp = 0, bubble = 0, dp = 0, optimizer = 0;
  double total = 0;
  double tokens_per_s = 0;  // the global batch's tokens per second
  double mfu = 0;           // model FLOPs per second per device / peak_flops
  std::string slowest;      // the largest part's name
};

// `stages`: one StageShape per pipeline stage of `config`'s layout. `flops_per_token`: TrainFlopsPerToken of the model at the
// config's sequence length and tp (models/transformer.h), for the MFU; computed when < 0 (it
// declares every parameter: a search passes it once per tp).
StepTime PredictStepTime(const Config& config, const ClusterSpec& cluster,
                         const std::vector<StageShape>& stages, double flops_per_token = -1);

}  // namespace tessera
