// tests/kernels/partition_test.cc — the tensor-parallel split of the parameters
// (models/partition.h) on tiny GPT-2 and Llama models (tied and untied, GQA, a vocabulary that
// tp does not divide): tp = 1 is the one-rank layout exactly; over all ranks the segments cover
// every global element once (replicated tensors once per rank); a rank's initial values are the
// one-rank model's bits at the elements Megatron's rules name, padding 0; sub-ranges map to the
// right partial pieces; invalid tp sizes are refused with messages naming the numbers; the
// duplicate ranges are exactly the replicated tensors of ranks > 0, the tensors that are not
// the main replica of their ShardedTensor, whose runs are the segments.
// Pipeline chunks: PipelineLayerSplit (even, explicit, refused splits and the suggested one),
// PipelineChunks (plain and interleaved), a chunked rank's layout rebuilt from the rules in
// partition.h (units per chunk, empty embedding / final units, the tied last stage's copy of
// the embedding unit), coverage over every (tp rank, stage) with and without the duplicate
// ranges, and the one-rank init bits on chunked ranks.
// links: tessera_models
#include "models/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "models/param_layout.h"

namespace tessera {
namespace {

ModelConfig Gpt2(bool tied) {
  ModelConfig c;
  c.family = ModelFamily::kGpt2;
  c.vocab_size = 10;  // at tp = 4 each rank holds 3 rows: rank 3 row 9 and 2 padding rows
  c.max_seq_len = 8;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_heads = 4;  // ffn 64
  c.tie_embeddings = tied;
  return c;
}

ModelConfig Llama(int64_t kv_heads, bool tied) {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.vocab_size = 10;
  c.max_seq_len = 8;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_heads = 4;
  c.num_kv_heads = kv_heads;
  c.ffn_hidden_size = 32;
  c.tie_embeddings = tied;
  return c;
}

struct Case {
  const char* name;
  ModelConfig config;
  std::vector<int> tps;
};

std::vector<Case> Cases() {
  return {{"gpt2_tied", Gpt2(true), {1, 2, 4}},
          {"gpt2_untied", Gpt2(false), {1, 2, 4}},
          {"llama_gqa_untied", Llama(2, false), {1, 2}},
          {"llama_gqa_tied", Llama(2, true), {1, 2}},
          {"llama_mha_untied", Llama(4, false), {1, 2, 4}}};
}

ModelPartition Make(const ModelConfig& c, int tp, int rank) {
  Result<ModelPartition> p = ModelPartition::Create(c, tp, rank);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

int64_t NumGlobal(const ModelConfig& c) { return UnitBounds(c).back(); }

std::vector<float> GlobalInit(const ModelConfig& c, uint64_t seed) {
  std::vector<float> g(NumGlobal(c));
  InitParameterRange(c, seed, 0, NumGlobal(c), g.data());
  return g;
}

std::vector<float> LocalInit(const ModelPartition& p, uint64_t seed) {
  std::vector<float> l(p.num_local(), -7.0f);
  p.InitRange(seed, 0, p.num_local(), l.data());
  return l;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The split Megatron prescribes for a tensor, written out per name independently of the code
// under test.
TpSplit ExpectedSplit(const std::string& n) {
  if (n == "wte.weight" || n == "model.embed_tokens.weight" || n == "lm_head.weight") {
    return TpSplit::kVocab;
  }
  for (const char* s : {".attn.c_attn.weight", ".attn.c_attn.bias", ".mlp.c_fc.weight",
                        ".mlp.c_fc.bias", ".q_proj.weight", ".k_proj.weight", ".v_proj.weight",
                        ".gate_proj.weight", ".up_proj.weight"}) {
    if (EndsWith(n, s)) return TpSplit::kRows;
  }
  for (const char* s : {".attn.c_proj.weight", ".o_proj.weight", ".mlp.c_proj.weight",
                        ".down_proj.weight"}) {
    if (EndsWith(n, s)) return TpSplit::kCols;
  }
  return TpSplit::kReplicated;
}

// Element (within the global tensor) that local element e of rank r holds, -1 for padding.
int64_t MegatronGlobal(const ModelConfig& c, const std::string& name, const Shape& g, int t,
                       int r, int64_t e) {
  const int64_t width = g.rank() == 2 ? g[1] : 1;
  switch (ExpectedSplit(name)) {
    case TpSplit::kReplicated:
      return e;
    case TpSplit::kRows: {
      const int64_t j = e / width, col = e % width;
      if (EndsWith(name, "c_attn.weight") || EndsWith(name, "c_attn.bias")) {
        // Local rows [q_r | k_r | v_r]: block b = j / (C/t) of this rank's heads.
        const int64_t C = c.hidden_size, ct = C / t;
        const int64_t b = j / ct, within = j % ct;
        return (b * C + r * ct + within) * width + col;
      }
      return (r * (g[0] / t) + j) * width + col;
    }
    case TpSplit::kCols: {
      const int64_t w = g[1] / t, i = e / w, col = e % w;
      return i * g[1] + r * w + col;
    }
    case TpSplit::kVocab: {
      const int64_t vp = (c.vocab_size + t - 1) / t, row = r * vp + e / width;
      return row < c.vocab_size ? row * width + e % width : -1;
    }
  }
  return -2;
}

Shape ExpectedLocalShape(const ModelConfig& c, const std::string& name, const Shape& g, int t) {
  Shape s = g;
  switch (ExpectedSplit(name)) {
    case TpSplit::kReplicated:
      break;
    case TpSplit::kRows:
      s[0] = g[0] / t;
      break;
    case TpSplit::kCols:
      s[1] = g[1] / t;
      break;
    case TpSplit::kVocab:
      s[0] = (c.vocab_size + t - 1) / t;
      break;
  }
  return s;
}

const TpParam& Find(const ModelPartition& p, const std::string& name) {
  for (const TpParam& q : p.params()) {
    if (q.local.name == name) return q;
  }
  ADD_FAILURE() << "no parameter " << name;
  return p.params().front();
}

TEST(PartitionTest, TpOneIsTheGlobalLayout) {
  for (const Case& cs : Cases()) {
    SCOPED_TRACE(cs.name);
    const ModelPartition p = Make(cs.config, 1, 0);
    const std::vector<ParamDecl> decls = DeclareParameters(cs.config);
    ASSERT_EQ(p.params().size(), decls.size());
    int64_t offset = 0;
    for (size_t i = 0; i < decls.size(); ++i) {
      const TpParam& q = p.params()[i];
      const ParamDecl& d = decls[i];
      EXPECT_EQ(q.local.name, d.name);
      EXPECT_EQ(q.local.shape, d.shape) << d.name;
      EXPECT_EQ(q.global_shape(), d.shape) << d.name;
      EXPECT_EQ(q.local.kind, d.kind) << d.name;
      EXPECT_EQ(q.local.hf_transposed, d.hf_transposed) << d.name;
      EXPECT_EQ(q.local.init, d.init) << d.name;
      EXPECT_EQ(q.local.unit, d.unit) << d.name;
      EXPECT_EQ(q.global_index, static_cast<int>(i));
      EXPECT_EQ(q.local_offset, offset);
      EXPECT_EQ(q.global_offset, offset);
      ASSERT_EQ(q.segments.size(), 1u) << d.name;
      EXPECT_EQ(q.segments[0].local_begin, 0);
      EXPECT_EQ(q.segments[0].global_begin, 0);
      EXPECT_EQ(q.segments[0].length, d.shape.numel());
      offset += d.shape.numel();
    }
    EXPECT_EQ(p.unit_bounds(), UnitBounds(cs.config));
    EXPECT_EQ(p.num_local(), offset);
    EXPECT_EQ(p.vocab_per_rank(), cs.config.vocab_size);
    EXPECT_EQ(p.vocab_begin(), 0);
    EXPECT_TRUE(p.duplicate_ranges().empty());
    // InitRange is InitParameterRange, whole and on a sub-range.
    const std::vector<float> g = GlobalInit(cs.config, 5);
    const std::vector<float> l = LocalInit(p, 5);
    EXPECT_EQ(0, std::memcmp(g.data(), l.data(), g.size() * sizeof(float)));
    const int64_t b = offset / 3, e = offset - 7;
    std::vector<float> sub(e - b), want(e - b);
    p.InitRange(5, b, e, sub.data());
    InitParameterRange(cs.config, 5, b, e, want.data());
    EXPECT_EQ(0, std::memcmp(sub.data(), want.data(), sub.size() * sizeof(float)));
  }
}

TEST(PartitionTest, LayoutSplitsAndUnits) {
  for (const Case& cs : Cases()) {
    for (int t : cs.tps) {
      for (int r = 0; r < t; ++r) {
        SCOPED_TRACE(std::string(cs.name) + " tp=" + std::to_string(t) + " rank " +
                     std::to_string(r));
        const ModelPartition p = Make(cs.config, t, r);
        EXPECT_EQ(p.vocab_per_rank(), VocabPerRank(cs.config, t));
        EXPECT_EQ(p.vocab_begin(), r * VocabPerRank(cs.config, t));
        const std::vector<ParamDecl> decls = DeclareParameters(cs.config);
        ASSERT_EQ(p.params().size(), decls.size());
        int64_t local = 0, global = 0;
        std::vector<int64_t> bounds(cs.config.num_layers + 3, -1);
        for (size_t i = 0; i < decls.size(); ++i) {
          const TpParam& q = p.params()[i];
          const ParamDecl& d = decls[i];
          EXPECT_EQ(q.local.name, d.name);
          EXPECT_EQ(q.split(), ExpectedSplit(d.name)) << d.name;
          EXPECT_EQ(q.local.shape, ExpectedLocalShape(cs.config, d.name, d.shape, t)) << d.name;
          EXPECT_EQ(q.local.kind, d.kind);
          EXPECT_EQ(q.local.init, d.init);
          EXPECT_EQ(q.local.unit, d.unit);
          EXPECT_EQ(q.local.hf_transposed, d.hf_transposed);
          EXPECT_EQ(q.local_offset, local);
          EXPECT_EQ(q.global_offset, global);
          const bool seq = EndsWith(d.name, "ln_1.weight") || EndsWith(d.name, "ln_1.bias") ||
                           EndsWith(d.name, "ln_2.weight") || EndsWith(d.name, "ln_2.bias") ||
                           d.name == "ln_f.weight" || d.name == "ln_f.bias" ||
                           EndsWith(d.name, "layernorm.weight") || d.name == "model.norm.weight" ||
                           EndsWith(d.name, "attn.c_proj.bias") ||
                           EndsWith(d.name, "mlp.c_proj.bias");
          EXPECT_EQ(q.sequence_partial, seq) << d.name;
          if (bounds[d.unit] < 0) bounds[d.unit] = local;
          local += q.local.shape.numel();
          global += d.shape.numel();
        }
        bounds.back() = local;
        EXPECT_EQ(p.unit_bounds(), bounds);
        EXPECT_EQ(p.num_local(), local);
      }
    }
  }
  // Spot checks of the shapes Megatron gives a GQA Llama at tp = 2 (C 16, NH 4, NKV 2, HS 4).
  const ModelPartition p = Make(Llama(2, false), 2, 1);
  EXPECT_EQ(Find(p, "model.layers.0.self_attn.q_proj.weight").local.shape, Shape({8, 16}));
  EXPECT_EQ(Find(p, "model.layers.0.self_attn.k_proj.weight").local.shape, Shape({4, 16}));
  EXPECT_EQ(Find(p, "model.layers.0.self_attn.v_proj.weight").local.shape, Shape({4, 16}));
  EXPECT_EQ(Find(p, "model.layers.0.self_attn.o_proj.weight").local.shape, Shape({16, 8}));
  EXPECT_EQ(Find(p, "model.layers.1.mlp.up_proj.weight").local.shape, Shape({16, 16}));
  EXPECT_EQ(Find(p, "model.layers.1.mlp.down_proj.weight").local.shape, Shape({16, 16}));
  EXPECT_EQ(Find(p, "lm_head.weight").local.shape, Shape({5, 16}));
  // q, k, v adjacent (one fused GEMM), gate, up adjacent.
  const TpParam& q = Find(p, "model.layers.0.self_attn.q_proj.weight");
  const TpParam& k = Find(p, "model.layers.0.self_attn.k_proj.weight");
  const TpParam& v = Find(p, "model.layers.0.self_attn.v_proj.weight");
  EXPECT_EQ(k.local_offset, q.local_offset + 8 * 16);
  EXPECT_EQ(v.local_offset, k.local_offset + 4 * 16);
}

TEST(PartitionTest, SegmentsCoverEveryGlobalElementOnce) {
  for (const Case& cs : Cases()) {
    const std::vector<ParamDecl> decls = DeclareParameters(cs.config);
    for (int t : cs.tps) {
      SCOPED_TRACE(std::string(cs.name) + " tp=" + std::to_string(t));
      std::vector<int> counts(NumGlobal(cs.config), 0);
      for (int r = 0; r < t; ++r) {
        const ModelPartition p = Make(cs.config, t, r);
        for (const TpParam& q : p.params()) {
          int64_t covered = 0, prev_end = 0;
          for (const TpSegment& s : q.segments) {
            ASSERT_GT(s.length, 0);
            ASSERT_GE(s.local_begin, prev_end) << q.local.name;  // sorted, disjoint
            ASSERT_LE(s.local_begin + s.length, q.local.shape.numel());
            ASSERT_LE(s.global_begin + s.length, q.global_shape().numel());
            prev_end = s.local_begin + s.length;
            covered += s.length;
            for (int64_t k = 0; k < s.length; ++k) ++counts[q.global_offset + s.global_begin + k];
          }
          // Everything but vocabulary padding rows is mapped.
          int64_t padding = 0;
          if (q.split() == TpSplit::kVocab) {
            const int64_t vp = p.vocab_per_rank(), first = r * vp;
            const int64_t real =
                std::max<int64_t>(0, std::min(cs.config.vocab_size, first + vp) - first);
            padding = (vp - real) * cs.config.hidden_size;
          }
          EXPECT_EQ(covered + padding, q.local.shape.numel()) << q.local.name;
        }
      }
      int64_t offset = 0;
      for (const ParamDecl& d : decls) {
        const int want = ExpectedSplit(d.name) == TpSplit::kReplicated ? t : 1;
        for (int64_t k = 0; k < d.shape.numel(); ++k) {
          ASSERT_EQ(counts[offset + k], want) << d.name << " element " << k;
        }
        offset += d.shape.numel();
      }
    }
  }
}

// Each rank's initial values sit where Megatron's rules put them (index arithmetic written out
// in MegatronGlobal, independent of the segments), with the one-rank model's bits.
TEST(PartitionTest, LocalValuesAreMegatronSlices) {
  for (const Case& cs : Cases()) {
    const std::vector<float> g = GlobalInit(cs.config, 11);
    for (int t : cs.tps) {
      for (int r = 0; r < t; ++r) {
        SCOPED_TRACE(std::string(cs.name) + " tp=" + std::to_string(t) + " rank " +
                     std::to_string(r));
        const ModelPartition p = Make(cs.config, t, r);
        const std::vector<float> l = LocalInit(p, 11);
        for (const TpParam& q : p.params()) {
          for (int64_t e = 0; e < q.local.shape.numel(); ++e) {
            const int64_t ge = MegatronGlobal(cs.config, q.local.name, q.global_shape(), t, r, e);
            const float got = l[q.local_offset + e];
            if (ge < 0) {
              ASSERT_EQ(Bits(got), 0u) << q.local.name << " padding element " << e;
            } else {
              ASSERT_EQ(Bits(got), Bits(g[q.global_offset + ge])) << q.local.name << " " << e;
            }
          }
          // The segments agree with the same arithmetic.
          for (const TpSegment& s : q.segments) {
            for (int64_t k = 0; k < s.length; ++k) {
              ASSERT_EQ(MegatronGlobal(cs.config, q.local.name, q.global_shape(), t, r,
                                       s.local_begin + k),
                        s.global_begin + k)
                  << q.local.name;
            }
          }
        }
      }
    }
  }
}

// GPT-2 c_attn spelled out: local row j of rank r is global row b*C + r*C/t + within.
TEST(PartitionTest, Gpt2QkvRowsAreThisRanksHeads) {
  const ModelConfig c = Gpt2(true);
  const int64_t C = c.hidden_size;
  const std::vector<float> g = GlobalInit(c, 3);
  for (int t : {2, 4}) {
    for (int r = 0; r < t; ++r) {
      const ModelPartition p = Make(c, t, r);
      const std::vector<float> l = LocalInit(p, 3);
      const TpParam& w = Find(p, "h.1.attn.c_attn.weight");
      ASSERT_EQ(w.local.shape, Shape({3 * C / t, C}));
      for (int64_t j = 0; j < 3 * C / t; ++j) {
        const int64_t b = j / (C / t), within = j % (C / t);
        const int64_t row = b * C + r * C / t + within;
        EXPECT_EQ(0, std::memcmp(&l[w.local_offset + j * C], &g[w.global_offset + row * C],
                                 C * sizeof(float)))
            << "tp " << t << " rank " << r << " local row " << j;
      }
      // With tp = t > 1 there are 3 segments (q, k, v pieces), not contiguous globally.
      EXPECT_EQ(w.segments.size(), 3u);
    }
  }
}

// Stitching every rank's ForEachGlobalPiece back together rebuilds the one-rank init exactly.
TEST(PartitionTest, PiecesReassembleTheGlobalInit) {
  for (const Case& cs : Cases()) {
    const std::vector<float> g = GlobalInit(cs.config, 21);
    for (int t : cs.tps) {
      SCOPED_TRACE(std::string(cs.name) + " tp=" + std::to_string(t));
      std::vector<float> rebuilt(g.size(), -1.0f);
      for (int r = 0; r < t; ++r) {
        const ModelPartition p = Make(cs.config, t, r);
        const std::vector<float> l = LocalInit(p, 21);
        std::vector<char> mapped(l.size(), 0);
        int64_t next = 0;
        p.ForEachGlobalPiece(0, p.num_local(), [&](const TpParam& q, int64_t global_begin,
                                                   int64_t length, int64_t local_flat) {
          EXPECT_GE(local_flat, next);  // increasing local order
          next = local_flat + length;
          ASSERT_GE(local_flat, q.local_offset);
          ASSERT_LE(local_flat + length, q.local_offset + q.local.shape.numel());
          ASSERT_LE(global_begin + length, q.global_shape().numel());
          EXPECT_EQ(0, std::memcmp(&l[local_flat], &g[q.global_offset + global_begin],
                                   length * sizeof(float)))
              << q.local.name;
          std::memcpy(&rebuilt[q.global_offset + global_begin], &l[local_flat],
                      length * sizeof(float));
          std::fill(mapped.begin() + local_flat, mapped.begin() + local_flat + length, 1);
        });
        for (int64_t i = 0; i < p.num_local(); ++i) {
          if (!mapped[i]) {
            ASSERT_EQ(Bits(l[i]), 0u) << "unmapped element " << i << " not 0";
          }
        }
      }
      EXPECT_EQ(0, std::memcmp(rebuilt.data(), g.data(), g.size() * sizeof(float)));
    }
  }
}

using Piece = std::tuple<std::string, int64_t, int64_t, int64_t>;  // name, global, length, local

std::vector<Piece> Pieces(const ModelPartition& p, int64_t begin, int64_t end) {
  std::vector<Piece> out;
  p.ForEachGlobalPiece(begin, end, [&](const TpParam& q, int64_t gb, int64_t n, int64_t lf) {
    out.emplace_back(q.local.name, gb, n, lf);
  });
  return out;
}

TEST(PartitionTest, SubRangePiecesStartAndEndMidTensor) {
  // GPT-2 C 16, F 64, tp 2, rank 1: attn.c_proj.weight is (16, 8), columns [8, 16).
  const ModelPartition p = Make(Gpt2(true), 2, 1);
  const int64_t proj = Find(p, "h.0.attn.c_proj.weight").local_offset;
  // Row 0 from column 3 to row 1 column 2.
  EXPECT_EQ(Pieces(p, proj + 3, proj + 8 + 2),
            (std::vector<Piece>{{"h.0.attn.c_proj.weight", 8 + 3, 5, proj + 3},
                                {"h.0.attn.c_proj.weight", 16 + 8, 2, proj + 8}}));
  // Last row of c_proj from column 6, through the replicated c_proj.bias and ln_2, into the
  // first 20 elements of c_fc (this rank's rows [32, 64)).
  const int64_t bias = Find(p, "h.0.attn.c_proj.bias").local_offset;
  const int64_t ln2w = Find(p, "h.0.ln_2.weight").local_offset;
  const int64_t ln2b = Find(p, "h.0.ln_2.bias").local_offset;
  const int64_t fc = Find(p, "h.0.mlp.c_fc.weight").local_offset;
  EXPECT_EQ(Pieces(p, proj + 15 * 8 + 6, fc + 20),
            (std::vector<Piece>{{"h.0.attn.c_proj.weight", 15 * 16 + 8 + 6, 2, proj + 126},
                                {"h.0.attn.c_proj.bias", 0, 16, bias},
                                {"h.0.ln_2.weight", 0, 16, ln2w},
                                {"h.0.ln_2.bias", 0, 16, ln2b},
                                {"h.0.mlp.c_fc.weight", 32 * 16, 20, fc}}));
  // Within one tensor: the middle of c_attn's k block to the middle of its v block.
  const int64_t qkv = Find(p, "h.0.attn.c_attn.weight").local_offset;
  EXPECT_EQ(Pieces(p, qkv + 8 * 16 + 5, qkv + 16 * 16 + 3),
            (std::vector<Piece>{{"h.0.attn.c_attn.weight", (16 + 8) * 16 + 5, 8 * 16 - 5,
                                 qkv + 8 * 16 + 5},
                                {"h.0.attn.c_attn.weight", (32 + 8) * 16, 3, qkv + 16 * 16}}));
  // The vocabulary at tp = 4, rank 3: one real row (9), two padding rows that map nowhere.
  const ModelPartition p4 = Make(Gpt2(true), 4, 3);
  EXPECT_EQ(Pieces(p4, 5, 3 * 16 + 1),
            (std::vector<Piece>{{"wte.weight", 9 * 16 + 5, 11, 5},
                                {"wpe.weight", 0, 1, 3 * 16}}));
  EXPECT_TRUE(Pieces(p4, 20, 30).empty());
  EXPECT_TRUE(Pieces(p4, 7, 7).empty());

  // Every sub-range: pieces are the element map, maximal, and InitRange matches the slice.
  for (const Case& cs : Cases()) {
    for (int t : cs.tps) {
      const ModelPartition q = Make(cs.config, t, t - 1);
      const std::vector<float> l = LocalInit(q, 9);
      const int64_t n = q.num_local();
      for (int64_t b = 0; b < n; b += n / 7 + 3) {
        const int64_t e = std::min(n, b + n / 5 + 11);
        SCOPED_TRACE(std::string(cs.name) + " tp=" + std::to_string(t) + " [" +
                     std::to_string(b) + ", " + std::to_string(e) + ")");
        // Expected element map by brute force.
        std::vector<std::pair<std::string, int64_t>> want(e - b, {"", -1});
        for (const TpParam& param : q.params()) {
          for (int64_t i = 0; i < param.local.shape.numel(); ++i) {
            const int64_t at = param.local_offset + i;
            if (at < b || at >= e) continue;
            want[at - b] = {param.local.name, MegatronGlobal(cs.config, param.local.name,
                                                             param.global_shape(), t, t - 1, i)};
          }
        }
        std::vector<std::pair<std::string, int64_t>> got(e - b, {"", -1});
        const std::vector<Piece> pieces = Pieces(q, b, e);
        for (size_t k = 0; k < pieces.size(); ++k) {
          const auto& [name, gb, len, lf] = pieces[k];
          ASSERT_GE(lf, b);
          ASSERT_LE(lf + len, e);
          for (int64_t i = 0; i < len; ++i) got[lf - b + i] = {name, gb + i};
          if (k > 0) {  // maximal: never a continuation of the previous piece
            const auto& [pname, pgb, plen, plf] = pieces[k - 1];
            EXPECT_FALSE(pname == name && plf + plen == lf && pgb + plen == gb);
          }
        }
        for (int64_t i = 0; i < e - b; ++i) {
          if (want[i].second < 0) {
            ASSERT_EQ(got[i].second, -1) << "padding element mapped";
          } else {
            ASSERT_EQ(got[i], want[i]) << "local element " << b + i;
          }
        }
        std::vector<float> sub(e - b, 3.0f);
        q.InitRange(9, b, e, sub.data());
        EXPECT_EQ(0, std::memcmp(sub.data(), &l[b], sub.size() * sizeof(float)));
      }
    }
  }
}

TEST(PartitionTest, ValidateRefusesTpThatCannotSplit) {
  ModelConfig six = Gpt2(true);
  six.hidden_size = 24;
  six.num_heads = 6;
  Status s = ValidateTensorParallel(six, 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("parallel.tp=4"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("model.num_heads=6"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("divides 6"), std::string::npos) << s.message();
  EXPECT_TRUE(ValidateTensorParallel(six, 3).ok());
  EXPECT_FALSE(ModelPartition::Create(six, 4, 0).ok());

  s = ValidateTensorParallel(Llama(2, false), 4);  // NH 4 fine, NKV 2 not
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("parallel.tp=4"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("model.num_kv_heads=2"), std::string::npos) << s.message();

  ModelConfig ffn = Llama(4, false);
  ffn.ffn_hidden_size = 30;
  s = ValidateTensorParallel(ffn, 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ffn_size=30"), std::string::npos) << s.message();
  EXPECT_TRUE(ValidateTensorParallel(ffn, 2).ok());

  for (int bad : {0, -2}) {
    s = ValidateTensorParallel(Gpt2(true), bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("parallel.tp=" + std::to_string(bad)), std::string::npos);
  }
  // A rank outside [0, tp) is refused too.
  EXPECT_EQ(ModelPartition::Create(Gpt2(true), 2, 2).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ModelPartition::Create(Gpt2(true), 2, -1).status().code(),
            StatusCode::kInvalidArgument);
  // The vocabulary never needs to divide: it is padded.
  EXPECT_TRUE(ValidateTensorParallel(Gpt2(true), 4).ok());
  EXPECT_EQ(VocabPerRank(Gpt2(true), 4), 3);
  EXPECT_EQ(VocabPerRank(Gpt2(true), 2), 5);
  EXPECT_EQ(VocabPerRank(Gpt2(true), 1), 10);
}

TEST(PartitionTest, DuplicateRangesAreTheReplicatedTensorsOfRanksAboveZero) {
  // GPT-2 tied, tp 2, rank 1: wpe + ln_1 of block 0 merge; then c_proj.bias + ln_2; then
  // mlp.c_proj.bias + block 1's ln_1; ... the last range ends with ln_f.
  const ModelPartition p = Make(Gpt2(true), 2, 1);
  auto at = [&](const char* name) { return Find(p, name).local_offset; };
  const std::vector<std::pair<int64_t, int64_t>> want = {
      {at("wpe.weight"), at("h.0.attn.c_attn.weight")},
      {at("h.0.attn.c_proj.bias"), at("h.0.mlp.c_fc.weight")},
      {at("h.0.mlp.c_proj.bias"), at("h.1.attn.c_attn.weight")},
      {at("h.1.attn.c_proj.bias"), at("h.1.mlp.c_fc.weight")},
      {at("h.1.mlp.c_proj.bias"), p.num_local()}};
  EXPECT_EQ(p.duplicate_ranges(), want);
  EXPECT_TRUE(Make(Gpt2(true), 2, 0).duplicate_ranges().empty());
  EXPECT_TRUE(Make(Gpt2(true), 1, 0).duplicate_ranges().empty());
  // Untied GPT-2: ln_f is followed by the vocab-split lm_head.
  const ModelPartition u = Make(Gpt2(false), 4, 2);
  EXPECT_EQ(u.duplicate_ranges().back(),
            std::make_pair(Find(u, "h.1.mlp.c_proj.bias").local_offset,
                           Find(u, "lm_head.weight").local_offset));

  // In general: sorted, never touching (merged), covering exactly the replicated tensors.
  for (const Case& cs : Cases()) {
    for (int t : cs.tps) {
      for (int r = 1; r < t; ++r) {
        const ModelPartition q = Make(cs.config, t, r);
        std::vector<char> dup(q.num_local(), 0);
        int64_t prev_end = -1;
        for (const auto& [b, e] : q.duplicate_ranges()) {
          EXPECT_GT(b, prev_end);  // strictly after: adjacent ranges would have been merged
          EXPECT_LT(b, e);
          prev_end = e;
          std::fill(dup.begin() + b, dup.begin() + e, 1);
        }
        for (const TpParam& param : q.params()) {
          const char want_dup = param.split() == TpSplit::kReplicated ? 1 : 0;
          for (int64_t i = 0; i < param.local.shape.numel(); ++i) {
            ASSERT_EQ(dup[param.local_offset + i], want_dup) << cs.name << " " << param.local.name;
          }
        }
      }
    }
  }
}

TEST(PartitionTest, EachParameterStatesItsSliceAsAShardedTensorWhoseRunsAreItsSegments) {
  // The one vocabulary (runtime/core/sharded_tensor.h): every TpParam's tensor is valid, names
  // the global tensor and its local buffer, its runs (merged where contiguous) are the
  // segments, and it is the main replica exactly where it is not a duplicate range.
  for (const Case& cs : Cases()) {
    for (int t : cs.tps) {
      for (int r = 0; r < t; ++r) {
        const ModelPartition q = Make(cs.config, t, r);
        std::vector<char> dup(q.num_local(), 0);
        for (const auto& [b, e] : q.duplicate_ranges()) std::fill(dup.begin() + b, dup.begin() + e, 1);
        for (const TpParam& param : q.params()) {
          const ShardedTensor& st = param.tensor;
          ASSERT_TRUE(st.Validate().ok()) << st.Validate().ToString();
          EXPECT_EQ(st.name, param.local.name);
          EXPECT_EQ(st.global_shape, param.global_shape()) << st.name;
          EXPECT_EQ(st.local_shape, param.local.shape) << st.name;
          EXPECT_EQ(st.split_group, param.split() == TpSplit::kReplicated ? ShardGroup::kNone
                                                                         : ShardGroup::kTp)
              << st.name;
          std::vector<TpSegment> runs;
          st.ForEachRun([&](int64_t l, int64_t g, int64_t n) {
            if (!runs.empty() && runs.back().local_begin + runs.back().length == l &&
                runs.back().global_begin + runs.back().length == g) {
              runs.back().length += n;
            } else {
              runs.push_back({l, g, n});
            }
          });
          ASSERT_EQ(runs.size(), param.segments.size()) << cs.name << " " << st.name;
          for (size_t i = 0; i < runs.size(); ++i) {
            EXPECT_EQ(runs[i].local_begin, param.segments[i].local_begin) << st.name;
            EXPECT_EQ(runs[i].global_begin, param.segments[i].global_begin) << st.name;
            EXPECT_EQ(runs[i].length, param.segments[i].length) << st.name;
          }
          EXPECT_EQ(st.IsMainReplica(), dup[param.local_offset] == 0) << cs.name << " " << st.name;
        }
      }
    }
  }
}


// ---- Pipeline chunks -------------------------------------------------------------------------

TEST(PartitionTest, PipelineLayerSplitEvenExplicitAndErrors) {
  EXPECT_EQ(PipelineLayerSplit(8, 4, {}).value(), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(PipelineLayerSplit(5, 1, {}).value(), (std::vector<int64_t>{5}));
  EXPECT_EQ(PipelineLayerSplit(7, 3, {1, 4, 2}).value(), (std::vector<int64_t>{1, 4, 2}));
  // An explicit split is used as is even when the layers would divide evenly.
  EXPECT_EQ(PipelineLayerSplit(8, 2, {3, 5}).value(), (std::vector<int64_t>{3, 5}));

  auto error = [](int64_t layers, int stages, std::vector<int64_t> split) {
    Result<std::vector<int64_t>> r = PipelineLayerSplit(layers, stages, split);
    EXPECT_FALSE(r.ok());
    if (r.ok()) return std::string();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    return r.status().message();
  };
  std::string m = error(8, 4, {2, 2, 4});  // 3 counts for 4 stages
  EXPECT_NE(m.find("3 layer counts"), std::string::npos) << m;
  EXPECT_NE(m.find("4 virtual stages"), std::string::npos) << m;
  m = error(8, 3, {4, 0, 4});
  EXPECT_NE(m.find("at least one layer"), std::string::npos) << m;
  EXPECT_NE(m.find("got 0"), std::string::npos) << m;
  m = error(8, 2, {3, 4});
  EXPECT_NE(m.find("sums to 7"), std::string::npos) << m;
  EXPECT_NE(m.find("model.num_layers=8"), std::string::npos) << m;
  // 10 layers on 4 stages: the suggestion sums to 10 and gives the middle stages the extras.
  m = error(10, 4, {});
  EXPECT_NE(m.find("model.num_layers=10"), std::string::npos) << m;
  EXPECT_NE(m.find("4 pipeline stages"), std::string::npos) << m;
  EXPECT_NE(m.find("parallel.pipeline_split, e.g. [2, 3, 3, 2]"), std::string::npos) << m;
  m = error(11, 4, {});  // 3 extras: both middle stages, then the first
  EXPECT_NE(m.find("e.g. [3, 3, 3, 2]"), std::string::npos) << m;
  m = error(7, 2, {});  // no middle stage: the first takes the extra
  EXPECT_NE(m.find("e.g. [4, 3]"), std::string::npos) << m;
  // Fewer layers than stages: no split can work.
  m = error(3, 4, {});
  EXPECT_NE(m.find("model.num_layers=3"), std::string::npos) << m;
  EXPECT_NE(m.find("at least one layer"), std::string::npos) << m;
  EXPECT_EQ(m.find("e.g."), std::string::npos) << m;
  error(4, 0, {});
}

TEST(PartitionTest, PipelineChunksPlainAndInterleaved) {
  using C = PipelineChunk;
  EXPECT_EQ(PipelineChunks(4, 2, 0, 1, {}).value(), (std::vector<C>{{0, 2, true, false}}));
  EXPECT_EQ(PipelineChunks(4, 2, 1, 1, {}).value(), (std::vector<C>{{2, 4, false, true}}));
  EXPECT_EQ(PipelineChunks(4, 1, 0, 1, {}).value(), (std::vector<C>{{0, 4, true, true}}));
  // Interleaved: chunk c of stage s is virtual stage c * pp + s.
  EXPECT_EQ(PipelineChunks(8, 2, 0, 2, {}).value(),
            (std::vector<C>{{0, 2, true, false}, {4, 6, false, false}}));
  EXPECT_EQ(PipelineChunks(8, 2, 1, 2, {}).value(),
            (std::vector<C>{{2, 4, false, false}, {6, 8, false, true}}));
  // An uneven split follows the virtual-stage order.
  EXPECT_EQ(PipelineChunks(6, 2, 1, 2, {1, 2, 2, 1}).value(),
            (std::vector<C>{{1, 3, false, false}, {5, 6, false, true}}));
  // Bad stage / pp / virtual stages, and split errors pass through.
  EXPECT_FALSE(PipelineChunks(4, 2, 2, 1, {}).ok());
  EXPECT_FALSE(PipelineChunks(4, 2, -1, 1, {}).ok());
  EXPECT_FALSE(PipelineChunks(4, 0, 0, 1, {}).ok());
  EXPECT_FALSE(PipelineChunks(4, 2, 0, 0, {}).ok());
  EXPECT_FALSE(PipelineChunks(6, 2, 0, 2, {}).ok());
  EXPECT_FALSE(PipelineChunks(8, 2, 0, 2, {2, 2, 4}).ok());
}

ModelConfig Deep(ModelConfig c, int64_t layers) {
  c.num_layers = layers;
  return c;
}

struct Layout {
  int tp, pp, v;
  std::vector<int64_t> split;
};

std::string Describe(const char* name, const Layout& lay, int r, int stage) {
  std::string s = std::string(name) + " tp=" + std::to_string(lay.tp) + " pp=" +
                  std::to_string(lay.pp) + " v=" + std::to_string(lay.v);
  if (!lay.split.empty()) s += " split";
  return s + " tp rank " + std::to_string(r) + " stage " + std::to_string(stage);
}

ModelPartition MakeChunked(const ModelConfig& c, const Layout& lay, int r, int stage) {
  Result<std::vector<PipelineChunk>> chunks =
      PipelineChunks(c.num_layers, lay.pp, stage, lay.v, lay.split);
  EXPECT_TRUE(chunks.ok()) << chunks.status().ToString();
  Result<ModelPartition> p = ModelPartition::Create(c, lay.tp, r, chunks.value());
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

// The layout a chunked rank must have, rebuilt from the rules in partition.h (not from the
// code under test): per chunk, its embedding unit (the embeddings when first, a copy when last
// and tied), its blocks, its final unit (when last); parameters in declaration order.
void ExpectChunkedLayout(const ModelPartition& p) {
  const ModelConfig& c = p.config();
  const int64_t L = c.num_layers;
  const int t = p.tp_size();
  const std::vector<ParamDecl> decls = DeclareParameters(c);
  std::vector<int64_t> global_offsets;
  int64_t g = 0;
  for (const ParamDecl& d : decls) {
    global_offsets.push_back(g);
    g += d.shape.numel();
  }
  std::vector<int64_t> bounds = {0};
  size_t next = 0;
  int64_t local = 0;
  int unit_base = 0;
  for (size_t ci = 0; ci < p.chunks().size(); ++ci) {
    const PipelineChunk& ch = p.chunks()[ci];
    const int64_t blocks = ch.layer_end - ch.layer_begin;
    const bool copy = c.tie_embeddings && ch.last && !ch.first;
    EXPECT_EQ(p.chunk_unit_begin(static_cast<int>(ci)), unit_base);
    EXPECT_EQ(p.chunk_num_units(static_cast<int>(ci)), blocks + 2);
    std::vector<int64_t> sizes(blocks + 2, 0);
    for (size_t i = 0; i < decls.size(); ++i) {
      const ParamDecl& d = decls[i];
      int cu = -1;
      if (d.unit == 0) {
        if (ch.first || copy) cu = 0;
      } else if (d.unit == L + 1) {
        if (ch.last) cu = static_cast<int>(blocks + 1);
      } else if (d.unit - 1 >= ch.layer_begin && d.unit - 1 < ch.layer_end) {
        cu = static_cast<int>(d.unit - 1 - ch.layer_begin + 1);
      }
      if (cu < 0) continue;
      ASSERT_LT(next, p.params().size()) << "missing " << d.name;
      const TpParam& q = p.params()[next++];
      EXPECT_EQ(q.local.name, d.name);
      EXPECT_EQ(q.global_index, static_cast<int>(i)) << d.name;
      EXPECT_EQ(q.global_offset, global_offsets[i]) << d.name;
      EXPECT_EQ(q.global_shape(), d.shape) << d.name;
      EXPECT_EQ(q.local.shape, ExpectedLocalShape(c, d.name, d.shape, t)) << d.name;
      EXPECT_EQ(q.split(), ExpectedSplit(d.name)) << d.name;
      EXPECT_EQ(q.chunk, static_cast<int>(ci)) << d.name;
      EXPECT_EQ(q.local.unit, unit_base + cu) << d.name;
      EXPECT_EQ(q.pipeline_copy(), d.unit == 0 && !ch.first) << d.name;
      EXPECT_EQ(q.local_offset, local) << d.name;
      sizes[cu] += q.local.shape.numel();
      local += q.local.shape.numel();
    }
    for (int64_t n : sizes) bounds.push_back(bounds.back() + n);
    unit_base += static_cast<int>(blocks + 2);
  }
  EXPECT_EQ(next, p.params().size()) << "extra parameters";
  EXPECT_EQ(p.unit_bounds(), bounds);
  EXPECT_EQ(p.num_local(), local);
  for (size_t u = 1; u < p.unit_bounds().size(); ++u) {
    EXPECT_LE(p.unit_bounds()[u - 1], p.unit_bounds()[u]);
  }
  // Every parameter lies inside its local unit.
  for (const TpParam& q : p.params()) {
    EXPECT_LE(p.unit_bounds()[q.local.unit], q.local_offset) << q.local.name;
    EXPECT_LE(q.local_offset + q.local.shape.numel(), p.unit_bounds()[q.local.unit + 1])
        << q.local.name;
  }
}

int64_t UnitSize(const ModelPartition& p, int u) {
  return p.unit_bounds()[u + 1] - p.unit_bounds()[u];
}

TEST(PartitionTest, ChunkedLayoutTiedGpt2TwoStages) {
  const ModelConfig c = Deep(Gpt2(true), 4);  // V 10, T 8, C 16
  const int64_t V = 10, T = 8, C = 16;
  const Layout lay{1, 2, 1, {}};
  const ModelPartition s0 = MakeChunked(c, lay, 0, 0);
  const ModelPartition s1 = MakeChunked(c, lay, 0, 1);
  ExpectChunkedLayout(s0);
  ExpectChunkedLayout(s1);
  ASSERT_EQ(s0.unit_bounds().size(), 5u);  // 2 blocks + 2 units
  ASSERT_EQ(s1.unit_bounds().size(), 5u);
  // Stage 0: the embeddings (not a copy), blocks 0 and 1, an empty final unit.
  EXPECT_EQ(UnitSize(s0, 0), (V + T) * C);
  EXPECT_EQ(UnitSize(s0, 3), 0);
  EXPECT_FALSE(Find(s0, "wte.weight").pipeline_copy());
  EXPECT_EQ(Find(s0, "h.1.mlp.c_proj.bias").local.unit, 2);
  for (const TpParam& q : s0.params()) EXPECT_NE(q.local.name, "ln_f.weight");
  EXPECT_TRUE(s0.duplicate_ranges().empty());
  // Stage 1: a copy of the whole embedding unit (wte and wpe) in unit 0, blocks 2, 3, ln_f.
  const TpParam& wte = Find(s1, "wte.weight");
  const TpParam& wpe = Find(s1, "wpe.weight");
  EXPECT_TRUE(wte.pipeline_copy());
  EXPECT_TRUE(wpe.pipeline_copy());
  EXPECT_EQ(wte.local.unit, 0);
  EXPECT_EQ(wpe.local.unit, 0);
  EXPECT_EQ(wte.local_offset, 0);
  EXPECT_EQ(UnitSize(s1, 0), (V + T) * C);
  EXPECT_EQ(Find(s1, "h.2.ln_1.weight").local.unit, 1);
  EXPECT_EQ(Find(s1, "h.2.ln_1.weight").global_index,
            Find(Make(c, 1, 0), "h.2.ln_1.weight").global_index);
  EXPECT_EQ(Find(s1, "ln_f.bias").local.unit, 3);
  EXPECT_GT(UnitSize(s1, 3), 0);
  for (const TpParam& q : s1.params()) EXPECT_EQ(q.local.name.rfind("h.0.", 0), std::string::npos);
  // The copy is a duplicate even on tp rank 0.
  EXPECT_EQ(s1.duplicate_ranges(),
            (std::vector<std::pair<int64_t, int64_t>>{{0, (V + T) * C}}));
  // tp 2 rank 1: the copy (5 vocab rows + wpe) merges with block 2's replicated ln_1.
  const ModelPartition r1 = MakeChunked(c, {2, 2, 1, {}}, 1, 1);
  ExpectChunkedLayout(r1);
  EXPECT_EQ(UnitSize(r1, 0), (5 + T) * C);
  ASSERT_FALSE(r1.duplicate_ranges().empty());
  EXPECT_EQ(r1.duplicate_ranges().front(),
            std::make_pair(int64_t{0}, Find(r1, "h.2.attn.c_attn.weight").local_offset));
  // tp 2 rank 0: only the copy.
  const ModelPartition r0 = MakeChunked(c, {2, 2, 1, {}}, 0, 1);
  EXPECT_EQ(r0.duplicate_ranges(),
            (std::vector<std::pair<int64_t, int64_t>>{{0, (5 + T) * C}}));
}

TEST(PartitionTest, ChunkedLayoutUntiedLlamaTwoStages) {
  const ModelConfig c = Deep(Llama(2, false), 4);
  const Layout lay{1, 2, 1, {}};
  const ModelPartition s0 = MakeChunked(c, lay, 0, 0);
  const ModelPartition s1 = MakeChunked(c, lay, 0, 1);
  ExpectChunkedLayout(s0);
  ExpectChunkedLayout(s1);
  // Stage 0: embed_tokens, no norm or lm_head.
  EXPECT_EQ(Find(s0, "model.embed_tokens.weight").local.unit, 0);
  EXPECT_FALSE(Find(s0, "model.embed_tokens.weight").pipeline_copy());
  EXPECT_EQ(UnitSize(s0, 3), 0);
  // Stage 1: an empty embedding unit (no copy when untied), lm_head in the final unit.
  EXPECT_EQ(UnitSize(s1, 0), 0);
  for (const TpParam& q : s1.params()) {
    EXPECT_FALSE(q.pipeline_copy()) << q.local.name;
    EXPECT_NE(q.local.name, "model.embed_tokens.weight");
  }
  EXPECT_EQ(Find(s1, "lm_head.weight").local.unit, 3);
  EXPECT_EQ(Find(s1, "model.norm.weight").local.unit, 3);
  EXPECT_EQ(Find(s1, "lm_head.weight").local_offset + 10 * 16, s1.num_local());
  EXPECT_TRUE(s0.duplicate_ranges().empty());
  EXPECT_TRUE(s1.duplicate_ranges().empty());
}

TEST(PartitionTest, ChunkedLayoutInterleaved) {
  const ModelConfig c = Deep(Gpt2(true), 8);
  const Layout lay{1, 2, 2, {}};
  const ModelPartition s0 = MakeChunked(c, lay, 0, 0);
  const ModelPartition s1 = MakeChunked(c, lay, 0, 1);
  ExpectChunkedLayout(s0);
  ExpectChunkedLayout(s1);
  for (const ModelPartition* p : {&s0, &s1}) {
    ASSERT_EQ(p->chunks().size(), 2u);
    EXPECT_EQ(p->chunk_unit_begin(0), 0);
    EXPECT_EQ(p->chunk_unit_begin(1), 4);
    EXPECT_EQ(p->unit_bounds().size(), 9u);
  }
  // Stage 0: chunk 0 holds the embeddings; chunk 1 (layers 4, 5) none and no final norm.
  EXPECT_GT(UnitSize(s0, 0), 0);
  EXPECT_EQ(UnitSize(s0, 3), 0);
  EXPECT_EQ(UnitSize(s0, 4), 0);
  EXPECT_EQ(UnitSize(s0, 7), 0);
  EXPECT_EQ(Find(s0, "h.4.ln_1.weight").chunk, 1);
  EXPECT_EQ(Find(s0, "h.4.ln_1.weight").local.unit, 5);
  EXPECT_EQ(Find(s0, "h.1.ln_1.weight").chunk, 0);
  EXPECT_TRUE(s0.duplicate_ranges().empty());
  // Stage 1: chunk 0 (layers 2, 3) holds no embeddings; chunk 1 holds the copy in its unit 0
  // (local unit 4), layers 6, 7 and ln_f.
  EXPECT_EQ(UnitSize(s1, 0), 0);
  EXPECT_EQ(UnitSize(s1, 3), 0);
  const TpParam& wte = Find(s1, "wte.weight");
  EXPECT_TRUE(wte.pipeline_copy());
  EXPECT_EQ(wte.chunk, 1);
  EXPECT_EQ(wte.local.unit, 4);
  EXPECT_EQ(Find(s1, "wpe.weight").local.unit, 4);
  EXPECT_EQ(wte.local_offset, s1.unit_bounds()[4]);
  EXPECT_EQ(Find(s1, "ln_f.weight").local.unit, 7);
  EXPECT_EQ(Find(s1, "h.3.mlp.c_proj.bias").chunk, 0);
  EXPECT_EQ(s1.duplicate_ranges(), (std::vector<std::pair<int64_t, int64_t>>{
                                       {s1.unit_bounds()[4], s1.unit_bounds()[5]}}));
}

TEST(PartitionTest, CreateRefusesBadChunks) {
  const ModelConfig c = Deep(Gpt2(true), 4);
  for (const PipelineChunk& bad : {PipelineChunk{2, 2, false, false},
                                   PipelineChunk{3, 2, false, false},
                                   PipelineChunk{-1, 2, true, false},
                                   PipelineChunk{2, 5, false, true}}) {
    Result<ModelPartition> p = ModelPartition::Create(c, 1, 0, {bad});
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  }
  // One whole-model chunk is the default layout.
  const ModelPartition whole = ModelPartition::Create(c, 2, 1, {{0, 4, true, true}}).value();
  const ModelPartition dflt = Make(c, 2, 1);
  EXPECT_EQ(whole.unit_bounds(), dflt.unit_bounds());
  EXPECT_EQ(whole.duplicate_ranges(), dflt.duplicate_ranges());
  ASSERT_EQ(whole.params().size(), dflt.params().size());
  for (size_t i = 0; i < whole.params().size(); ++i) {
    EXPECT_EQ(whole.params()[i].local_offset, dflt.params()[i].local_offset);
    EXPECT_FALSE(whole.params()[i].pipeline_copy());
  }
}

struct ChunkCase {
  const char* name;
  ModelConfig config;
};

std::vector<ChunkCase> ChunkCases() {
  return {{"gpt2_tied", Deep(Gpt2(true), 8)},
          {"llama_gqa_untied", Deep(Llama(2, false), 8)},
          {"llama_gqa_tied", Deep(Llama(2, true), 8)}};
}

std::vector<Layout> ChunkLayouts() {
  std::vector<Layout> out;
  for (int tp : {1, 2}) {
    for (int pp : {2, 4}) {
      for (int v : {1, 2}) out.push_back({tp, pp, v, {}});
    }
    out.push_back({tp, 4, 1, {1, 3, 3, 1}});  // uneven
  }
  return out;
}

// Over all (tp rank, pipeline stage): non-duplicate local elements cover every global element
// exactly once; with duplicates, replicated tensors count tp times and the copies once more.
TEST(PartitionTest, ChunkedCoverageAndDuplicates) {
  for (const ChunkCase& cs : ChunkCases()) {
    const ModelConfig& c = cs.config;
    const std::vector<ParamDecl> decls = DeclareParameters(c);
    for (const Layout& lay : ChunkLayouts()) {
      SCOPED_TRACE(Describe(cs.name, lay, -1, -1));
      std::vector<int> once(NumGlobal(c), 0), all(NumGlobal(c), 0);
      for (int r = 0; r < lay.tp; ++r) {
        for (int stage = 0; stage < lay.pp; ++stage) {
          SCOPED_TRACE(Describe(cs.name, lay, r, stage));
          const ModelPartition p = MakeChunked(c, lay, r, stage);
          ExpectChunkedLayout(p);
          std::vector<char> dup(p.num_local(), 0);
          int64_t prev_end = -1;
          for (const auto& [b, e] : p.duplicate_ranges()) {
            EXPECT_GT(b, prev_end);  // sorted, merged
            EXPECT_LT(b, e);
            prev_end = e;
            std::fill(dup.begin() + b, dup.begin() + e, 1);
          }
          for (const TpParam& q : p.params()) {
            const char want_dup =
                q.pipeline_copy() || (r > 0 && q.split() == TpSplit::kReplicated) ? 1 : 0;
            EXPECT_EQ(q.tensor.IsMainReplica(), want_dup == 0) << q.local.name;  // one rule
            EXPECT_EQ(q.tensor.replica.pp, q.pipeline_copy() ? 1 : 0) << q.local.name;
            for (int64_t i = 0; i < q.local.shape.numel(); ++i) {
              ASSERT_EQ(dup[q.local_offset + i], want_dup) << q.local.name << " " << i;
            }
            for (const TpSegment& s : q.segments) {
              for (int64_t k = 0; k < s.length; ++k) {
                const int64_t ge = q.global_offset + s.global_begin + k;
                ++all[ge];
                if (!dup[q.local_offset + s.local_begin + k]) ++once[ge];
              }
            }
          }
        }
      }
      int64_t offset = 0;
      for (const ParamDecl& d : decls) {
        const int per = ExpectedSplit(d.name) == TpSplit::kReplicated ? lay.tp : 1;
        const int copies = c.tie_embeddings && d.unit == 0 ? 2 : 1;
        for (int64_t k = 0; k < d.shape.numel(); ++k) {
          ASSERT_EQ(once[offset + k], 1) << d.name << " element " << k;
          ASSERT_EQ(all[offset + k], per * copies) << d.name << " element " << k;
        }
        offset += d.shape.numel();
      }
    }
  }
}

// A chunked rank's initial values, the pipeline copy included, are the one-rank model's bits
// at the elements Megatron's rules name; any sub-range gives the same values. (A subset of the
// layouts: each InitParameterRange call is an OpenMP region, slow on a loaded machine.)
TEST(PartitionTest, ChunkedInitMatchesOneRankBits) {
  const std::vector<Layout> layouts = {
      {1, 2, 1, {}}, {1, 4, 2, {}}, {2, 2, 2, {}}, {2, 4, 1, {1, 3, 3, 1}}};
  for (const ChunkCase& cs : ChunkCases()) {
    const std::vector<float> g = GlobalInit(cs.config, 17);
    for (const Layout& lay : layouts) {
      for (int r = 0; r < lay.tp; ++r) {
        for (int stage = 0; stage < lay.pp; ++stage) {
          SCOPED_TRACE(Describe(cs.name, lay, r, stage));
          const ModelPartition p = MakeChunked(cs.config, lay, r, stage);
          const std::vector<float> l = LocalInit(p, 17);
          for (const TpParam& q : p.params()) {
            for (int64_t e = 0; e < q.local.shape.numel(); ++e) {
              const int64_t ge =
                  MegatronGlobal(cs.config, q.local.name, q.global_shape(), lay.tp, r, e);
              const float got = l[q.local_offset + e];
              if (ge < 0) {
                ASSERT_EQ(Bits(got), 0u) << q.local.name << " padding element " << e;
              } else {
                ASSERT_EQ(Bits(got), Bits(g[q.global_offset + ge])) << q.local.name << " " << e;
              }
            }
          }
          const int64_t n = p.num_local();
          for (int64_t b = 0; b < n; b += n / 3 + 7) {
            const int64_t e = std::min(n, b + n / 2 + 5);
            std::vector<float> sub(e - b, 3.0f);
            p.InitRange(17, b, e, sub.data());
            ASSERT_EQ(0, std::memcmp(sub.data(), &l[b], sub.size() * sizeof(float)))
                << "[" << b << ", " << e << ")";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// parallel.account_for_embedding_and_head: the embeddings and the head weigh one layer each.
TEST(PipelineLayerSplitAccountingEnds, FirstAndLastStageTakeABlockFewer) {
  EXPECT_EQ(*PipelineLayerSplit(6, 4, {}, true), (std::vector<int64_t>{1, 2, 2, 1}));
  EXPECT_EQ(*PipelineLayerSplit(4, 2, {}, true), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(*PipelineLayerSplit(10, 3, {}, true), (std::vector<int64_t>{3, 4, 3}));
  EXPECT_EQ(*PipelineLayerSplit(3, 1, {}, true), (std::vector<int64_t>{3}));  // one stage: all
  // An explicit split wins.
  EXPECT_EQ(*PipelineLayerSplit(6, 2, {2, 4}, true), (std::vector<int64_t>{2, 4}));
  // 5 + 2 units do not divide among 2 stages; 2 + 2 among 4 leaves end stages empty.
  auto bad = PipelineLayerSplit(5, 2, {}, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("account_for_embedding_and_head"), std::string::npos);
  EXPECT_FALSE(PipelineLayerSplit(2, 4, {}, true).ok());
  // Chunks follow the split.
  auto chunks = PipelineChunks(6, 4, 0, 1, {}, true);
  ASSERT_TRUE(chunks.ok());
  EXPECT_EQ((*chunks)[0], (PipelineChunk{0, 1, true, false}));
  chunks = PipelineChunks(6, 4, 3, 1, {}, true);
  EXPECT_EQ((*chunks)[0], (PipelineChunk{5, 6, false, true}));
}

}  // namespace
}  // namespace tessera
