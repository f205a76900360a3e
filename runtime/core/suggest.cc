// runtime/core/suggest.cc — edit distance and the "did you mean" choice (suggest.h).
// Pure functions; thread-safe.
#include "runtime/core/suggest.h"

#include <algorithm>
#include <cctype>

namespace tessera {
namespace {

std::string Lower(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

int EditDistance(const std::string& a_in, const std::string& b_in) {
  const std::string a = Lower(a_in);
  const std::string b = Lower(b_in);
  const size_t n = a.size(), m = b.size();
  // d[i][j] = distance between a[0, i) and b[0, j); keys are short, a full table is fine.
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string ClosestWord(const std::string& word, const std::vector<std::string>& candidates) {
  const int threshold = std::max(2, static_cast<int>(word.size()) / 3);
  std::string best;
  int best_distance = threshold + 1;
  for (const std::string& c : candidates) {
    const int dist = EditDistance(word, c);
    // A "suggestion" that rewrites every character is noise ("x" -> "lr").
    if (dist >= static_cast<int>(std::max(word.size(), c.size()))) continue;
    if (dist < best_distance) {
      best_distance = dist;
      best = c;
    }
  }
  return best;
}

std::string DidYouMean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string best = ClosestWord(word, candidates);
  return best.empty() ? "" : " (did you mean \"" + best + "\"?)";
}

}  // namespace tessera
