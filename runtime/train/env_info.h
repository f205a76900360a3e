// runtime/train/env_info.h — the environment fingerprint printed by `tessera env` and stored
// with every run and every checkpoint, so a result can be traced to the build and machine that
// produced it, and compared when a checkpoint is resumed or loaded by init_from (checkpointer).
// Pure queries; thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/core/json.h"

namespace tessera {

// Ordered (key, value) pairs: tessera version, git commit, build type, compiler, C++ standard,
// OpenBLAS config and core, oneDNN, the bf16 GEMM instruction set, MPI, NCCL/CUDA (or "not
// built"), yaml-cpp, OpenMP, CPU model (name, family, model, stepping), CPU features (as the
// kernels dispatch on them), cores, threads, hostname, OS.
std::vector<std::pair<std::string, std::string>> EnvironmentFingerprint();
// One JSON object with the same keys.
std::string EnvironmentFingerprintJson();

// A key whose value differs between a saved fingerprint (a checkpoint's) and this process's,
// or that only one of them has ("" for the side without it). `placement`: where the run runs
// (hostname, cores, threads, the OS kernel), which a job moved to other hosts changes without
// changing what it computes; every other key names the code, libraries or CPU that compute.
struct EnvironmentDifference {
  std::string key, saved, now;
  bool placement = false;
};
// The differences, in this process's key order, then keys only the saved one has. A saved
// value that is not an object compares as empty (every key differs).
std::vector<EnvironmentDifference> CompareEnvironment(const JsonValue& saved);
// "git_commit: 1a2b3c -> 4d5e6f" (values quoted when empty: "(none)").
std::string DescribeDifference(const EnvironmentDifference& d);

}  // namespace tessera
