// tools/output_path.h — where an export may write: never over one of its own inputs, never
// inside a checkpoint root.
//
// `tessera export` and `tessera ckpt export` write one safetensors file (temp + fsync +
// rename: runtime/core/file_util.h). Atomic as that is, the rename would still replace an
// input the command is reading (the weights being exported, the config), and a file written
// into a checkpoint root or a step_<N> directory mixes user files into what the checkpoint
// protocol owns (retention and gc delete whole directories there). Both are refused before
// anything is read, as bad input (exit 4).
// Pure checks over the file system; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/status.h"

namespace tessera {

// kInvalidArgument naming both paths when `out` is the same file as one of `inputs` (after
// resolving symbolic links; hard links too), or ends in .safetensors and names a directory
// (any other `out` is a model directory, hf_export.h); kInvalidArgument naming the
// root when `out` lies inside a checkpoint root (a directory holding `catalog/` or a committed
// step_<N>) or a checkpoint directory (one holding manifest.json). Missing inputs are ignored.
Status CheckOutputPath(const std::string& out, const std::vector<std::string>& inputs);

// CheckOutputPath for an export's --out, and a model directory there (any `out` not ending in
// .safetensors) must not exist or be empty (CheckExportTarget, hf_export.h): all refused
// before anything is read, as bad input.
Status CheckExportOutput(const std::string& out, const std::vector<std::string>& inputs);

// The files a weights path stands for (init_from / --init-from): the path itself, and for a
// directory or an index, the safetensors files and index beside it.
std::vector<std::string> WeightsInputs(const std::string& path);

}  // namespace tessera
