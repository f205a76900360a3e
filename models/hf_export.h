// models/hf_export.h — a model written as a Hugging Face model directory, as save_pretrained
// lays one out: the weights in safetensors shards of at most `max_shard_bytes` each
// ("model-00001-of-00003.safetensors", tensors in model order so a shard holds whole
// consecutive layers) with model.safetensors.index.json ({"metadata": {"total_size": bytes},
// "weight_map": {tensor: shard}}), or one model.safetensors when everything fits; and
// config.json when a supported model type computes exactly this model (HfConfigJson).
//
// Atomic as a whole: everything is written (each file fsynced) into "<dir>.partial", which is
// then renamed to `dir`; a failure removes the partial directory and leaves `dir` as it was.
// `dir` must not exist or be empty (kInvalidArgument otherwise: an export never mixes with
// other files). Loading the directory (init_from) gives the f32 parameters bit for bit.
// Thread-safety: none; the caller owns `params`.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "models/hf_weights.h"
#include "runtime/core/file_util.h"

namespace tessera {

// transformers' default max_shard_size, "5GB" (decimal).
inline constexpr uint64_t kHfDefaultShardBytes = 5'000'000'000;

struct HfDirExport {
  std::vector<std::string> files;  // written, relative to the directory, in write order
  int shards = 0;
  uint64_t weight_bytes = 0;       // the index's total_size
  std::string no_config;           // why config.json was not written; empty when it was
};

Result<HfDirExport> ExportHfModelDir(const std::string& dir, const ModelConfig& config,
                                     std::span<const Parameter> params, DType dtype,
                                     const HfExtras* extras,
                                     uint64_t max_shard_bytes = kHfDefaultShardBytes,
                                     FileSystem& fs = DefaultFileSystem());

// kInvalidArgument when `out` names a model directory (ExportHf's rule) that exists and is
// not an empty directory: an export never mixes its files with others.
Status CheckExportTarget(const std::string& out);

// An export to `out`: one safetensors file when it ends in ".safetensors" (ExportHfWeights),
// otherwise a model directory (ExportHfModelDir). Returns the line a command prints.
Result<std::string> ExportHf(const std::string& out, const ModelConfig& config,
                             std::span<const Parameter> params, DType dtype,
                             const HfExtras* extras, uint64_t max_shard_bytes);

// "5GB", "500MB", "2GiB", "1000000" (bytes) as bytes; kInvalidArgument otherwise.
Result<uint64_t> ParseShardSize(const std::string& text);

}  // namespace tessera
