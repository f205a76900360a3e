// checkpoint/shard_file.h — one rank's shard file of a checkpoint: writing segments while
// checksumming them, and reading segments back verified.
//
// Owns the byte layout of `shard_<rank>.bin`: segments back to back, each 64-byte aligned
// (padding zero), no header (the manifest describes everything). A range longer than
// kMaxSegmentBytes is cut into several segments, so a loader that needs part of a tensor
// reads (and verifies) at most one segment's worth beyond what it needs at each end.
// Writes go through the FileSystem seam (fault injection: ENOSPC/EIO at any write or fsync).
// Thread-safety: a ShardWriter belongs to one thread (the background writer); CheckpointReader's
// Read is const and safe from several threads (pread on one descriptor).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "checkpoint/file_names.h"
#include "checkpoint/manifest.h"
#include "runtime/core/file_util.h"
#include "runtime/core/status.h"

namespace tessera {

inline constexpr uint64_t kMaxSegmentBytes = uint64_t{4} << 20;  // 4 MiB
inline constexpr uint64_t kSegmentAlign = 64;

class ShardWriter {
 public:
  // Creates (truncates) `dir`/ShardFileName(rank).
  static Result<std::unique_ptr<ShardWriter>> Create(const std::string& dir, int rank,
                                                     FileSystem& fs = DefaultFileSystem());
  ~ShardWriter();  // closes (without fsync) if Finish was not reached

  // Appends elements [begin, end) of `tensor` (of `dtype`), whose bytes are `data`
  // ((end - begin) * DTypeSize(dtype)), as one or more segments. Floating-point elements are
  // checked on the way (the same pass that checksums them): a NaN or Inf is kNonFinite naming
  // the tensor and element, and the writer fails — a checkpoint never holds non-finite state,
  // so retention can never delete the last healthy one in favour of a poisoned one.
  Status Append(const std::string& tensor, int64_t begin, int64_t end, DType dtype,
                const void* data);
  // fsyncs and closes the file; returns its record (rank, file, bytes, segments).
  Result<ShardRecord> Finish();

 private:
  ShardWriter(FileSystem& fs, std::string path, int fd, int rank);
  Status Fail(Status st);  // closes the file, refuses further work, returns st

  FileSystem& fs_;
  std::string path_;
  int fd_ = -1;        // -1 once finished or failed
  bool failed_ = false;
  ShardRecord record_;
  uint64_t offset_ = 0;
};

// Read access to one committed checkpoint directory: the validated manifest and verified reads.
class CheckpointReader {
 public:
  // Reads and validates `dir`/manifest.json (ParseManifest + ValidateCoverage), opens every
  // shard file and checks its size against the manifest. kNotFound if there is no manifest;
  // kDataLoss for anything malformed, missing or truncated, naming the file.
  // lazy_shards: each shard file is opened (and its size checked) at the first read that needs
  // it, so a reader that loads part of the state touches only the shards holding that part (the
  // memory tier fetches a file from a peer when it is first opened: host_tier.h).
  static Result<std::unique_ptr<CheckpointReader>> Open(const std::string& dir,
                                                         FileSystem& fs = DefaultFileSystem(),
                                                         bool lazy_shards = false);
  ~CheckpointReader();

  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }

  // Elements [begin, end) of `tensor` into out ((end - begin) * dtype size bytes), in the
  // tensor's dtype. Reads every segment that intersects the range WHOLE and verifies its
  // CRC before copying the intersection. kDataLoss naming shard file, tensor and segment on a
  // mismatch; kInvalidArgument for an unknown tensor or a range outside it.
  Status Read(const std::string& tensor, int64_t begin, int64_t end, void* out) const;

  // Reads every segment of every shard and verifies it (`tessera ckpt verify`). Returns the
  // bytes verified.
  Result<uint64_t> VerifyAll() const;

 private:
  CheckpointReader() = default;
  // One segment of a tensor: elements [begin, end) are manifest_.shards[shard].segments[segment].
  struct SegmentRef {
    int64_t begin, end;
    size_t shard, segment;
  };

  FileSystem* fs_ = nullptr;
  std::string dir_;
  Manifest manifest_;
  // Per shard; -1: not opened yet (lazy_shards). Guarded by mu_ once Open has returned.
  mutable std::vector<int> fds_;
  mutable std::mutex mu_;
  // The open descriptor of shard s, opening it first if needed.
  Result<int> ShardFd(size_t s) const;
  // Per tensor name: its dtype size and segments sorted by begin (contiguous: coverage holds).
  struct TensorSegments {
    size_t elem_bytes = 0;
    int64_t numel = 0;
    std::vector<SegmentRef> segments;
  };
  std::unordered_map<std::string, TensorSegments> index_;
};

}  // namespace tessera
