// runtime/train/env_info.cc — gathers the environment fingerprint.
#include "runtime/train/env_info.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "runtime/core/json.h"
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

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(pos + 2);
    }
  }
  return "unknown";
}

std::string CpuFeatures() {
  std::string out;
  auto add = [&out](bool has, const char* name) {
    if (has) out += (out.empty() ? "" : " ") + std::string(name);
  };
  __builtin_cpu_init();
  add(__builtin_cpu_supports("sse4.2"), "sse4.2");
  add(__builtin_cpu_supports("avx"), "avx");
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512vl"), "avx512vl");
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> EnvironmentFingerprint() {
  struct utsname u {};
  uname(&u);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return {
      {"tessera", "0.1.0"},
      {"git_commit", TESSERA_GIT_COMMIT},
      {"build_type", TESSERA_BUILD_TYPE},
      {"compiler", std::string("g++ ") + __VERSION__},
      {"cxx_standard", std::to_string(__cplusplus)},
      {"openblas", cpu::BlasConfig()},
      {"openblas_core", cpu::BlasCoreName()},
      {"yaml_cpp", TESSERA_YAML_CPP_VERSION},
      {"openmp", std::to_string(cpu::OpenMpVersion())},
      {"cpu", CpuModel()},
      {"cpu_features", CpuFeatures()},
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

}  // namespace tessera
