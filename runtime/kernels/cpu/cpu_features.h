// runtime/kernels/cpu/cpu_features.h — what this CPU can do for bf16 matrix products, read
// from cpuid, and the pure decision from those feature bits to an instruction set.
//
// Owns: CpuFeatures (the bits that matter for bf16 GEMM, each both "the core has it" and, where
// the state is large, "the OS saves it"), DetectCpuFeatures (cpuid + xgetbv), ChooseBf16Isa
// (pure: features -> the best bf16 instruction set, tested on hand-written feature sets), and
// names for both. bf16_gemm.h turns the choice into a GEMM path.
// Thread-safety: pure functions; DetectCpuFeatures only executes cpuid/xgetbv.
#pragma once

#include <string>

namespace tessera::cpu {

// The cpuid bits bf16 GEMM depends on (Intel SDM vol. 2, CPUID; AMD APM vol. 3 agrees).
// A usable feature needs both the core bit and, for AVX/AVX-512/AMX, the OS enabling its
// register state in XCR0: a hypervisor may report a core bit while hiding the state.
struct CpuFeatures {
  bool avx2 = false;         // leaf 7 EBX bit 5
  bool fma = false;          // leaf 1 ECX bit 12
  bool avx512f = false;      // leaf 7 EBX bit 16
  bool avx512dq = false;     // leaf 7 EBX bit 17
  bool avx512bw = false;     // leaf 7 EBX bit 30
  bool avx512vl = false;     // leaf 7 EBX bit 31
  bool avx512_bf16 = false;  // leaf 7 sub-leaf 1 EAX bit 5: VCVTNE2PS2BF16, VDPBF16PS
  bool amx_tile = false;     // leaf 7 EDX bit 24
  bool amx_bf16 = false;     // leaf 7 EDX bit 22: TDPBF16PS
  bool os_avx = false;       // OSXSAVE and XCR0 bits 1-2 (xmm, ymm state)
  bool os_avx512 = false;    // XCR0 bits 5-7 (opmask, zmm state) on top of os_avx
  bool os_amx = false;       // XCR0 bits 17-18 (tile config and data). Linux also wants a
                             // per-process arch_prctl permission, which oneDNN requests itself.
};

// The best instruction set for a bf16 product with fp32 accumulation, best last.
enum class Bf16Isa {
  kNone,        // no AVX-512: bf16 can only be stored, the products run in fp32
  kAvx512Core,  // AVX-512 F+DQ+BW+VL without bf16 instructions: oneDNN emulates bf16 dot products
  kAvx512Bf16,  // AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4): VDPBF16PS
  kAmxBf16,     // AMX-BF16 tiles (Sapphire Rapids and later): TDPBF16PS
};

// Reads cpuid and XCR0 on this machine.
CpuFeatures DetectCpuFeatures();

// The best bf16 instruction set `f` makes usable (core bit and OS state both present). Pure.
Bf16Isa ChooseBf16Isa(const CpuFeatures& f);

// "none", "AVX512-core", "AVX512-BF16", "AMX-BF16".
const char* Bf16IsaName(Bf16Isa isa);

// The usable features among those above, space-separated ("avx2 fma avx512f ... amx-bf16"),
// or "none", for diagnostics and the environment fingerprint.
std::string DescribeCpuFeatures(const CpuFeatures& f);

}  // namespace tessera::cpu
