// links: tessera_kernels
// tests/kernels/cpu_features_test.cc — the pure decision from cpuid feature bits to a bf16
// instruction set, on hand-written CPUs, and cpuid reading against what Linux reports.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "runtime/kernels/cpu/cpu_features.h"

namespace tessera::cpu {
namespace {

// AMD Zen 3 (this project's build machine): AVX2 and FMA, no AVX-512.
CpuFeatures Zen3() {
  CpuFeatures f;
  f.avx2 = f.fma = f.os_avx = true;
  return f;
}

// Skylake-SP / Ice Lake: AVX-512 F+DQ+BW+VL with the OS saving zmm state, no bf16.
CpuFeatures Avx512Core() {
  CpuFeatures f = Zen3();
  f.avx512f = f.avx512dq = f.avx512bw = f.avx512vl = true;
  f.os_avx512 = true;
  return f;
}

// Cooper Lake / Zen 4: AVX512-BF16.
CpuFeatures Avx512Bf16() {
  CpuFeatures f = Avx512Core();
  f.avx512_bf16 = true;
  return f;
}

// Sapphire Rapids: AMX tiles with bf16, the OS enabling tile state.
CpuFeatures SapphireRapids() {
  CpuFeatures f = Avx512Bf16();
  f.amx_tile = f.amx_bf16 = f.os_amx = true;
  return f;
}

TEST(ChooseBf16Isa, NoFeaturesMeansNone) { EXPECT_EQ(ChooseBf16Isa(CpuFeatures{}), Bf16Isa::kNone); }

TEST(ChooseBf16Isa, Avx2OnlyCpuHasNoBf16Path) {
  EXPECT_EQ(ChooseBf16Isa(Zen3()), Bf16Isa::kNone);
}

TEST(ChooseBf16Isa, EachCpuGetsItsBestInstructionSet) {
  EXPECT_EQ(ChooseBf16Isa(Avx512Core()), Bf16Isa::kAvx512Core);
  EXPECT_EQ(ChooseBf16Isa(Avx512Bf16()), Bf16Isa::kAvx512Bf16);
  EXPECT_EQ(ChooseBf16Isa(SapphireRapids()), Bf16Isa::kAmxBf16);
}

TEST(ChooseBf16Isa, AvxFiveTwelveNeedsAllFourCoreSubsets) {
  for (bool CpuFeatures::*bit : {&CpuFeatures::avx512f, &CpuFeatures::avx512dq,
                                 &CpuFeatures::avx512bw, &CpuFeatures::avx512vl}) {
    CpuFeatures f = SapphireRapids();
    f.*bit = false;
    EXPECT_EQ(ChooseBf16Isa(f), Bf16Isa::kNone);
  }
}

TEST(ChooseBf16Isa, StateTheOsDoesNotSaveDoesNotCount) {
  // A hypervisor may report the instructions but leave XCR0's zmm or tile bits clear.
  CpuFeatures no_zmm = SapphireRapids();
  no_zmm.os_avx512 = false;
  EXPECT_EQ(ChooseBf16Isa(no_zmm), Bf16Isa::kNone);
  CpuFeatures no_tiles = SapphireRapids();
  no_tiles.os_amx = false;
  EXPECT_EQ(ChooseBf16Isa(no_tiles), Bf16Isa::kAvx512Bf16);
}

TEST(ChooseBf16Isa, AmxNeedsBothTileAndBf16Bits) {
  CpuFeatures tile_only = SapphireRapids();
  tile_only.amx_bf16 = false;
  EXPECT_EQ(ChooseBf16Isa(tile_only), Bf16Isa::kAvx512Bf16);
  CpuFeatures bf16_only = SapphireRapids();
  bf16_only.amx_tile = false;
  EXPECT_EQ(ChooseBf16Isa(bf16_only), Bf16Isa::kAvx512Bf16);
  // AMX bits without AVX-512 at all (no such CPU, but the rule must not be fooled).
  CpuFeatures amx_no_avx512 = Zen3();
  amx_no_avx512.amx_tile = amx_no_avx512.amx_bf16 = amx_no_avx512.os_amx = true;
  EXPECT_EQ(ChooseBf16Isa(amx_no_avx512), Bf16Isa::kNone);
}

TEST(Bf16IsaName, NamesEveryIsa) {
  EXPECT_STREQ(Bf16IsaName(Bf16Isa::kNone), "none");
  EXPECT_STREQ(Bf16IsaName(Bf16Isa::kAvx512Core), "AVX512-core");
  EXPECT_STREQ(Bf16IsaName(Bf16Isa::kAvx512Bf16), "AVX512-BF16");
  EXPECT_STREQ(Bf16IsaName(Bf16Isa::kAmxBf16), "AMX-BF16");
}

TEST(DescribeCpuFeatures, ListsOnlyUsableFeatures) {
  EXPECT_EQ(DescribeCpuFeatures(CpuFeatures{}), "none");
  EXPECT_EQ(DescribeCpuFeatures(Zen3()), "avx2 fma");
  CpuFeatures hidden = SapphireRapids();
  hidden.os_avx512 = hidden.os_amx = false;
  EXPECT_EQ(DescribeCpuFeatures(hidden), "avx2 fma");
  EXPECT_EQ(DescribeCpuFeatures(SapphireRapids()),
            "avx2 fma avx512f avx512dq avx512bw avx512vl avx512-bf16 amx-tile amx-bf16");
}

// The "flags" line of /proc/cpuinfo: Linux lists a feature only when the CPU has it and the
// kernel enabled its state, which is what DetectCpuFeatures' "usable" means.
std::set<std::string> LinuxCpuFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

TEST(DetectCpuFeatures, AgreesWithTheFlagsLinuxReports) {
  const auto flags = LinuxCpuFlags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  const CpuFeatures f = DetectCpuFeatures();
  auto has = [&](const char* name) { return flags.count(name) == 1; };
  EXPECT_EQ(f.os_avx && f.avx2, has("avx2"));
  EXPECT_EQ(f.os_avx && f.fma, has("fma"));
  EXPECT_EQ(f.os_avx512 && f.avx512f, has("avx512f"));
  EXPECT_EQ(f.os_avx512 && f.avx512dq, has("avx512dq"));
  EXPECT_EQ(f.os_avx512 && f.avx512bw, has("avx512bw"));
  EXPECT_EQ(f.os_avx512 && f.avx512vl, has("avx512vl"));
  EXPECT_EQ(f.os_avx512 && f.avx512_bf16, has("avx512_bf16"));
  EXPECT_EQ(f.os_amx && f.amx_tile, has("amx_tile"));
  EXPECT_EQ(f.os_amx && f.amx_bf16, has("amx_bf16"));
  std::printf("this CPU: %s -> bf16 ISA %s\n", DescribeCpuFeatures(f).c_str(),
              Bf16IsaName(ChooseBf16Isa(f)));
}

}  // namespace
}  // namespace tessera::cpu
