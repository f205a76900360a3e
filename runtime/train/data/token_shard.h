// runtime/train/data/token_shard.h — token shard files: writing them atomically and reading
// them (memory-mapped, read-only, validated) as one logical token stream.
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
// matching files sorted by name). Errors name the file: DataLoss "FILE: ..." for bad bytes,
// NotFound naming the path for missing files.
//
// Writers produce `path.tmp`, fsync it, rename it over `path` and fsync the directory
// (AtomicFileWriter, runtime/core/file_util.h), so a reader never sees a half-written shard.
// Thread-safety: TokenShardWriter is single-owner. TokenShardSet is immutable after Open and
// its const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/file_util.h"
#include "runtime/core/status.h"

namespace tessera {

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

// One or more shard files, memory-mapped and concatenated into one logical token stream.
class TokenShardSet {
 public:
  // `path`: file, directory or pattern (see top). Validates every header and file size.
  // kNotFound: the path does not exist, or a directory/pattern matches no file.
  // kDataLoss: bad magic, unsupported version or token_bytes, non-zero reserved, wrong size.
  // kIoError: the OS refused to open or map a file.
  static Result<std::unique_ptr<TokenShardSet>> Open(const std::string& path);
  ~TokenShardSet();
  TokenShardSet(const TokenShardSet&) = delete;
  TokenShardSet& operator=(const TokenShardSet&) = delete;

  // Checks that every token id is < vocab_size (one pass over all tokens, memory bandwidth;
  // a header vocab_size larger than vocab_size is rejected without scanning).
  // kInvalidArgument "FILE: token id X at position P (of that file) is >= vocab_size V".
  Status ValidateTokenIds(int64_t vocab_size) const;

  int64_t num_tokens() const { return total_tokens_; }
  const std::vector<TokenShardInfo>& files() const { return infos_; }
  const std::string& path() const { return path_; }
  // Copies tokens [begin, begin + count) of the logical stream into out as int32 (crossing
  // file boundaries as needed). Requires 0 <= begin, begin + count <= num_tokens().
  void Read(int64_t begin, int64_t count, int32_t* out) const;

 private:
  struct Mapping {
    const unsigned char* base = nullptr;  // start of the mapping (the header)
    size_t bytes = 0;
  };
  TokenShardSet() = default;

  std::string path_;
  std::vector<TokenShardInfo> infos_;
  std::vector<Mapping> maps_;
  std::vector<int64_t> starts_;  // [files + 1] first logical token of each file, then total
  int64_t total_tokens_ = 0;
};

}  // namespace tessera
