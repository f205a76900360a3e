// runtime/core/memory.cc — arenas and the memory accounting table.
#include "runtime/core/memory.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

namespace tessera {

const char* MemoryKindName(MemoryKind k) {
  switch (k) {
    case MemoryKind::kParameters: return "parameters";
    case MemoryKind::kGradients: return "gradients";
    case MemoryKind::kOptimizerState: return "optimizer state";
    case MemoryKind::kActivations: return "activations";
    case MemoryKind::kWorkspace: return "workspace";
    case MemoryKind::kUnitBuffers: return "unit buffers";
    case MemoryKind::kCheckpointStaging: return "ckpt staging";
    case MemoryKind::kOffloaded: return "offloaded";
    case MemoryKind::kCount: break;
  }
  return "?";
}

void MemoryTracker::OnUse(MemoryKind k, int64_t delta) {
  size_t& cur = current_[Idx(k)];
  cur = static_cast<size_t>(static_cast<int64_t>(cur) + delta);
  peak_[Idx(k)] = std::max(peak_[Idx(k)], cur);
}

void MemoryTracker::OnReserve(MemoryKind k, int64_t delta) {
  size_t& r = reserved_[Idx(k)];
  r = static_cast<size_t>(static_cast<int64_t>(r) + delta);
  reserved_peak_[Idx(k)] = std::max(reserved_peak_[Idx(k)], r);
}

std::string MemoryTracker::Report() const {
  std::string out;
  char line[160];
  for (int i = 0; i < static_cast<int>(MemoryKind::kCount); ++i) {
    auto k = static_cast<MemoryKind>(i);
    std::snprintf(line, sizeof line, "    %-16s peak %10s   reserved %10s\n", MemoryKindName(k),
                  FormatBytes(peak(k)).c_str(), FormatBytes(reserved(k)).c_str());
    out += line;
  }
  return out;
}

Arena::Arena(MemoryKind kind, size_t capacity_bytes, MemoryTracker* tracker)
    : kind_(kind), free_fn_(&Arena::FreeHost), capacity_(capacity_bytes), tracker_(tracker) {
  size_t rounded = (std::max<size_t>(capacity_bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  base_ = static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded));
  TESSERA_CHECK_MSG(base_ != nullptr, "out of memory reserving %zu bytes for %s", rounded,
                    MemoryKindName(kind));
  std::memset(base_, 0, rounded);
  if (tracker_) tracker_->OnReserve(kind_, static_cast<int64_t>(capacity_));
}

Arena::Arena(MemoryKind kind, Device device, std::byte* base, size_t capacity_bytes,
             FreeFn free_fn, MemoryTracker* tracker)
    : kind_(kind),
      device_(device),
      base_(base),
      free_fn_(free_fn),
      capacity_(capacity_bytes),
      tracker_(tracker) {
  TESSERA_CHECK_MSG(base_ != nullptr && free_fn_ != nullptr,
                    "a %s arena adopts a buffer and the function that frees it",
                    MemoryKindName(kind));
  if (tracker_) tracker_->OnReserve(kind_, static_cast<int64_t>(capacity_));
}

Arena Arena::Measuring(MemoryKind kind, Device device) { return Arena(kind, device); }

Arena Arena::Sizing(MemoryKind kind, size_t capacity_bytes, MemoryTracker* tracker, Device device) {
  Arena a(kind, device);
  a.sizing_ = true;
  a.capacity_ = capacity_bytes;
  a.tracker_ = tracker;
  if (tracker != nullptr) tracker->OnReserve(kind, static_cast<int64_t>(capacity_bytes));
  return a;
}

void Arena::FreeHost(std::byte* base) { std::free(base); }

void Arena::Free() {
  if (base_ != nullptr) free_fn_(base_);
  base_ = nullptr;
}

Arena::Arena(Arena&& o) noexcept { *this = std::move(o); }

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    // The bytes this arena held leave the books before it takes over the other's.
    if (tracker_) {
      if (used_) tracker_->OnUse(kind_, -static_cast<int64_t>(used_));
      if (Books()) tracker_->OnReserve(kind_, -static_cast<int64_t>(capacity_));
    }
    Free();
    kind_ = o.kind_;
    device_ = o.device_;
    base_ = std::exchange(o.base_, nullptr);
    free_fn_ = std::exchange(o.free_fn_, nullptr);
    capacity_ = std::exchange(o.capacity_, 0);
    used_ = std::exchange(o.used_, 0);
    peak_ = std::exchange(o.peak_, 0);
    sizing_ = std::exchange(o.sizing_, false);
    tracker_ = std::exchange(o.tracker_, nullptr);
  }
  return *this;
}

Arena::~Arena() {
  if (tracker_ && used_) tracker_->OnUse(kind_, -static_cast<int64_t>(used_));
  if (tracker_ && Books()) tracker_->OnReserve(kind_, -static_cast<int64_t>(capacity_));
  Free();
}

Tensor Arena::Allocate(DType dtype, Shape shape) {
  size_t bytes = static_cast<size_t>(shape.numel()) * DTypeSize(dtype);
  size_t start = (used_ + kAlignment - 1) / kAlignment * kAlignment;
  size_t end = start + bytes;
  if (!measuring()) {
    TESSERA_CHECK_MSG(end <= capacity_, "%s arena overflow: need %zu bytes, capacity %zu",
                      MemoryKindName(kind_), end, capacity_);
  }
  if (tracker_) tracker_->OnUse(kind_, static_cast<int64_t>(end - used_));
  used_ = end;
  peak_ = std::max(peak_, used_);
  return Tensor(measuring() ? nullptr : base_ + start, dtype, shape, device_);
}

void Arena::Release(size_t mark) {
  TESSERA_CHECK(mark <= used_);
  if (tracker_) tracker_->OnUse(kind_, -static_cast<int64_t>(used_ - mark));
  used_ = mark;
}

std::string FormatBytes(size_t bytes) {
  char buf[32];
  double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%zu B", bytes);
  return buf;
}

int64_t ProcessMemoryBytes(int pid, const std::string& field) {
  std::ifstream in("/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atoll(line.c_str() + field.size() + 1) * 1024;  // kB
  }
  return -1;
}

bool ResetPeakResident() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace tessera
