// runtime/core/sharded_tensor.h — the one sharded-tensor vocabulary: what a rank holds of a
// global tensor, stated in global terms, for the models (which emit it), the ZeRO shards, the
// checkpoint writer and loader and the exporter (which consume it without seeing a layer).
//
// A ShardedTensor says: "my local buffer (local_shape) holds, row-major and first, the slice
// [offset, offset + lengths) of the global tensor `name` (global_shape, dtype) seen as `view`,
// split along view axis `split_axis` over the `split_group` ranks; the rest of the buffer is
// padding that maps to no global element; I am copy `replica` of that slice".
//   view      the global tensor as it is split: global_shape itself, or the same elements with
//             the first dimension cut into blocks. A fused GPT-2 c_attn (3C, C) is split per
//             head block [q | k | v], so its view is (3, C, C) split along axis 1: the slice
//             (3, C/tp, C) is exactly this rank's [q_r | k_r | v_r] in local order.
//   padding   a vocab-parallel embedding holds ceil(V / tp) rows, the last rank's rows past V
//             are padding: lengths (real rows) < local_shape's rows.
//   replica   which copy of the slice this is, per group that holds it more than once: tp (a
//             norm every tp rank holds whole: replica.tp = tp rank), pp (the last pipeline
//             stage's copy of the embedding unit under tied embeddings: replica.pp = 1), dp
//             (for a holder of replicated data-parallel state; the model partition leaves it 0
//             because the dp ranks' checkpoint shares are disjoint flat ranges, below). Only
//             the MAIN replica (all ids 0) is saved and counted in global sums, so that every
//             global element counts exactly once. ZeRO cuts a rank's local elements further
//             into flat ranges, one dp owner each (optimizer/shard_layout.h); those are not
//             replicas.
// With no parallelism the slice is the whole tensor (Whole()).
// Plain value; thread-safe to share once built.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace tessera {

// The parallel group a tensor is split over (or replicated across).
// kEp: routed experts split along their expert axis over the expert-parallel ranks.
enum class ShardGroup : uint8_t { kNone, kTp, kPp, kDp, kEp };
const char* ShardGroupName(ShardGroup g);  // "none" "tp" "pp" "dp" "ep"

// Which copy of a slice a rank holds, per group; 0 everywhere is the main replica.
struct ReplicaId {
  int tp = 0, pp = 0, dp = 0;
  bool main() const { return tp == 0 && pp == 0 && dp == 0; }
  bool operator==(const ReplicaId&) const = default;
};

struct ShardedTensor {
  std::string name;            // global name, e.g. "h.0.attn.c_attn.weight"
  Shape global_shape;          // of the whole tensor across all ranks
  DType dtype = DType::kF32;
  Shape view;                  // global_shape, or it with dim 0 cut into blocks (numel equal)
  std::array<int64_t, Shape::kMaxDims> offset{};  // slice start per view dim
  Shape lengths;               // slice extent per view dim: the real elements held
  Shape local_shape;           // the local buffer: the slice row-major, then padding
  int split_axis = -1;         // view dim the slice is cut along; -1: whole
  ShardGroup split_group = ShardGroup::kNone;
  ReplicaId replica;

  // The whole tensor, held once (offsets 0, lengths == view == local_shape == shape).
  static ShardedTensor Whole(std::string name, Shape shape, DType dtype = DType::kF32);
  // The slice [begin, begin + length) of view dim `axis` (every other dim whole), over
  // `group`, held in a buffer of `local_shape` (numel >= the slice's; the rest padding).
  static ShardedTensor Split(std::string name, Shape global_shape, Shape view, int axis,
                             ShardGroup group, int64_t begin, int64_t length, Shape local_shape,
                             DType dtype = DType::kF32);

  bool IsWhole() const { return lengths == view && local_shape.numel() == view.numel(); }
  bool IsMainReplica() const { return replica.main(); }
  int64_t slice_numel() const { return lengths.numel(); }
  int64_t padding() const { return local_shape.numel() - lengths.numel(); }

  // OK, or InvalidArgument naming the tensor and the broken rule: view and global_shape have
  // the same elements, the slice lies inside the view, the buffer holds the slice, the split
  // axis exists.
  Status Validate() const;

  // Calls fn(local_flat, global_flat, length) for each maximal run of local elements that
  // are consecutive global elements (row-major in global_shape), in increasing local order;
  // together the runs cover [0, slice_numel()) locally, padding excluded.
  using RunFn = std::function<void(int64_t local_flat, int64_t global_flat, int64_t length)>;
  void ForEachRun(const RunFn& fn) const;

  // "h.0.mlp.c_fc.weight [3072, 768] f32: rows [0, 1536) over tp, replica tp=0 pp=0 dp=0"
  std::string ToString() const;

  bool operator==(const ShardedTensor&) const = default;
};

// The earlier name, kept so that code and tests written against it read on.
using ShardSpec = ShardedTensor;

}  // namespace tessera
