// runtime/train/rank_layout.cc — mesh coordinates and partitions of world ranks (rank_layout.h).
#include "runtime/train/rank_layout.h"

#include <algorithm>

namespace tessera {

int TpRankOf(const ParallelConfig& p, int rank) { return rank % std::max(1, p.tp); }

int PipelineStageOf(const ParallelConfig& p, int rank) {
  const int block = std::max(1, p.dp) * std::max(1, p.ep) * std::max(1, p.tp);
  return (rank / block) % std::max(1, p.pp);
}

int DpRankOf(const ParallelConfig& p, int rank) {
  return (rank / (std::max(1, p.tp) * std::max(1, p.ep))) % std::max(1, p.dp);
}

Result<ModelPartition> RankPartition(const Config& config, int rank) {
  const ParallelConfig& p = config.parallel;
  ASSIGN_OR_RETURN(std::vector<PipelineChunk> chunks,
                   PipelineChunks(config.model.num_layers, std::max(1, p.pp),
                                  PipelineStageOf(p, rank), std::max(1, p.virtual_stages),
                                  p.pipeline_split));
  return ModelPartition::Create(config.model, std::max(1, p.tp), TpRankOf(p, rank),
                                std::move(chunks));
}

}  // namespace tessera
