// models/partition.cc — the Megatron tensor-parallel split of DeclareParameters (partition.h):
// which tensors split how, each rank's local shapes and flat layout, the local -> global element
// map (segments), and the init of a local range with the one-rank model's bits.
//
// Every split is the split the parameter declares (param_layout.h), stated as a ShardedTensor:
// one slice of one dim of a view of the tensor (GPT-2's c_attn viewed as its [q | k | v]
// blocks). Segments are the tensor's runs in local order, merged where contiguous in both
// layouts, so with tp = 1 every tensor is one segment and the layout is DeclareParameters'.
// Pure functions of (config, tp size, tp rank, chunks); a ModelPartition is an immutable value.
#include "models/partition.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/core/check.h"

namespace tessera {
namespace {

// Appends [local, local + length) -> [global, global + length), merging with the previous
// segment when both sides continue it.
void AddSegment(std::vector<TpSegment>& segments, int64_t local, int64_t global, int64_t length) {
  if (length <= 0) return;
  if (!segments.empty()) {
    TpSegment& last = segments.back();
    if (last.local_begin + last.length == local && last.global_begin + last.length == global) {
      last.length += length;
      return;
    }
  }
  segments.push_back({local, global, length});
}

// What rank `r` of `t` holds of the declared tensor `decl`, by its declared split. Every split
// is one slice of one dim of a view of the tensor: kRows with `tp_blocks` stacked blocks (GPT-2
// c_attn's [q | k | v]) views (rows, ...) as (blocks, rows / blocks, ...) and slices dim 1, so
// the blocks need no code of their own.
ShardedTensor SliceOf(const ParamDecl& decl, int t, int r, int64_t vocab_size,
                      int64_t vocab_per_rank) {
  const Shape& g = decl.shape;
  const int64_t rows = g[0];
  Shape local = g;
  switch (decl.tp_split) {
    case TpSplit::kReplicated: {
      ShardedTensor whole = ShardedTensor::Whole(decl.name, g);
      whole.replica.tp = r;  // every tp rank holds it; rank 0's is the main copy
      return whole;
    }
    case TpSplit::kRows: {
      // Block b's rows [r*h, (r+1)*h), h = block height / t, stored as local block b.
      const int64_t blocks = decl.tp_blocks, block_rows = rows / blocks, h = block_rows / t;
      TESSERA_CHECK(block_rows * blocks == rows && h * t == block_rows);
      local[0] = blocks * h;
      if (blocks == 1) {
        return ShardedTensor::Split(decl.name, g, g, 0, ShardGroup::kTp, r * h, h, local);
      }
      Shape view{blocks, block_rows};
      for (int d = 1; d < g.rank(); ++d) view.push_back(g[d]);
      return ShardedTensor::Split(decl.name, g, view, 1, ShardGroup::kTp, r * h, h, local);
    }
    case TpSplit::kCols: {
      TESSERA_CHECK(g.rank() == 2 && g[1] % t == 0);
      const int64_t w = g[1] / t;
      local[1] = w;
      return ShardedTensor::Split(decl.name, g, g, 1, ShardGroup::kTp, r * w, w, local);
    }
    case TpSplit::kVocab: {
      // Rows at or past vocab_size are padding: held, mapped to no global element.
      TESSERA_CHECK(rows == vocab_size);
      const int64_t first = std::min(vocab_size, vocab_per_rank * r);
      const int64_t real = std::min(vocab_size, vocab_per_rank * r + vocab_per_rank) - first;
      local[0] = vocab_per_rank;
      return ShardedTensor::Split(decl.name, g, g, 0, ShardGroup::kTp, first, real, local);
    }
  }
  return ShardedTensor::Whole(decl.name, g);
}

// Expert-parallel rank r's experts of the stacked (E, ...) tensor `decl`: rows [r*E/ep,
// (r+1)*E/ep) of its expert axis, held whole by every tp rank (tp rank 0's is the main copy).
ShardedTensor ExpertSlice(const ParamDecl& decl, int ep, int r, int tp_rank) {
  const Shape& g = decl.shape;
  const int64_t per_rank = g[0] / ep;
  Shape local = g;
  local[0] = per_rank;
  ShardedTensor t = ShardedTensor::Split(decl.name, g, g, 0, ShardGroup::kEp, r * per_rank,
                                         per_rank, local);
  t.replica.tp = tp_rank;
  return t;
}

}  // namespace

Status ValidateTensorParallel(const ModelConfig& config, int tp) {
  const std::string t = "parallel.tp=" + std::to_string(tp);
  if (tp < 1) return InvalidArgument(t + " must be >= 1 (1 = no tensor parallelism)");
  const int64_t nh = config.num_heads, nkv = config.kv_heads(), ffn = config.ffn_size();
  if (nh % tp != 0) {
    return InvalidArgument(t + " does not divide model.num_heads=" + std::to_string(nh) +
                           " (each tensor-parallel rank needs whole attention heads; use a tp "
                           "that divides " + std::to_string(nh) + ")");
  }
  if (nkv % tp != 0) {
    return InvalidArgument(t + " does not divide model.num_kv_heads=" + std::to_string(nkv) +
                           " (each tensor-parallel rank needs whole key/value heads; use a tp "
                           "that divides " + std::to_string(nkv) + ")");
  }
  if (ffn % tp != 0) {
    return InvalidArgument(t + " does not divide the MLP width ffn_size=" + std::to_string(ffn) +
                           " (model.ffn_hidden_size, or its default; each tensor-parallel rank "
                           "needs an equal share of it; use a tp that divides " +
                           std::to_string(ffn) + " or change model.ffn_hidden_size)");
  }
  return Status::Ok();
}

int64_t VocabPerRank(const ModelConfig& config, int tp) {
  TESSERA_CHECK(tp >= 1);
  return (config.vocab_size + tp - 1) / tp;
}

Result<std::vector<int64_t>> PipelineLayerSplit(int64_t num_layers, int stages,
                                                const std::vector<int64_t>& split,
                                                bool account_ends) {
  const std::string L = std::to_string(num_layers), S = std::to_string(stages);
  if (stages < 1) return InvalidArgument("pipeline: " + S + " virtual stages, needs >= 1");
  if (!split.empty()) {
    if (static_cast<int>(split.size()) != stages) {
      return InvalidArgument("parallel.pipeline_split lists " + std::to_string(split.size()) +
                             " layer counts but the pipeline has " + S +
                             " virtual stages (pp x virtual_stages): give one count per stage");
    }
    int64_t sum = 0;
    for (int64_t n : split) {
      if (n < 1) {
        return InvalidArgument("parallel.pipeline_split: every virtual stage needs at least "
                               "one layer, got " + std::to_string(n));
      }
      sum += n;
    }
    if (sum != num_layers) {
      return InvalidArgument("parallel.pipeline_split sums to " + std::to_string(sum) +
                             " layers but model.num_layers=" + L);
    }
    return split;
  }
  if (account_ends && stages > 1) {
    // The embeddings and the head weigh one layer each: (L + 2) units in equal shares, the
    // first and last stage's share including its end.
    const int64_t units = num_layers + 2;
    if (units % stages != 0 || units / stages < 2) {
      return InvalidArgument(
          "parallel.account_for_embedding_and_head: model.num_layers=" + L +
          " plus the embeddings and the LM head (" + std::to_string(units) +
          " units) do not divide evenly into " + S +
          " pipeline stages with at least one layer each; set parallel.pipeline_split or "
          "choose num_layers + 2 divisible by pp x virtual_stages");
    }
    std::vector<int64_t> layers(static_cast<size_t>(stages), units / stages);
    layers.front() -= 1;
    layers.back() -= 1;
    return layers;
  }
  if (num_layers < stages || num_layers % stages != 0) {
    // Suggest a split that gives the first and last stage fewer layers: they also carry the
    // embeddings and the LM head.
    std::vector<int64_t> suggest(static_cast<size_t>(stages), num_layers / stages);
    int64_t rest = num_layers - (num_layers / stages) * stages;
    for (int i = 1; i < stages - 1 && rest > 0; ++i, --rest) ++suggest[static_cast<size_t>(i)];
    for (int i = 0; i < stages && rest > 0; ++i, --rest) ++suggest[static_cast<size_t>(i)];
    std::string text;
    for (int64_t n : suggest) text += (text.empty() ? "" : ", ") + std::to_string(n);
    const bool possible = num_layers >= stages;
    return InvalidArgument(
        "model.num_layers=" + L + " does not divide evenly into " + S +
        " pipeline stages (pp x virtual_stages)" +
        (possible ? "; set parallel.pipeline_split, e.g. [" + text + "] (the middle stages "
                    "take the extra layers: the first and last also run the embeddings and "
                    "LM head)"
                  : ": every stage needs at least one layer"));
  }
  return std::vector<int64_t>(static_cast<size_t>(stages), num_layers / stages);
}

Result<std::vector<PipelineChunk>> PipelineChunks(int64_t num_layers, int pp, int stage,
                                                  int virtual_stages,
                                                  const std::vector<int64_t>& split,
                                                  bool account_ends) {
  if (pp < 1 || stage < 0 || stage >= pp || virtual_stages < 1) {
    return InvalidArgument("pipeline: stage " + std::to_string(stage) + " of pp=" +
                           std::to_string(pp) + " with " + std::to_string(virtual_stages) +
                           " virtual stages per rank");
  }
  const int stages = pp * virtual_stages;
  ASSIGN_OR_RETURN(std::vector<int64_t> layers,
                   PipelineLayerSplit(num_layers, stages, split, account_ends));
  std::vector<int64_t> begin(static_cast<size_t>(stages) + 1, 0);
  for (int i = 0; i < stages; ++i) begin[i + 1] = begin[i] + layers[i];
  std::vector<PipelineChunk> chunks;
  for (int c = 0; c < virtual_stages; ++c) {
    const int vs = c * pp + stage;
    chunks.push_back({begin[vs], begin[vs + 1], vs == 0, vs == stages - 1});
  }
  return chunks;
}

Result<ModelPartition> ModelPartition::Create(const ModelConfig& config, int tp_size,
                                              int tp_rank, std::vector<PipelineChunk> chunks,
                                              int ep_size, int ep_rank) {
  RETURN_IF_ERROR(ValidateTensorParallel(config, tp_size));
  if (tp_rank < 0 || tp_rank >= tp_size) {
    return InvalidArgument("tensor-parallel rank " + std::to_string(tp_rank) +
                           " is outside [0, " + std::to_string(tp_size) + ")");
  }
  if (ep_size < 1 || ep_rank < 0 || ep_rank >= ep_size ||
      (ep_size > 1 && (!config.moe.enabled() || config.moe.num_experts % ep_size != 0))) {
    return InvalidArgument("expert-parallel rank " + std::to_string(ep_rank) + " of ep=" +
                           std::to_string(ep_size) + ": ep must divide model.moe.num_experts=" +
                           std::to_string(config.moe.num_experts));
  }
  const int64_t L = config.num_layers;
  if (chunks.empty()) chunks.push_back({0, L, true, true});
  for (const PipelineChunk& c : chunks) {
    if (c.layer_begin < 0 || c.layer_begin >= c.layer_end || c.layer_end > L) {
      return InvalidArgument("pipeline chunk of layers [" + std::to_string(c.layer_begin) +
                             ", " + std::to_string(c.layer_end) + ") is not a non-empty range "
                             "of the model's " + std::to_string(L) + " layers");
    }
  }
  ModelPartition m;
  m.config_ = config;
  m.tp_size_ = tp_size;
  m.tp_rank_ = tp_rank;
  m.ep_size_ = ep_size;
  m.ep_rank_ = ep_rank;
  m.vocab_per_rank_ = VocabPerRank(config, tp_size);
  m.chunks_ = chunks;
  m.bounds_.assign(1, 0);
  m.chunk_units_.assign(1, 0);
  const std::vector<ParamDecl> decls = DeclareParameters(config);
  for (size_t c = 0; c < chunks.size(); ++c) m.AddChunk(static_cast<int>(c), decls);
  return m;
}

// Chunk c's parameters (those of its units, in declaration order), its unit bounds, and the
// local ranges that are not the main replica.
void ModelPartition::AddChunk(int c, const std::vector<ParamDecl>& decls) {
  const PipelineChunk& ch = chunks_[static_cast<size_t>(c)];
  const int64_t L = config_.num_layers;
  const bool copy = !ch.first && ch.last && config_.tie_embeddings;
  const int64_t n_blocks = ch.layer_end - ch.layer_begin;
  // The chunk's MoE blocks: their expert units follow its final unit, in layer order.
  const int64_t moe_first = config_.moe_layers_before(ch.layer_begin);
  const int64_t n_moe = config_.moe_layers_before(ch.layer_end) - moe_first;
  // Chunk-relative unit of global unit g, or -1 when the chunk does not hold it.
  // Then (finetune.lora) one adapter unit per block, in layer order.
  const int64_t M = config_.num_moe_layers();
  const int64_t n_adapters = config_.lora.enabled() ? n_blocks : 0;
  auto chunk_unit = [&](int g) -> int {
    if (g == 0) return ch.first || copy ? 0 : -1;
    if (g == L + 1) return ch.last ? static_cast<int>(n_blocks + 1) : -1;
    if (g >= L + 2 + M) {  // block (g - L - 2 - M)'s adapter unit
      const int64_t layer = g - (L + 2 + M);
      if (layer < ch.layer_begin || layer >= ch.layer_end) return -1;
      return static_cast<int>(n_blocks + 2 + n_moe + (layer - ch.layer_begin));
    }
    if (g > L + 1) {  // the expert unit of the (g - L - 2)-th MoE block
      const int64_t m = g - (L + 2) - moe_first;
      return m >= 0 && m < n_moe ? static_cast<int>(n_blocks + 2 + m) : -1;
    }
    const int64_t layer = g - 1;
    if (layer < ch.layer_begin || layer >= ch.layer_end) return -1;
    return static_cast<int>(layer - ch.layer_begin + 1);
  };
  const int unit_base = chunk_units_.back();
  int64_t local_offset = bounds_.back();
  std::vector<int64_t> sizes(static_cast<size_t>(n_blocks + 2 + n_moe + n_adapters), 0);
  int64_t global_offset = 0;
  for (size_t i = 0; i < decls.size(); global_offset += decls[i].shape.numel(), ++i) {
    const int cu = chunk_unit(decls[i].unit);
    if (cu < 0) continue;
    TpParam p;
    p.local = decls[i];
    p.local.unit = unit_base + cu;
    p.global_index = static_cast<int>(i);
    p.tensor = SliceOf(decls[i], tp_size_, tp_rank_, config_.vocab_size, vocab_per_rank_);
    if (decls[i].expert && ep_size_ > 1) p.tensor = ExpertSlice(decls[i], ep_size_, ep_rank_, tp_rank_);
    // The last pipeline stage's copy of the tied embedding unit is a pp replica.
    if (decls[i].unit == 0 && !ch.first) p.tensor.replica.pp = 1;
    TESSERA_CHECK_MSG(p.tensor.Validate().ok(), "%s", p.tensor.Validate().ToString().c_str());
    p.local.shape = p.tensor.local_shape;
    p.local_offset = local_offset;
    p.global_offset = global_offset;
    p.chunk = c;
    // Norm weights and the biases kept whole (LayerNorm biases, row-parallel output biases)
    // are applied to sequence-sharded activations under sequence parallelism.
    p.sequence_partial = p.split() == TpSplit::kReplicated &&
                         (decls[i].kind == ParamKind::kNorm || decls[i].kind == ParamKind::kBias);
    p.tensor.ForEachRun([&p](int64_t local, int64_t global, int64_t length) {
      AddSegment(p.segments, local, global, length);
    });
    const int64_t n = p.local.shape.numel();
    if (!p.tensor.IsMainReplica()) {  // the replica rule (sharded_tensor.h)
      if (!dups_.empty() && dups_.back().second == local_offset) {
        dups_.back().second += n;
      } else {
        dups_.emplace_back(local_offset, local_offset + n);
      }
    }
    sizes[static_cast<size_t>(cu)] += n;
    local_offset += n;
    params_.push_back(std::move(p));
  }
  // Declarations come in unit order (param_layout.h), so the chunk's parameters are in
  // chunk-unit order: accumulate sizes into offsets.
  for (int64_t n : sizes) bounds_.push_back(bounds_.back() + n);
  chunk_units_.push_back(unit_base + static_cast<int>(sizes.size()));
  TESSERA_CHECK(bounds_.back() == local_offset);
}

std::vector<int> ModelPartition::expert_units() const {
  std::vector<int> units;
  for (const TpParam& p : params_) {
    if (p.local.expert && (units.empty() || units.back() != p.local.unit)) {
      units.push_back(p.local.unit);
    }
  }
  return units;
}

std::vector<int> ModelPartition::adapter_units() const {
  std::vector<int> units;
  for (const TpParam& p : params_) {
    if (!p.local.frozen && config_.lora.enabled() &&
        (units.empty() || units.back() != p.local.unit)) {
      units.push_back(p.local.unit);
    }
  }
  return units;
}

void ModelPartition::ForEachGlobalPiece(int64_t begin, int64_t end, const PieceFn& fn) const {
  TESSERA_CHECK_MSG(0 <= begin && begin <= end && end <= num_local(),
                    "local range [%ld, %ld) outside the %ld local parameters",
                    static_cast<long>(begin), static_cast<long>(end),
                    static_cast<long>(num_local()));
  if (begin == end) return;
  // First parameter whose tensor ends after `begin`.
  auto it = std::upper_bound(params_.begin(), params_.end(), begin,
                             [](int64_t x, const TpParam& p) { return x < p.local_offset; });
  if (it != params_.begin()) --it;  // params_[0].local_offset == 0 <= begin
  for (; it != params_.end() && it->local_offset < end; ++it) {
    const TpParam& p = *it;
    for (const TpSegment& s : p.segments) {
      const int64_t lo = std::max(begin, p.local_offset + s.local_begin);
      const int64_t hi = std::min(end, p.local_offset + s.local_begin + s.length);
      if (lo >= hi) continue;
      fn(p, s.global_begin + (lo - p.local_offset - s.local_begin), hi - lo, lo);
    }
  }
}

void ModelPartition::InitRange(uint64_t seed, int64_t begin, int64_t end, float* out) const {
  TESSERA_CHECK(0 <= begin && begin <= end && end <= num_local());
  std::fill(out, out + (end - begin), 0.0f);  // padding stays 0
  // InitParameterRange is cheap per element but not per call (it re-declares the model: about
  // as long as 4 normal draws per parameter tensor, measured), and a row-parallel tensor is one
  // piece per row. So consecutive pieces whose global gap costs less to draw than a call are
  // drawn together into scratch and copied out; any global sub-range gives the same bits, so
  // the result does not depend on this batching.
  const int64_t max_gap = 4 * static_cast<int64_t>(params_.size());  // elements thrown away
  constexpr int64_t kMaxSpan = int64_t{1} << 20;  // elements of scratch per batch
  struct Piece {
    int64_t global_flat, length, local_flat;
  };
  std::vector<Piece> batch;
  std::vector<float> scratch;
  auto flush = [&]() {
    if (batch.empty()) return;
    const int64_t g0 = batch.front().global_flat;
    const int64_t g1 = batch.back().global_flat + batch.back().length;
    int64_t useful = 0;
    for (const Piece& pc : batch) useful += pc.length;
    const bool contiguous = useful == g1 - g0 &&
                            batch.back().local_flat + batch.back().length -
                                    batch.front().local_flat == useful;
    if (contiguous) {  // e.g. adjacent whole tensors: draw straight into `out`
      InitParameterRange(config_, seed, g0, g1, out + (batch.front().local_flat - begin));
    } else {
      scratch.resize(static_cast<size_t>(g1 - g0));
      InitParameterRange(config_, seed, g0, g1, scratch.data());
      for (const Piece& pc : batch) {
        std::memcpy(out + (pc.local_flat - begin), scratch.data() + (pc.global_flat - g0),
                    static_cast<size_t>(pc.length) * sizeof(float));
      }
    }
    batch.clear();
  };
  ForEachGlobalPiece(begin, end, [&](const TpParam& p, int64_t global_begin, int64_t length,
                                     int64_t local_flat) {
    const Piece pc{p.global_offset + global_begin, length, local_flat};
    // Pieces arrive in increasing local order, which within a chunk is also increasing global
    // order (local tensors keep the global order, segments the order of rows); a tied copy
    // after earlier chunks goes back in global order, which closes the batch. So a batch's
    // global span is [front, back + length).
    if (!batch.empty() &&
        (pc.global_flat < batch.back().global_flat + batch.back().length ||
         pc.global_flat - (batch.back().global_flat + batch.back().length) > max_gap ||
         pc.global_flat + pc.length - batch.front().global_flat > kMaxSpan)) {
      flush();
    }
    batch.push_back(pc);
  });
  flush();
}

}  // namespace tessera
