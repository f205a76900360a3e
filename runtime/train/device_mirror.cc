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
  open_grads_.assign(bounds_.size() - 1, nullptr);
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

float* DeviceMirrorStore::Grads(int unit) {
  float* dev = grads_base_ + (bounds_[static_cast<size_t>(unit)] - bounds_.front());
  float*& host = open_grads_[static_cast<size_t>(unit)];
  if (host == nullptr) {  // the step's first request: start from what the host state holds
    host = host_.Grads(unit);
    device_.Upload(dev, host, Bytes(unit));
  }
  return dev;
}

void DeviceMirrorStore::GradsDone(int unit) {
  float*& host = open_grads_[static_cast<size_t>(unit)];
  TESSERA_CHECK_MSG(host != nullptr, "GradsDone(%d) without Grads", unit);
  device_.Download(host, grads_base_ + (bounds_[static_cast<size_t>(unit)] - bounds_.front()),
                   Bytes(unit));
  host = nullptr;
  host_.GradsDone(unit);
}

}  // namespace tessera
