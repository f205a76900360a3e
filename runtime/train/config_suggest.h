// runtime/train/config_suggest.h — the config loader's names for the one "did you mean"
// (runtime/core/suggest.h), kept so that config.cc and its tests read as before. No logic of
// its own: the chaos scenario parser uses the same functions. Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/suggest.h"

namespace tessera {

inline int ConfigEditDistance(const std::string& a, const std::string& b) { return EditDistance(a, b); }

inline std::string ClosestConfigWord(const std::string& word, const std::vector<std::string>& candidates) {
  return ClosestWord(word, candidates);
}

}  // namespace tessera
