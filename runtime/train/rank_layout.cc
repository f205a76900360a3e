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

std::vector<ParamRange> DecayRanges(const ModelPartition& partition, const AdamWConfig& o) {
  std::vector<ParamRange> ranges;
  for (const TpParam& p : partition.params()) {
    const ParamDecl& d = p.local;
    bool decay = true;
    switch (d.kind) {
      case ParamKind::kMatrix: decay = true; break;
      case ParamKind::kNorm: decay = o.decay_norms; break;
      case ParamKind::kBias: decay = o.decay_biases; break;
      case ParamKind::kEmbedding: decay = o.decay_embeddings; break;
    }
    ranges.push_back({p.local_offset, d.shape.numel(), decay, d.name});
  }
  return ranges;
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
