// runtime/train/data/byte_tokenizer.h — the byte-level tokenizer: one token per byte (ids
// 0..255), turning text files into token shards for `tessera data`.
//
// A model trained on these shards needs model.vocab_size >= 256 (the shards record
// vocab_size 256, and opening them for a smaller model is an error).
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/train/data/tokenizer.h"

namespace tessera {

inline constexpr int64_t kByteVocabSize = 256;

struct TokenizeStats {
  int64_t input_bytes = 0;   // bytes read from all inputs
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::vector<std::string> train_files;  // shards written, in order
  std::vector<std::string> val_files;    // empty when there are no val tokens
};

// Reads `inputs` in order as one concatenated byte stream and writes it as 2-byte token
// shards with vocab_size 256:
//   out_dir/train_000000.bin, train_000001.bin, ...  the first part of the stream
//   out_dir/val_000000.bin, ...                       the last floor(val_fraction * bytes) tokens
// Each shard holds at most shard_tokens tokens. No val shard is written when the val part is
// empty (val_fraction 0 or a tiny input). out_dir is created if needed. Every shard is written
// through temp + fsync + rename; last, out_dir/index.json (token_shard_index.h) lists them with
// sizes, counts and CRC-32C: training refuses a directory without it, so a run killed before
// the end leaves shards nobody trains on by accident. Point data.train at
// "out_dir/train_*.bin" and data.val at "out_dir/val_*.bin" (a bare out_dir would mean every
// *.bin in it, val included).
// Errors: kNotFound naming a missing input; kInvalidArgument for val_fraction outside [0, 1),
// shard_tokens < 1, no input bytes or an empty train part; kFailedPrecondition if out_dir
// already holds train_*.bin / val_*.bin shards or an index.json (never mixes runs); kIoError from the OS or when
// an input's size changed while it was read. All or nothing: on any error the shards this call
// wrote are removed again (and *stats reset), so a retry is not refused. `stats` may be null.
//
// With a `tokenizer` (tokenizer.h: a model's BPE or SentencePiece) each input is one document:
// read whole (up to 4 GiB), encoded on `threads` threads, followed by the tokenizer's
// end-of-text id when it has one; the split and the shards are as above, in tokens, with the
// tokenizer's vocab_size (4-byte tokens above 65536 ids) and independent of `threads`. A text
// the tokenizer refuses is an error naming the file.
Status TokenizeFiles(const std::vector<std::string>& inputs, const std::string& out_dir,
                     double val_fraction, int64_t shard_tokens, TokenizeStats* stats,
                     const Tokenizer* tokenizer = nullptr, int threads = 1);

// Bytes back from byte tokens (ids must be in [0, 256)).
std::string DecodeBytes(const int32_t* tokens, int64_t count);

}  // namespace tessera
