// optimizer/shard_layout.h — how the flat parameter/gradient buffers are cut into units and
// each unit into one equal piece per data-parallel rank (ZeRO 1/2/3, FSDP-style).
//
// A model's flat buffer (num_params elements) is a sequence of units (models/param_store.h:
// embeddings, each block, final norm + head), given as bounds b_0 = 0 < b_1 < ... < b_U =
// num_params (a unit may be empty only if the model has none; bounds are non-decreasing).
// Unit u = [b_u, b_{u+1}) of n_u elements is cut into `ranks` pieces of the same padded size
// P_u: the smallest multiple of `align` with ranks * P_u >= n_u (at least `align`). Rank r's
// piece of unit u is unit elements [r*P_u, (r+1)*P_u); only the part below n_u is real
// (real(u, r) elements, possibly 0), the rest is padding that stays zero.
// A rank's PACKED buffer concatenates its pieces in unit order, padding included: unit u's
// piece starts at packed_offset(u) = P_0 + ... + P_{u-1}, and packed_size() = sum of P_u is the
// same on every rank. So one unit's all-gather or reduce-scatter is a single equal-count
// collective over (ranks * P_u) elements, and a rank's moments, master weights and reduced
// gradients are all packed buffers of packed_size() elements.
// align = kNormBlock (grad_clip.h) makes every piece start on a norm block of its unit, so a
// rank computes exactly the per-block partials a single rank computes (SegmentedNorm below).
// Immutable value; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "optimizer/adamw.h"

namespace tessera {

class ShardLayout {
 public:
  // bounds.size() >= 2, bounds[0] == 0, non-decreasing; ranks >= 1; align >= 1 (CHECKs).
  ShardLayout(std::vector<int64_t> bounds, int ranks, int64_t align);

  int num_units() const { return static_cast<int>(bounds_.size()) - 1; }
  int ranks() const { return ranks_; }
  int64_t num_params() const { return bounds_.back(); }
  int64_t unit_begin(int u) const { return bounds_[u]; }
  int64_t unit_end(int u) const { return bounds_[u + 1]; }
  int64_t unit_size(int u) const { return bounds_[u + 1] - bounds_[u]; }
  int64_t piece_size(int u) const { return piece_[u]; }   // P_u (padded)
  // Flat offset of rank r's piece of unit u (may be >= unit_end when the piece is all padding).
  int64_t piece_begin(int u, int r) const { return bounds_[u] + r * piece_[u]; }
  // Real elements of that piece: clamp(n_u - r*P_u, 0, P_u).
  int64_t piece_real(int u, int r) const;
  int64_t packed_offset(int u) const { return packed_[u]; }
  int64_t packed_size() const { return packed_.back(); }
  // Sum over units of piece_real(u, r): the real elements rank r owns.
  int64_t real_elements(int r) const;

 private:
  std::vector<int64_t> bounds_;
  int ranks_;
  std::vector<int64_t> piece_;   // per unit
  std::vector<int64_t> packed_;  // per unit, plus the total at the end
};

// The flat ranges `ranges` restricted to rank r's pieces and expressed in packed coordinates
// (a range spanning several pieces becomes several; names kept). Elements of the packed buffer
// covered by no result (padding) are updated without decay.
std::vector<ParamRange> PackParamRanges(const std::vector<ParamRange>& ranges,
                                        const ShardLayout& layout, int rank);

// The global gradient norm, defined per unit: unit u's elements are summed in blocks of
// kNormBlock starting at the unit's first element (BlockSumsOfSquares over the unit), and all
// partials are added in (unit, block) order. NumSegmentedBlocks(layout) partials in all.
int64_t NumSegmentedBlocks(const ShardLayout& layout);
// Sum of squares of a FULL flat buffer (num_params elements), by that definition.
double SegmentedSumOfSquares(const ShardLayout& layout, const float* x);
// Rank r's contribution from its PACKED buffer (packed_size elements): a vector of
// NumSegmentedBlocks(layout) partials holding the partials of the blocks rank r owns (computed
// over the real elements of each piece only) and 0 elsewhere. Adding every rank's vectors
// element by element (any order: each block has one non-zero contributor, x + 0 is exact)
// and then the partials in order gives SegmentedSumOfSquares of the full buffer, bit for bit.
// Requires every piece with real elements to start on a norm block of its unit (align a
// multiple of kNormBlock, or ranks = 1); CHECKs it.
std::vector<double> PiecePartials(const ShardLayout& layout, int rank, const float* packed);
// The sum of `partials` in order (the last step of both definitions above).
double SumPartials(const std::vector<double>& partials);

}  // namespace tessera
