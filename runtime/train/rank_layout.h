// runtime/train/rank_layout.h — which part of the model a world rank holds under the config's
// parallel layout: its tensor-parallel share and its pipeline chunks (models/partition.h).
//
// Mesh order (comm/device_mesh.h): rank = ((pp_i * dp + dp_i) * ep + ep_i) * tp + tp_i, so the
// tp rank is rank % tp and the pipeline stage rank / (dp * ep * tp). Every rank can compute any
// other rank's layout (the global export and the checkpoint loader do).
// Pure functions; thread-safe.
#pragma once

#include <vector>

#include "models/parameter.h"
#include "models/partition.h"
#include "optimizer/adamw.h"
#include "runtime/core/status.h"
#include "runtime/train/config.h"

namespace tessera {

int TpRankOf(const ParallelConfig& p, int rank);
int PipelineStageOf(const ParallelConfig& p, int rank);
int DpRankOf(const ParallelConfig& p, int rank);
int EpRankOf(const ParallelConfig& p, int rank);

// The optimizer's view of a partition's local parameters: flat ranges (local offsets) with
// the weight-decay decision of each parameter's kind (optimizer.decay_norms / decay_biases /
// decay_embeddings; matrices always decay).
std::vector<ParamRange> DecayRanges(const ModelPartition& partition, const AdamWConfig& o);

// The global (one-rank) model's parameters as views over a flat fp32 buffer holding all of
// them in DeclareParameters order (for a whole-model weights file: the final export).
std::vector<Parameter> GlobalViews(const ModelConfig& model, float* base);

// The partition of world rank `rank`: tp share, its experts (ep), and chunks per parallel.pp, virtual_stages and
// pipeline_split. Errors are the config's (a layout the config check would refuse).
Result<ModelPartition> RankPartition(const Config& config, int rank);

}  // namespace tessera
