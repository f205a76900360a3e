// checkpoint/shard_file.cc — ShardWriter and CheckpointReader. Contracts in shard_file.h.
//
// Reads are verified per segment: the whole segment is read (the part the caller wants goes
// straight into the caller's buffer, the rest through a bounded scratch buffer) and its
// CRC-32C, seeded with the segment's tensor and range (manifest.h), is computed on the way; a mismatch fails the Read with kDataLoss, and the caller's
// buffer then holds unverified bytes it must not use.
#include "checkpoint/shard_file.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "runtime/core/crc32c.h"

namespace tessera {
namespace {

// Bytes of a segment outside the caller's range are read through a scratch buffer this big.
constexpr uint64_t kScratchBytes = uint64_t{1} << 20;

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// Reads the segment [seg.offset, +seg_bytes) of `fd`, copying its bytes [want_lo, want_hi)
// (relative to the segment) into `dst` and the rest into scratch, and checks its CRC.
Status ReadVerified(FileSystem& fs, int fd, const std::string& path, const SegmentRecord& seg,
                    size_t segment_index, uint64_t seg_bytes, uint64_t want_lo, uint64_t want_hi,
                    char* dst, std::vector<char>& scratch) {
  // Seeded with the segment's tensor and range: bytes that belong elsewhere do not match.
  uint32_t crc = SegmentCrcSeed(seg.tensor, seg.begin, seg.end);
  auto read_through_scratch = [&](uint64_t lo, uint64_t hi) -> Status {
    while (lo < hi) {
      const uint64_t n = std::min(hi - lo, kScratchBytes);
      if (scratch.size() < n) scratch.resize(n);
      RETURN_IF_ERROR(fs.ReadAt(fd, scratch.data(), n, seg.offset + lo, path));
      crc = Crc32c(scratch.data(), n, crc);
      lo += n;
    }
    return Status::Ok();
  };
  RETURN_IF_ERROR(read_through_scratch(0, want_lo));
  if (want_hi > want_lo) {
    RETURN_IF_ERROR(fs.ReadAt(fd, dst, want_hi - want_lo, seg.offset + want_lo, path));
    crc = Crc32c(dst, want_hi - want_lo, crc);
  }
  RETURN_IF_ERROR(read_through_scratch(want_hi, seg_bytes));
  if (crc != seg.crc32c) {
    return DataLoss(path + ": segment " + std::to_string(segment_index) + " of tensor \"" +
                    seg.tensor + "\" (elements [" + std::to_string(seg.begin) + ", " +
                    std::to_string(seg.end) + "), bytes at offset " + std::to_string(seg.offset) +
                    "): CRC-32C mismatch (manifest " + Hex32(seg.crc32c) + ", data " +
                    Hex32(crc) + ")");
  }
  return Status::Ok();
}

// kNotFound if `path` is missing, kDataLoss unless it is a regular file (not following links).
Status CheckRegular(FileSystem& fs, const std::string& path) {
  ASSIGN_OR_RETURN(const FileKind kind, fs.Kind(path));
  if (kind == FileKind::kRegular) return Status::Ok();
  if (kind == FileKind::kMissing) return NotFound(path + ": file not found");
  return DataLoss(path + ": is " + FileKindName(kind) + ", not a regular file");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ShardWriter

ShardWriter::ShardWriter(FileSystem& fs, std::string path, int fd, int rank)
    : fs_(fs), path_(std::move(path)), fd_(fd) {
  record_.rank = rank;
  record_.file = ShardFileName(rank);
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) (void)fs_.Close(fd_, path_);
}

Result<std::unique_ptr<ShardWriter>> ShardWriter::Create(const std::string& dir, int rank,
                                                         FileSystem& fs) {
  if (rank < 0) return InvalidArgument("shard writer: rank " + std::to_string(rank) + " < 0");
  const std::string path = JoinPath(dir, ShardFileName(rank));
  ASSIGN_OR_RETURN(const int fd, fs.OpenForWrite(path));
  return std::unique_ptr<ShardWriter>(new ShardWriter(fs, path, fd, rank));
}

Status ShardWriter::Fail(Status st) {
  failed_ = true;
  if (fd_ >= 0) (void)fs_.Close(fd_, path_);  // the first error is the one to report
  fd_ = -1;
  return st;
}

Status ShardWriter::Append(const std::string& tensor, int64_t begin, int64_t end, DType dtype,
                           const void* data) {
  const size_t elem_bytes = DTypeSize(dtype);
  if (fd_ < 0) {
    return FailedPrecondition(path_ + (failed_ ? ": an earlier write failed" : ": already finished"));
  }
  if (begin < 0 || begin > end || end - begin > kMaxCheckpointElements ||
      (data == nullptr && begin != end)) {
    return InvalidArgument(path_ + ": bad Append of \"" + tensor + "\" elements [" +
                           std::to_string(begin) + ", " + std::to_string(end) + ") of " +
                           std::to_string(elem_bytes) + " bytes");
  }
  static const char kZeros[kSegmentAlign] = {};
  const int64_t max_elems = static_cast<int64_t>(kMaxSegmentBytes / elem_bytes);
  const char* p = static_cast<const char*>(data);
  while (begin < end) {
    const int64_t n = std::min(end - begin, max_elems);
    const uint64_t bytes = static_cast<uint64_t>(n) * elem_bytes;
    if (const int64_t bad = FirstNonFinite(p, n, dtype); bad >= 0) {
      return Fail(NonFinite(path_ + ": element " + std::to_string(begin + bad) + " of \"" +
                            tensor + "\" is NaN or Inf: refusing to checkpoint non-finite state"));
    }
    const uint64_t pad = (kSegmentAlign - offset_ % kSegmentAlign) % kSegmentAlign;
    if (pad != 0) {
      Status st = fs_.Write(fd_, kZeros, pad, path_);
      if (!st.ok()) return Fail(std::move(st));
      offset_ += pad;
    }
    Status st = fs_.Write(fd_, p, bytes, path_);
    if (!st.ok()) return Fail(std::move(st));
    record_.segments.push_back(
        {tensor, begin, begin + n, offset_, Crc32c(p, bytes, SegmentCrcSeed(tensor, begin, begin + n))});
    offset_ += bytes;
    begin += n;
    p += bytes;
  }
  return Status::Ok();
}

Result<ShardRecord> ShardWriter::Finish() {
  if (fd_ < 0) {
    return FailedPrecondition(path_ + (failed_ ? ": an earlier write failed" : ": already finished"));
  }
  Status st = fs_.Sync(fd_, path_);
  if (!st.ok()) return Fail(std::move(st));
  const int fd = fd_;
  fd_ = -1;
  st = fs_.Close(fd, path_);
  if (!st.ok()) return Fail(std::move(st));
  record_.bytes = offset_;
  return record_;
}

// ---------------------------------------------------------------------------------------------
// CheckpointReader

CheckpointReader::~CheckpointReader() {
  for (size_t i = 0; i < fds_.size(); ++i) {
    if (fds_[i] >= 0) (void)fs_->Close(fds_[i], JoinPath(dir_, manifest_.shards[i].file));
  }
}

Result<int> CheckpointReader::ShardFd(size_t k) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (fds_[k] >= 0) return fds_[k];
  const ShardRecord& sh = manifest_.shards[k];
  const std::string path = JoinPath(dir_, sh.file);
  if (Status st = CheckRegular(*fs_, path); !st.ok() && st.code() != StatusCode::kNotFound) {
    return st;
  }
  Result<int> fd = fs_->OpenForRead(path);
  if (!fd.ok()) {
    if (fd.status().code() == StatusCode::kNotFound) {
      return DataLoss(path + ": shard file listed in " + ManifestPath(dir_) + " is missing");
    }
    return fd.status();
  }
  Result<uint64_t> size = fs_->FileSize(*fd, path);
  if (!size.ok() || *size != sh.bytes) {
    (void)fs_->Close(*fd, path);  // refused every time it is asked for, never half-trusted
    if (!size.ok()) return size.status();
    return DataLoss(path + ": " + std::to_string(*size) + " bytes, but the manifest says " +
                    std::to_string(sh.bytes) + (*size < sh.bytes ? " (truncated)" : ""));
  }
  fds_[k] = *fd;  // owned from here: the destructor closes it
  return *fd;
}

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& dir,
                                                                 FileSystem& fs, bool lazy_shards) {
  std::unique_ptr<CheckpointReader> r(new CheckpointReader());
  r->fs_ = &fs;
  r->dir_ = dir;
  const std::string manifest_path = ManifestPath(dir);
  // The manifest and the shards must be the directory's own regular files: a symbolic link
  // (which could point at another checkpoint's manifest) or a FIFO is damage, refused here.
  RETURN_IF_ERROR(CheckRegular(fs, manifest_path));
  ASSIGN_OR_RETURN(const std::string text, fs.ReadFile(manifest_path, kMaxManifestBytes));
  ASSIGN_OR_RETURN(r->manifest_, ParseManifest(text, manifest_path));
  const Manifest& m = r->manifest_;

  r->fds_.assign(m.shards.size(), -1);
  if (!lazy_shards) {
    for (size_t k = 0; k < m.shards.size(); ++k) RETURN_IF_ERROR(r->ShardFd(k).status());
  }

  for (const TensorRecord& t : m.tensors) {
    TensorSegments& ts = r->index_[t.name];
    ts.elem_bytes = DTypeSize(t.dtype);
    ts.numel = t.numel();
  }
  for (size_t s = 0; s < m.shards.size(); ++s) {
    for (size_t k = 0; k < m.shards[s].segments.size(); ++k) {
      const SegmentRecord& seg = m.shards[s].segments[k];
      r->index_.at(seg.tensor).segments.push_back({seg.begin, seg.end, s, k});
    }
  }
  for (auto& [name, ts] : r->index_) {
    std::sort(ts.segments.begin(), ts.segments.end(),
              [](const SegmentRef& a, const SegmentRef& b) { return a.begin < b.begin; });
  }
  return r;
}

Status CheckpointReader::Read(const std::string& tensor, int64_t begin, int64_t end,
                              void* out) const {
  const auto it = index_.find(tensor);
  if (it == index_.end()) {
    return InvalidArgument(dir_ + ": no tensor \"" + tensor + "\" in the checkpoint");
  }
  const TensorSegments& ts = it->second;
  if (begin < 0 || begin > end || end > ts.numel) {
    return InvalidArgument(dir_ + ": elements [" + std::to_string(begin) + ", " +
                           std::to_string(end) + ") are outside tensor \"" + tensor + "\" (" +
                           std::to_string(ts.numel) + " elements)");
  }
  if (begin == end) return Status::Ok();
  char* const dst = static_cast<char*>(out);
  std::vector<char> scratch;
  // Coverage holds (validated at Open): segments are contiguous, so the first that ends after
  // `begin` starts the run.
  auto seg_it = std::partition_point(ts.segments.begin(), ts.segments.end(),
                                     [&](const SegmentRef& s) { return s.end <= begin; });
  for (; seg_it != ts.segments.end() && seg_it->begin < end; ++seg_it) {
    const SegmentRecord& seg = manifest_.shards[seg_it->shard].segments[seg_it->segment];
    const int64_t lo = std::max(begin, seg.begin);
    const int64_t hi = std::min(end, seg.end);
    const uint64_t seg_bytes = static_cast<uint64_t>(seg.end - seg.begin) * ts.elem_bytes;
    ASSIGN_OR_RETURN(const int fd, ShardFd(seg_it->shard));
    RETURN_IF_ERROR(ReadVerified(*fs_, fd,
                                 JoinPath(dir_, manifest_.shards[seg_it->shard].file), seg,
                                 seg_it->segment, seg_bytes,
                                 static_cast<uint64_t>(lo - seg.begin) * ts.elem_bytes,
                                 static_cast<uint64_t>(hi - seg.begin) * ts.elem_bytes,
                                 dst + static_cast<uint64_t>(lo - begin) * ts.elem_bytes,
                                 scratch));
  }
  return Status::Ok();
}

Result<uint64_t> CheckpointReader::VerifyAll() const {
  uint64_t verified = 0;
  std::vector<char> scratch;
  for (size_t s = 0; s < manifest_.shards.size(); ++s) {
    const ShardRecord& sh = manifest_.shards[s];
    const std::string path = JoinPath(dir_, sh.file);
    ASSIGN_OR_RETURN(const int fd, ShardFd(s));
    for (size_t k = 0; k < sh.segments.size(); ++k) {
      const SegmentRecord& seg = sh.segments[k];
      const uint64_t seg_bytes =
          static_cast<uint64_t>(seg.end - seg.begin) * index_.at(seg.tensor).elem_bytes;
      RETURN_IF_ERROR(
          ReadVerified(*fs_, fd, path, seg, k, seg_bytes, 0, 0, nullptr, scratch));
      verified += seg_bytes;
    }
  }
  return verified;
}

}  // namespace tessera
