// optimizer/zero.h — the AdamW of one data-parallel rank under ZeRO: moments (and, with mixed
// precision, fp32 master weights) for the rank's pieces of every unit only (shard_layout.h).
//
// Owns: the packed moments of the rank's pieces (an AdamW over packed_size() elements whose
// decay ranges are PackParamRanges of the model's) and, when asked, the packed fp32 master
// weights. Replicated training (ZeRO 0) is the layout with ranks = 1: one piece per unit holding
// the whole unit.
// Semantics: AdamW is elementwise, so stepping every rank's pieces gives exactly the bits of one
// AdamW over the whole flat buffer; padding elements (zero gradients, zero values) stay zero.
// Master weights: with `keep_master` the optimizer owns fp32 copies of its pieces (kOptimizerState
// — the "fp32 master weights in the optimizer partition" of mixed precision); the trainer
// initialises them with LoadMaster and, after each Step, rounds them into its low-precision
// parameters. Without it, Step updates fp32 pieces the caller points at (the model's own fp32
// parameters: nothing duplicated).
// Thread-safety: one driving thread; Step runs OpenMP loops.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "optimizer/adamw.h"
#include "optimizer/shard_layout.h"

namespace tessera {

class ShardedAdamW {
 public:
  // `ranges` are flat (model) ranges, validated by the caller. Moments (2 * packed_size floats)
  // and, with keep_master, the master weights (packed_size floats) accounted to `tracker` as
  // kOptimizerState.
  ShardedAdamW(const AdamWConfig& config, const ShardLayout& layout, int rank,
               const std::vector<ParamRange>& ranges, bool keep_master, MemoryTracker* tracker);

  // keep_master only: master piece of unit u (packed, P_u elements; the real ones first).
  float* master(int u);
  // keep_master only: master = the fp32 values of `full` (a full flat buffer) at this rank's
  // pieces, padding zero.
  void LoadMaster(const float* full);

  // One AdamW step t = step() + 1 with learning rate lr over every real element of the rank's
  // pieces. `grads[u]` points at the reduced gradients of unit u's piece (piece_real(u, rank)
  // elements; e.g. packed + packed_offset(u), or the piece's place in a full flat buffer).
  // keep_master: updates the master weights; `pieces` must be empty.
  // otherwise: pieces.size() == num_units and pieces[u] points at the fp32 values of unit u's
  // piece (piece_real(u, rank) elements, wherever they live; may be null when that is 0),
  // updated in place. Padding (of the values, grads, moments, master) is never read or written.
  // With optimizer.offload == cpu each piece is stepped in kOffloadChunk chunks
  // (optimizer/offload.h); same bits. grad_scale as in AdamW::Step: the gradients are read
  // multiplied by it (the folded clipping coefficient), never written.
  void Step(std::span<float* const> pieces, std::span<const float* const> grads, float lr,
            float grad_scale = 1.0f);
  // The same with every unit's gradients in one packed buffer (packed_size elements).
  void Step(std::span<float* const> pieces, const float* packed_grads, float lr,
            float grad_scale = 1.0f);

  const ShardLayout& layout() const { return layout_; }
  int rank() const { return rank_; }
  bool keeps_master() const { return keep_master_; }
  const AdamW& adamw() const { return adamw_; }
  AdamW& adamw() { return adamw_; }

 private:
  ShardLayout layout_;
  int rank_;
  bool keep_master_;
  AdamW adamw_;   // over the packed coordinates
  Arena master_arena_;
  Tensor master_;  // (packed_size) when keep_master
};

}  // namespace tessera
