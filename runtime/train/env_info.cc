// runtime/train/env_info.cc — gathers the environment fingerprint.
#include "runtime/train/env_info.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "comm/mpi.h"
#include "comm/nccl.h"
#include "runtime/kernels/cuda_backend.h"
#include "runtime/core/json.h"
#include "runtime/kernels/cpu/cpu_features.h"
#include "runtime/kernels/cpu/onednn_matmul.h"
#include "runtime/kernels/cpu/threads.h"
#include "tessera_git_commit.h"  // generated at build time: TESSERA_GIT_COMMIT
#ifndef TESSERA_BUILD_TYPE
#define TESSERA_BUILD_TYPE "unknown"
#endif
#ifndef TESSERA_YAML_CPP_VERSION
#define TESSERA_YAML_CPP_VERSION "unknown"
#endif

namespace tessera {
namespace {

// "AMD EPYC 9B45 (family 26 model 2 stepping 1)": the name and the numbers that tell two
// parts with the same marketing name apart.
std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "unknown", family, model, stepping;
  auto value = [&line] {
    const size_t pos = line.find(':');
    return pos == std::string::npos || pos + 2 > line.size() ? std::string() : line.substr(pos + 2);
  };
  while (std::getline(in, line) && !line.empty()) {  // the first processor's block
    if (line.rfind("model name", 0) == 0) name = value();
    else if (line.rfind("cpu family", 0) == 0) family = value();
    else if (line.rfind("model", 0) == 0) model = value();
    else if (line.rfind("stepping", 0) == 0) stepping = value();
  }
  if (family.empty()) return name;
  return name + " (family " + family + " model " + model + " stepping " + stepping + ")";
}

// Keys that say where a run runs, not what computes it (EnvironmentDifference::placement).
bool IsPlacement(const std::string& key) {
  return key == "hostname" || key == "cores" || key == "threads" || key == "os";
}

// "built, sm_90; GPU 0: NVIDIA H200 (sm_90, 132 SMs, 141 GiB)", or why there is no GPU.
std::string CudaBackendDescription() {
  if (!CudaBackendBuilt()) return "not built";
  std::string s = std::string("built for sm_") + TESSERA_CUDA_ARCHITECTURES;
  auto gpu = CudaDevice(0);
  if (!gpu.ok()) return s + "; " + gpu.status().message();
  return s + "; GPU 0: " + gpu->name + " (sm_" + std::to_string(gpu->compute_major) +
         std::to_string(gpu->compute_minor) + ", " + std::to_string(gpu->multiprocessors) +
         " SMs, " + std::to_string(gpu->memory_bytes >> 30) + " GiB)";
}

}  // namespace

std::vector<std::pair<std::string, std::string>> EnvironmentFingerprint() {
  struct utsname u {};
  uname(&u);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const cpu::CpuFeatures features = cpu::DetectCpuFeatures();
  return {
      {"tessera", "0.1.0"},
      {"git_commit", TESSERA_GIT_COMMIT},
      {"build_type", TESSERA_BUILD_TYPE},
      {"compiler", std::string("g++ ") + __VERSION__},
      {"cxx_standard", std::to_string(__cplusplus)},
      {"openblas", cpu::BlasConfig()},
      {"openblas_core", cpu::BlasCoreName()},
      {"onednn", cpu::onednn::VersionString()},
      {"bf16_gemm", cpu::Bf16IsaName(cpu::ChooseBf16Isa(features))},
      {"mpi", MpiLibraryVersion()},
      {"nccl", NcclVersionString()},
      {"cuda_backend", CudaBackendDescription()},
      {"yaml_cpp", TESSERA_YAML_CPP_VERSION},
      {"openmp", std::to_string(cpu::OpenMpVersion())},
      {"cpu", CpuModel()},
      {"cpu_features", cpu::DescribeCpuFeatures(features)},
      {"cores", std::to_string(std::thread::hardware_concurrency())},
      {"threads", std::to_string(cpu::NumThreads())},
      {"hostname", host},
      {"os", std::string(u.sysname) + " " + u.release + " " + u.machine},
  };
}

std::string EnvironmentFingerprintJson() {
  JsonWriter w;
  w.BeginObject();
  for (const auto& [k, v] : EnvironmentFingerprint()) w.Key(k).String(v);
  w.EndObject();
  return w.str();
}

std::vector<EnvironmentDifference> CompareEnvironment(const JsonValue& saved) {
  std::vector<EnvironmentDifference> out;
  const std::vector<std::pair<std::string, std::string>> now = EnvironmentFingerprint();
  auto saved_value = [&](const std::string& key) -> std::string {
    const JsonValue* v = saved.is_object() ? saved.Find(key) : nullptr;
    return v != nullptr && v->is_string() ? v->as_string() : std::string();
  };
  for (const auto& [key, value] : now) {
    const std::string was = saved_value(key);
    if (was != value) out.push_back({key, was, value, IsPlacement(key)});
  }
  if (saved.is_object()) {
    for (const auto& [key, value] : saved.members()) {
      const bool known = std::any_of(now.begin(), now.end(), [&](const auto& kv) { return kv.first == key; });
      if (!known) out.push_back({key, value.is_string() ? value.as_string() : "", "", IsPlacement(key)});
    }
  }
  return out;
}

std::string DescribeDifference(const EnvironmentDifference& d) {
  auto shown = [](const std::string& v) { return v.empty() ? std::string("(none)") : v; };
  return d.key + ": " + shown(d.saved) + " -> " + shown(d.now);
}

}  // namespace tessera
