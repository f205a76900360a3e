// runtime/train/data/data_loader.h — token sources and the deterministic, resumable batch
// loader the trainer reads from.
//
// Owns: TokenSource (a split's tokens: a synthetic stream in memory, or shard files read with
// pread and checked on every read) and DataLoader (training windows in a seeded, per-epoch
// permuted order).
//
// Errors while reading. A shard truncated, rewritten or otherwise changed after it was verified
// at open makes NextBatch return kDataLoss naming the file and token position (token_shard.h);
// the caller ends the run with it (`tessera train` exits 4). The position has then advanced by
// the windows read before the failing one: a failed loader is not used again.
//
// Sampling. A source of N tokens has W = (N - 1) / seq_len non-overlapping windows; window w
// covers tokens [w * seq_len, w * seq_len + seq_len] (seq_len + 1 tokens): inputs are its first
// seq_len tokens, targets the last seq_len (inputs shifted by one). An epoch visits every
// window once, in the order of a bijective permutation of [0, W) keyed by (seed, epoch) (a
// cycle-walking Feistel network on Mix64; no table, O(1) per sample). WindowStart(epoch,
// index) is a pure function, so the loader's whole state is DataPosition {epoch, index}: the
// next window to hand out. A batch may straddle two epochs.
//
// Resume: Seek(p) with p from position() makes the following batches identical to those an
// uninterrupted loader would have produced. Data parallelism (not wired yet): with dp ranks of
// local batch B, every rank keeps the same global position; rank r reads samples
// [r * B, (r + 1) * B) of each global batch: Skip(r * B), NextBatch(B), Skip((dp - 1 - r) * B).
// Evaluation: Reset() rewinds to {0, 0}, so "the first K batches" of a split are fixed.
//
// Thread-safety: a DataLoader is single-owner (NextBatch/Seek/Reset mutate it); its const
// methods, WindowStart included, are safe to call concurrently with each other.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/train/config.h"
#include "runtime/train/data/markov_chain.h"
#include "runtime/train/data/token_shard.h"

namespace tessera {

// A split's tokens, random access.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t num_tokens() const = 0;
  // Copies tokens [begin, begin + count) into out; requires the range inside [0, num_tokens()).
  // Errors: kDataLoss / kIoError from the files behind the source (shards), naming them.
  virtual Status Read(int64_t begin, int64_t count, int32_t* out) const = 0;
  // One line, e.g. "token shards data/tiny/train_*.bin (3 files, 1200000 tokens)".
  virtual std::string Describe() const = 0;
};

// Tokens held in memory (synthetic streams, tests).
class InMemoryTokenSource final : public TokenSource {
 public:
  InMemoryTokenSource(std::vector<int32_t> tokens, std::string description)
      : tokens_(std::move(tokens)), description_(std::move(description)) {}
  int64_t num_tokens() const override { return static_cast<int64_t>(tokens_.size()); }
  Status Read(int64_t begin, int64_t count, int32_t* out) const override;
  std::string Describe() const override { return description_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  std::vector<int32_t> tokens_;
  std::string description_;
};

// Shard files (TokenShardSet: verified at open, every read checked).
class ShardTokenSource final : public TokenSource {
 public:
  explicit ShardTokenSource(std::unique_ptr<TokenShardSet> shards) : shards_(std::move(shards)) {}
  int64_t num_tokens() const override { return shards_->num_tokens(); }
  Status Read(int64_t begin, int64_t count, int32_t* out) const override {
    return shards_->Read(begin, count, out);
  }
  std::string Describe() const override;

 private:
  std::unique_ptr<TokenShardSet> shards_;
};

enum class Split { kTrain, kVal };
const char* SplitName(Split split);  // "train" | "val"

// The next window to hand out: `index` into the permutation of epoch `epoch`.
// Invariant (as returned by position()): 0 <= index < num_windows.
struct DataPosition {
  int64_t epoch = 0;
  int64_t index = 0;
  bool operator==(const DataPosition&) const = default;
};

class DataLoader {
 public:
  // Whether `config` provides a validation split: always for synthetic data, for shards only
  // when data.val is set. The trainer skips evaluation when this is false.
  static bool HasSplit(const DataConfig& config, Split split);

  // Opens `split` of the configured data for a model of `vocab_size` tokens and windows of
  // seq_len. Synthetic: builds the chain (vocab = the model's vocab_size) and generates
  // data.synthetic.num_tokens tokens of the split; the chain is handed to the next Open with
  // the same chain settings and vocab (the train/val pair builds it once; data_loader.cc).
  // Shards: opens data.train / data.val through TokenShardSet::Open (index.json, checksums and
  // every token id < vocab_size verified). A non-empty data.val is opened as shards for either
  // source (no entropy floor then). `seed` keys the sampling order (train.seed).
  // Errors: kInvalidArgument (bad settings, token id out of range, too few tokens for one
  // window: names the path and numbers), kNotFound / kDataLoss / kIoError from the shard files
  // and their index, kFailedPrecondition for Split::kVal of shard data without data.val.
  static Result<std::unique_ptr<DataLoader>> Open(const DataConfig& config, Split split,
                                                  int64_t vocab_size, int64_t seq_len,
                                                  uint64_t seed);
  // A loader over any source (tests, tools). entropy_floor: reported by entropy_floor().
  static Result<std::unique_ptr<DataLoader>> FromSource(std::unique_ptr<TokenSource> source,
                                                        int64_t seq_len, uint64_t seed,
                                                        std::optional<double> entropy_floor);

  // Fills inputs and targets, each [batch_size * seq_len] row-major (B, T), with the next
  // batch_size windows, and advances the position by batch_size. Errors: those of
  // TokenSource::Read (kDataLoss naming the shard file and token position).
  [[nodiscard]] Status NextBatch(int64_t batch_size, int32_t* inputs, int32_t* targets);
  // Advances the position by `samples` windows without reading them (so it cannot fail).
  void Skip(int64_t samples);

  DataPosition position() const { return position_; }
  // kInvalidArgument when p is not a valid position for this data (epoch < 0, index outside
  // [0, num_windows)): the checkpoint was taken on different data or seq_len.
  Status Seek(DataPosition p);
  void Reset() { position_ = {}; }

  // First token of window `index` of epoch `epoch`; pure. 0 <= index < num_windows().
  int64_t WindowStart(int64_t epoch, int64_t index) const;

  int64_t seq_len() const { return seq_len_; }
  int64_t num_windows() const { return num_windows_; }
  // Target tokens per epoch: num_windows() * seq_len().
  int64_t tokens_per_epoch() const { return num_windows_ * seq_len_; }
  // Synthetic data only: the exact loss floor, MarkovChain::EntropyFloor(seq_len).
  std::optional<double> entropy_floor() const { return entropy_floor_; }
  const TokenSource& source() const { return *source_; }
  // One line for the run header, e.g. "synthetic Markov chain: V=64 order 1 branching 4
  // concentration 1, train split 1048576 tokens, 16383 windows of 64, floor 1.2345 nats/token".
  std::string Describe() const;

 private:
  DataLoader() = default;

  std::unique_ptr<TokenSource> source_;
  int64_t seq_len_ = 0;
  uint64_t seed_ = 0;
  int64_t num_windows_ = 0;
  int half_bits_ = 1;  // the Feistel domain is 2^(2 * half_bits_) >= num_windows_
  std::optional<double> entropy_floor_;
  DataPosition position_;
  std::vector<int32_t> window_;  // scratch, seq_len + 1 tokens
};

}  // namespace tessera
