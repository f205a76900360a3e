// runtime/train/data/token_shard.cc — token shard writing (through AtomicFileWriter: temp file,
// fsync, rename) and reading (POSIX mmap). The format is documented in token_shard.h.
#include "runtime/train/data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "runtime/core/check.h"

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

std::string Errno() { return std::strerror(errno); }

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

// Lists the files `path` names: itself, the *.bin files of a directory, or a pattern's matches.
Result<std::vector<std::string>> ResolveShardPaths(const std::string& path) {
  std::error_code ec;
  std::string dir, pattern;
  const std::string name = fs::path(path).filename().string();
  if (name.find('*') != std::string::npos) {
    dir = ParentDir(path);
    pattern = name;
    if (!fs::is_directory(dir, ec)) return NotFound(dir + ": no such directory (from " + path + ")");
  } else {
    fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) return NotFound(path + ": no such file or directory");
    if (!fs::is_directory(st)) return std::vector<std::string>{path};
    dir = path;
    pattern = "*.bin";
  }
  std::vector<std::string> files;
  fs::directory_iterator it(dir, ec), end;
  if (ec) return IoError(dir + ": cannot list directory: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return IoError(dir + ": cannot list directory: " + ec.message());
    const std::string file_name = it->path().filename().string();
    if (MatchPattern(pattern.c_str(), file_name.c_str()) && it->is_regular_file(ec)) {
      files.push_back(it->path().string());
    }
  }
  if (files.empty()) return NotFound(path + ": no token shards (" + pattern + ") in " + dir);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

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

TokenShardSet::~TokenShardSet() {
  for (const Mapping& m : maps_) {
    if (m.base != nullptr) ::munmap(const_cast<unsigned char*>(m.base), m.bytes);
  }
}

Result<std::unique_ptr<TokenShardSet>> TokenShardSet::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<std::string> paths, ResolveShardPaths(path));
  std::unique_ptr<TokenShardSet> set(new TokenShardSet());
  set->path_ = path;
  set->starts_.push_back(0);
  for (const std::string& file : paths) {
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return NotFound(file + ": no such file");
    if (fd < 0) return IoError(file + ": cannot open: " + Errno());
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      Status s = IoError(file + ": cannot stat: " + Errno());
      ::close(fd);
      return s;
    }
    const int64_t file_bytes = static_cast<int64_t>(st.st_size);
    Mapping m;
    if (file_bytes > 0) {
      void* p = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        Status s = IoError(file + ": mmap failed: " + Errno());
        ::close(fd);
        return s;
      }
      m.base = static_cast<const unsigned char*>(p);
      m.bytes = static_cast<size_t>(file_bytes);
    }
    ::close(fd);  // the mapping keeps the file alive
    set->maps_.push_back(m);  // owned from here on, unmapped by the destructor on any error

    if (file_bytes < 8 || std::memcmp(m.base, kTokenShardMagic, 8) != 0) {
      return DataLoss(file + ": not a Tessera token shard (bad magic)");
    }
    if (file_bytes < kTokenShardHeaderBytes) {
      return DataLoss(file + ": truncated: " + std::to_string(file_bytes) +
                      " bytes is shorter than the 32-byte header");
    }
    Header h;
    std::memcpy(&h, m.base, sizeof(h));
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
    const int64_t expected = kTokenShardHeaderBytes +
                             static_cast<int64_t>(h.num_tokens) * static_cast<int64_t>(h.token_bytes);
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
    set->infos_.push_back(info);
    set->total_tokens_ += info.num_tokens;
    set->starts_.push_back(set->total_tokens_);
  }
  return set;
}

Status TokenShardSet::ValidateTokenIds(int64_t vocab_size) const {
  for (size_t f = 0; f < infos_.size(); ++f) {
    const TokenShardInfo& info = infos_[f];
    if (info.vocab_size != 0 && static_cast<int64_t>(info.vocab_size) > vocab_size) {
      return InvalidArgument(info.path + ": shard vocab_size " + std::to_string(info.vocab_size) +
                             " exceeds the model's vocab_size " + std::to_string(vocab_size));
    }
    const unsigned char* data = maps_[f].base + kTokenShardHeaderBytes;
    // Chunked max keeps the hot loop branch-free (vectorisable); the rare failing chunk is
    // rescanned to report the first offending position.
    auto scan = [&](auto* tokens) -> Status {
      constexpr int64_t kChunk = 1 << 16;
      for (int64_t begin = 0; begin < info.num_tokens; begin += kChunk) {
        const int64_t end = std::min(info.num_tokens, begin + kChunk);
        uint64_t max_id = 0;
        for (int64_t i = begin; i < end; ++i) max_id = std::max<uint64_t>(max_id, tokens[i]);
        if (max_id < static_cast<uint64_t>(vocab_size)) continue;
        for (int64_t i = begin; i < end; ++i) {
          if (static_cast<uint64_t>(tokens[i]) >= static_cast<uint64_t>(vocab_size)) {
            return InvalidArgument(info.path + ": token id " + std::to_string(tokens[i]) +
                                   " at position " + std::to_string(i) + " is >= vocab_size " +
                                   std::to_string(vocab_size));
          }
        }
      }
      return Status::Ok();
    };
    // The payload starts at offset 32 of a page-aligned mapping, so it is aligned for both.
    if (info.token_bytes == 2) {
      RETURN_IF_ERROR(scan(reinterpret_cast<const uint16_t*>(data)));
    } else {
      RETURN_IF_ERROR(scan(reinterpret_cast<const uint32_t*>(data)));
    }
  }
  return Status::Ok();
}

void TokenShardSet::Read(int64_t begin, int64_t count, int32_t* out) const {
  TESSERA_CHECK(begin >= 0 && count >= 0 && begin + count <= total_tokens_);
  // The file holding `begin`: the last start <= begin (skipping empty files).
  size_t f = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) -
                                 starts_.begin()) - 1;
  while (count > 0) {
    while (starts_[f + 1] <= begin) ++f;
    const TokenShardInfo& info = infos_[f];
    const int64_t local = begin - starts_[f];
    const int64_t n = std::min(count, info.num_tokens - local);
    const unsigned char* data = maps_[f].base + kTokenShardHeaderBytes;
    if (info.token_bytes == 2) {
      const uint16_t* src = reinterpret_cast<const uint16_t*>(data) + local;
      for (int64_t i = 0; i < n; ++i) out[i] = src[i];
    } else {
      const uint32_t* src = reinterpret_cast<const uint32_t*>(data) + local;
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(src[i]);
    }
    out += n;
    begin += n;
    count -= n;
  }
}

}  // namespace tessera
