// runtime/train/rank_layout.cc — mesh coordinates and partitions of world ranks (rank_layout.h).
#include "runtime/train/rank_layout.h"

#include <algorithm>

#include "models/hf_weights.h"

namespace tessera {

int TpRankOf(const ParallelConfig& p, int rank) { return rank % std::max(1, p.tp); }

int PipelineStageOf(const ParallelConfig& p, int rank) {
  const int block = std::max(1, p.dp) * std::max(1, p.ep) * std::max(1, p.tp);
  return (rank / block) % std::max(1, p.pp);
}

int DpRankOf(const ParallelConfig& p, int rank) {
  return (rank / (std::max(1, p.tp) * std::max(1, p.ep))) % std::max(1, p.dp);
}

int EpRankOf(const ParallelConfig& p, int rank) {
  return (rank / std::max(1, p.tp)) % std::max(1, p.ep);
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

// The global (one-rank) model's parameters as views over a flat fp32 buffer of all of them,
// in DeclareParameters order (for a weights file).
std::vector<Parameter> GlobalViews(const ModelConfig& model, float* base) {
  std::vector<Parameter> views = HfGlobalSpecs(model);
  for (Parameter& p : views) p.value = Tensor(base + p.offset, DType::kF32, p.spec.global_shape);
  return views;
}

Result<ModelPartition> RankPartition(const Config& config, int rank) {
  const ParallelConfig& p = config.parallel;
  ASSIGN_OR_RETURN(std::vector<PipelineChunk> chunks,
                   PipelineChunks(config.model.num_layers, std::max(1, p.pp),
                                  PipelineStageOf(p, rank), std::max(1, p.virtual_stages),
                                  p.pipeline_split, p.account_for_embedding_and_head));
  return ModelPartition::Create(config.model, std::max(1, p.tp), TpRankOf(p, rank),
                                std::move(chunks), std::max(1, p.ep), EpRankOf(p, rank));
}

}  // namespace tessera
