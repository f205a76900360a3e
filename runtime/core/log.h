// runtime/core/log.h — one-line diagnostics on stderr ("tessera: warning: ...").
// Progress and summaries a user asked for go to stdout from runtime/train, not through here.
// Thread-safety: each call writes one line with one fprintf (atomic for stdio).
#pragma once

#include <string>

namespace tessera {

enum class LogLevel { kInfo, kWarning, kError };
void Log(LogLevel level, const std::string& message);
inline void LogInfo(const std::string& m) { Log(LogLevel::kInfo, m); }
inline void LogWarning(const std::string& m) { Log(LogLevel::kWarning, m); }
inline void LogError(const std::string& m) { Log(LogLevel::kError, m); }

}  // namespace tessera
