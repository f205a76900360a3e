// checkpoint/file_names.cc — the names of a checkpoint root (file_names.h). Pure.
#include "checkpoint/file_names.h"

#include <cstdio>

#include "runtime/core/check.h"

namespace tessera {

std::string StepDirName(int64_t step) {
  TESSERA_CHECK(step >= 0);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string StagingDirName(int64_t step) { return StepDirName(step) + std::string(kStagingSuffix); }

std::string CorruptDirName(int64_t step) { return StepDirName(step) + std::string(kCorruptSuffix); }

int64_t ParseStepDirName(std::string_view name) {
  constexpr std::string_view kPrefix = "step_";
  if (name.size() <= kPrefix.size() || name.substr(0, kPrefix.size()) != kPrefix) return -1;
  const std::string_view digits = name.substr(kPrefix.size());
  if (digits.size() > 18) return -1;  // fits int64 without overflow
  int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return StepDirName(step) == name ? step : -1;
}

int64_t ParseSuffixedStepDirName(std::string_view name, std::string_view suffix) {
  if (name.size() <= suffix.size() || name.substr(name.size() - suffix.size()) != suffix) return -1;
  return ParseStepDirName(name.substr(0, name.size() - suffix.size()));
}

std::string ShardFileName(int rank) { return "shard_" + std::to_string(rank) + ".bin"; }

std::string ManifestPath(const std::string& dir) {
  if (dir.empty()) return std::string(kManifestFileName);
  return dir + (dir.back() == '/' ? "" : "/") + std::string(kManifestFileName);
}

}  // namespace tessera
