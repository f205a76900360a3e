// runtime/train/env_info.h — the environment fingerprint printed by `tessera env` and stored
// with every run (later: every checkpoint), so a result can be traced to the build and machine
// that produced it. Pure queries; thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tessera {

// Ordered (key, value) pairs: tessera version, git commit, build type, compiler, C++ standard,
// OpenBLAS config, yaml-cpp, OpenMP, CPU model, CPU features, cores, threads, hostname, OS.
std::vector<std::pair<std::string, std::string>> EnvironmentFingerprint();
// One JSON object with the same keys.
std::string EnvironmentFingerprintJson();

}  // namespace tessera
