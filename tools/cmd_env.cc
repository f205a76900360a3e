// tools/cmd_env.cc — `tessera env`: the environment fingerprint.
#include <cstdio>

#include "runtime/core/exit_codes.h"
#include "runtime/train/env_info.h"
#include "tools/commands.h"

namespace tessera::cli {

int RunEnv(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera env [--json]\n\n"
        "Prints what this build and machine are: Tessera version, git commit, build type,\n"
        "compiler, OpenBLAS configuration, oneDNN, the bf16 GEMM instruction set, MPI,\n"
        "NCCL/CUDA (or 'not built'), yaml-cpp, OpenMP, CPU model and features, cores, host.\n"
        "The same fingerprint is written into every run's output directory (env.json) and\n"
        "every checkpoint; resuming or init_from a checkpoint prints what differs, and\n"
        "tessera train --strict-env refuses a checkpoint of other code, libraries or CPU.\n\n"
        "  --json   one JSON object instead of aligned text\n");
    return kExitOk;
  }
  bool json = false;
  for (const auto& a : args) {
    if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "tessera env: unknown argument '%s' (see tessera env --help)\n", a.c_str());
      return kExitUsage;
    }
  }
  if (json) {
    std::printf("%s\n", EnvironmentFingerprintJson().c_str());
    return kExitOk;
  }
  for (const auto& [k, v] : EnvironmentFingerprint()) std::printf("%-14s %s\n", k.c_str(), v.c_str());
  return kExitOk;
}

}  // namespace tessera::cli
