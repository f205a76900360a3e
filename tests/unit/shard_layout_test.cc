// optimizer/shard_layout.h: unit/piece arithmetic (padding, tiny and empty units, all-padding
// pieces), PackParamRanges (ranges split across pieces and units, decay flags and names kept,
// padding uncovered), and the per-unit blocked norm: every rank's PiecePartials added
// elementwise then SumPartials == SegmentedSumOfSquares of the full buffer, bit for bit.
// links: tessera_optimizer
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "optimizer/grad_clip.h"
#include "optimizer/shard_layout.h"

namespace tessera {
namespace {

// Bounds from unit sizes.
std::vector<int64_t> Bounds(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> b{0};
  for (int64_t s : sizes) b.push_back(b.back() + s);
  return b;
}

// Values of very different magnitudes, so a different summation order changes the last bits.
std::vector<float> Values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 6);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(normal(gen), exponent(gen));
  return v;
}

// Rank r's packed buffer of `full`: its pieces in unit order, padding filled with `pad`.
std::vector<float> Pack(const ShardLayout& layout, int r, const std::vector<float>& full,
                        float pad) {
  std::vector<float> packed(layout.packed_size(), pad);
  for (int u = 0; u < layout.num_units(); ++u) {
    for (int64_t i = 0; i < layout.piece_real(u, r); ++i) {
      packed[layout.packed_offset(u) + i] = full[layout.piece_begin(u, r) + i];
    }
  }
  return packed;
}

TEST(ShardLayout, PaddedPiecesPerUnit) {
  // Units of 100, 0 (empty), 900 and 2 elements over 4 ranks, pieces aligned to 16.
  const ShardLayout l(Bounds({100, 0, 900, 2}), 4, 16);
  ASSERT_EQ(l.num_units(), 4);
  EXPECT_EQ(l.ranks(), 4);
  EXPECT_EQ(l.num_params(), 1002);
  EXPECT_EQ(l.piece_size(0), 32);   // ceil(100 / 4) = 25 -> 32
  EXPECT_EQ(l.piece_size(1), 16);   // empty unit: one all-padding piece of `align`
  EXPECT_EQ(l.piece_size(2), 240);  // 225 -> 240
  EXPECT_EQ(l.piece_size(3), 16);
  EXPECT_EQ(l.packed_offset(0), 0);
  EXPECT_EQ(l.packed_offset(1), 32);
  EXPECT_EQ(l.packed_offset(2), 48);
  EXPECT_EQ(l.packed_offset(3), 288);
  EXPECT_EQ(l.packed_size(), 304);
  EXPECT_EQ(l.unit_begin(2), 100);
  EXPECT_EQ(l.unit_end(2), 1000);
  EXPECT_EQ(l.piece_begin(2, 3), 100 + 720);
  EXPECT_EQ(l.piece_real(0, 0), 32);
  EXPECT_EQ(l.piece_real(0, 3), 4);    // 100 - 96
  EXPECT_EQ(l.piece_real(1, 0), 0);
  EXPECT_EQ(l.piece_real(2, 3), 180);  // 900 - 720
  EXPECT_EQ(l.piece_real(3, 0), 2);
  EXPECT_EQ(l.piece_real(3, 1), 0);    // tiny unit: ranks 1..3 hold padding only
  EXPECT_EQ(l.piece_begin(3, 2), 1000 + 32);  // past the unit's end
  EXPECT_EQ(l.real_elements(0), 32 + 0 + 240 + 2);
  EXPECT_EQ(l.real_elements(3), 4 + 0 + 180 + 0);
  int64_t total = 0;
  for (int r = 0; r < 4; ++r) total += l.real_elements(r);
  EXPECT_EQ(total, l.num_params());
}

TEST(ShardLayout, OneRankIsOnePiecePerUnit) {
  const ShardLayout l(Bounds({7, 64, 65}), 1, 1);
  EXPECT_EQ(l.packed_size(), l.num_params());
  for (int u = 0; u < 3; ++u) {
    EXPECT_EQ(l.piece_size(u), l.unit_size(u));
    EXPECT_EQ(l.packed_offset(u), l.unit_begin(u));
  }
}

TEST(PackParamRanges, HandComputedSplit) {
  // Units [0, 10) and [10, 30) on 2 ranks, align 4: unit 0 pieces of 8 (rank 1 real 2),
  // unit 1 pieces of 12 (rank 1 real 8). Packed: unit 0 at 0, unit 1 at 8; size 20.
  const ShardLayout l(Bounds({10, 20}), 2, 4);
  ASSERT_EQ(l.packed_size(), 20);
  const std::vector<ParamRange> ranges = {
      {0, 6, true, "a"},    // inside rank 0's piece of unit 0
      {6, 9, false, "b"},   // [6, 15): unit 0 both pieces, unit 1 rank 0
      {15, 15, true, "c"},  // [15, 30): unit 1, both pieces
  };
  const std::vector<ParamRange> r0 = PackParamRanges(ranges, l, 0);
  ASSERT_EQ(r0.size(), 4u);
  EXPECT_EQ(r0[0].offset, 0);  EXPECT_EQ(r0[0].size, 6);  EXPECT_TRUE(r0[0].decay);
  EXPECT_EQ(r0[0].name, "a");
  EXPECT_EQ(r0[1].offset, 6);  EXPECT_EQ(r0[1].size, 2);  EXPECT_FALSE(r0[1].decay);  // [6, 8)
  EXPECT_EQ(r0[1].name, "b");
  EXPECT_EQ(r0[2].offset, 8);  EXPECT_EQ(r0[2].size, 5);  EXPECT_FALSE(r0[2].decay);  // [10, 15)
  EXPECT_EQ(r0[2].name, "b");
  EXPECT_EQ(r0[3].offset, 13); EXPECT_EQ(r0[3].size, 7);  EXPECT_TRUE(r0[3].decay);   // [15, 22)
  const std::vector<ParamRange> r1 = PackParamRanges(ranges, l, 1);
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0].offset, 0);  EXPECT_EQ(r1[0].size, 2);  EXPECT_FALSE(r1[0].decay);  // [8, 10)
  EXPECT_EQ(r1[1].offset, 8);  EXPECT_EQ(r1[1].size, 8);  EXPECT_TRUE(r1[1].decay);   // [22, 30)
  EXPECT_EQ(r1[1].name, "c");
}

// For every layout below: each packed element of a real piece carries exactly the decay flag
// and name of the flat element it holds (or none), and padding is covered by nothing.
TEST(PackParamRanges, EveryElementMapsToItsFlatRange) {
  const std::vector<int64_t> sizes = {37, 3, 0, 129, 64, 1};
  const int64_t n = Bounds(sizes).back();
  // Parameters of varied length laid over the units, with two gaps (no range) in between.
  std::vector<ParamRange> ranges;
  int64_t off = 0;
  for (int i = 0; off < n; ++i) {
    const int64_t len = std::min<int64_t>(n - off, 1 + (i * 37) % 53);
    if (i != 3 && i != 7) ranges.push_back({off, len, i % 2 == 0, "p" + std::to_string(i)});
    off += len;
  }
  std::vector<int> flat_owner(n, -1);
  for (size_t k = 0; k < ranges.size(); ++k) {
    for (int64_t i = 0; i < ranges[k].size; ++i) flat_owner[ranges[k].offset + i] = int(k);
  }
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (int64_t align : {1, 8, 64}) {
      const ShardLayout l(Bounds(sizes), ranks, align);
      for (int r = 0; r < ranks; ++r) {
        const std::vector<ParamRange> packed = PackParamRanges(ranges, l, r);
        ASSERT_TRUE(ValidateParamRanges(packed, l.packed_size()).ok());
        std::vector<const ParamRange*> cover(l.packed_size(), nullptr);
        for (const ParamRange& p : packed) {
          EXPECT_GT(p.size, 0);
          for (int64_t i = 0; i < p.size; ++i) cover[p.offset + i] = &p;
        }
        for (int u = 0; u < l.num_units(); ++u) {
          for (int64_t i = 0; i < l.piece_size(u); ++i) {
            const ParamRange* c = cover[l.packed_offset(u) + i];
            const int owner =
                i < l.piece_real(u, r) ? flat_owner[l.piece_begin(u, r) + i] : -1;
            SCOPED_TRACE("ranks " + std::to_string(ranks) + " align " + std::to_string(align) +
                         " rank " + std::to_string(r) + " unit " + std::to_string(u) +
                         " elem " + std::to_string(i));
            if (owner < 0) {
              EXPECT_EQ(c, nullptr);
            } else {
              ASSERT_NE(c, nullptr);
              EXPECT_EQ(c->decay, ranges[owner].decay);
              EXPECT_EQ(c->name, ranges[owner].name);
            }
          }
        }
      }
    }
  }
}

TEST(SegmentedNorm, OneUnitIsTheBlockedNorm) {
  const int64_t n = 3 * kNormBlock + 77;
  const std::vector<float> x = Values(n, 1);
  const ShardLayout l({0, n}, 1, 1);
  EXPECT_EQ(NumSegmentedBlocks(l), 4);
  const double a = SegmentedSumOfSquares(l, x.data()), b = SumOfSquares(x.data(), n);
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
}

TEST(SegmentedNorm, MatchesNaiveSumAndRestartsBlocksAtEachUnit) {
  const std::vector<int64_t> sizes = {kNormBlock + 5, 3, 2 * kNormBlock - 1};
  const ShardLayout l(Bounds(sizes), 1, 1);
  EXPECT_EQ(NumSegmentedBlocks(l), 2 + 1 + 2);
  const std::vector<float> x = Values(l.num_params(), 2);
  double naive = 0.0;
  for (float v : x) naive += double(v) * v;
  EXPECT_NEAR(SegmentedSumOfSquares(l, x.data()), naive, 1e-12 * naive);
}

// The bit-identity claim of shard_layout.h, over layouts with units that are not multiples of
// anything, units smaller than a block, an empty unit, and pieces that are all padding.
TEST(SegmentedNorm, RankPartialsSumToTheFullNormBitForBit) {
  const std::vector<std::vector<int64_t>> unit_sets = {
      {3 * kNormBlock + 123, 5, 0, kNormBlock, 40001, 1},
      {7},
      {kNormBlock - 1, kNormBlock + 1, 2, 5 * kNormBlock + 9999},
  };
  uint32_t seed = 10;
  for (const std::vector<int64_t>& sizes : unit_sets) {
    for (int ranks = 1; ranks <= 4; ++ranks) {
      const ShardLayout l(Bounds(sizes), ranks, kNormBlock);
      const std::vector<float> full = Values(l.num_params(), seed++);
      const double expected = SegmentedSumOfSquares(l, full.data());
      std::vector<std::vector<double>> per_rank;
      for (int r = 0; r < ranks; ++r) {
        // Non-zero padding would break the claim if it were read: fill it with garbage.
        const std::vector<float> packed = Pack(l, r, full, 1e3f);
        per_rank.push_back(PiecePartials(l, r, packed.data()));
        ASSERT_EQ(static_cast<int64_t>(per_rank.back().size()), NumSegmentedBlocks(l));
      }
      // Add the rank vectors in two different orders (as an all-reduce might).
      std::vector<double> forward(NumSegmentedBlocks(l), 0.0), backward = forward;
      for (int r = 0; r < ranks; ++r) {
        for (size_t b = 0; b < forward.size(); ++b) forward[b] += per_rank[r][b];
      }
      for (int r = ranks - 1; r >= 0; --r) {
        for (size_t b = 0; b < backward.size(); ++b) backward[b] += per_rank[r][b];
      }
      const double got_f = SumPartials(forward), got_b = SumPartials(backward);
      SCOPED_TRACE("units " + std::to_string(sizes.size()) + " ranks " + std::to_string(ranks));
      EXPECT_EQ(std::memcmp(&got_f, &expected, sizeof expected), 0) << got_f << " " << expected;
      EXPECT_EQ(std::memcmp(&got_b, &expected, sizeof expected), 0);
      // Each block has exactly one contributor (blocks of empty pieces have none).
      for (size_t b = 0; b < forward.size(); ++b) {
        int contributors = 0;
        for (int r = 0; r < ranks; ++r) contributors += per_rank[r][b] != 0.0;
        EXPECT_LE(contributors, 1) << "block " << b;
      }
    }
  }
}

TEST(SegmentedNorm, SumPartialsAddsInOrder) {
  EXPECT_EQ(SumPartials({}), 0.0);
  // 1e16 + 1 + 1 in order loses both ones; the opposite order would keep them.
  EXPECT_EQ(SumPartials({1e16, 1.0, 1.0}), 1e16);
  EXPECT_EQ(SumPartials({1.0, 1.0, 1e16}), 1e16 + 2.0);
}

}  // namespace
}  // namespace tessera
