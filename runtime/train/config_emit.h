// runtime/train/config_emit.h — the effective Config written back as YAML (private to
// runtime/train; yaml-cpp stays inside config_emit.cc).
//
// Owns: the text recorded as Config::resolved_yaml. Invariant: LoadConfig of that text gives
// back an equal Config (every key is written, floats in their shortest exact form).
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "runtime/train/config.h"

namespace tessera {

// Every section and key of `config` (defaults included), preceded by comment lines naming the
// source file and the overrides applied.
std::string EmitResolvedYaml(const Config& config, const std::vector<std::string>& overrides);

}  // namespace tessera
