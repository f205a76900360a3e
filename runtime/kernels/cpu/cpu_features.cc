// runtime/kernels/cpu/cpu_features.cc — cpuid / xgetbv reading and the bf16 ISA decision
// (cpu_features.h). x86-64 only, like the rest of the CPU backend (-march=x86-64-v3).
#include "runtime/kernels/cpu/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <utility>

namespace tessera::cpu {
namespace {

constexpr bool Bit(uint32_t reg, int bit) { return ((reg >> bit) & 1u) != 0; }

// XCR0, the register-state components the OS saves on a context switch. Only valid when
// CPUID.1:ECX.OSXSAVE is set (checked by the caller). Inline asm rather than _xgetbv, which
// would need -mxsave on this translation unit.
uint64_t ReadXcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool Avx512CoreUsable(const CpuFeatures& f) {
  return f.os_avx512 && f.avx512f && f.avx512dq && f.avx512bw && f.avx512vl;
}

}  // namespace

CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return f;
  f.fma = Bit(ecx, 12);
  const bool osxsave = Bit(ecx, 27);
  if (osxsave) {
    const uint64_t xcr0 = ReadXcr0();
    f.os_avx = (xcr0 & 0x6) == 0x6;
    f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;
    f.os_amx = (xcr0 & 0x60000) == 0x60000;
  }
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return f;
  const uint32_t max_subleaf = eax;
  f.avx2 = Bit(ebx, 5);
  f.avx512f = Bit(ebx, 16);
  f.avx512dq = Bit(ebx, 17);
  f.avx512bw = Bit(ebx, 30);
  f.avx512vl = Bit(ebx, 31);
  f.amx_bf16 = Bit(edx, 22);
  f.amx_tile = Bit(edx, 24);
  if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0)
    f.avx512_bf16 = Bit(eax, 5);
  return f;
}

Bf16Isa ChooseBf16Isa(const CpuFeatures& f) {
  // Every bf16 kernel of oneDNN is AVX-512 code (AMX kernels too use zmm for their edges and
  // conversions), so without usable AVX-512 nothing else counts.
  if (!Avx512CoreUsable(f)) return Bf16Isa::kNone;
  if (f.amx_tile && f.amx_bf16 && f.os_amx && f.avx512_bf16) return Bf16Isa::kAmxBf16;
  if (f.avx512_bf16) return Bf16Isa::kAvx512Bf16;
  return Bf16Isa::kAvx512Core;
}

const char* Bf16IsaName(Bf16Isa isa) {
  switch (isa) {
    case Bf16Isa::kNone: return "none";
    case Bf16Isa::kAvx512Core: return "AVX512-core";
    case Bf16Isa::kAvx512Bf16: return "AVX512-BF16";
    case Bf16Isa::kAmxBf16: return "AMX-BF16";
  }
  return "?";
}

std::string DescribeCpuFeatures(const CpuFeatures& f) {
  const bool avx = f.os_avx, avx512 = f.os_avx512;
  const std::pair<bool, const char*> named[] = {
      {avx && f.avx2, "avx2"},          {avx && f.fma, "fma"},
      {avx512 && f.avx512f, "avx512f"}, {avx512 && f.avx512dq, "avx512dq"},
      {avx512 && f.avx512bw, "avx512bw"}, {avx512 && f.avx512vl, "avx512vl"},
      {avx512 && f.avx512_bf16, "avx512-bf16"}, {f.os_amx && f.amx_tile, "amx-tile"},
      {f.os_amx && f.amx_bf16, "amx-bf16"},
  };
  std::string out;
  for (const auto& [on, name] : named) {
    if (!on) continue;
    if (!out.empty()) out += ' ';
    out += name;
  }
  return out.empty() ? "none" : out;
}

}  // namespace tessera::cpu
