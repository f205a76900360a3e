// runtime/core/sharded_tensor.cc — construction, checks and the slice -> global element runs of
// a ShardedTensor (sharded_tensor.h).
#include "runtime/core/sharded_tensor.h"

namespace tessera {

const char* ShardGroupName(ShardGroup g) {
  switch (g) {
    case ShardGroup::kNone: return "none";
    case ShardGroup::kTp: return "tp";
    case ShardGroup::kPp: return "pp";
    case ShardGroup::kDp: return "dp";
    case ShardGroup::kEp: return "ep";
  }
  return "?";
}

ShardedTensor ShardedTensor::Whole(std::string name, Shape shape, DType dtype) {
  ShardedTensor t;
  t.name = std::move(name);
  t.global_shape = shape;
  t.dtype = dtype;
  t.view = shape;
  t.lengths = shape;
  t.local_shape = shape;
  return t;
}

ShardedTensor ShardedTensor::Split(std::string name, Shape global_shape, Shape view, int axis,
                                   ShardGroup group, int64_t begin, int64_t length,
                                   Shape local_shape, DType dtype) {
  ShardedTensor t = Whole(std::move(name), global_shape, dtype);
  t.view = view;
  t.lengths = view;
  t.local_shape = local_shape;
  t.split_axis = axis;
  t.split_group = group;
  if (axis >= 0 && axis < view.rank()) {
    t.offset[axis] = begin;
    t.lengths[axis] = length;
  }
  return t;
}

Status ShardedTensor::Validate() const {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("sharded tensor " + ToString() + ": " + why);
  };
  if (view.numel() != global_shape.numel()) {
    return bad("view " + view.ToString() + " does not have the elements of the global shape");
  }
  if (lengths.rank() != view.rank()) return bad("slice rank differs from the view's");
  for (int d = 0; d < view.rank(); ++d) {
    if (offset[d] < 0 || lengths[d] < 0 || offset[d] + lengths[d] > view[d]) {
      return bad("slice dim " + std::to_string(d) + " [" + std::to_string(offset[d]) + ", " +
                 std::to_string(offset[d] + lengths[d]) + ") leaves the view's " +
                 std::to_string(view[d]));
    }
  }
  if (local_shape.numel() < lengths.numel()) {
    return bad("local buffer " + local_shape.ToString() + " is smaller than the slice");
  }
  if (split_axis < -1 || split_axis >= view.rank()) {
    return bad("split axis " + std::to_string(split_axis) + " is not a view dim");
  }
  if (split_axis == -1 && !(lengths == view)) return bad("a slice without a split axis");
  return Status::Ok();
}

void ShardedTensor::ForEachRun(const RunFn& fn) const {
  const int r = view.rank();
  if (lengths.numel() == 0) return;
  if (r == 0) {
    fn(0, 0, 1);
    return;
  }
  // Dims after k are whole, so one run spans lengths[k] rows of them; dims before k are
  // walked row-major. k stops at the last dim that is not whole (or 0).
  int k = r - 1;
  while (k > 0 && lengths[k] == view[k]) --k;
  std::array<int64_t, Shape::kMaxDims> stride{};
  stride[r - 1] = 1;
  for (int d = r - 2; d >= 0; --d) stride[d] = stride[d + 1] * view[d + 1];
  const int64_t run = lengths[k] * stride[k];
  std::array<int64_t, Shape::kMaxDims> i{};  // index inside the slice, dims [0, k)
  int64_t local = 0;
  for (;;) {
    int64_t global = offset[k] * stride[k];
    for (int d = 0; d < k; ++d) global += (offset[d] + i[d]) * stride[d];
    fn(local, global, run);
    local += run;
    int d = k - 1;  // odometer over dims [0, k)
    while (d >= 0 && ++i[d] == lengths[d]) {
      i[d] = 0;
      --d;
    }
    if (d < 0) return;
  }
}

std::string ShardedTensor::ToString() const {
  std::string s = name + " " + global_shape.ToString() + " " + std::string(DTypeName(dtype));
  if (split_axis < 0) {
    s += ": whole";
  } else {
    s += ": view " + view.ToString() + " dim " + std::to_string(split_axis) + " [" +
         std::to_string(offset[split_axis]) + ", " +
         std::to_string(offset[split_axis] + lengths[split_axis]) + ") over " +
         ShardGroupName(split_group);
  }
  return s + ", replica tp=" + std::to_string(replica.tp) + " pp=" + std::to_string(replica.pp) +
         " dp=" + std::to_string(replica.dp);
}

}  // namespace tessera
