// runtime/train/data/data_loader.cc — opening a split, the epoch permutation and batching.
// Contracts in data_loader.h.
#include "runtime/train/data/data_loader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "runtime/core/check.h"
#include "runtime/core/random.h"

namespace tessera {
namespace {

constexpr uint64_t kDataOrderStream = 0x7473722d64617461ull;  // StreamKey id of epoch orders
constexpr int kFeistelRounds = 6;

// One pass of a balanced Feistel network on 2 * half_bits bits: a bijection of
// [0, 4^half_bits) for every key.
uint64_t Feistel(uint64_t x, uint64_t key, int half_bits) {
  const uint64_t mask = (uint64_t{1} << half_bits) - 1;
  uint64_t left = x >> half_bits, right = x & mask;
  for (int r = 0; r < kFeistelRounds; ++r) {
    const uint64_t f = Mix64(key ^ Mix64(right ^ (static_cast<uint64_t>(r) << 56))) & mask;
    const uint64_t next_right = left ^ f;
    left = right;
    right = next_right;
  }
  return (left << half_bits) | right;
}

std::string FormatDouble(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// Hand-off of a built chain between the Opens of one run. The trainer opens the train split,
// then the val split, with the same (config, vocab); building the chain (power iteration over
// V^order states) dominates opening a synthetic split: ~0.2 s for V=256 order 2, ~7 s for
// V=1024 order 2. The chain an Open builds is left here for the next Open, which takes it if
// its key matches: train + val build once and nothing stays cached after the pair (the tables
// can reach ~200 MiB). At most one chain waits here, and only after an Open that no matching
// Open followed. Build is a pure function of the key, so sharing changes no token.
// Thread-safety: guarded by mu; a chain is immutable and shared read-only.
struct ChainHandoff {
  std::mutex mu;
  SyntheticDataConfig key;
  int64_t vocab_size = 0;
  std::shared_ptr<const MarkovChain> chain;  // null when empty
};

bool SameChain(const SyntheticDataConfig& a, const SyntheticDataConfig& b) {
  return a.order == b.order && a.branching == b.branching && a.concentration == b.concentration &&
         a.seed == b.seed;  // num_tokens does not enter the chain
}

Result<std::shared_ptr<const MarkovChain>> GetChain(const SyntheticDataConfig& syn,
                                                    int64_t vocab_size) {
  static ChainHandoff* const handoff = new ChainHandoff();  // never destroyed: usable at exit
  {
    std::lock_guard<std::mutex> lock(handoff->mu);
    if (handoff->chain != nullptr && handoff->vocab_size == vocab_size &&
        SameChain(handoff->key, syn)) {
      return std::move(handoff->chain);  // leaves the slot empty
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<MarkovChain> built, MarkovChain::Build(syn, vocab_size));
  std::shared_ptr<const MarkovChain> chain(std::move(built));
  std::lock_guard<std::mutex> lock(handoff->mu);
  handoff->key = syn;
  handoff->vocab_size = vocab_size;
  handoff->chain = chain;
  return chain;
}

Result<std::unique_ptr<DataLoader>> OpenSynthetic(const DataConfig& config, Split split,
                                                  int64_t vocab_size, int64_t seq_len,
                                                  uint64_t seed) {
  const SyntheticDataConfig& syn = config.synthetic;
  if (syn.num_tokens < seq_len + 1) {
    return InvalidArgument("data.synthetic.num_tokens=" + std::to_string(syn.num_tokens) +
                           " is too few for one window of seq_len + 1 = " +
                           std::to_string(seq_len + 1) + " tokens");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const MarkovChain> chain, GetChain(syn, vocab_size));
  std::vector<int32_t> tokens(static_cast<size_t>(syn.num_tokens));
  chain->Generate(split == Split::kTrain ? 0 : 1, tokens);
  const std::string description = "synthetic Markov chain: " + chain->Describe() + ", " +
                                  SplitName(split) + " split " +
                                  std::to_string(syn.num_tokens) + " tokens";
  return DataLoader::FromSource(
      std::make_unique<InMemoryTokenSource>(std::move(tokens), description), seq_len, seed,
      chain->EntropyFloor(seq_len));
}

Result<std::unique_ptr<DataLoader>> OpenShards(const DataConfig& config, Split split,
                                               int64_t vocab_size, int64_t seq_len,
                                               uint64_t seed) {
  const std::string& path = split == Split::kTrain ? config.train_path : config.val_path;
  if (path.empty()) {
    return split == Split::kTrain
               ? InvalidArgument("data.train is empty: data.source 'shards' needs a shard file "
                                 "or directory")
               : FailedPrecondition("data.val is empty: shard data has no validation split");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TokenShardSet> shards, TokenShardSet::Open(path, vocab_size));
  if (shards->num_tokens() < seq_len + 1) {
    return InvalidArgument(path + ": " + std::to_string(shards->num_tokens()) +
                           " tokens is too few for one window of seq_len + 1 = " +
                           std::to_string(seq_len + 1) + " tokens");
  }
  return DataLoader::FromSource(std::make_unique<ShardTokenSource>(std::move(shards)), seq_len,
                                seed, std::nullopt);
}

}  // namespace

Status InMemoryTokenSource::Read(int64_t begin, int64_t count, int32_t* out) const {
  TESSERA_CHECK(begin >= 0 && count >= 0 && begin + count <= num_tokens());
  std::memcpy(out, tokens_.data() + begin, static_cast<size_t>(count) * sizeof(int32_t));
  return Status::Ok();
}

std::string ShardTokenSource::Describe() const {
  const std::vector<TokenShardInfo>& files = shards_->files();
  return "token shards " + shards_->path() + " (" + std::to_string(files.size()) +
         (files.size() == 1 ? " file, " : " files, ") + std::to_string(shards_->num_tokens()) +
         " tokens)";
}

const char* SplitName(Split split) { return split == Split::kTrain ? "train" : "val"; }

bool DataLoader::HasSplit(const DataConfig& config, Split split) {
  if (config.source == DataSource::kSynthetic || split == Split::kTrain) return true;
  return !config.val_path.empty();
}

Result<std::unique_ptr<DataLoader>> DataLoader::Open(const DataConfig& config, Split split,
                                                     int64_t vocab_size, int64_t seq_len,
                                                     uint64_t seed) {
  if (seq_len < 1) return InvalidArgument("seq_len must be >= 1, got " + std::to_string(seq_len));
  if (vocab_size < 1) {
    return InvalidArgument("vocab_size must be >= 1, got " + std::to_string(vocab_size));
  }
  // data.val, when set, names held-out shards for either source (config.h).
  const bool synthetic = config.source == DataSource::kSynthetic &&
                         !(split == Split::kVal && !config.val_path.empty());
  return synthetic ? OpenSynthetic(config, split, vocab_size, seq_len, seed)
                   : OpenShards(config, split, vocab_size, seq_len, seed);
}

Result<std::unique_ptr<DataLoader>> DataLoader::FromSource(std::unique_ptr<TokenSource> source,
                                                           int64_t seq_len, uint64_t seed,
                                                           std::optional<double> entropy_floor) {
  if (seq_len < 1) return InvalidArgument("seq_len must be >= 1, got " + std::to_string(seq_len));
  const int64_t windows = (source->num_tokens() - 1) / seq_len;
  if (windows < 1) {
    return InvalidArgument(source->Describe() + ": " + std::to_string(source->num_tokens()) +
                           " tokens is too few for one window of seq_len + 1 = " +
                           std::to_string(seq_len + 1) + " tokens");
  }
  std::unique_ptr<DataLoader> loader(new DataLoader());
  loader->source_ = std::move(source);
  loader->seq_len_ = seq_len;
  loader->seed_ = seed;
  loader->num_windows_ = windows;
  while ((int64_t{1} << (2 * loader->half_bits_)) < windows) ++loader->half_bits_;
  loader->entropy_floor_ = entropy_floor;
  loader->window_.resize(static_cast<size_t>(seq_len + 1));
  return loader;
}

int64_t DataLoader::WindowStart(int64_t epoch, int64_t index) const {
  TESSERA_CHECK(epoch >= 0 && index >= 0 && index < num_windows_);
  const uint64_t key = StreamKey(seed_, kDataOrderStream, static_cast<uint64_t>(epoch));
  // Cycle walking: re-apply the permutation of the power-of-4 domain until the value lands in
  // [0, W); this restricts a bijection of the big domain to a bijection of [0, W). The domain
  // is < 4 W, so fewer than 4 passes are expected.
  uint64_t x = static_cast<uint64_t>(index);
  do {
    x = Feistel(x, key, half_bits_);
  } while (x >= static_cast<uint64_t>(num_windows_));
  return static_cast<int64_t>(x) * seq_len_;
}

Status DataLoader::NextBatch(int64_t batch_size, int32_t* inputs, int32_t* targets) {
  TESSERA_CHECK(batch_size >= 0);
  const size_t T = static_cast<size_t>(seq_len_);
  for (int64_t b = 0; b < batch_size; ++b) {
    RETURN_IF_ERROR(source_->Read(WindowStart(position_.epoch, position_.index), seq_len_ + 1,
                                  window_.data()));
    std::memcpy(inputs + b * seq_len_, window_.data(), T * sizeof(int32_t));
    std::memcpy(targets + b * seq_len_, window_.data() + 1, T * sizeof(int32_t));
    Skip(1);
  }
  return Status::Ok();
}

void DataLoader::Skip(int64_t samples) {
  TESSERA_CHECK(samples >= 0);
  const int64_t total = position_.index + samples;
  position_.epoch += total / num_windows_;
  position_.index = total % num_windows_;
}

Status DataLoader::Seek(DataPosition p) {
  if (p.epoch < 0 || p.index < 0 || p.index >= num_windows_) {
    return InvalidArgument("data position {epoch " + std::to_string(p.epoch) + ", index " +
                           std::to_string(p.index) + "} is invalid for " +
                           std::to_string(num_windows_) +
                           " windows (was the checkpoint taken on different data or seq_len?)");
  }
  position_ = p;
  return Status::Ok();
}

std::string DataLoader::Describe() const {
  std::string s = source_->Describe() + ", " + std::to_string(num_windows_) + " windows of " +
                  std::to_string(seq_len_);
  if (entropy_floor_) s += ", floor " + FormatDouble("%.4f", *entropy_floor_) + " nats/token";
  return s;
}

}  // namespace tessera
