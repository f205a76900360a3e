// tests/e2e/cli_util.h — run the real `tessera` binary (or any command) and capture what it
// printed, for end-to-end tests. Each test works in its own fresh temporary directory.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/testing/temp_dir.h"

namespace tessera::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr interleaved
};

inline CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// `tessera <args>` with the binary under test.
inline CommandResult Tessera(const std::string& args) {
  return RunCommand(std::string(TESSERA_BINARY) + " " + args);
}

inline std::string Repo(const std::string& rel) { return std::string(TESSERA_SOURCE_DIR) + "/" + rel; }

// Each test works in a fresh directory: TempDir dir("tag"); dir / "file".
using TempDir = ScopedTempDir;

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace tessera::testing
