// runtime/train/device_mirror.h — a rank's parameters and gradients on its compute device, in
// front of its parameter state in host memory (train.device: cuda).
//
// The parameter state (param_shards.h and its kin: ZeRO sharding, mixed precision, the dp
// reductions, the optimizer and its offload file, checkpoints) stays in host memory, where
// the host communicators and the vectorised AdamW work on it, as DeepSpeed's CPU offload keeps
// master weights and moments. This store sits between it and a model running on a device
// backend: it holds one device copy of every unit's parameters and gradients and moves them
// across at the unit boundaries the model already calls (param_store.h):
//   Acquire(u)    the host state's values of u (gathered if sharded), uploaded; the device copy
//   Grads(u)      first call of a step: the host buffer's starting values uploaded (so the
//                 model's += accumulation means what it means on the host); the device copy,
//                 or null where the host store answers null (a frozen LoRA base unit)
//   GradsDone(u)  the device gradients downloaded into that host buffer, then the host's
//                 GradsDone (which starts the unit's dp reduction)
// Prefetch and Release pass through. Every value crosses exactly, so a run on a backend whose
// device memory is host memory gives the host run's bits (tests/unit/device_mirror_test.cc).
// Cost: one upload of the parameters per Acquire (forward and backward), and gradients both
// ways once per micro-batch; copies are synchronous at unit boundaries (no overlap yet).
// Memory: 2 x 4 bytes per parameter of the rank on the device (kParameters, kGradients).
// Thread-safety: the model's thread, as every ParamStore.
#pragma once

#include <cstdint>
#include <vector>

#include "models/param_store.h"
#include "runtime/core/memory.h"
#include "runtime/kernels/backend.h"

namespace tessera {

class DeviceMirrorStore final : public ParamStore {
 public:
  // `unit_bounds`: the flat offsets of the rank's units (ModelPartition::unit_bounds()), the
  // units `host` serves. `host`, `device` and `tracker` outlive the store.
  DeviceMirrorStore(ParamStore& host, Backend& device, std::vector<int64_t> unit_bounds,
                    MemoryTracker* tracker);

  const float* Acquire(int unit) override;
  void Release(int unit) override { host_.Release(unit); }
  void Prefetch(int unit) override { host_.Prefetch(unit); }
  float* Grads(int unit) override;
  void GradsDone(int unit) override;

 private:
  size_t Bytes(int unit) const;

  ParamStore& host_;
  Backend& device_;
  std::vector<int64_t> bounds_;
  Arena params_, grads_;
  float* params_base_ = nullptr;
  float* grads_base_ = nullptr;
  // Per unit: whether its gradients are open this step (Grads called, GradsDone not yet), and
  // the host buffer they go to (null: the host store wants none).
  struct OpenGrads {
    bool open = false;
    float* host = nullptr;
  };
  std::vector<OpenGrads> open_;
};

}  // namespace tessera
