// models/hf_export.cc — a model as a Hugging Face model directory (hf_export.h).
#include "models/hf_export.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "models/hf_config.h"
#include "runtime/core/json.h"

namespace tessera {
namespace {

uint64_t Bytes(const SafetensorsTensorOut& t) {
  return static_cast<uint64_t>(t.shape.numel()) * DTypeSize(t.dtype);
}

// Tensors into shards in order: a new shard starts when the next tensor would pass the limit
// (a tensor larger than the limit gets a shard of its own), as transformers splits.
std::vector<std::vector<const SafetensorsTensorOut*>> Split(
    const std::vector<SafetensorsTensorOut>& tensors, uint64_t max_shard_bytes) {
  std::vector<std::vector<const SafetensorsTensorOut*>> shards(1);
  uint64_t filled = 0;
  for (const SafetensorsTensorOut& t : tensors) {
    if (!shards.back().empty() && filled + Bytes(t) > max_shard_bytes) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().push_back(&t);
    filled += Bytes(t);
  }
  return shards;
}

const char* TorchDtype(DType t) {
  return t == DType::kBF16 ? "bfloat16" : t == DType::kF16 ? "float16" : "float32";
}

std::string ShardName(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

std::string IndexJson(const std::vector<std::pair<std::string, std::string>>& weight_map,
                      uint64_t total) {
  JsonWriter w;
  w.BeginObject().Key("metadata").BeginObject().Key("total_size").Int(static_cast<int64_t>(total));
  w.EndObject().Key("weight_map").BeginObject();
  for (const auto& [tensor, file] : weight_map) w.Key(tensor).String(file);
  w.EndObject().EndObject();
  return w.str() + "\n";
}

// ExportHf's rule: a path ending in ".safetensors" is one file, any other a model directory.
bool IsOneFile(const std::string& out) {
  const std::string suffix = ".safetensors";
  return out.size() > suffix.size() &&
         out.compare(out.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string WithoutTrailingSlashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

// `dir` absent or an empty directory.
Status CheckEmptyTarget(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return Status::Ok();
  if (!fs::is_directory(dir, ec)) {
    return InvalidArgument(dir + ": exists and is not a directory (a model directory is written "
                           "there; a path ending in .safetensors writes one file)");
  }
  if (!fs::is_empty(dir, ec)) {
    return InvalidArgument(dir + ": exists and is not empty; an export writes a new (or empty) "
                           "directory so its files never mix with others");
  }
  return Status::Ok();
}

// Writes the files into `tmp` (already created).
Status WriteFiles(const std::string& tmp, const HfExportTensors& all, const std::string& config_json,
                  uint64_t max_shard_bytes, HfDirExport* out, FileSystem& fs) {
  const auto shards = Split(all.tensors, max_shard_bytes);
  std::vector<std::pair<std::string, std::string>> weight_map;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shards.size() == 1 ? "model.safetensors" : ShardName(i, shards.size());
    std::vector<SafetensorsTensorOut> part;
    for (const SafetensorsTensorOut* t : shards[i]) {
      part.push_back(*t);
      weight_map.emplace_back(t->name, name);
      out->weight_bytes += Bytes(*t);
    }
    RETURN_IF_ERROR(WriteSafetensors(tmp + "/" + name, part, {{"format", "pt"}}, fs));
    out->files.push_back(name);
  }
  out->shards = static_cast<int>(shards.size());
  if (shards.size() > 1) {
    std::sort(weight_map.begin(), weight_map.end());
    RETURN_IF_ERROR(WriteFileAtomic(tmp + "/model.safetensors.index.json",
                                    IndexJson(weight_map, out->weight_bytes), fs));
    out->files.push_back("model.safetensors.index.json");
  }
  if (!config_json.empty()) {
    RETURN_IF_ERROR(WriteFileAtomic(tmp + "/config.json", config_json + "\n", fs));
    out->files.push_back("config.json");
  }
  return fs.SyncDir(tmp);
}

}  // namespace

Result<HfDirExport> ExportHfModelDir(const std::string& dir_arg, const ModelConfig& config,
                                     std::span<const Parameter> params, DType dtype,
                                     const HfExtras* extras, uint64_t max_shard_bytes,
                                     FileSystem& fs) {
  if (max_shard_bytes == 0) return InvalidArgument("max shard size must be > 0 bytes");
  // "out/" is "out": the partial directory is its sibling, never inside it.
  const std::string dir = WithoutTrailingSlashes(dir_arg);
  RETURN_IF_ERROR(CheckEmptyTarget(dir));
  // Parents are created as save_pretrained creates them.
  std::error_code parent_ec;
  std::filesystem::create_directories(ParentDir(dir), parent_ec);
  if (parent_ec) return IoError(ParentDir(dir) + ": cannot create directory: " + parent_ec.message());
  ASSIGN_OR_RETURN(HfExportTensors all, CollectHfExport(dir, config, params, dtype, extras));
  HfDirExport out;
  Result<std::string> config_json = HfConfigJson(config, TorchDtype(dtype), all.routing_bias);
  if (!config_json.ok()) out.no_config = config_json.status().message();
  const std::string tmp = dir + ".partial";
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);  // a crashed export's leftovers
  RETURN_IF_ERROR(fs.MakeDir(tmp));
  Status s = WriteFiles(tmp, all, config_json.ok() ? *config_json : "", max_shard_bytes, &out, fs);
  if (s.ok() && std::filesystem::exists(dir, ec)) s = fs.RemoveTree(dir);  // empty (CheckEmptyTarget)
  if (s.ok()) s = fs.Rename(tmp, dir);
  if (s.ok()) s = fs.SyncDir(ParentDir(dir));
  if (!s.ok()) {
    (void)fs.RemoveTree(tmp);
    return s;
  }
  return out;
}

Status CheckExportTarget(const std::string& out) {
  return IsOneFile(out) ? Status::Ok() : CheckEmptyTarget(WithoutTrailingSlashes(out));
}

Result<std::string> ExportHf(const std::string& out, const ModelConfig& config,
                             std::span<const Parameter> params, DType dtype,
                             const HfExtras* extras, uint64_t max_shard_bytes) {
  if (IsOneFile(out)) {
    RETURN_IF_ERROR(ExportHfWeights(out, config, params, dtype, extras));
    return out;
  }
  ASSIGN_OR_RETURN(HfDirExport d, ExportHfModelDir(out, config, params, dtype, extras, max_shard_bytes));
  std::string line = WithoutTrailingSlashes(out) + "/ (" + std::to_string(d.shards) + (d.shards == 1 ? " shard" : " shards") +
                     ", " + std::to_string(d.weight_bytes) + " bytes of weights";
  line += d.no_config.empty() ? ", config.json)" : "; no config.json: " + d.no_config + ")";
  return line;
}

Result<uint64_t> ParseShardSize(const std::string& text) {
  static constexpr struct {
    const char* suffix;
    uint64_t scale;
  } kUnits[] = {{"GiB", 1ull << 30}, {"MiB", 1ull << 20}, {"KiB", 1ull << 10},
                {"GB", 1000000000ull}, {"MB", 1000000ull}, {"KB", 1000ull}, {"B", 1}, {"", 1}};
  for (const auto& u : kUnits) {
    const std::string suffix = u.suffix;
    if (text.size() <= suffix.size() ||
        text.compare(text.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string digits = text.substr(0, text.size() - suffix.size());
    if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) break;
    const uint64_t n = std::stoull(digits);
    if (n == 0 || n > UINT64_MAX / u.scale) break;
    return n * u.scale;
  }
  return InvalidArgument("--max-shard-size: expected a positive size such as 5GB, 500MB, 2GiB or "
                         "a number of bytes, got '" + text + "'");
}

}  // namespace tessera
