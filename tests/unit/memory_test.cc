// Arena accounting and the dtype conversions of runtime/core.
// links: tessera_core
#include <gtest/gtest.h>

#include "runtime/core/dtype.h"
#include "runtime/core/memory.h"

namespace tessera {
namespace {

TEST(Arena, TracksPeakAndReleases) {
  MemoryTracker tracker;
  Arena arena(MemoryKind::kActivations, 1 << 16, &tracker);
  size_t mark = arena.Mark();
  Tensor a = arena.Allocate(DType::kF32, {10, 10});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % Arena::kAlignment, 0u);
  arena.Allocate(DType::kF32, {100});
  EXPECT_GE(tracker.current(MemoryKind::kActivations), 800u);
  arena.Release(mark);
  EXPECT_EQ(tracker.current(MemoryKind::kActivations), 0u);
  EXPECT_GE(tracker.peak(MemoryKind::kActivations), 800u);
  EXPECT_EQ(tracker.reserved(MemoryKind::kActivations), size_t{1} << 16);
}

TEST(Arena, MeasuringPassGivesTheCapacityARealOneNeeds) {
  Arena m = Arena::Measuring(MemoryKind::kWorkspace);
  m.Allocate(DType::kF32, {3});
  m.Allocate(DType::kI32, {17});
  Arena real(MemoryKind::kWorkspace, m.peak(), nullptr);
  real.Allocate(DType::kF32, {3});
  real.Allocate(DType::kI32, {17});  // would CHECK-fail if the measurement were short
  EXPECT_EQ(real.used(), m.peak());
}

// What a device backend does: allocate the buffer itself and give the arena the function that
// frees it. The arena's tensors carry the device; the buffer is freed exactly once, by the
// arena that owns it after moves.
std::byte* g_freed = nullptr;
int g_frees = 0;
void RecordFree(std::byte* base) {
  g_freed = base;
  ++g_frees;
}

TEST(Arena, AdoptedDeviceBufferIsFreedOnceByItsOwnerAndTensorsCarryTheDevice) {
  alignas(Arena::kAlignment) static std::byte buffer[256] = {};
  g_freed = nullptr;
  g_frees = 0;
  MemoryTracker tracker;
  {
    Arena a(MemoryKind::kActivations, Device::kCuda, buffer, sizeof buffer, &RecordFree,
            &tracker);
    EXPECT_EQ(a.device(), Device::kCuda);
    EXPECT_EQ(tracker.current(MemoryKind::kActivations), 0u);
    EXPECT_EQ(tracker.reserved(MemoryKind::kActivations), sizeof buffer);
    Tensor t = a.Allocate(DType::kF32, {4});
    EXPECT_EQ(t.data(), buffer);
    EXPECT_EQ(t.device(), Device::kCuda);
    Arena b = std::move(a);
    EXPECT_EQ(b.device(), Device::kCuda);
    EXPECT_EQ(g_frees, 0);
  }
  EXPECT_EQ(g_frees, 1);
  EXPECT_EQ(g_freed, buffer);
}

TEST(Arena, MeasuringArenaBelongsToItsDevice) {
  Arena m = Arena::Measuring(MemoryKind::kWorkspace, Device::kCuda);
  EXPECT_EQ(m.device(), Device::kCuda);
  EXPECT_EQ(m.Allocate(DType::kF32, {8}).device(), Device::kCuda);
  EXPECT_EQ(Arena::Measuring(MemoryKind::kWorkspace).device(), Device::kCpu);
}

TEST(DType, HalfConversionsRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.1f}) {
    EXPECT_EQ(F16ToF32(F32ToF16(f)), F16ToF32(F32ToF16(F16ToF32(F32ToF16(f)))));
    EXPECT_NEAR(F16ToF32(F32ToF16(f)), f, std::abs(f) * 1e-3f + 6e-8f) << f;
    EXPECT_NEAR(Bf16ToF32(F32ToBf16(f)), f, std::abs(f) * 8e-3f) << f;
  }
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(1e6f), 0x7c00);  // overflow to inf
}

}  // namespace
}  // namespace tessera
