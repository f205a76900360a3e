// models/partition.h — how a model's parameters are split across tensor-parallel ranks
// (Megatron-style) and where every local element lives in the global, one-rank model.
//
// A tp rank holds, for each global parameter (DeclareParameters order, Hugging Face names):
//   column-parallel (kRows: output rows split in tp equal blocks)
//       GPT-2  attn.c_attn.{weight,bias}  [q | k | v] rows: this rank's heads of q, of k and of
//                                         v (three row blocks of NH/tp * HS rows each), stored
//                                         locally as [q_r | k_r | v_r] so the block's fused
//                                         qkv GEMM and attention kernel work unchanged
//              mlp.c_fc.{weight,bias}     rows [r*F/tp, (r+1)*F/tp)
//       Llama  q_proj (NH/tp heads), k_proj, v_proj (NKV/tp heads each), gate_proj, up_proj
//              (F/tp rows each): still adjacent locally, so [q|k|v] and [gate|up] stay ONE GEMM
//   row-parallel (kCols: input columns split)
//       attn.c_proj.weight / o_proj (C, NH*HS): columns of this rank's heads
//       mlp.c_proj.weight / down_proj (C, F):   columns [r*F/tp, (r+1)*F/tp)
//   vocab-parallel (kVocab: rows of the vocabulary split, padded)
//       wte / embed_tokens / lm_head (V, C): rows [r*Vp, (r+1)*Vp), Vp = VocabPerRank; rows at or
//       past vocab_size are PADDING: zero-initialised, never looked up, their logits excluded
//       from the softmax, never saved or loaded (no global element)
//   replicated (kReplicated: every tp rank holds the whole tensor, identical bits)
//       norms (weights and biases), row-parallel biases (attn.c_proj.bias, mlp.c_proj.bias),
//       wpe
// With tp = 1 every parameter is whole like a kReplicated one (one segment each; `split` still
// names the tensor's role) and the local layout IS DeclareParameters / UnitBounds, bit for bit.
//
// Pipeline parallelism: a rank may hold only some of the layers, as one or more CHUNKS (one
// per virtual stage it runs; interleaved schedules give a rank several). A chunk is a
// contiguous range of blocks, plus the embeddings when it is the first virtual stage and the
// final norm [+ lm_head] when it is the last. With tied embeddings the last virtual stage
// (when it is not also the first) holds a COPY of the whole embedding unit (pipeline_copy):
// its LM head reads the copy's token table, its gradient is summed with the first stage's
// after each step (Megatron's embedding group), so both copies stay identical; copies are
// never saved and are left out of the gradient norm (duplicate_ranges).
// The local flat layout is the chunks in order; each chunk has its own units: its embedding
// unit (empty unless it holds embeddings or the copy), one per block, its final unit (empty
// unless last), then one expert unit per MoE block it holds (model.moe), then (finetune.lora)
// one adapter unit per block it holds. Without chunks (one
// chunk = the whole model) this is the layout above. Units (param_store.h) keep their
// meaning: unit 0 embeddings, 1 + l block l, L + 1 final norm [+ lm_head], L + 2 + m the m-th
// MoE block's routed experts; local unit bounds are those of the local flat buffer.
// Routed experts (ParamDecl::expert) are whole on every tp rank, like the router and shared
// experts of an MoE block. Expert parallelism (parallel.ep) splits them along the expert axis:
// ep rank r holds experts [r*E/ep, (r+1)*E/ep) of every MoE block, stored (E/ep, ...), a
// ShardGroup::kEp slice; everything else is the same on every ep rank.
// Pure functions of (config, tp size, tp rank, chunks); thread-safe values.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "models/model_config.h"
#include "models/param_layout.h"
#include "runtime/core/sharded_tensor.h"
#include "runtime/core/status.h"

namespace tessera {

// TpSplit (param_layout.h) is declared with each parameter; a TpParam's `tensor` states the
// resulting slice in global terms (runtime/core/sharded_tensor.h).

// InvalidArgument naming the numbers and what to change when `tp` cannot split `config`:
// tp < 1, num_heads % tp, kv_heads % tp, ffn_size % tp. (The vocabulary never needs to divide:
// it is padded.)
Status ValidateTensorParallel(const ModelConfig& config, int tp);

// Rows of the (padded) vocabulary each tp rank holds: ceil(vocab_size / tp).
int64_t VocabPerRank(const ModelConfig& config, int tp);

struct TpSegment {
  int64_t local_begin = 0;   // row-major element offset inside the local tensor
  int64_t global_begin = 0;  // row-major element offset inside the global tensor
  int64_t length = 0;        // elements
};

// One chunk: blocks [layer_begin, layer_end), with the embeddings when `first`, the final norm
// and LM head when `last`.
struct PipelineChunk {
  int64_t layer_begin = 0, layer_end = 0;
  bool first = true, last = true;
  bool operator==(const PipelineChunk&) const = default;
};

// Layers per virtual stage for `stages` = pp * virtual_stages virtual stages: `split` when
// given (parallel.pipeline_split: one count per virtual stage, each >= 1, summing to
// num_layers), else num_layers / stages each; with `account_ends`
// (parallel.account_for_embedding_and_head) the embeddings and the LM head count as one layer
// each, so the first and last virtual stages take one block fewer: (num_layers + 2) / stages
// per stage. InvalidArgument naming the numbers (and a split that would work) when the layers
// do not divide evenly without a split, or the split is bad.
Result<std::vector<int64_t>> PipelineLayerSplit(int64_t num_layers, int stages,
                                                const std::vector<int64_t>& split,
                                                bool account_ends = false);

// The chunks pipeline rank `stage` (0 .. pp-1) holds with `virtual_stages` chunks per rank:
// chunk c is virtual stage c * pp + stage (Megatron's interleaving), layers per
// PipelineLayerSplit.
Result<std::vector<PipelineChunk>> PipelineChunks(int64_t num_layers, int pp, int stage,
                                                  int virtual_stages,
                                                  const std::vector<int64_t>& split,
                                                  bool account_ends = false);

struct TpParam {
  // What this rank holds, in global terms: slice, split, replica (pp = 1 for a pipeline copy,
  // tp = tp rank for a tensor every tp rank holds whole). The accessors and `segments` are
  // derived from it and from the declaration.
  ShardedTensor tensor;
  ParamDecl local;            // global name, LOCAL shape, kind, init rule, unit
  int global_index = 0;       // index in DeclareParameters(config)
  int64_t local_offset = 0;   // flat offset in the local buffer
  int64_t global_offset = 0;  // flat offset of the global tensor in the one-rank layout
  // Under sequence parallelism each rank's gradient of this tensor covers only its sequence
  // shard (norm weights and biases, row-parallel biases): the model sums it over tp.
  bool sequence_partial = false;
  int chunk = 0;                // which of the rank's chunks holds it
  // Local elements -> global elements, sorted by local_begin, merged where contiguous in both
  // (tensor.ForEachRun, kept for lookups). Together they cover every non-padding local element
  // exactly once.
  std::vector<TpSegment> segments;

  const Shape& global_shape() const { return tensor.global_shape; }
  TpSplit split() const { return local.tp_split; }
  // The last stage's copy of a tied embedding unit (a pp replica).
  bool pipeline_copy() const { return tensor.replica.pp != 0; }
};

class ModelPartition {
 public:
  // ValidateTensorParallel, then the local layout of rank `tp_rank` of `tp_size` holding
  // `chunks` (in order; each a non-empty valid layer range). Default: the whole model.
  // `ep_size` / `ep_rank`: the expert-parallel split (ep_size must divide the experts).
  static Result<ModelPartition> Create(const ModelConfig& config, int tp_size, int tp_rank,
                                       std::vector<PipelineChunk> chunks = {}, int ep_size = 1,
                                       int ep_rank = 0);

  const ModelConfig& config() const { return config_; }  // the global model
  int tp_size() const { return tp_size_; }
  int tp_rank() const { return tp_rank_; }
  int ep_size() const { return ep_size_; }
  int ep_rank() const { return ep_rank_; }
  // Every local parameter, in local flat order (the global order, local shapes).
  const std::vector<TpParam>& params() const { return params_; }
  // Local unit bounds over all chunks (for one whole-model chunk: num_layers + 3 values, as
  // UnitBounds for the global layout). Units may be empty (a chunk without embeddings).
  const std::vector<int64_t>& unit_bounds() const { return bounds_; }
  const std::vector<PipelineChunk>& chunks() const { return chunks_; }
  // First local unit of chunk c: its embedding unit; its blocks follow, then its final unit.
  int chunk_unit_begin(int c) const { return chunk_units_[c]; }
  int chunk_num_units(int c) const { return chunk_units_[c + 1] - chunk_units_[c]; }
  int64_t num_local() const { return bounds_.back(); }
  // The local units holding routed experts (model.moe), in increasing order.
  std::vector<int> expert_units() const;
  // The local units holding LoRA adapters (finetune.lora: what trains), in increasing order.
  std::vector<int> adapter_units() const;
  int64_t vocab_per_rank() const { return vocab_per_rank_; }
  int64_t vocab_begin() const { return vocab_per_rank_ * tp_rank_; }  // first local vocab row

  // Calls fn(param, global_begin, length, local_flat) for every maximal piece of the local flat
  // range [begin, end) that maps to consecutive elements of one global tensor (padding
  // elements are skipped), in increasing local order. global_begin is inside the tensor.
  using PieceFn = std::function<void(const TpParam& param, int64_t global_begin, int64_t length,
                                     int64_t local_flat)>;
  void ForEachGlobalPiece(int64_t begin, int64_t end, const PieceFn& fn) const;

  // out[i] = the initial value of local flat element begin + i: the one-rank model's
  // InitParameterRange value of the global element it maps to (the same bits), 0 for padding.
  void InitRange(uint64_t seed, int64_t begin, int64_t end, float* out) const;

  // Local flat ranges [first, second) of the parameters that are not the main replica
  // (tensor.IsMainReplica(): kReplicated parameters on tp ranks > 0, pipeline copies of the
  // embeddings; none on tp rank 0 of a whole-model partition): left out of global sums such as
  // the gradient norm and out of checkpoints so every element counts once.
  const std::vector<std::pair<int64_t, int64_t>>& duplicate_ranges() const { return dups_; }

 private:
  ModelPartition() = default;
  void AddChunk(int c, const std::vector<ParamDecl>& decls);  // Create's step per chunk
  ModelConfig config_;
  int tp_size_ = 1, tp_rank_ = 0;
  int ep_size_ = 1, ep_rank_ = 0;
  int64_t vocab_per_rank_ = 0;
  std::vector<TpParam> params_;
  std::vector<int64_t> bounds_;
  std::vector<PipelineChunk> chunks_;
  std::vector<int> chunk_units_;  // chunk c's units are [chunk_units_[c], chunk_units_[c+1])
  std::vector<std::pair<int64_t, int64_t>> dups_;
};

}  // namespace tessera
