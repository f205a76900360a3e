// runtime/train/moe_balance.h — what a training step does with its MoE blocks' routing once
// the gradients are applied: the routing statistics summed over the whole job, the
// aux-loss-free balancing bias moved by them, and the report a user watches.
//
// Every MoE block is held by one pipeline stage; its statistics (models/moe.h MoeLayerState)
// are the sums over that stage's micro-batches on each data-parallel rank. FinishMoeStep sums
// them over the data-parallel ranks (rank order, exact: counts are integers far below 2^53) and
// gathers the stages' blocks, so every rank ends with the same report. Tensor-parallel ranks
// hold identical statistics (every tp rank routes the same tokens) and are not summed.
// The bias of model.moe.bias_update_rate (DeepSeek-V3's auxiliary-loss-free balancing):
//   bias_e += rate * sign(mean_e' count_e' - count_e)
// with the counts of the whole step over the data-parallel world, on every rank that holds
// the block (so replicas stay identical); a skipped step moves nothing.
// Thread-safety: one driving thread; the collectives are the trainer's groups.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "models/model_config.h"
#include "models/moe.h"
#include "runtime/core/status.h"

namespace tessera {

// One MoE block of the step, over the whole job.
struct MoeLayerReport {
  int64_t layer = 0;            // global block index
  std::vector<int64_t> counts;  // (E) tokens that chose each expert (before capacity drops)
  double dropped = 0;           // fraction of assignments capacity dropped
  double imbalance = 0;         // max count / mean count (1 = perfectly balanced)
  double aux_loss = 0;          // mean auxiliary loss per micro-batch
  std::vector<float> bias;      // (E) the balancing bias after the step's update
  float bias_min = 0, bias_max = 0;
};

struct MoeStepReport {
  std::vector<MoeLayerReport> layers;  // in layer order; empty for a dense model
  double aux_loss = 0;                 // sum over the blocks of their mean auxiliary loss
  double worst_imbalance = 0;          // the largest imbalance of any block
  int64_t worst_layer = -1;            // where it is
};

// A block as this rank holds it: its global index and its state.
struct LocalMoeLayer {
  int64_t layer;
  MoeLayerState* state;
};

// Sums the local blocks' statistics over `dp` (null: one rank), gathers the blocks of every
// pipeline stage over `pp` (null: one stage), moves each local block's bias when `applied`
// and the rate is > 0, resets the local statistics, and returns the report (the same on
// every rank). Failures are the collectives'.
Result<MoeStepReport> FinishMoeStep(const ModelConfig& model, std::span<const LocalMoeLayer> local,
                                    Communicator* dp, Communicator* pp, bool applied);

// "moe: worst imbalance 1.42 (layer 3), aux 0.0123" for the progress line's tail, "" when
// the report is empty.
std::string FormatMoeProgress(const MoeStepReport& r);

// The end-of-run block: per block, the per-expert share of the tokens summed over `steps`
// reports as a text histogram, so a hot expert stands out.
std::string FormatMoeHistogram(const std::vector<MoeLayerReport>& summed, int64_t steps);

}  // namespace tessera
