// runtime/train/data/token_shard.cc — token shard writing (through AtomicFileWriter: temp file,
// fsync, rename) and reading (pread of exactly the tokens asked for, verified at open against
// the directory's index.json and checked again on every read). Contracts in token_shard.h.
#include "runtime/train/data/token_shard.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "runtime/core/crc32c.h"
#include "runtime/core/check.h"
#include "runtime/train/data/token_shard_index.h"

namespace tessera {

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian and read without byte swapping");

namespace {

namespace fs = std::filesystem;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;
  uint64_t num_tokens;
  uint32_t vocab_size;
  uint32_t reserved;
};
static_assert(sizeof(Header) == kTokenShardHeaderBytes);

// '*' matches any run of characters; everything else matches itself.
bool MatchPattern(const char* pattern, const char* name) {
  if (*pattern == '\0') return *name == '\0';
  if (*pattern == '*') {
    for (const char* s = name;; ++s) {
      if (MatchPattern(pattern + 1, s)) return true;
      if (*s == '\0') return false;
    }
  }
  return *pattern == *name && MatchPattern(pattern + 1, name + 1);
}

// The files a shard path selects, and the rule that selected them: the index check needs both
// (a file the index lists that matches the rule but is gone shrinks the set silently).
struct ShardSelection {
  std::string dir;                 // where the files and index.json live
  std::string pattern;             // "*.bin" for a directory, the pattern, or the file's name
  std::vector<std::string> files;  // full paths, sorted by name
};

// Lists the files `path` names: itself, the *.bin files of a directory, or a pattern's matches.
Result<ShardSelection> ResolveShardSelection(const std::string& path) {
  std::error_code ec;
  ShardSelection sel;
  const std::string name = fs::path(path).filename().string();
  if (name.find('*') != std::string::npos) {
    sel.dir = ParentDir(path);
    sel.pattern = name;
    if (!fs::is_directory(sel.dir, ec)) {
      return NotFound(sel.dir + ": no such directory (from " + path + ")");
    }
  } else {
    fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) return NotFound(path + ": no such file or directory");
    if (!fs::is_directory(st)) {
      sel.dir = ParentDir(path);
      sel.pattern = name;
      sel.files.push_back(path);
      return sel;
    }
    sel.dir = path;
    sel.pattern = "*.bin";
  }
  fs::directory_iterator it(sel.dir, ec), end;
  if (ec) return IoError(sel.dir + ": cannot list directory: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return IoError(sel.dir + ": cannot list directory: " + ec.message());
    const std::string file_name = it->path().filename().string();
    if (MatchPattern(sel.pattern.c_str(), file_name.c_str()) && it->is_regular_file(ec)) {
      sel.files.push_back(it->path().string());
    }
  }
  if (sel.files.empty()) {
    return NotFound(path + ": no token shards (" + sel.pattern + ") in " + sel.dir);
  }
  std::sort(sel.files.begin(), sel.files.end());
  return sel;
}

std::string FileName(const std::string& path) { return fs::path(path).filename().string(); }
std::string IndexPath(const std::string& dir) { return (fs::path(dir) / kTokenShardIndexName).string(); }

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

// Ids a token of this width can carry into an int32 batch.
int64_t TypeLimit(int token_bytes) { return token_bytes == 2 ? 65536 : int64_t{1} << 31; }

// A descriptor closed on scope exit unless it is one the set holds.
class ScopedFd {
 public:
  ScopedFd(FileSystem& fs, int fd, bool owned, std::string path)
      : fs_(fs), fd_(fd), owned_(owned), path_(std::move(path)) {}
  ~ScopedFd() {
    if (owned_ && fd_ >= 0) (void)fs_.Close(fd_, path_);  // read-only: nothing to lose
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  FileSystem& fs_;
  int fd_;
  bool owned_;
  std::string path_;
};

// The first of n little-endian tokens of type T at `raw` whose id is >= id_limit, or -1 (its id
// in *id). A branch-free max first (vectorisable); only a failing range is rescanned.
template <typename T>
int64_t FirstIdAtOrAbove(const unsigned char* raw, int64_t n, int64_t id_limit, uint32_t* id) {
  T max_id = 0;
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, raw + i * sizeof(T), sizeof(T));
    max_id = std::max(max_id, v);
  }
  if (static_cast<int64_t>(max_id) < id_limit) return -1;
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, raw + i * sizeof(T), sizeof(T));
    if (static_cast<int64_t>(v) >= id_limit) {
      *id = v;
      return i;
    }
  }
  return -1;
}

int64_t FirstIdAtOrAbove(const unsigned char* raw, int token_bytes, int64_t n, int64_t id_limit,
                         uint32_t* id) {
  return token_bytes == 2 ? FirstIdAtOrAbove<uint16_t>(raw, n, id_limit, id)
                          : FirstIdAtOrAbove<uint32_t>(raw, n, id_limit, id);
}

// Little-endian tokens of `token_bytes` at `raw` -> n uint32 ids. Reads through memcpy (no
// alignment assumed); out may overlap raw when it starts at or before it (each out[i] is written
// after raw[i] is read, and out[i] ends before raw[i + 1] starts when raw >= out + 2i).
void WidenTokens(const unsigned char* raw, int token_bytes, int64_t n, uint32_t* out) {
  if (token_bytes == 2) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, raw + 2 * i, 2);
      out[i] = v;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, raw + 4 * i, 4);
      out[i] = v;
    }
  }
}

// What one pass over a whole shard found.
struct FileScan {
  uint32_t crc32c = 0;
  int64_t bad_position = -1;  // first token id >= id_limit, or -1
  uint32_t bad_id = 0;
};

// Reads the open shard `info` (file_bytes long) in 4 MiB chunks: CRC-32C of every byte and the
// first token id >= id_limit. Memory: the chunk buffer, whatever the file size.
Result<FileScan> ScanFile(FileSystem& fs, int fd, const TokenShardInfo& info, int64_t file_bytes,
                          int64_t id_limit) {
  constexpr int64_t kChunkBytes = int64_t{4} << 20;  // a multiple of 4: tokens never straddle
  std::vector<unsigned char> chunk(static_cast<size_t>(std::min(kChunkBytes, file_bytes)));
  FileScan scan;
  for (int64_t offset = 0; offset < file_bytes; offset += kChunkBytes) {
    const int64_t n = std::min(kChunkBytes, file_bytes - offset);
    RETURN_IF_ERROR(fs.ReadAt(fd, chunk.data(), static_cast<size_t>(n),
                              static_cast<uint64_t>(offset), info.path));
    scan.crc32c = Crc32c(chunk.data(), static_cast<size_t>(n), scan.crc32c);
    if (scan.bad_position >= 0) continue;
    const int64_t skip = offset == 0 ? kTokenShardHeaderBytes : 0;
    const int64_t count = (n - skip) / info.token_bytes;
    const int64_t bad =
        FirstIdAtOrAbove(chunk.data() + skip, info.token_bytes, count, id_limit, &scan.bad_id);
    if (bad >= 0) scan.bad_position = (offset + skip - kTokenShardHeaderBytes) / info.token_bytes + bad;
  }
  return scan;
}

// Identity of an open file as Read compares it with what Open saw.
struct FileStat {
  int64_t bytes = 0, mtime_ns = 0;
  uint64_t device = 0, inode = 0;
};

Result<FileStat> StatFd(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return IoError(path + ": cannot stat: " + std::strerror(errno));
  FileStat s;
  s.bytes = static_cast<int64_t>(st.st_size);
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  s.device = static_cast<uint64_t>(st.st_dev);
  s.inode = static_cast<uint64_t>(st.st_ino);
  return s;
}

}  // namespace

Result<TokenShardInfo> ParseTokenShardHeader(std::span<const unsigned char> head,
                                             int64_t file_bytes, const std::string& file) {
  // The checks below read byte i only when file_bytes > i.
  TESSERA_CHECK(static_cast<int64_t>(head.size()) >= std::min(file_bytes, kTokenShardHeaderBytes));
  const unsigned char* bytes = head.data();
  if (file_bytes < 8 || std::memcmp(bytes, kTokenShardMagic, 8) != 0) {
    return DataLoss(file + ": not a Tessera token shard (bad magic)");
  }
  if (file_bytes < kTokenShardHeaderBytes) {
    return DataLoss(file + ": truncated: " + std::to_string(file_bytes) +
                    " bytes is shorter than the 32-byte header");
  }
  Header h;
  std::memcpy(&h, bytes, sizeof(h));
  if (h.version != kTokenShardVersion) {
    return DataLoss(file + ": unsupported token shard version " + std::to_string(h.version) +
                    " (this build reads version " + std::to_string(kTokenShardVersion) + ")");
  }
  if (h.token_bytes != 2 && h.token_bytes != 4) {
    return DataLoss(file + ": bad header: token_bytes=" + std::to_string(h.token_bytes) +
                    " (must be 2 or 4)");
  }
  if (h.reserved != 0) {
    return DataLoss(file + ": bad header: reserved field is " + std::to_string(h.reserved) +
                    " (must be 0)");
  }
  const uint64_t max_tokens =
      (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - 32) / h.token_bytes;
  if (h.num_tokens > max_tokens) {
    return DataLoss(file + ": bad header: num_tokens=" + std::to_string(h.num_tokens));
  }
  const int64_t expected = kTokenShardHeaderBytes + static_cast<int64_t>(h.num_tokens) *
                                                        static_cast<int64_t>(h.token_bytes);
  if (file_bytes != expected) {
    return DataLoss(file + ": " + (file_bytes < expected ? "truncated" : "size mismatch") +
                    ": header says " + std::to_string(h.num_tokens) + " tokens (" +
                    std::to_string(expected) + " bytes) but file has " +
                    std::to_string(file_bytes) + " bytes");
  }
  TokenShardInfo info;
  info.path = file;
  info.token_bytes = static_cast<int>(h.token_bytes);
  info.num_tokens = static_cast<int64_t>(h.num_tokens);
  info.vocab_size = h.vocab_size;
  return info;
}

// ---------------------------------------------------------------------------------------------
// Writing

Result<std::unique_ptr<TokenShardWriter>> TokenShardWriter::Create(const std::string& path,
                                                                   int token_bytes,
                                                                   uint32_t vocab_size) {
  if (token_bytes != 2 && token_bytes != 4) {
    return InvalidArgument(path + ": token_bytes must be 2 or 4, got " +
                           std::to_string(token_bytes));
  }
  if (token_bytes == 2 && vocab_size > 65536) {
    return InvalidArgument(path + ": vocab_size " + std::to_string(vocab_size) +
                           " does not fit 2-byte tokens");
  }
  std::unique_ptr<TokenShardWriter> w(new TokenShardWriter());
  w->path_ = path;
  w->token_bytes_ = token_bytes;
  w->vocab_size_ = vocab_size;
  ASSIGN_OR_RETURN(w->file_, AtomicFileWriter::Create(path));
  Header h{};  // the count is written by Finish
  RETURN_IF_ERROR(w->file_->Append(&h, sizeof(h)));
  return w;
}

// An unfinished writer's AtomicFileWriter removes path.tmp when it is destroyed.
TokenShardWriter::~TokenShardWriter() = default;

Status TokenShardWriter::Append(std::span<const int32_t> tokens) {
  TESSERA_CHECK(file_ != nullptr);
  const int64_t type_limit = token_bytes_ == 2 ? 65536 : int64_t{1} << 31;
  const int64_t limit = vocab_size_ != 0 ? std::min<int64_t>(vocab_size_, type_limit) : type_limit;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= limit) {
      return InvalidArgument(path_ + ": token id " + std::to_string(tokens[i]) + " at position " +
                             std::to_string(num_tokens_ + static_cast<int64_t>(i)) +
                             " is out of range [0, " + std::to_string(limit) + ")");
    }
  }
  constexpr size_t kFlushBytes = size_t{1} << 20;
  for (int32_t t : tokens) {
    const uint32_t v = static_cast<uint32_t>(t);
    const unsigned char bytes[4] = {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
                                    static_cast<unsigned char>(v >> 16),
                                    static_cast<unsigned char>(v >> 24)};
    buffer_.insert(buffer_.end(), bytes, bytes + token_bytes_);
    if (buffer_.size() >= kFlushBytes) {
      RETURN_IF_ERROR(file_->Append(buffer_.data(), buffer_.size()));
      buffer_.clear();
    }
  }
  num_tokens_ += static_cast<int64_t>(tokens.size());
  return Status::Ok();
}

Status TokenShardWriter::Finish() {
  TESSERA_CHECK(file_ != nullptr);
  // Whatever happens, this writer is done: the AtomicFileWriter removes the .tmp on failure.
  std::unique_ptr<AtomicFileWriter> file = std::move(file_);
  RETURN_IF_ERROR(file->Append(buffer_.data(), buffer_.size()));
  buffer_.clear();
  Header h{};
  std::memcpy(h.magic, kTokenShardMagic, sizeof(h.magic));
  h.version = kTokenShardVersion;
  h.token_bytes = static_cast<uint32_t>(token_bytes_);
  h.num_tokens = static_cast<uint64_t>(num_tokens_);
  h.vocab_size = vocab_size_;
  h.reserved = 0;
  RETURN_IF_ERROR(file->WriteAt(0, &h, sizeof(h)));
  return file->Commit();
}

Status WriteTokenShard(const std::string& path, std::span<const int32_t> tokens,
                       int token_bytes, uint32_t vocab_size) {
  ASSIGN_OR_RETURN(std::unique_ptr<TokenShardWriter> writer,
                   TokenShardWriter::Create(path, token_bytes, vocab_size));
  RETURN_IF_ERROR(writer->Append(tokens));
  return writer->Finish();
}

// ---------------------------------------------------------------------------------------------
// Reading

Result<TokenShardScan> ScanTokenShard(const std::string& path, FileSystem& fs) {
  ASSIGN_OR_RETURN(const int raw_fd, fs.OpenForRead(path));
  ScopedFd fd(fs, raw_fd, /*owned=*/true, path);
  ASSIGN_OR_RETURN(const uint64_t size, fs.FileSize(fd.get(), path));
  unsigned char header[kTokenShardHeaderBytes] = {};
  const int64_t file_bytes = static_cast<int64_t>(size);
  const size_t header_bytes = static_cast<size_t>(std::min<int64_t>(file_bytes, sizeof(header)));
  RETURN_IF_ERROR(fs.ReadAt(fd.get(), header, header_bytes, 0, path));
  TokenShardScan out;
  ASSIGN_OR_RETURN(out.info, ParseTokenShardHeader({header, header_bytes}, file_bytes, path));
  out.file_bytes = file_bytes;
  const TokenShardInfo& info = out.info;
  const int64_t limit = info.vocab_size != 0 ? info.vocab_size : TypeLimit(info.token_bytes);
  ASSIGN_OR_RETURN(FileScan scan, ScanFile(fs, fd.get(), info, file_bytes, limit));
  if (scan.bad_position >= 0) {
    return DataLoss(path + ": token id " + std::to_string(scan.bad_id) + " at position " +
                    std::to_string(scan.bad_position) + " is >= the vocab_size " +
                    std::to_string(limit) + " of its own header");
  }
  out.crc32c = scan.crc32c;
  return out;
}

TokenShardSet::~TokenShardSet() {
  for (size_t f = 0; f < open_.size(); ++f) {
    if (open_[f].fd >= 0) (void)fs_->Close(open_[f].fd, infos_[f].path);
  }
}

Result<std::unique_ptr<TokenShardSet>> TokenShardSet::Open(const std::string& path,
                                                           int64_t vocab_size, FileSystem& fs) {
  if (vocab_size < 0) {
    return InvalidArgument("vocab_size must be >= 0, got " + std::to_string(vocab_size));
  }
  ASSIGN_OR_RETURN(ShardSelection sel, ResolveShardSelection(path));
  std::unique_ptr<TokenShardSet> set(new TokenShardSet());
  set->fs_ = &fs;
  set->path_ = path;
  set->starts_.push_back(0);
  // The files themselves first: a damaged shard is named as such even without an index.
  for (const std::string& file : sel.files) RETURN_IF_ERROR(set->OpenOne(file));
  ASSIGN_OR_RETURN(TokenShardIndex index, ReadTokenShardIndex(sel.dir, fs));
  const std::string index_path = IndexPath(sel.dir);
  const std::string fix = "if the set is meant to be so, run `tessera data index " + sel.dir + "`";
  for (const TokenShardIndexEntry& e : index.files) {
    if (!MatchPattern(sel.pattern.c_str(), e.name.c_str())) continue;
    const bool present = std::any_of(sel.files.begin(), sel.files.end(),
                                     [&](const std::string& f) { return FileName(f) == e.name; });
    if (!present) {
      return DataLoss(index_path + " lists " + e.name + " (" + std::to_string(e.num_tokens) +
                      " tokens), which " + path + " selects, but it is missing (removed, renamed "
                      "or not a regular file): restore it, or " + fix);
    }
  }
  for (size_t f = 0; f < sel.files.size(); ++f) {
    const TokenShardIndexEntry* e = index.Find(FileName(sel.files[f]));
    if (e == nullptr) {
      return DataLoss(sel.files[f] + ": not listed in " + index_path +
                      " (added after the index was written?): " + fix);
    }
    RETURN_IF_ERROR(set->CheckAgainstIndex(f, *e, index_path, fix));
    RETURN_IF_ERROR(set->VerifyContents(f, vocab_size, e->crc32c, index_path));
  }
  return set;
}

Status TokenShardSet::OpenOne(const std::string& file) {
  ASSIGN_OR_RETURN(const int raw_fd, fs_->OpenForRead(file));
  const bool held = open_.size() < kMaxHeldShardFiles;
  ScopedFd fd(*fs_, raw_fd, /*owned=*/!held, file);
  OpenFile o;
  if (held) o.fd = raw_fd;
  open_.push_back(o);  // from here on the destructor closes a held descriptor
  infos_.emplace_back();
  OpenFile& mine = open_.back();
  ASSIGN_OR_RETURN(const FileStat st, StatFd(fd.get(), file));
  mine.file_bytes = st.bytes;
  mine.mtime_ns = st.mtime_ns;
  mine.device = st.device;
  mine.inode = st.inode;
  const size_t header_bytes = static_cast<size_t>(std::min<int64_t>(st.bytes, sizeof(mine.header)));
  RETURN_IF_ERROR(fs_->ReadAt(fd.get(), mine.header, header_bytes, 0, file));
  ASSIGN_OR_RETURN(infos_.back(),
                   ParseTokenShardHeader({mine.header, header_bytes}, st.bytes, file));
  total_tokens_ += infos_.back().num_tokens;
  starts_.push_back(total_tokens_);
  return Status::Ok();
}

Status TokenShardSet::CheckAgainstIndex(size_t f, const TokenShardIndexEntry& e,
                                        const std::string& index_path,
                                        const std::string& fix) const {
  const TokenShardInfo& info = infos_[f];
  auto differs = [&](const char* field, int64_t file_value, int64_t index_value) -> Status {
    if (file_value == index_value) return Status::Ok();
    return DataLoss(info.path + ": disagrees with " + index_path + ": " + field + " is " +
                    std::to_string(file_value) + " in the file but " +
                    std::to_string(index_value) + " in the index (one of them changed after the "
                    "index was written): re-create the shards, or " + fix);
  };
  RETURN_IF_ERROR(differs("size (bytes)", open_[f].file_bytes, e.bytes));
  RETURN_IF_ERROR(differs("token_bytes", info.token_bytes, e.token_bytes));
  RETURN_IF_ERROR(differs("num_tokens", info.num_tokens, e.num_tokens));
  return differs("vocab_size", info.vocab_size, e.vocab_size);
}

// One read of the whole file: CRC-32C against the index, every id against the vocabulary.
Status TokenShardSet::VerifyContents(size_t f, int64_t vocab_size, uint32_t index_crc,
                                     const std::string& index_path) {
  const TokenShardInfo& info = infos_[f];
  OpenFile& o = open_[f];
  if (info.vocab_size != 0 && vocab_size != 0 && info.vocab_size > vocab_size) {
    return InvalidArgument(info.path + ": shard vocab_size " + std::to_string(info.vocab_size) +
                           " exceeds the model's vocab_size " + std::to_string(vocab_size));
  }
  o.vocab_from_header = info.vocab_size != 0;
  o.id_limit = std::min(TypeLimit(info.token_bytes),
                        o.vocab_from_header ? int64_t{info.vocab_size}
                                            : (vocab_size != 0 ? vocab_size : INT64_MAX));
  ASSIGN_OR_RETURN(const int raw_fd, Descriptor(f));
  ScopedFd fd(*fs_, raw_fd, /*owned=*/o.fd < 0, info.path);
  ASSIGN_OR_RETURN(const FileScan scan, ScanFile(*fs_, fd.get(), info, o.file_bytes, o.id_limit));
  if (scan.crc32c != index_crc) {
    return DataLoss(info.path + ": CRC-32C " + Hex32(scan.crc32c) + " does not match " +
                    Hex32(index_crc) + " in " + index_path + ": its bytes changed after "
                    "the index was written (disk damage, an interrupted copy or an edit): restore "
                    "or re-create it (`tessera data index` would accept its current bytes)");
  }
  if (scan.bad_position < 0) return Status::Ok();
  const std::string what = info.path + ": token id " + std::to_string(scan.bad_id) +
                           " at position " + std::to_string(scan.bad_position) + " is >= ";
  if (o.vocab_from_header) {
    return DataLoss(what + "the vocab_size " + std::to_string(o.id_limit) + " of its own header");
  }
  return InvalidArgument(what + "vocab_size " + std::to_string(o.id_limit));
}

// The held descriptor, or a fresh one for files past kMaxHeldShardFiles (the caller closes it),
// checked to be the file Open saw.
Result<int> TokenShardSet::Descriptor(size_t f) const {
  if (open_[f].fd >= 0) return open_[f].fd;
  const std::string& path = infos_[f].path;
  ASSIGN_OR_RETURN(const int fd, fs_->OpenForRead(path));
  Result<FileStat> st = StatFd(fd, path);
  if (!st.ok() || st->device != open_[f].device || st->inode != open_[f].inode) {
    (void)fs_->Close(fd, path);
    if (!st.ok()) return st.status();
    return DataLoss(path + ": replaced by another file after it was verified at open");
  }
  return fd;
}

Status TokenShardSet::Read(int64_t begin, int64_t count, int32_t* out) const {
  TESSERA_CHECK(begin >= 0 && count >= 0 && begin + count <= total_tokens_);
  // The file holding `begin`: the last start <= begin (skipping empty files).
  size_t f = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) -
                                 starts_.begin()) - 1;
  while (count > 0) {
    while (starts_[f + 1] <= begin) ++f;
    const int64_t local = begin - starts_[f];
    const int64_t n = std::min(count, infos_[f].num_tokens - local);
    RETURN_IF_ERROR(ReadFromFile(f, local, n, out));
    out += n;
    begin += n;
    count -= n;
  }
  return Status::Ok();
}

// Tokens [local, local + n) of file f into out: the bytes land in the tail of out and are
// widened in place, so out is the only buffer.
Status TokenShardSet::ReadFromFile(size_t f, int64_t local, int64_t n, int32_t* out) const {
  const TokenShardInfo& info = infos_[f];
  ASSIGN_OR_RETURN(const int raw_fd, Descriptor(f));
  ScopedFd fd(*fs_, raw_fd, /*owned=*/open_[f].fd < 0, info.path);
  auto read_and_check = [&]() -> Status {
    const int tb = info.token_bytes;
    unsigned char* raw = reinterpret_cast<unsigned char*>(out) + (4 - tb) * n;
    const uint64_t offset = static_cast<uint64_t>(kTokenShardHeaderBytes + local * tb);
    Status read = fs_->ReadAt(fd.get(), raw, static_cast<size_t>(n * tb), offset, info.path);
    if (read.code() == StatusCode::kDataLoss) return Truncated(f, fd.get(), local, n);
    RETURN_IF_ERROR(read);
    uint32_t id = 0;
    const int64_t bad = FirstIdAtOrAbove(raw, tb, n, open_[f].id_limit, &id);
    WidenTokens(raw, tb, n, reinterpret_cast<uint32_t*>(out));
    if (bad < 0) return Status::Ok();
    return DataLoss(info.path + ": token id " + std::to_string(id) + " at token position " +
                    std::to_string(local + bad) + " is >= vocab_size " +
                    std::to_string(open_[f].id_limit) +
                    ": the file changed after it was verified at open");
  };
  RETURN_IF_ERROR(read_and_check());
  Status unchanged = CheckUnchanged(f, fd.get(), local);
  if (unchanged.ok()) return unchanged;
  // It changed while this window was read: a second read names the bad id when there is one.
  RETURN_IF_ERROR(read_and_check());
  return unchanged;
}

Status TokenShardSet::Truncated(size_t f, int fd, int64_t local, int64_t n) const {
  const TokenShardInfo& info = infos_[f];
  Result<uint64_t> now = fs_->FileSize(fd, info.path);
  const std::string size = now.ok() ? std::to_string(*now) : "unknown";
  return DataLoss(info.path + ": truncated while the run reads it: tokens at token position " +
                  std::to_string(local) + ".." + std::to_string(local + n - 1) +
                  " lie past its end (now " + size + " bytes, " +
                  std::to_string(open_[f].file_bytes) + " when verified at open)");
}

// The file is the one Open verified: same size, modification time and header bytes.
Status TokenShardSet::CheckUnchanged(size_t f, int fd, int64_t local) const {
  const TokenShardInfo& info = infos_[f];
  const OpenFile& o = open_[f];
  ASSIGN_OR_RETURN(const FileStat st, StatFd(fd, info.path));
  const std::string where = " (seen reading token position " + std::to_string(local) + ")";
  if (st.bytes < o.file_bytes) {
    return DataLoss(info.path + ": truncated while the run reads it: now " +
                    std::to_string(st.bytes) + " bytes, " + std::to_string(o.file_bytes) +
                    " when verified at open" + where);
  }
  if (st.bytes != o.file_bytes || st.mtime_ns != o.mtime_ns) {
    return DataLoss(info.path + ": modified while the run reads it (" +
                    (st.bytes != o.file_bytes ? "now " + std::to_string(st.bytes) + " bytes, " +
                                                    std::to_string(o.file_bytes) + " at open"
                                              : std::string("its modification time changed")) +
                    ")" + where);
  }
  unsigned char header[kTokenShardHeaderBytes];
  RETURN_IF_ERROR(fs_->ReadAt(fd, header, sizeof(header), 0, info.path));
  if (std::memcmp(header, o.header, sizeof(header)) != 0) {
    return DataLoss(info.path + ": header changed while the run reads it" + where);
  }
  return Status::Ok();
}

}  // namespace tessera
