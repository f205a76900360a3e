// models/safetensors.h — reading and writing the safetensors format, single files and sharded
// checkpoints (model.safetensors.index.json).
//
// Format: an 8-byte little-endian u64 N, N bytes of UTF-8 JSON (the header), then the data
// section. The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the data section start) and may hold "__metadata__": {str: str}.
//
// Reader contract: Open() validates the whole header against the file size before returning,
// so once a SafetensorsFile exists every tensor's byte range lies inside the file, matches its
// dtype and shape, and no two tensors overlap. Every failure is a Status naming the file
// (kNotFound: missing file, kDataLoss: malformed bytes, kIoError: the OS refused). Gaps between
// tensors and trailing bytes are allowed (they are harmless and some writers align data).
// Data is read with pread, so a file that shrinks after Open yields an error, never a SIGBUS.
// Thread-safety: a SafetensorsFile is immutable after Open; concurrent reads are safe.
//
// Writer contract: WriteSafetensors writes "<path>.tmp", fsyncs it, renames it over <path> and
// fsyncs the directory (AtomicFileWriter, runtime/core/file_util.h), so <path> is either the
// previous file or the complete new one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/file_util.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace tessera {

// Refuse headers beyond this size: real ones are a few hundred KiB; a larger length field
// means a corrupt or hostile file, and we would otherwise allocate it.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull << 20;  // 100 MiB

// The most elements a 16-bit tensor is converted through at once, reading or writing (2 MiB).
inline constexpr size_t kSafetensorsChunkElems = size_t{1} << 20;

// One tensor as described by a validated header.
struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::kF32;   // F32, F16, BF16 or I32 (others are rejected at Open)
  Shape shape;                 // rank <= Shape::kMaxDims
  uint64_t data_begin = 0;     // byte offset relative to the data section
  uint64_t data_end = 0;       // one past the last byte; end - begin == numel * DTypeSize
  int64_t numel() const { return shape.numel(); }
  uint64_t nbytes() const { return data_end - data_begin; }
};

// What a validated header says. Open fills a SafetensorsFile with it; the functions below run
// the same checks on bytes in memory (tests/fuzz feeds them arbitrary bytes).
struct SafetensorsHeader {
  std::vector<SafetensorsTensorInfo> tensors;  // in header order
  std::map<std::string, std::string> metadata;
};

// N, the header length, from the first min(8, file_bytes) bytes of a file of `file_bytes`
// bytes. kDataLoss naming `path` when the file is shorter than the prefix, N exceeds
// kSafetensorsMaxHeaderBytes or N exceeds what follows the prefix.
Result<uint64_t> ParseSafetensorsPrefix(std::span<const unsigned char> first_bytes,
                                        uint64_t file_bytes, const std::string& path);
// Validates the N header bytes `json` against a data section of `data_bytes` bytes (the file
// size - 8 - N): the Reader contract above. kDataLoss naming `path` (kInvalidArgument for a
// dtype the format defines that Tessera does not read).
Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view json, uint64_t data_bytes,
                                                 const std::string& path);

class SafetensorsFile {
 public:
  // Opens and validates `path`. kNotFound if it does not exist, kDataLoss if malformed.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In header order.
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  // nullptr if absent.
  const SafetensorsTensorInfo* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t header_bytes() const { return header_bytes_; }  // N, excluding the 8-byte prefix

  // Copies the tensor's raw little-endian bytes (info.nbytes()) into `out`.
  // `info` must come from this file.
  Status ReadRaw(const SafetensorsTensorInfo& info, void* out) const;
  // Converts F32/F16/BF16 to f32 into out[0 .. numel). kInvalidArgument for I32 tensors.
  Status ReadAsF32(const SafetensorsTensorInfo& info, float* out) const;
  // Elements [begin, begin + n) of the tensor (row-major) as f32 into out[0 .. n): only those
  // bytes are read; F16/BF16 go through a buffer of at most kSafetensorsChunkElems
  // elements. The range must lie inside the tensor.
  Status ReadRangeAsF32(const SafetensorsTensorInfo& info, int64_t begin, int64_t n,
                        float* out) const;

 private:
  SafetensorsFile() = default;
  Status ReadBytes(uint64_t file_offset, size_t n, void* out) const;

  std::string path_;
  int fd_ = -1;
  uint64_t file_bytes_ = 0;
  uint64_t header_bytes_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// One tensor to write. The source is `data` (numel elements of `source_dtype`, row-major);
// it is stored as `dtype`. Allowed: source == stored (bytes copied as they are), or an f32
// source stored as F16/BF16 (rounded to nearest even).
struct SafetensorsTensorOut {
  std::string name;
  Shape shape;
  const void* data = nullptr;
  DType source_dtype = DType::kF32;
  DType dtype = DType::kF32;
};

// Writes the tensors sorted by name (as Hugging Face's writer does, so equal inputs give equal
// bytes), the header padded with spaces to a multiple of 8 bytes so the data section is
// aligned. kInvalidArgument for duplicate/empty names, "__metadata__" as a name, null data or
// an unsupported conversion; kIoError if the OS refuses. Never leaves a partial file at `path`
// (nor a .tmp). `fs` is the seam tests use to fail a write or fsync.
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensorOut>& tensors,
                        const std::map<std::string, std::string>& metadata,
                        FileSystem& fs = DefaultFileSystem());

// The weight_map of a model.safetensors.index.json (OpenIndex below): tensor -> shard file name,
// each name relative and without "..". kDataLoss naming `index_path` for malformed JSON, a
// non-object "metadata", a missing or non-object "weight_map", or a bad shard name.
Result<std::map<std::string, std::string, std::less<>>> ParseSafetensorsIndex(
    std::string_view text, const std::string& index_path);

// A set of tensors spread over one or more safetensors files, with one name lookup.
class SafetensorsCheckpoint {
 public:
  struct Entry {
    const SafetensorsFile* file;
    const SafetensorsTensorInfo* info;
  };

  // One plain .safetensors file.
  static Result<std::unique_ptr<SafetensorsCheckpoint>> OpenFile(const std::string& path);
  // A model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor: shard file}}.
  // Shard files are relative to the index's directory. Validates that every shard opens
  // (missing shard: kNotFound naming it), every weight_map entry exists in its shard, no
  // tensor appears in two shards, and every tensor of a shard is listed in the weight_map.
  static Result<std::unique_ptr<SafetensorsCheckpoint>> OpenIndex(const std::string& index_path);

  // nullptr if absent.
  const Entry* Find(std::string_view name) const;
  // Sorted by name.
  const std::map<std::string, Entry, std::less<>>& entries() const { return entries_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // The index file, or the single file for OpenFile.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace tessera
