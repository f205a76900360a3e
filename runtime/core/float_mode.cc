// runtime/core/float_mode.cc — per-thread flush-to-zero control (float_mode.h): MXCSR on
// x86-64, FPCR on AArch64, nothing elsewhere.
#include "runtime/core/float_mode.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessera {

#if defined(__x86_64__)
namespace {

constexpr uint32_t kMxcsrDaz = 1u << 6;   // denormals are zero: subnormal inputs read as 0
constexpr uint32_t kMxcsrFtz = 1u << 15;  // flush to zero: tiny results become 0
constexpr uint32_t kMxcsrBoth = kMxcsrDaz | kMxcsrFtz;

// Setting an MXCSR bit the CPU does not implement raises #GP, so DAZ is only set where the
// MXCSR_MASK field of the FXSAVE image (bytes 28..31) reports it. A zero field means the
// architectural default mask 0xffbf, which lacks DAZ (the first SSE parts).
bool CpuHasDaz() {
  alignas(16) unsigned char image[512] = {};
  _fxsave(image);
  uint32_t mask;
  std::memcpy(&mask, image + 28, sizeof(mask));
  if (mask == 0) mask = 0xffbfu;
  return (mask & kMxcsrDaz) != 0;
}

}  // namespace

bool CanFlushSubnormals() {
  static const bool kCan = CpuHasDaz();
  return kCan;
}

void SetFlushSubnormals(bool on) {
  if (!CanFlushSubnormals()) return;
  const uint32_t csr = _mm_getcsr();
  _mm_setcsr(on ? (csr | kMxcsrBoth) : (csr & ~kMxcsrBoth));
}

bool FlushesSubnormals() { return (_mm_getcsr() & kMxcsrBoth) == kMxcsrBoth; }

#elif defined(__aarch64__)
namespace {

constexpr uint64_t kFpcrFz = uint64_t{1} << 24;  // flush-to-zero for fp32/fp64, inputs and results

uint64_t ReadFpcr() {
  uint64_t v;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(v));
  return v;
}

void WriteFpcr(uint64_t v) { __asm__ __volatile__("msr fpcr, %0" : : "r"(v)); }

}  // namespace

bool CanFlushSubnormals() { return true; }

void SetFlushSubnormals(bool on) {
  const uint64_t fpcr = ReadFpcr();
  WriteFpcr(on ? (fpcr | kFpcrFz) : (fpcr & ~kFpcrFz));
}

bool FlushesSubnormals() { return (ReadFpcr() & kFpcrFz) != 0; }

#else

bool CanFlushSubnormals() { return false; }
void SetFlushSubnormals(bool) {}
bool FlushesSubnormals() { return false; }

#endif

}  // namespace tessera
