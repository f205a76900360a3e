// runtime/core/suggest.h — the one "did you mean" of every strict reader: config keys and enum
// values (runtime/train/config.cc), chaos scenario keys and fault kinds (runtime/chaos/
// scenario.cc).
//
// Owns: the edit distance used to pick the closest known word to a misspelt one, the threshold
// that decides whether a suggestion is worth showing, and the words of the suggestion.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace tessera {

// Optimal-string-alignment distance (Levenshtein plus adjacent transposition, so "keep_lats"
// is one edit from "keep_last"), compared case-insensitively.
int EditDistance(const std::string& a, const std::string& b);

// The candidate closest to `word`, or "" when none is close enough to be a plausible typo
// (distance <= max(2, |word| / 3) and below the longer length). Ties go to the earlier
// candidate, so callers list keys in their documented order.
std::string ClosestWord(const std::string& word, const std::vector<std::string>& candidates);

// ` (did you mean "x"?)` with x = ClosestWord(word, candidates), or "" when there is none.
std::string DidYouMean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace tessera
