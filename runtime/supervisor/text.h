// runtime/supervisor/text.h — the small formatting and statistics helpers the supervisor's
// event lines and reports share (one copy, so every place writes ranks and medians alike).
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

namespace tessera {

// printf into a std::string (any length).
std::string StrFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// "2,3"; "-" for none.
std::string JoinRanks(const std::vector<int>& ranks);
// "rank 2" or "ranks 2,3".
std::string RankWord(const std::vector<int>& ranks);
// Median (mean of the middle two for an even count); 0 for none.
double Median(std::vector<double> v);

}  // namespace tessera
