// runtime/train/data/token_shard_index.h — the completion index of a token shard directory:
// `index.json`, written last and atomically by `tessera data tokenize` and `tessera data index`,
// listing every shard with what a reader verifies (TokenShardSet::Open, token_shard.h).
//
// Format (JSON; one file per line so that a diff reads well):
//   {"format":"tessera-token-shard-index","version":1,"files":[
//   {"name":"train_000000.bin","split":"train","token_bytes":2,"vocab_size":256,
//    "num_tokens":1000,"bytes":2032,"crc32c":3735928559},
//   ...
//   ]}
// name: a file in the index's own directory (no '/'), unique, the list sorted by name.
// split: "train" | "val" | "" — from the name's prefix; informative (the config decides which
//   files are trained on), not checked. token_bytes, vocab_size, num_tokens: the header fields.
// bytes: the file size. crc32c: CRC-32C (runtime/core/crc32c.h) of the whole file, header
//   included, as an unsigned integer. Unknown keys are refused (a typo is not ignored).
// The index is the completion mark: a tokenize stopped before writing it leaves a directory that
// training refuses, and an index that exists lists complete, fsynced shards.
// Thread-safety: pure functions (plus file I/O through the given FileSystem).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/file_util.h"
#include "runtime/core/status.h"

namespace tessera {

inline constexpr char kTokenShardIndexName[] = "index.json";
inline constexpr int64_t kTokenShardIndexVersion = 1;

struct TokenShardIndexEntry {
  std::string name;   // file name inside the directory
  std::string split;  // "train" | "val" | ""
  int token_bytes = 2;
  uint32_t vocab_size = 0;
  int64_t num_tokens = 0;
  int64_t bytes = 0;
  uint32_t crc32c = 0;
  bool operator==(const TokenShardIndexEntry&) const = default;
};

struct TokenShardIndex {
  std::vector<TokenShardIndexEntry> files;  // sorted by name
  // The entry named `name`, or nullptr.
  const TokenShardIndexEntry* Find(std::string_view name) const;
};

// "train" for names starting with "train", "val" for "val", else "".
std::string ShardSplitOfName(std::string_view name);

std::string TokenShardIndexToJson(const TokenShardIndex& index);
// kDataLoss "PATH: ..." for malformed JSON, a missing or mistyped key, an unknown key, a bad
// name (empty, with '/', "." or ".."), a duplicate name, or a value out of range.
Result<TokenShardIndex> ParseTokenShardIndex(std::string_view json, const std::string& path);

// Reads DIR/index.json. kDataLoss when it is missing (saying how to make one), not a regular
// file, larger than 64 MiB, or malformed; kIoError when the OS refuses.
Result<TokenShardIndex> ReadTokenShardIndex(const std::string& dir,
                                            FileSystem& fs = DefaultFileSystem());

// Reads each of `names` (files in `dir`) whole (ScanTokenShard: header, size, ids against the
// header's vocab_size, CRC-32C) and then writes DIR/index.json through AtomicFileWriter (temp,
// fsync, rename, directory fsync), listing exactly those files. Returns what it wrote.
// Errors: those of ScanTokenShard naming the file (nothing is written then), kInvalidArgument
// for an empty list or a name with '/', kIoError from the write.
Result<TokenShardIndex> WriteTokenShardIndex(const std::string& dir,
                                             const std::vector<std::string>& names,
                                             FileSystem& fs = DefaultFileSystem());

// WriteTokenShardIndex for every regular `*.bin` file in `dir`: what `tessera data index DIR`
// runs for shards written by other tools (and what tests call after WriteTokenShard).
// kNotFound when `dir` is missing or holds no *.bin file.
Result<TokenShardIndex> IndexTokenShardDirectory(const std::string& dir,
                                                 FileSystem& fs = DefaultFileSystem());

}  // namespace tessera
