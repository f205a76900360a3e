// runtime/train/device_mirror.cc — DeviceMirrorStore (device_mirror.h).
#include "runtime/train/device_mirror.h"

#include <utility>

#include "runtime/core/check.h"

namespace tessera {

DeviceMirrorStore::DeviceMirrorStore(ParamStore& host, Backend& device,
                                     std::vector<int64_t> unit_bounds, MemoryTracker* tracker)
    : host_(host),
      device_(device),
      bounds_(std::move(unit_bounds)),
      params_(Arena::Measuring(MemoryKind::kParameters, device.device())),
      grads_(Arena::Measuring(MemoryKind::kGradients, device.device())) {
  TESSERA_CHECK(bounds_.size() >= 2);
  const int64_t n = bounds_.back() - bounds_.front();
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  params_ = device.MakeArena(MemoryKind::kParameters, bytes, tracker);
  grads_ = device.MakeArena(MemoryKind::kGradients, bytes, tracker);
  params_base_ = params_.Allocate(DType::kF32, {n}).f32();
  grads_base_ = grads_.Allocate(DType::kF32, {n}).f32();
  open_.assign(bounds_.size() - 1, OpenGrads{});
}

size_t DeviceMirrorStore::Bytes(int unit) const {
  const auto u = static_cast<size_t>(unit);
  return static_cast<size_t>(bounds_[u + 1] - bounds_[u]) * sizeof(float);
}

const float* DeviceMirrorStore::Acquire(int unit) {
  const float* host = host_.Acquire(unit);
  float* dev = params_base_ + (bounds_[static_cast<size_t>(unit)] - bounds_.front());
  device_.Upload(dev, host, Bytes(unit));
  return dev;
}

// A host store may answer null (a frozen LoRA base unit wants no gradients): so does the mirror.
float* DeviceMirrorStore::Grads(int unit) {
  float* dev = grads_base_ + (bounds_[static_cast<size_t>(unit)] - bounds_.front());
  OpenGrads& o = open_[static_cast<size_t>(unit)];
  if (!o.open) {  // the step's first request: start from what the host state holds
    o.open = true;
    o.host = host_.Grads(unit);
    if (o.host != nullptr) device_.Upload(dev, o.host, Bytes(unit));
  }
  return o.host != nullptr ? dev : nullptr;
}

void DeviceMirrorStore::GradsDone(int unit) {
  OpenGrads& o = open_[static_cast<size_t>(unit)];
  TESSERA_CHECK_MSG(o.open, "GradsDone(%d) without Grads", unit);
  if (o.host != nullptr) {
    device_.Download(o.host, grads_base_ + (bounds_[static_cast<size_t>(unit)] - bounds_.front()),
                     Bytes(unit));
  }
  o = OpenGrads{};
  host_.GradsDone(unit);
}

}  // namespace tessera
