// runtime/train/data/token_shard.h — token shard files: writing them atomically and reading
// them (positional reads of exactly the windows asked for, every read checked) as one logical
// token stream.
//
// File format (version 1), little-endian:
//   offset  size  field
//        0     8  magic "TSRTOKEN"
//        8     4  uint32 version = 1
//       12     4  uint32 token_bytes: 2 (uint16 tokens) or 4 (uint32 tokens)
//       16     8  uint64 num_tokens
//       24     4  uint32 vocab_size (0 = unknown)
//       28     4  uint32 reserved = 0
//       32     -  num_tokens tokens of token_bytes each; the file is exactly
//                 32 + num_tokens * token_bytes bytes long.
// The code assumes a little-endian host (static_assert in the .cc).
//
// A shard path names one file, a directory (all `*.bin` files in it, sorted by name,
// concatenated), or a directory plus a file pattern with `*` wildcards ("data/train_*.bin"; the
// matching files sorted by name). The directory must hold the completion index `index.json`
// (token_shard_index.h) that lists every selected file with its size, header fields and
// CRC-32C; Open refuses a set the index does not vouch for.
//
// What is checked when:
//   Open      every selected file: a regular file, its header and size, listed in the index and
//             equal to its entry, then one read of the whole file: CRC-32C against the index and
//             every token id against the vocabulary.
//   Read      (every window, after Open) exactly the bytes of the window are read with pread
//             (no mapping: a file truncated underneath is an error, never SIGBUS), every token id
//             is checked against the vocabulary again, and the file must be unchanged since Open
//             (same header bytes, size and modification time; for files reopened per read, the
//             same inode). Any difference is kDataLoss naming the file and the token position.
// Errors name the file: kDataLoss "FILE: ..." for bad or changed bytes, kNotFound naming the
// path for missing files.
//
// Writers produce `path.tmp`, fsync it, rename it over `path` and fsync the directory
// (AtomicFileWriter, runtime/core/file_util.h), so a reader never sees a half-written shard.
// Thread-safety: TokenShardWriter is single-owner. TokenShardSet is immutable after Open and
// its const methods (Read included: pread only) may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/file_util.h"
#include "runtime/core/status.h"

namespace tessera {

struct TokenShardIndexEntry;  // token_shard_index.h

inline constexpr char kTokenShardMagic[8] = {'T', 'S', 'R', 'T', 'O', 'K', 'E', 'N'};
inline constexpr uint32_t kTokenShardVersion = 1;
inline constexpr int64_t kTokenShardHeaderBytes = 32;

// Streams tokens into `path` (through `path.tmp`); Finish commits it. Destroying an unfinished
// writer removes the temporary file.
class TokenShardWriter {
 public:
  // token_bytes: 2 or 4. vocab_size: recorded in the header (0 = unknown); when non-zero,
  // Append rejects ids >= vocab_size.
  static Result<std::unique_ptr<TokenShardWriter>> Create(const std::string& path,
                                                          int token_bytes, uint32_t vocab_size);
  ~TokenShardWriter();
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;

  // kInvalidArgument for ids that are negative, do not fit token_bytes or are >= vocab_size.
  Status Append(std::span<const int32_t> tokens);
  // Writes the token count into the header, fsyncs, renames, fsyncs the directory.
  Status Finish();
  int64_t num_tokens() const { return num_tokens_; }

 private:
  TokenShardWriter() = default;

  std::string path_;
  std::unique_ptr<AtomicFileWriter> file_;  // null once Finish has run
  int token_bytes_ = 2;
  uint32_t vocab_size_ = 0;
  int64_t num_tokens_ = 0;
  std::vector<unsigned char> buffer_;
};

// Writes a whole shard at once (TokenShardWriter::Create + Append + Finish).
Status WriteTokenShard(const std::string& path, std::span<const int32_t> tokens,
                       int token_bytes, uint32_t vocab_size);

// Header fields of one validated shard file.
struct TokenShardInfo {
  std::string path;
  int token_bytes = 2;
  int64_t num_tokens = 0;
  uint32_t vocab_size = 0;  // 0 = unknown
};

// Validates a shard header against the file's size: `head` holds the first
// min(32, file_bytes) bytes of the file named `file` (fewer is a bug: CHECK). kDataLoss
// "FILE: ..." for bad magic, an unsupported version or token_bytes, a non-zero reserved field,
// or a size other than 32 + num_tokens * token_bytes. Pure: what ScanTokenShard and
// TokenShardSet::Open run on the bytes they read (and what tests/fuzz feeds arbitrary bytes).
Result<TokenShardInfo> ParseTokenShardHeader(std::span<const unsigned char> head,
                                             int64_t file_bytes, const std::string& file);

// What one full read of a shard file found (ScanTokenShard).
struct TokenShardScan {
  TokenShardInfo info;
  int64_t file_bytes = 0;
  uint32_t crc32c = 0;  // of the whole file, header included (runtime/core/crc32c.h)
};

// Reads the shard at `path` whole: validates header and size, checks every token id against the
// header's vocab_size (when non-zero) and computes the file's CRC-32C. For index writers
// (token_shard_index.h). kDataLoss for a malformed file or an id >= the header's vocab_size.
Result<TokenShardScan> ScanTokenShard(const std::string& path,
                                      FileSystem& fs = DefaultFileSystem());

// One or more shard files, concatenated into one logical token stream. Files stay open (up to
// kMaxHeldShardFiles; files past that are reopened for each read) and are read with pread.
class TokenShardSet {
 public:
  static constexpr size_t kMaxHeldShardFiles = 256;  // descriptors one set keeps open

  // `path`: file, directory or pattern (see top). `vocab_size`: the model's vocabulary; token
  // ids must be below it (and below a non-zero header vocab_size); 0 = no model bound.
  // Verifies every selected file as described at the top (one full read of each file).
  // kNotFound: the path does not exist, or a directory/pattern matches no file.
  // kDataLoss: bad magic, unsupported version or token_bytes, non-zero reserved, wrong size;
  //   index.json missing, malformed, not listing a selected file, listing a matching file that
  //   is gone, or disagreeing with a file (size, header field, CRC-32C); an id >= the header's
  //   vocab_size. The message says how to fix it (`tessera data index DIR`, or re-tokenize).
  // kInvalidArgument: a header vocab_size above `vocab_size`, or (header vocab_size 0) an id
  //   >= `vocab_size`: the data does not fit the model.
  // kIoError: the OS refused to open or read a file.
  static Result<std::unique_ptr<TokenShardSet>> Open(const std::string& path, int64_t vocab_size,
                                                     FileSystem& fs = DefaultFileSystem());
  ~TokenShardSet();
  TokenShardSet(const TokenShardSet&) = delete;
  TokenShardSet& operator=(const TokenShardSet&) = delete;

  int64_t num_tokens() const { return total_tokens_; }
  const std::vector<TokenShardInfo>& files() const { return infos_; }
  const std::string& path() const { return path_; }
  // Copies tokens [begin, begin + count) of the logical stream into out as int32 (crossing file
  // boundaries as needed), reading exactly those bytes; `out` is the only buffer. Requires
  // 0 <= begin, begin + count <= num_tokens(). kDataLoss "FILE: ... token position P ..." when a
  // file was truncated, holds an id out of range, or changed since Open; kIoError from the OS.
  Status Read(int64_t begin, int64_t count, int32_t* out) const;

 private:
  // What Open saw of one file; Read insists that it still holds.
  struct OpenFile {
    int fd = -1;  // held open, or -1 for files past kMaxHeldShardFiles (reopened per read)
    int64_t file_bytes = 0;
    int64_t mtime_ns = 0;
    uint64_t device = 0, inode = 0;
    unsigned char header[kTokenShardHeaderBytes] = {};
    int64_t id_limit = 0;  // every token id is < this
    bool vocab_from_header = false;  // id_limit is the header's vocab_size (else the model's)
  };
  TokenShardSet() = default;
  Status OpenOne(const std::string& file);
  Status CheckAgainstIndex(size_t f, const TokenShardIndexEntry& e, const std::string& index_path,
                           const std::string& fix) const;
  Status VerifyContents(size_t f, int64_t vocab_size, uint32_t index_crc,
                        const std::string& index_path);
  Result<int> Descriptor(size_t f) const;
  Status ReadFromFile(size_t f, int64_t local, int64_t n, int32_t* out) const;
  Status Truncated(size_t f, int fd, int64_t local, int64_t n) const;
  Status CheckUnchanged(size_t f, int fd, int64_t local) const;

  FileSystem* fs_ = nullptr;
  std::string path_;
  std::vector<TokenShardInfo> infos_;
  std::vector<OpenFile> open_;
  std::vector<int64_t> starts_;  // [files + 1] first logical token of each file, then total
  int64_t total_tokens_ = 0;
};

}  // namespace tessera
