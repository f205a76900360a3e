// checkpoint/file_names.h — every name a checkpoint root holds, spelled once.
//
// Layout (commit.h says what each stage means):
//   <root>/step_<N, 8+ digits>/            committed: manifest.json + shard_<rank>.bin files
//   <root>/step_<N>.tmp/                   staging (being written)
//   <root>/step_<N>.old/, .deleting/       moved aside during a commit / being removed
//   <root>/step_<N>.corrupt/               failed verification, set aside by a resume
//   <root>/catalog/                        the catalog database (catalog.h)
// The checkpoint module, the trainer's loader, the tools and tessera chaos build and recognise
// these names only through this header (tests may spell them out, to pin the format).
// Thread-safety: pure functions and constants.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

inline constexpr std::string_view kManifestFileName = "manifest.json";
inline constexpr std::string_view kCatalogDirName = "catalog";
inline constexpr std::string_view kStagingSuffix = ".tmp";       // step_<N>.tmp
inline constexpr std::string_view kOldSuffix = ".old";           // step_<N>.old
inline constexpr std::string_view kDeletingSuffix = ".deleting"; // step_<N>.deleting
inline constexpr std::string_view kCorruptSuffix = ".corrupt";   // step_<N>.corrupt

std::string StepDirName(int64_t step);     // "step_00000100"
std::string StagingDirName(int64_t step);  // "step_00000100.tmp"
std::string CorruptDirName(int64_t step);  // "step_00000100.corrupt"

// The step of a canonical "step_<N>" name (exactly what StepDirName(N) writes), else -1.
// Canonical only, so "step_1" and "step_00000001" can never both claim step 1.
int64_t ParseStepDirName(std::string_view name);

// The step of a canonical "step_<N>" followed by `suffix` (".tmp", ".corrupt", ...), else -1.
int64_t ParseSuffixedStepDirName(std::string_view name, std::string_view suffix);

// "shard_<rank>.bin".
std::string ShardFileName(int rank);

// <dir>/manifest.json: the manifest of the checkpoint directory `dir`.
std::string ManifestPath(const std::string& dir);

}  // namespace tessera
