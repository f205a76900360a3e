// models/partition.cc — the Megatron tensor-parallel split of DeclareParameters (partition.h):
// which tensors split how, each rank's local shapes and flat layout, the local -> global element
// map (segments), and the init of a local range with the one-rank model's bits.
//
// Every split is described by one rule, "a tensor of `blocks` row blocks of `rows` rows each, of
// width `width`", applied to rows or columns, so the q|k|v blocks of GPT-2's c_attn need no code
// of their own. Segments are built in local order and merged where contiguous in both layouts,
// so with tp = 1 every tensor is one segment and the layout is DeclareParameters'.
// Pure functions of (config, tp size, tp rank); a ModelPartition is an immutable value.
#include "models/partition.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/core/check.h"

namespace tessera {
namespace {

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// How one global tensor splits. For kRows the tensor is `row_blocks` stacked blocks of equal
// height (GPT-2 c_attn: [q | k | v], 3 blocks), each split in tp equal row ranges.
struct SplitRule {
  TpSplit split = TpSplit::kReplicated;
  int64_t row_blocks = 1;
};

SplitRule RuleFor(const ParamDecl& decl) {
  const std::string& n = decl.name;
  if (n == "wte.weight" || n == "model.embed_tokens.weight" || n == "lm_head.weight") {
    return {TpSplit::kVocab, 1};
  }
  if (EndsWith(n, ".attn.c_attn.weight") || EndsWith(n, ".attn.c_attn.bias")) {
    return {TpSplit::kRows, 3};
  }
  static const char* const kColumnParallel[] = {
      ".mlp.c_fc.weight",        ".mlp.c_fc.bias",          ".self_attn.q_proj.weight",
      ".self_attn.k_proj.weight", ".self_attn.v_proj.weight", ".mlp.gate_proj.weight",
      ".mlp.up_proj.weight"};
  for (const char* s : kColumnParallel) {
    if (EndsWith(n, s)) return {TpSplit::kRows, 1};
  }
  static const char* const kRowParallel[] = {".attn.c_proj.weight", ".self_attn.o_proj.weight",
                                             ".mlp.c_proj.weight", ".mlp.down_proj.weight"};
  for (const char* s : kRowParallel) {
    if (EndsWith(n, s)) return {TpSplit::kCols, 1};
  }
  return {};
}

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

// Fills p.local.shape and p.segments for rank `r` of `t` (p.local is the global decl on entry).
void SplitTensor(const SplitRule& rule, int t, int r, int64_t vocab_size, int64_t vocab_per_rank,
                 TpParam& p) {
  const Shape& g = p.global_shape;
  const int64_t rows = g[0];
  const int64_t width = g.rank() >= 2 ? g.numel() / rows : 1;  // elements per row
  Shape& local = p.local.shape;
  switch (rule.split) {
    case TpSplit::kReplicated:
      AddSegment(p.segments, 0, 0, g.numel());
      break;
    case TpSplit::kRows: {
      // Block b's rows [r*h, (r+1)*h), h = block height / t, stored as local block b.
      const int64_t block_rows = rows / rule.row_blocks, h = block_rows / t;
      TESSERA_CHECK(block_rows * rule.row_blocks == rows && h * t == block_rows);
      for (int64_t b = 0; b < rule.row_blocks; ++b) {
        AddSegment(p.segments, b * h * width, (b * block_rows + r * h) * width, h * width);
      }
      local[0] = rule.row_blocks * h;
      break;
    }
    case TpSplit::kCols: {
      // Each local row is a strided piece of its global row: one segment per row unless t = 1.
      TESSERA_CHECK(g.rank() == 2 && g[1] % t == 0);
      const int64_t cols = g[1], w = cols / t;
      for (int64_t i = 0; i < rows; ++i) AddSegment(p.segments, i * w, i * cols + r * w, w);
      local[1] = w;
      break;
    }
    case TpSplit::kVocab: {
      TESSERA_CHECK(rows == vocab_size);
      const int64_t first = vocab_per_rank * r;
      const int64_t real =
          std::max<int64_t>(0, std::min(vocab_size, first + vocab_per_rank) - first);
      AddSegment(p.segments, 0, first * width, real * width);  // rows past it are padding
      local[0] = vocab_per_rank;
      break;
    }
  }
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

Result<ModelPartition> ModelPartition::Create(const ModelConfig& config, int tp_size,
                                              int tp_rank) {
  RETURN_IF_ERROR(ValidateTensorParallel(config, tp_size));
  if (tp_rank < 0 || tp_rank >= tp_size) {
    return InvalidArgument("tensor-parallel rank " + std::to_string(tp_rank) +
                           " is outside [0, " + std::to_string(tp_size) + ")");
  }
  ModelPartition m;
  m.config_ = config;
  m.tp_size_ = tp_size;
  m.tp_rank_ = tp_rank;
  m.vocab_per_rank_ = VocabPerRank(config, tp_size);
  const std::vector<ParamDecl> decls = DeclareParameters(config);
  const int units = static_cast<int>(config.num_layers + 2);
  m.bounds_.assign(units + 1, 0);
  int64_t local_offset = 0, global_offset = 0;
  for (size_t i = 0; i < decls.size(); ++i) {
    TpParam p;
    p.local = decls[i];
    p.global_index = static_cast<int>(i);
    p.global_shape = decls[i].shape;
    const SplitRule rule = RuleFor(decls[i]);
    p.split = rule.split;
    p.local_offset = local_offset;
    p.global_offset = global_offset;
    // Norm weights and the biases kept whole (LayerNorm biases, row-parallel output biases)
    // are applied to sequence-sharded activations under sequence parallelism.
    p.sequence_partial = rule.split == TpSplit::kReplicated &&
                         (decls[i].kind == ParamKind::kNorm || decls[i].kind == ParamKind::kBias);
    SplitTensor(rule, tp_size, tp_rank, config.vocab_size, m.vocab_per_rank_, p);
    const int64_t n = p.local.shape.numel();
    if (tp_rank > 0 && rule.split == TpSplit::kReplicated) {
      if (!m.dups_.empty() && m.dups_.back().second == local_offset) {
        m.dups_.back().second += n;
      } else {
        m.dups_.emplace_back(local_offset, local_offset + n);
      }
    }
    TESSERA_CHECK(p.local.unit >= 0 && p.local.unit < units);
    m.bounds_[p.local.unit + 1] += n;
    local_offset += n;
    global_offset += p.global_shape.numel();
    m.params_.push_back(std::move(p));
  }
  // Declarations come in unit order (param_layout.h): accumulate sizes into offsets.
  for (int u = 0; u < units; ++u) {
    TESSERA_CHECK(m.bounds_[u + 1] > 0);
    m.bounds_[u + 1] += m.bounds_[u];
  }
  TESSERA_CHECK(m.bounds_.back() == local_offset);
  return m;
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
  --it;  // params_[0].local_offset == 0 <= begin
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
    // Pieces arrive in increasing local order, which is also increasing global order (local
    // tensors keep the global order and segments keep the order of rows), so a batch's global
    // span is [front, back + length).
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
