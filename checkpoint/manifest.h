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
// Integrity (version 2): the manifest's last member is "checksum": "crc32c:<8 hex digits>", the
// CRC-32C of every byte before it, so no field that a resume uses — a segment's tensor name,
// range, offset or CRC, the step, the trainer's state, the layout, the config — can be
// changed by damage or by hand without the parse failing. Each segment's CRC is seeded with
// its tensor name and element range (SegmentCrcSeed), which binds the bytes to the place
// they belong: two segments of equal size swapped between tensors (or within one) fail
// verification even though each holds bytes that were once checksummed.
//
// A manifest is UNTRUSTED input (a file on disk anyone may have edited): ParseManifest
// checks the checksum, then validates everything before anything is allocated or opened —
// names, dtypes, shapes (each
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
#include <string_view>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/json.h"
#include "runtime/core/status.h"

namespace tessera {

inline constexpr int kManifestVersion = 2;  // 1: before metadata checksums (refused)
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
  uint32_t crc32c = 0;    // of the (end - begin) * dtype-size bytes, seeded with
                          //   SegmentCrcSeed(tensor, begin, end)
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

// The value a segment's CRC-32C starts from: the CRC of its tensor name and element range.
// A segment's crc32c is Crc32c(bytes, n, SegmentCrcSeed(tensor, begin, end)).
uint32_t SegmentCrcSeed(std::string_view tensor, int64_t begin, int64_t end);

// The JSON text with its checksum member (the file comment). SerializeManifest writes it.
std::string SerializeManifest(const Manifest& m);
// The checksum envelope on its own, for tools and tests that edit a manifest on purpose:
// SealManifestJson appends the "checksum" member to a JSON object's text (which must end in
// '}' and hold at least one member); UnsealManifestJson verifies and removes it (kDataLoss
// "<where>: ..." when it is missing or does not match).
std::string SealManifestJson(std::string_view json);
Result<std::string> UnsealManifestJson(std::string_view text, const std::string& where);
// `where` names the file in errors. Validates everything listed in the file comment.
Result<Manifest> ParseManifest(std::string_view text, const std::string& where);
// Every tensor's elements [0, numel) covered by exactly one segment of one shard, and every
// segment names a listed tensor. kDataLoss naming the tensor and the gap or overlap.
Status ValidateCoverage(const Manifest& m, const std::string& where);

}  // namespace tessera
