// runtime/train/data/tokenizer.h — text to token ids for `tessera data tokenize`: the byte
// tokenizer (one token per byte), a model's byte-level BPE (tokenizer.json: GPT-2, Llama 3,
// Qwen2 style; bpe_tokenizer.h) or its SentencePiece model (tokenizer.model, through Debian's
// libsentencepiece; sentencepiece_tokenizer.h).
// Thread-safety: Encode and Decode are const and safe from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/status.h"

namespace tessera {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The ids of `text` as the reference implementation encodes it (special tokens written in
  // the text are recognised, no BOS/EOS added). kInvalidArgument when the text holds what
  // this tokenizer cannot encode faithfully (bpe_tokenizer.h says when).
  virtual Result<std::vector<int32_t>> Encode(std::string_view text) const = 0;
  virtual std::string Decode(std::span<const int32_t> ids) const = 0;
  // Every id is below this (the shards record it; model.vocab_size must be at least it).
  virtual int64_t vocab_size() const = 0;
  // The end-of-text id written after each document (input file), when the tokenizer has one.
  virtual std::optional<int32_t> eos() const = 0;
  // "byte-level BPE (tokenizer.json, llama3 pre-tokenizer, 128256 ids)".
  virtual std::string Describe() const = 0;
};

std::unique_ptr<Tokenizer> MakeByteTokenizer();

// The tokenizer of a model directory: tokenizer.json (byte-level BPE) if present, else
// tokenizer.model (SentencePiece). kNotFound when it holds neither; kDataLoss naming the file
// for a damaged one; kInvalidArgument naming what a tokenizer.json asks for that is not
// implemented (another model type, pre-tokenizer or normalizer).
Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir);

}  // namespace tessera
