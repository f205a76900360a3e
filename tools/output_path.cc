// tools/output_path.cc — CheckOutputPath and WeightsInputs (contract in output_path.h).
#include "tools/output_path.h"

#include <filesystem>
#include <system_error>

#include "checkpoint/commit.h"
#include "checkpoint/file_names.h"
#include "models/hf_export.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// A checkpoint root holds the catalog or committed steps; a checkpoint directory its manifest.
bool IsCheckpointPlace(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir / kCatalogDirName, ec) || fs::exists(dir / kManifestFileName, ec)) return true;
  auto steps = CommittedSteps(dir.string());
  return steps.ok() && !steps->empty();
}

}  // namespace

Status CheckOutputPath(const std::string& out, const std::vector<std::string>& inputs) {
  std::error_code ec;
  const fs::path target = fs::weakly_canonical(fs::absolute(out, ec), ec);
  if (ec) return InvalidArgument(out + ": cannot resolve the output path: " + ec.message());
  if (out.ends_with(".safetensors") && fs::is_directory(target, ec)) {
    return InvalidArgument(out + ": is a directory; a path ending in .safetensors names the file "
                           "to write (any other path names a model directory)");
  }
  for (const std::string& input : inputs) {
    std::error_code e;
    if (!fs::exists(input, e)) continue;
    const bool same = fs::exists(target, e) ? fs::equivalent(target, input, e)
                                            : fs::weakly_canonical(input, e) == target;
    if (same) {
      return InvalidArgument(out + ": is one of this command's inputs (" + input +
                             "): writing it would replace what is being read; choose another --out");
    }
  }
  for (fs::path dir = target.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    if (IsCheckpointPlace(dir)) {
      return InvalidArgument(out + ": is inside the checkpoint root or checkpoint " + dir.string() +
                             ", which the checkpoint protocol owns (retention and gc remove "
                             "whole directories there); write it outside");
    }
    if (dir == dir.parent_path()) break;
  }
  return Status::Ok();
}

Status CheckExportOutput(const std::string& out, const std::vector<std::string>& inputs) {
  RETURN_IF_ERROR(CheckOutputPath(out, inputs));
  return CheckExportTarget(out);
}

std::vector<std::string> WeightsInputs(const std::string& path) {
  std::vector<std::string> files = {path};
  std::error_code ec;
  fs::path dir;
  if (fs::is_directory(path, ec)) {
    dir = path;
  } else if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    dir = fs::path(path).parent_path();
  } else {
    return files;
  }
  if (dir.empty()) dir = ".";
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".safetensors") || name == "model.safetensors.index.json") {
      files.push_back(entry.path().string());
    }
  }
  return files;
}

}  // namespace tessera
