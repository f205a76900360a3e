// checkpoint/manifest.h — what a committed checkpoint holds, in global terms, and the JSON
// form of it (`step_<N>/manifest.json`).
//
// A checkpoint is a set of global tensors (model parameters as fp32 master values, AdamW
// moments) by name, global shape and dtype, stored as SEGMENTS in per-rank shard files: a
// segment is the row-major element range [begin, end) of one tensor, at a byte offset of one
// shard file, with its CRC-32C. Everything is stated in global terms, so a loader under any
// layout computes what it needs and reads only the segments that intersect it (a future
// tensor-parallel column split is a set of row ranges; nothing here depends on how the saving
// ranks were laid out). Beside the tensors: the trainer's state (a JSON object the trainer
// owns: step, data position, optimizer step, loss scale, ...), the layout it was saved under,
// the resolved config and the environment fingerprint.
//
// A manifest is UNTRUSTED input (a file on disk anyone may have edited): ParseManifest
// validates everything before anything is allocated or opened — names, dtypes, shapes (each
// dimension >= 0, product <= kMaxCheckpointElements), shard file names (plain
// "shard_<digits>.bin": no '/', no "..", so paths cannot leave the checkpoint directory),
// segment ranges inside their tensor, segment bytes inside their shard's stated size, no two
// segments of one shard overlapping in the file, no two segments covering the same elements of
// a tensor, and every tensor covered exactly once (ValidateCoverage). Errors are kDataLoss
// naming the manifest and the offending entry.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/json.h"
#include "runtime/core/status.h"

namespace tessera {

inline constexpr int kManifestVersion = 1;
// Upper bound on one tensor's elements and on a manifest's size, so hostile input cannot make
// a loader allocate without bound.
inline constexpr int64_t kMaxCheckpointElements = int64_t{1} << 40;
inline constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;

struct TensorRecord {
  std::string name;            // e.g. "param/h.0.attn.c_attn.weight", "exp_avg/wte.weight"
  std::vector<int64_t> shape;  // global shape
  DType dtype = DType::kF32;
  int64_t numel() const;
};

struct SegmentRecord {
  std::string tensor;     // a TensorRecord name
  int64_t begin = 0;      // row-major element range [begin, end) of the tensor
  int64_t end = 0;
  uint64_t offset = 0;    // byte offset in the shard file
  uint32_t crc32c = 0;    // of the (end - begin) * dtype-size bytes
};

struct ShardRecord {
  int rank = 0;            // the rank that wrote it
  std::string file;        // "shard_<rank>.bin", relative to the checkpoint directory
  uint64_t bytes = 0;      // file size
  std::vector<SegmentRecord> segments;
};

struct Manifest {
  int version = kManifestVersion;
  int64_t step = 0;                  // optimizer steps completed when the state was taken
  std::vector<TensorRecord> tensors;
  std::vector<ShardRecord> shards;
  JsonValue state = JsonValue::Object({});   // the trainer's (opaque here)
  JsonValue layout = JsonValue::Object({});  // {"dp":..,"zero":..,"precision":..,...}
  std::string config_yaml;           // the resolved config of the run that saved it
  JsonValue environment = JsonValue::Object({});  // `tessera env` fingerprint
  // Save timings and sizes (for `tessera ckpt ls`), seconds / bytes.
  double stall_seconds = 0, write_seconds = 0;
  uint64_t total_bytes = 0;

  const TensorRecord* FindTensor(const std::string& name) const;
};

std::string SerializeManifest(const Manifest& m);
// `where` names the file in errors. Validates everything listed in the file comment.
Result<Manifest> ParseManifest(std::string_view text, const std::string& where);
// Every tensor's elements [0, numel) covered by exactly one segment of one shard, and every
// segment names a listed tensor. kDataLoss naming the tensor and the gap or overlap.
Status ValidateCoverage(const Manifest& m, const std::string& where);

}  // namespace tessera
