// runtime/train/config_suggest.h — "did you mean" for config keys and enum values (private to
// runtime/train; used by config.cc).
//
// Owns: the edit distance used to pick the closest known word to a misspelt one, and the
// threshold that decides whether a suggestion is worth showing. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace tessera {

// Optimal-string-alignment distance (Levenshtein plus adjacent transposition, so "keep_lats"
// is one edit from "keep_last"), compared case-insensitively.
int ConfigEditDistance(const std::string& a, const std::string& b);

// The candidate closest to `word`, or "" when none is close enough to be a plausible typo
// (distance <= max(2, |word| / 3) and
// below the longer length). Ties go to the earlier candidate, so callers list keys in
// their documented order.
std::string ClosestConfigWord(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace tessera
