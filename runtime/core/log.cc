// runtime/core/log.cc
#include "runtime/core/log.h"

#include <cstdio>

namespace tessera {

void Log(LogLevel level, const std::string& message) {
  const char* tag = level == LogLevel::kError ? "error: " : level == LogLevel::kWarning ? "warning: " : "";
  std::fprintf(stderr, "tessera: %s%s\n", tag, message.c_str());
}

}  // namespace tessera
