// tests/kernels/partition_test.cc — the tensor-parallel split of the parameters
// (models/partition.h) on tiny GPT-2 and Llama models (tied and untied, GQA, a vocabulary that
// tp does not divide): tp = 1 is the one-rank layout exactly; over all ranks the segments cover
// every global element once (replicated tensors once per rank); a rank's initial values are the
// one-rank model's bits at the elements Megatron's rules name, padding 0; sub-ranges map to the
// right partial pieces; invalid tp sizes are refused with messages naming the numbers; the
// duplicate ranges are exactly the replicated tensors of ranks > 0.
// links: tessera_models
#include "models/partition.h"

#include <gtest/gtest.h>

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
      EXPECT_EQ(q.global_shape, d.shape) << d.name;
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
          EXPECT_EQ(q.split, ExpectedSplit(d.name)) << d.name;
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
            ASSERT_LE(s.global_begin + s.length, q.global_shape.numel());
            prev_end = s.local_begin + s.length;
            covered += s.length;
            for (int64_t k = 0; k < s.length; ++k) ++counts[q.global_offset + s.global_begin + k];
          }
          // Everything but vocabulary padding rows is mapped.
          int64_t padding = 0;
          if (q.split == TpSplit::kVocab) {
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
            const int64_t ge = MegatronGlobal(cs.config, q.local.name, q.global_shape, t, r, e);
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
              ASSERT_EQ(MegatronGlobal(cs.config, q.local.name, q.global_shape, t, r,
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
          ASSERT_LE(global_begin + length, q.global_shape.numel());
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
                                                             param.global_shape, t, t - 1, i)};
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
          const char want_dup = param.split == TpSplit::kReplicated ? 1 : 0;
          for (int64_t i = 0; i < param.local.shape.numel(); ++i) {
            ASSERT_EQ(dup[param.local_offset + i], want_dup) << cs.name << " " << param.local.name;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera
