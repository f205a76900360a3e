// runtime/core/shard_spec.h — the sharded-tensor vocabulary shared by models, optimizer and
// checkpoints: what a rank holds, stated in global terms.
//
// A ShardSpec says "this local buffer is the slice [offset, offset+local_shape) of the global
// tensor `name` of shape `global_shape`". Models and optimizer emit these; the checkpoint
// module consumes them without ever seeing a layer. With no parallelism the slice is the whole
// tensor (offsets 0, local_shape == global_shape).
#pragma once

#include <array>
#include <string>

#include "runtime/core/tensor.h"

namespace tessera {

struct ShardSpec {
  std::string name;     // global name, e.g. "h.0.attn.c_attn.weight"
  Shape global_shape;   // shape of the whole tensor across all ranks
  std::array<int64_t, Shape::kMaxDims> global_offset{};  // where this slice starts, per dim
  Shape local_shape;    // shape of the slice this rank holds
  int replica_id = 0;   // 0 for the copy that is saved; >0 for replicas (dp copies)

  static ShardSpec Whole(std::string name, Shape shape) {
    ShardSpec s;
    s.name = std::move(name);
    s.global_shape = shape;
    s.local_shape = shape;
    return s;
  }
  bool IsWhole() const { return global_shape == local_shape; }
};

}  // namespace tessera
