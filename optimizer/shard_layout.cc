// optimizer/shard_layout.cc — unit/piece arithmetic, packed decay ranges and the per-unit
// blocked gradient norm (see shard_layout.h).
#include "optimizer/shard_layout.h"

#include <algorithm>
#include <utility>

#include "optimizer/grad_clip.h"
#include "runtime/core/check.h"

namespace tessera {

ShardLayout::ShardLayout(std::vector<int64_t> bounds, int ranks, int64_t align)
    : bounds_(std::move(bounds)), ranks_(ranks) {
  TESSERA_CHECK_MSG(bounds_.size() >= 2 && bounds_[0] == 0,
                    "ShardLayout: bounds must start at 0 and name at least one unit");
  TESSERA_CHECK(ranks >= 1 && align >= 1);
  packed_.push_back(0);
  for (int u = 0; u < num_units(); ++u) {
    const int64_t n = unit_size(u);
    TESSERA_CHECK_MSG(n >= 0, "ShardLayout: bounds decrease at unit %d", u);
    const int64_t per_rank = (n + ranks - 1) / ranks;
    const int64_t piece = std::max<int64_t>(1, (per_rank + align - 1) / align) * align;
    piece_.push_back(piece);
    packed_.push_back(packed_.back() + piece);
  }
}

int64_t ShardLayout::piece_real(int u, int r) const {
  TESSERA_CHECK(0 <= u && u < num_units() && 0 <= r && r < ranks_);
  return std::clamp<int64_t>(unit_size(u) - r * piece_[u], 0, piece_[u]);
}

int64_t ShardLayout::real_elements(int r) const {
  int64_t total = 0;
  for (int u = 0; u < num_units(); ++u) total += piece_real(u, r);
  return total;
}

std::vector<ParamRange> PackParamRanges(const std::vector<ParamRange>& ranges,
                                        const ShardLayout& layout, int rank) {
  TESSERA_CHECK(0 <= rank && rank < layout.ranks());
  std::vector<ParamRange> out;
  for (const ParamRange& range : ranges) {
    const int64_t begin = range.offset, end = range.offset + range.size;
    if (end <= begin) continue;
    for (int u = 0; u < layout.num_units() && layout.unit_begin(u) < end; ++u) {
      if (layout.unit_end(u) <= begin) continue;
      const int64_t piece_begin = layout.piece_begin(u, rank);
      const int64_t b = std::max(begin, piece_begin);
      const int64_t e = std::min(end, piece_begin + layout.piece_real(u, rank));
      if (e <= b) continue;
      out.push_back({layout.packed_offset(u) + (b - piece_begin), e - b, range.decay, range.name});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ParamRange& a, const ParamRange& b) { return a.offset < b.offset; });
  return out;
}

int64_t NumSegmentedBlocks(const ShardLayout& layout) {
  int64_t blocks = 0;
  for (int u = 0; u < layout.num_units(); ++u) blocks += NumNormBlocks(layout.unit_size(u));
  return blocks;
}

double SegmentedSumOfSquares(const ShardLayout& layout, const float* x) {
  std::vector<double> partials(static_cast<size_t>(NumSegmentedBlocks(layout)));
  int64_t first_block = 0;  // of unit u in `partials`
  for (int u = 0; u < layout.num_units(); ++u) {
    BlockSumsOfSquares(x + layout.unit_begin(u), layout.unit_size(u),
                       partials.data() + first_block);
    first_block += NumNormBlocks(layout.unit_size(u));
  }
  return SumPartials(partials);
}

std::vector<double> PiecePartials(const ShardLayout& layout, int rank, const float* packed) {
  TESSERA_CHECK(0 <= rank && rank < layout.ranks());
  std::vector<double> partials(static_cast<size_t>(NumSegmentedBlocks(layout)), 0.0);
  int64_t first_block = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    const int64_t real = layout.piece_real(u, rank);
    const int64_t unit_offset = rank * layout.piece_size(u);  // of the piece in its unit
    if (real > 0) {
      // A block cut between two pieces would be summed by neither rank as one rank sums it.
      TESSERA_CHECK_MSG(unit_offset % kNormBlock == 0,
                        "PiecePartials: unit %d's piece of rank %d starts at %lld, not on a "
                        "norm block (align the layout to kNormBlock)",
                        u, rank, static_cast<long long>(unit_offset));
      BlockSumsOfSquares(packed + layout.packed_offset(u), real,
                         partials.data() + first_block + unit_offset / kNormBlock);
    }
    first_block += NumNormBlocks(layout.unit_size(u));
  }
  return partials;
}

double SumPartials(const std::vector<double>& partials) {
  double total = 0.0;
  for (double p : partials) total += p;  // in order: the same bits on every rank
  return total;
}

}  // namespace tessera
