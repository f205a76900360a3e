// runtime/core/memory.h — arenas: one contiguous buffer per kind of state, with accounting.
//
// Every byte Tessera allocates for model state goes through an Arena of one MemoryKind, so the
// end-of-run summary can report peak bytes by kind and so that later layers (bucketed
// reductions, ZeRO partitions, checkpoint shards) can address state as ranges of one buffer.
// An Arena is a bump allocator with stack discipline (Mark/Release) — activations of a layer
// recomputed in backward reuse the bytes of the layer before. A measuring arena (no buffer)
// runs the same allocation sequence to learn the capacity a real one needs.
// An arena belongs to a device (tensor.h Device): a host arena allocates its own buffer; a
// device arena adopts one a compute backend allocated (runtime/kernels/backend.h MakeArena)
// and gives it back through the backend's free function; its tensors carry the device.
// Thread-safety: an Arena and a MemoryTracker belong to one thread (the trainer's).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/core/tensor.h"

namespace tessera {

enum class MemoryKind : int {
  kParameters = 0,
  kGradients,
  kOptimizerState,
  kActivations,
  kWorkspace,
  // Per-unit transient buffers of sharded / mixed-precision training (runtime/train/
  // param_shards.h): gathered or upcast parameters of the units in use and the per-unit
  // gradient buffers waiting for their reduction. Bounded by a few units, not the model.
  kUnitBuffers,
  // The host copy of this rank's state an asynchronous checkpoint writes from (reused).
  kCheckpointStaging,
  // Not memory: bytes of this rank's state kept on local disk (optimizer.offload: nvme), beside
  // the resident kinds so every report shows where the state went.
  kOffloaded,
  kCount,
};
const char* MemoryKindName(MemoryKind k);

// Current and peak bytes in use, by kind. Reserved bytes are the arenas' capacities.
class MemoryTracker {
 public:
  // Reserved bytes now held (an arena's capacity: + when created, - when freed), and the
  // peak of that sum, which is what the summary reports.
  void OnReserve(MemoryKind k, int64_t delta_bytes);
  void OnUse(MemoryKind k, int64_t delta_bytes);
  size_t current(MemoryKind k) const { return current_[Idx(k)]; }
  size_t peak(MemoryKind k) const { return peak_[Idx(k)]; }
  size_t reserved(MemoryKind k) const { return reserved_peak_[Idx(k)]; }  // peak reserved
  // Multi-line table: kind, peak in use, reserved.
  std::string Report() const;

 private:
  static int Idx(MemoryKind k) { return static_cast<int>(k); }
  std::array<size_t, static_cast<int>(MemoryKind::kCount)> current_{}, peak_{}, reserved_{},
      reserved_peak_{};
};

class Arena {
 public:
  // A real arena of `capacity_bytes`, zero-filled (which also pre-faults the pages).
  Arena(MemoryKind kind, size_t capacity_bytes, MemoryTracker* tracker);
  // An arena over `capacity_bytes` of `device` memory at `base` (allocated and zero-filled by
  // a compute backend), handed back with free_fn(base) when the arena is destroyed.
  using FreeFn = void (*)(std::byte* base);
  Arena(MemoryKind kind, Device device, std::byte* base, size_t capacity_bytes, FreeFn free_fn,
        MemoryTracker* tracker);
  // A measuring arena: Allocate returns tensors with null data and counts what was asked for.
  static Arena Measuring(MemoryKind kind, Device device = Device::kCpu);
  // A sizing arena: a measuring arena whose `capacity_bytes` the tracker counts as reserved,
  // as a real arena's would be. A dry construction of the trainer's state on sizing arenas
  // (runtime/train/memory_plan.h) books exactly what a run reserves, without the memory.
  static Arena Sizing(MemoryKind kind, size_t capacity_bytes, MemoryTracker* tracker,
                      Device device = Device::kCpu);
  Arena(Arena&&) noexcept;
  Arena& operator=(Arena&&) noexcept;
  ~Arena();

  static constexpr size_t kAlignment = 64;  // cache line; also enough for AVX-512 loads

  // Next `shape` elements of `dtype`, 64-byte aligned. CHECK-fails past capacity: capacities
  // come from a measuring pass, so running out is a bug, not an input error.
  Tensor Allocate(DType dtype, Shape shape);
  size_t Mark() const { return used_; }
  void Release(size_t mark);

  MemoryKind kind() const { return kind_; }
  Device device() const { return device_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t capacity() const { return capacity_; }
  bool measuring() const { return base_ == nullptr; }
  bool sizing() const { return sizing_; }
  std::byte* base() const { return base_; }

 private:
  Arena(MemoryKind kind, Device device) : kind_(kind), device_(device) {}
  void Free();
  static void FreeHost(std::byte* base);
  MemoryKind kind_;
  Device device_ = Device::kCpu;
  std::byte* base_ = nullptr;
  FreeFn free_fn_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t peak_ = 0;
  bool sizing_ = false;  // measuring, with capacity_ booked as reserved
  MemoryTracker* tracker_ = nullptr;
  bool Books() const { return base_ != nullptr || sizing_; }  // capacity_ is on the tracker
};

// "1.23 GiB", "456.0 MiB", "12.0 KiB", "17 B".
std::string FormatBytes(size_t bytes);

// A memory field of /proc/<pid>/status ("VmRSS": resident now, "VmHWM": its high-water mark)
// in bytes, for process `pid` (0: this process); -1 if unreadable (the process is gone).
int64_t ProcessMemoryBytes(int pid, const std::string& field);
// Resets this process's resident high-water mark (VmHWM) to its resident size now, so a later
// VmHWM is the peak since this call (Linux >= 4.0). False where /proc does not allow it.
bool ResetPeakResident();

}  // namespace tessera
