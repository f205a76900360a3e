// tests/unit/device_mirror_test.cc — DeviceMirrorStore (runtime/train/device_mirror.h) against
// models/param_store.h's contract, on a backend whose "device" memory is host memory (the CPU
// reference), so every copy can be inspected: Acquire hands out the mirror's copy of the host
// values; a unit's gradients start from the host buffer's values, may be asked for several
// times before GradsDone, reach the host buffer at GradsDone (once) and only then; a host
// store that wants no gradients (null) gets none asked for; empty units work; GradsDone without
// Grads is a bug (CHECK).
#include "runtime/train/device_mirror.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/kernels/cpu_backend.h"

namespace tessera {
namespace {

// Host state of three units (sizes 3, 0, 2); unit 2 wants no gradients when `frozen_last`.
class HostStore final : public ParamStore {
 public:
  explicit HostStore(bool frozen_last) : frozen_last_(frozen_last) {}
  const float* Acquire(int u) override {
    calls.push_back("A" + std::to_string(u));
    return params.data() + bounds[static_cast<size_t>(u)];
  }
  void Release(int u) override { calls.push_back("R" + std::to_string(u)); }
  void Prefetch(int u) override { calls.push_back("P" + std::to_string(u)); }
  float* Grads(int u) override {
    calls.push_back("G" + std::to_string(u));
    if (frozen_last_ && u == 2) return nullptr;
    return grads.data() + bounds[static_cast<size_t>(u)];
  }
  void GradsDone(int u) override { calls.push_back("D" + std::to_string(u)); }

  std::vector<int64_t> bounds = {0, 3, 3, 5};
  std::vector<float> params = {1, 2, 3, 4, 5};
  std::vector<float> grads = {10, 20, 30, 40, 50};
  std::vector<std::string> calls;

 private:
  bool frozen_last_;
};

TEST(DeviceMirrorStore, AcquireHandsOutTheMirrorsCopyOfTheHostValues) {
  HostStore host(false);
  CpuBackend device;
  MemoryTracker tracker;
  DeviceMirrorStore mirror(host, device, host.bounds, &tracker);
  EXPECT_EQ(tracker.reserved(MemoryKind::kParameters), 5 * sizeof(float));
  EXPECT_EQ(tracker.reserved(MemoryKind::kGradients), 5 * sizeof(float));
  const float* p = mirror.Acquire(2);
  EXPECT_NE(p, host.params.data() + 3);
  EXPECT_EQ(p[0], 4.0f);
  EXPECT_EQ(p[1], 5.0f);
  mirror.Prefetch(0);
  mirror.Release(2);
  EXPECT_EQ(host.calls, (std::vector<std::string>{"A2", "P0", "R2"}));
  mirror.Acquire(1);  // an empty unit
}

TEST(DeviceMirrorStore, GradientsStartFromTheHostAndReachItAtGradsDoneOnce) {
  HostStore host(false);
  CpuBackend device;
  DeviceMirrorStore mirror(host, device, host.bounds, nullptr);
  float* g = mirror.Grads(0);
  ASSERT_NE(g, nullptr);
  EXPECT_NE(g, host.grads.data());
  EXPECT_EQ(g[2], 30.0f);  // the host buffer's starting values (+= keeps its meaning)
  g[0] += 1.0f;
  EXPECT_EQ(mirror.Grads(0), g);  // asked again before GradsDone: the same buffer, not reloaded
  g[2] += 2.0f;
  EXPECT_EQ(host.grads[0], 10.0f);  // nothing reaches the host before GradsDone
  mirror.GradsDone(0);
  EXPECT_EQ(host.grads[0], 11.0f);
  EXPECT_EQ(host.grads[2], 32.0f);
  EXPECT_EQ(host.calls, (std::vector<std::string>{"G0", "D0"}));
  // The next step opens the unit again from the host's values.
  host.grads[1] = -7.0f;
  EXPECT_EQ(mirror.Grads(0)[1], -7.0f);
  mirror.GradsDone(0);
  mirror.Grads(1);  // an empty unit
  mirror.GradsDone(1);
}

TEST(DeviceMirrorStore, AUnitTheHostWantsNoGradientsForGetsNone) {
  HostStore host(/*frozen_last=*/true);
  CpuBackend device;
  DeviceMirrorStore mirror(host, device, host.bounds, nullptr);
  EXPECT_EQ(mirror.Grads(2), nullptr);
  EXPECT_EQ(mirror.Grads(2), nullptr);
  mirror.GradsDone(2);
  EXPECT_EQ(host.calls, (std::vector<std::string>{"G2", "D2"}));
  EXPECT_EQ(host.grads[3], 40.0f);
}

TEST(DeviceMirrorStoreDeathTest, GradsDoneWithoutGradsIsABug) {
  HostStore host(false);
  CpuBackend device;
  DeviceMirrorStore mirror(host, device, host.bounds, nullptr);
  EXPECT_DEATH(mirror.GradsDone(0), "GradsDone\\(0\\) without Grads");
}

}  // namespace
}  // namespace tessera
