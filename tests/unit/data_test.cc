// The data layer: synthetic Markov corpus (entropy floor computed two ways), token shard files
// and their errors, the byte tokenizer, and the deterministic, resumable DataLoader.
// links: tessera_train
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "runtime/train/data/byte_tokenizer.h"
#include "runtime/train/data/data_loader.h"
#include "runtime/train/data/markov_chain.h"
#include "runtime/train/data/token_shard.h"
#include "runtime/train/data/token_shard_index.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

SyntheticDataConfig Syn(int64_t order, int64_t branching, float concentration = 1.0f,
                        uint64_t seed = 7) {
  SyntheticDataConfig c;
  c.order = order;
  c.branching = branching;
  c.concentration = concentration;
  c.seed = seed;
  return c;
}

std::unique_ptr<MarkovChain> BuildChain(const SyntheticDataConfig& c, int64_t vocab) {
  Result<std::unique_ptr<MarkovChain>> r = MarkovChain::Build(c, vocab);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

// A fresh, empty directory per test.
std::string TempDir(const std::string& name) {
  fs::path dir = fs::path(testing::TempDir()) / ("tessera_data_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

bool Contains(const Status& s, const std::string& needle) {
  return s.message().find(needle) != std::string::npos;
}

// ---- Markov chain --------------------------------------------------------------------------

void ExpectStationary(const MarkovChain& chain) {
  const std::vector<double>& pi = chain.stationary();
  ASSERT_EQ(static_cast<int64_t>(pi.size()), chain.num_states());
  EXPECT_NEAR(std::accumulate(pi.begin(), pi.end(), 0.0), 1.0, 1e-12);
  std::vector<double> next(pi.size(), 0.0);
  for (int64_t s = 0; s < chain.num_states(); ++s) {
    double row = 0.0;
    for (int32_t t : chain.Successors(s)) {
      const double p = chain.TransitionProb(s, t);
      EXPECT_GT(p, 0.0);
      row += p;
      next[static_cast<size_t>(chain.NextState(s, t))] += pi[static_cast<size_t>(s)] * p;
    }
    EXPECT_NEAR(row, 1.0, 1e-12);
  }
  double l1 = 0.0;
  for (size_t s = 0; s < pi.size(); ++s) l1 += std::fabs(next[s] - pi[s]);
  EXPECT_LT(l1, 1e-10);
}

TEST(MarkovChain, StationaryDistributionSumsToOneAndIsFixedByTransition) {
  ExpectStationary(*BuildChain(Syn(1, 4), 64));
  ExpectStationary(*BuildChain(Syn(2, 3), 16));
  ExpectStationary(*BuildChain(Syn(1, 2, 0.05f), 50));  // peaky but still converges
}

TEST(MarkovChain, SuccessorsIncludeNextTokenAndSelfLoopOnZero) {
  std::unique_ptr<MarkovChain> chain = BuildChain(Syn(1, 3), 10);
  for (int64_t s = 0; s < 10; ++s) {
    std::span<const int32_t> succ = chain->Successors(s);
    ASSERT_EQ(succ.size(), 3u);
    EXPECT_EQ(std::set<int32_t>(succ.begin(), succ.end()).size(), 3u);  // distinct
    EXPECT_GT(chain->TransitionProb(s, static_cast<int32_t>((s + 1) % 10)), 0.0);
  }
  EXPECT_GT(chain->TransitionProb(0, 0), 0.0);
}

// Empirical -mean log P(x_{t+1} | context) over a long stream under the true chain.
double EmpiricalCrossEntropy(const MarkovChain& chain, const std::vector<int32_t>& stream) {
  const int64_t k = chain.order();
  double nll = 0.0;
  for (size_t t = static_cast<size_t>(k); t < stream.size(); ++t) {
    const int64_t state = chain.StateOf({stream.data() + t - k, static_cast<size_t>(k)});
    nll -= std::log(chain.TransitionProb(state, stream[t]));
  }
  return nll / static_cast<double>(stream.size() - static_cast<size_t>(k));
}

TEST(MarkovChain, EntropyRateMatchesEmpiricalNegLogLikelihood) {
  for (int64_t order : {1, 2}) {
    std::unique_ptr<MarkovChain> chain = BuildChain(Syn(order, 4), order == 1 ? 64 : 24);
    std::vector<int32_t> stream(1 << 20);
    chain->Generate(0, stream);
    const double h = chain->entropy_rate();
    EXPECT_GT(h, 0.1);
    EXPECT_LT(h, std::log(4.0));
    EXPECT_NEAR(EmpiricalCrossEntropy(*chain, stream), h, 0.01 * h) << "order " << order;
  }
}

TEST(MarkovChain, Order2FirstPositionHasHigherEntropy) {
  std::unique_ptr<MarkovChain> chain = BuildChain(Syn(2, 4), 16);
  const double h = chain->entropy_rate(), h1 = chain->FirstPositionEntropy();
  EXPECT_GT(h1, h + 0.05);
  EXPECT_DOUBLE_EQ(chain->EntropyFloor(1), h1);
  EXPECT_NEAR(chain->EntropyFloor(64), (h1 + 63 * h) / 64, 1e-12);
  EXPECT_GT(chain->EntropyFloor(64), h);
  // H(X1 | X0) two ways: exact vs -mean log P(x1 | x0) with P from the stationary joint.
  std::vector<int32_t> stream(1 << 19);
  chain->Generate(1, stream);
  const std::vector<double>& pi = chain->stationary();
  std::vector<double> marginal(16, 0.0);
  for (int64_t s = 0; s < 256; ++s) marginal[static_cast<size_t>(s / 16)] += pi[static_cast<size_t>(s)];
  double nll = 0.0;
  for (size_t t = 1; t < stream.size(); ++t) {
    const double joint = pi[static_cast<size_t>(stream[t - 1] * 16 + stream[t])];
    nll -= std::log(joint / marginal[static_cast<size_t>(stream[t - 1])]);
  }
  EXPECT_NEAR(nll / static_cast<double>(stream.size() - 1), h1, 0.01 * h1);

  std::unique_ptr<MarkovChain> order1 = BuildChain(Syn(1, 4), 16);
  EXPECT_DOUBLE_EQ(order1->EntropyFloor(1), order1->entropy_rate());
  EXPECT_DOUBLE_EQ(order1->EntropyFloor(64), order1->entropy_rate());
}

TEST(MarkovChain, StreamsAreDeterministicPerSeedAndSplit) {
  std::vector<int32_t> a(4096), b(4096), c(4096), d(4096);
  BuildChain(Syn(1, 4, 1.0f, 7), 64)->Generate(0, a);
  BuildChain(Syn(1, 4, 1.0f, 7), 64)->Generate(0, b);
  BuildChain(Syn(1, 4, 1.0f, 8), 64)->Generate(0, c);
  BuildChain(Syn(1, 4, 1.0f, 7), 64)->Generate(1, d);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  for (int32_t t : a) ASSERT_TRUE(t >= 0 && t < 64);
}

TEST(MarkovChain, BranchingOneIsADeterministicCycle) {
  std::unique_ptr<MarkovChain> chain = BuildChain(Syn(2, 1), 8);
  EXPECT_NEAR(chain->entropy_rate(), 0.0, 1e-15);
  std::vector<int32_t> s(20);
  chain->Generate(0, s);
  for (size_t t = 2; t < s.size(); ++t) EXPECT_EQ(s[t], (s[t - 1] + 1) % 8);
}

TEST(MarkovChain, GeneratesAMillionTokensFast) {
  std::unique_ptr<MarkovChain> chain = BuildChain(Syn(2, 8), 256);
  std::vector<int32_t> stream(1 << 20);
  auto t0 = std::chrono::steady_clock::now();
  chain->Generate(0, stream);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("1M tokens (order 2, V=256, b=8) in %.1f ms; chain took %lld power iterations\n",
              ms, static_cast<long long>(chain->power_iterations()));
  EXPECT_LT(ms, 1000.0);  // typically 50-250 ms; generous for a shared, loaded machine
}

TEST(MarkovChain, RejectsBadSettings) {
  EXPECT_EQ(MarkovChain::Build(Syn(2, 4), 5000).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(MarkovChain::Build(Syn(2, 4), 5000).status(), "4096"));
  EXPECT_EQ(MarkovChain::Build(Syn(1, 65), 64).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MarkovChain::Build(Syn(3, 4), 64).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MarkovChain::Build(Syn(1, 4, 0.0f), 64).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MarkovChain::Build(Syn(1, 4096), 8192).status().code(),
            StatusCode::kInvalidArgument);  // 2^25 transitions
}

// ---- Token shards --------------------------------------------------------------------------

TEST(TokenShard, RoundTripsTwoAndFourByteTokens) {
  const std::string dir = TempDir("roundtrip");
  for (int token_bytes : {2, 4}) {
    std::vector<int32_t> tokens(1000);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>((i * 7919) % (token_bytes == 2 ? 65536 : 1000003));
    }
    const std::string path = dir + "/t" + std::to_string(token_bytes) + ".bin";
    ASSERT_TRUE(WriteTokenShard(path, tokens, token_bytes, 0).ok());
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    EXPECT_EQ(static_cast<int64_t>(fs::file_size(path)), 32 + 1000 * token_bytes);
    ASSERT_TRUE(IndexTokenShardDirectory(dir).ok());
    Result<std::unique_ptr<TokenShardSet>> set = TokenShardSet::Open(path, 0);
    ASSERT_TRUE(set.ok()) << set.status().message();
    ASSERT_EQ((*set)->num_tokens(), 1000);
    EXPECT_EQ((*set)->files()[0].token_bytes, token_bytes);
    std::vector<int32_t> back(1000);
    EXPECT_TRUE((*set)->Read(0, 1000, back.data()).ok());
    EXPECT_EQ(back, tokens);
  }
  // The header bytes, exactly.
  const std::string bytes = ReadBytes(dir + "/t2.bin");
  EXPECT_EQ(bytes.substr(0, 8), "TSRTOKEN");
  uint32_t version, token_bytes, vocab, reserved;
  uint64_t n;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&token_bytes, bytes.data() + 12, 4);
  std::memcpy(&n, bytes.data() + 16, 8);
  std::memcpy(&vocab, bytes.data() + 24, 4);
  std::memcpy(&reserved, bytes.data() + 28, 4);
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(token_bytes, 2u);
  EXPECT_EQ(n, 1000u);
  EXPECT_EQ(vocab, 0u);
  EXPECT_EQ(reserved, 0u);
}

TEST(TokenShard, CorruptAndMissingFilesGiveClearErrors) {
  const std::string dir = TempDir("errors");
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::string good = dir + "/good.bin";
  ASSERT_TRUE(WriteTokenShard(good, tokens, 2, 16).ok());
  const std::string bytes = ReadBytes(good);

  const std::string bad_magic = dir + "/bad_magic.bin";
  WriteBytes(bad_magic, "NOTATOKEN" + bytes.substr(9));
  Status s = TokenShardSet::Open(bad_magic, 0).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), bad_magic + ": not a Tessera token shard (bad magic)");

  const std::string truncated = dir + "/truncated.bin";
  WriteBytes(truncated, bytes.substr(0, bytes.size() - 3));
  s = TokenShardSet::Open(truncated, 0).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(),
            truncated + ": truncated: header says 8 tokens (48 bytes) but file has 45 bytes");

  std::string v2 = bytes;
  v2[8] = 2;
  const std::string wrong_version = dir + "/v2.bin";
  WriteBytes(wrong_version, v2);
  s = TokenShardSet::Open(wrong_version, 0).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, wrong_version + ": unsupported token shard version 2")) << s.message();

  s = TokenShardSet::Open(dir + "/nope.bin", 0).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s, dir + "/nope.bin")) << s.message();

  // Token ids checked against the model's vocabulary at open: header vocab too big, then a
  // stray id in a shard whose header says nothing about its vocabulary.
  const std::string stray = dir + "/stray.bin";
  ASSERT_TRUE(WriteTokenShard(stray, {{0, 1, 2, 300, 4}}, 2, 0).ok());
  ASSERT_TRUE(WriteTokenShardIndex(dir, {"good.bin", "stray.bin"}).ok());
  EXPECT_TRUE(TokenShardSet::Open(good, 16).ok());
  s = TokenShardSet::Open(good, 8).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, good + ": shard vocab_size 16 exceeds")) << s.message();
  EXPECT_TRUE(TokenShardSet::Open(stray, 301).ok());
  s = TokenShardSet::Open(stray, 256).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), stray + ": token id 300 at position 3 is >= vocab_size 256");

  // The writer refuses ids that do not fit, and leaves no temporary file behind.
  EXPECT_EQ(WriteTokenShard(dir + "/big.bin", {{70000}}, 2, 0).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir + "/big.bin.tmp"));
}

TEST(TokenShard, DirectoryAndPatternConcatenateSortedFiles) {
  const std::string dir = TempDir("concat");
  ASSERT_TRUE(WriteTokenShard(dir + "/b.bin", {{10, 11, 12}}, 4, 0).ok());
  ASSERT_TRUE(WriteTokenShard(dir + "/a.bin", {{0, 1}}, 2, 0).ok());
  ASSERT_TRUE(WriteTokenShard(dir + "/c.bin", {}, 2, 0).ok());  // empty shards are fine
  ASSERT_TRUE(WriteTokenShard(dir + "/d.bin", {{20, 21, 22, 23}}, 2, 0).ok());
  WriteBytes(dir + "/notes.txt", "ignored");
  ASSERT_TRUE(IndexTokenShardDirectory(dir).ok());
  Result<std::unique_ptr<TokenShardSet>> set = TokenShardSet::Open(dir, 0);
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ((*set)->files().size(), 4u);
  std::vector<int32_t> all(9);
  EXPECT_TRUE((*set)->Read(0, 9, all.data()).ok());
  EXPECT_EQ(all, (std::vector<int32_t>{0, 1, 10, 11, 12, 20, 21, 22, 23}));
  std::vector<int32_t> middle(4);
  EXPECT_TRUE((*set)->Read(1, 4, middle.data()).ok());  // crosses a, b and (empty) c into d
  EXPECT_EQ(middle, (std::vector<int32_t>{1, 10, 11, 12}));

  set = TokenShardSet::Open(dir + "/[ab]*.bin", 0);  // no file matches this literal pattern
  EXPECT_EQ(set.status().code(), StatusCode::kNotFound);
  set = TokenShardSet::Open(dir + "/*d.bin", 0);
  ASSERT_TRUE(set.ok());
  EXPECT_EQ((*set)->num_tokens(), 4);
  EXPECT_EQ(TokenShardSet::Open(TempDir("empty_dir"), 0).status().code(), StatusCode::kNotFound);
}

// ---- Byte tokenizer ------------------------------------------------------------------------

TEST(ByteTokenizer, RoundTripsBytesAndSplitsValidation) {
  const std::string dir = TempDir("tokenizer");
  std::string text_a = "Hello, Tessera!\n";
  std::string text_b;
  for (int i = 0; i < 84; ++i) text_b.push_back(static_cast<char>(i * 3));  // includes 0, >127
  WriteBytes(dir + "/a.txt", text_a);
  WriteBytes(dir + "/b.txt", text_b);
  const std::string out = dir + "/out";
  TokenizeStats stats;
  Status s = TokenizeFiles({dir + "/a.txt", dir + "/b.txt"}, out, 0.1, 32, &stats);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(stats.input_bytes, 100);
  EXPECT_EQ(stats.val_tokens, 10);
  EXPECT_EQ(stats.train_tokens, 90);
  EXPECT_EQ(stats.train_files.size(), 3u);  // 32 + 32 + 26
  EXPECT_EQ(stats.val_files, std::vector<std::string>{out + "/val_000000.bin"});
  EXPECT_TRUE(fs::exists(out + "/train_000002.bin"));

  const std::string all = text_a + text_b;
  Result<std::unique_ptr<TokenShardSet>> train = TokenShardSet::Open(out + "/train_*.bin", kByteVocabSize);
  Result<std::unique_ptr<TokenShardSet>> val = TokenShardSet::Open(out + "/val_*.bin", kByteVocabSize);
  ASSERT_TRUE(train.ok() && val.ok()) << train.status().message() << val.status().message();
  EXPECT_EQ((*train)->files()[0].vocab_size, 256u);
  std::vector<int32_t> tokens(90), val_tokens(10);
  EXPECT_TRUE((*train)->Read(0, 90, tokens.data()).ok());
  EXPECT_TRUE((*val)->Read(0, 10, val_tokens.data()).ok());
  EXPECT_EQ(DecodeBytes(tokens.data(), 90), all.substr(0, 90));
  EXPECT_EQ(DecodeBytes(val_tokens.data(), 10), all.substr(90));

  // Never mixes with an earlier run; missing inputs are named.
  EXPECT_EQ(TokenizeFiles({dir + "/a.txt"}, out, 0.0, 32, nullptr).code(),
            StatusCode::kFailedPrecondition);
  s = TokenizeFiles({dir + "/missing.txt"}, dir + "/out2", 0.0, 32, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s, dir + "/missing.txt"));
  // val_fraction 0: no val shard at all.
  ASSERT_TRUE(TokenizeFiles({dir + "/a.txt"}, dir + "/out3", 0.0, 1000, &stats).ok());
  EXPECT_TRUE(stats.val_files.empty());
  EXPECT_EQ(stats.train_tokens, static_cast<int64_t>(text_a.size()));
}

// Names in `dir` that a tokenizer run would leave: shards or their temporaries.
std::vector<std::string> ShardLeftovers(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0) names.push_back(name);
  }
  return names;
}

TEST(ByteTokenizer, FailureAfterCommittedShardsLeavesNothingBehind) {
  // Linux /proc files are regular files that stat as 0 bytes: /proc/self/status then reads
  // more bytes than announced (the late "inputs changed" check fails) and /proc/self/mem fails
  // to read at offset 0 (EIO). Both come after a.txt, which commits three shards first.
  if (!fs::exists("/proc/self/status")) GTEST_SKIP() << "needs Linux /proc";
  const std::string dir = TempDir("tokenizer_all_or_nothing");
  WriteBytes(dir + "/a.txt", std::string(100, 'x'));
  const std::string out = dir + "/out";
  struct Case {
    const char* input;
    const char* phrase;
  };
  for (const Case& c : {Case{"/proc/self/status", "inputs changed"},
                        Case{"/proc/self/mem", "/proc/self/mem: read failed"}}) {
    SCOPED_TRACE(c.input);
    TokenizeStats stats;
    Status s = TokenizeFiles({dir + "/a.txt", c.input}, out, 0.0, 32, &stats);
    EXPECT_EQ(s.code(), StatusCode::kIoError);
    EXPECT_TRUE(Contains(s, c.phrase)) << s.message();
    EXPECT_TRUE(stats.train_files.empty() && stats.val_files.empty());
    EXPECT_EQ(ShardLeftovers(out), std::vector<std::string>{});
  }
  // The retry is not refused and produces the full set.
  TokenizeStats stats;
  Status s = TokenizeFiles({dir + "/a.txt"}, out, 0.0, 32, &stats);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(stats.train_files.size(), 4u);  // 32 + 32 + 32 + 4
  EXPECT_EQ(ShardLeftovers(out).size(), 4u);
}

// ---- DataLoader ----------------------------------------------------------------------------

// A loader over tokens 0, 1, ..., n - 1, so every window is recognisable.
std::unique_ptr<DataLoader> IotaLoader(int64_t n, int64_t seq_len, uint64_t seed) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), 0);
  Result<std::unique_ptr<DataLoader>> r = DataLoader::FromSource(
      std::make_unique<InMemoryTokenSource>(std::move(tokens), "iota"), seq_len, seed,
      std::nullopt);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

TEST(DataLoader, TargetsAreInputsShiftedByOne) {
  std::unique_ptr<DataLoader> loader = IotaLoader(1001, 10, 3);
  EXPECT_EQ(loader->num_windows(), 100);
  EXPECT_EQ(loader->tokens_per_epoch(), 1000);
  std::vector<int32_t> in(4 * 10), tgt(4 * 10);
  EXPECT_TRUE(loader->NextBatch(4, in.data(), tgt.data()).ok());
  for (int b = 0; b < 4; ++b) {
    EXPECT_EQ(in[static_cast<size_t>(b * 10)] % 10, 0);  // windows start on the stride
    for (int t = 0; t < 10; ++t) {
      const size_t i = static_cast<size_t>(b * 10 + t);
      EXPECT_EQ(in[i], in[static_cast<size_t>(b * 10)] + t);
      EXPECT_EQ(tgt[i], in[i] + 1);
    }
  }
}

TEST(DataLoader, EachEpochIsAPermutationAndEpochsDiffer) {
  std::unique_ptr<DataLoader> loader = IotaLoader(1 + 37 * 8, 8, 11);  // 37 windows: not 4^k
  std::vector<int32_t> in(37 * 8), tgt(37 * 8);
  std::vector<std::vector<int32_t>> starts;
  for (int epoch = 0; epoch < 2; ++epoch) {
    EXPECT_EQ(loader->position(), (DataPosition{epoch, 0}));
    EXPECT_TRUE(loader->NextBatch(37, in.data(), tgt.data()).ok());
    std::vector<int32_t> s;
    for (int b = 0; b < 37; ++b) s.push_back(in[static_cast<size_t>(b * 8)] / 8);
    std::vector<int32_t> sorted = s;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int32_t> expected(37);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(sorted, expected) << "epoch " << epoch;
    starts.push_back(s);
  }
  EXPECT_NE(starts[0], starts[1]);
  EXPECT_EQ(loader->position(), (DataPosition{2, 0}));
  // A batch straddling the epoch boundary continues into the next epoch's order.
  loader->Reset();
  loader->Skip(35);
  EXPECT_TRUE(loader->NextBatch(4, in.data(), tgt.data()).ok());
  EXPECT_EQ(in[0] / 8, starts[0][35]);
  EXPECT_EQ(in[8] / 8, starts[0][36]);
  EXPECT_EQ(in[16] / 8, starts[1][0]);
  EXPECT_EQ(in[24] / 8, starts[1][1]);
  EXPECT_EQ(loader->position(), (DataPosition{1, 2}));
}

TEST(DataLoader, SeekResumesTheExactSameStream) {
  DataConfig config;  // synthetic defaults
  config.synthetic.num_tokens = 20000;
  auto open = [&](uint64_t seed) {
    Result<std::unique_ptr<DataLoader>> r = DataLoader::Open(config, Split::kTrain, 64, 16, seed);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return std::move(r).value();
  };
  const int64_t B = 96, T = 16;  // 1249 windows: 10 batches roll over into epoch 1
  std::unique_ptr<DataLoader> full = open(5);
  std::vector<std::vector<int32_t>> inputs, targets;
  std::vector<int32_t> in(B * T), tgt(B * T);
  for (int i = 0; i < 14; ++i) {
    EXPECT_TRUE(full->NextBatch(B, in.data(), tgt.data()).ok());
    inputs.push_back(in);
    targets.push_back(tgt);
  }
  EXPECT_EQ(full->position().epoch, 1);

  std::unique_ptr<DataLoader> first = open(5);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(first->NextBatch(B, in.data(), tgt.data()).ok());
  const DataPosition saved = first->position();
  first.reset();
  std::unique_ptr<DataLoader> resumed = open(5);
  ASSERT_TRUE(resumed->Seek(saved).ok());
  for (int i = 4; i < 14; ++i) {
    EXPECT_TRUE(resumed->NextBatch(B, in.data(), tgt.data()).ok());
    EXPECT_EQ(in, inputs[static_cast<size_t>(i)]) << "batch " << i;
    EXPECT_EQ(tgt, targets[static_cast<size_t>(i)]) << "batch " << i;
  }
  // A different sampling seed gives a different order over the same tokens.
  std::unique_ptr<DataLoader> other = open(6);
  EXPECT_TRUE(other->NextBatch(B, in.data(), tgt.data()).ok());
  EXPECT_NE(in, inputs[0]);
  EXPECT_EQ(resumed->Seek({0, resumed->num_windows()}).code(), StatusCode::kInvalidArgument);
}

TEST(DataLoader, ValSplitIsTheSameWhetherItsChainWasBuiltOrHandedOver) {
  // Opening train then val hands the train split's chain to val (data_loader.cc); a val
  // loader whose chain was built on its own must produce identical batches.
  DataConfig config;
  config.synthetic.num_tokens = 4000;
  config.synthetic.order = 2;
  config.synthetic.branching = 3;
  auto batch = [](DataLoader& loader) {
    std::vector<int32_t> in(4 * 8), tgt(4 * 8);
    EXPECT_TRUE(loader.NextBatch(4, in.data(), tgt.data()).ok());
    return in;
  };
  Result<std::unique_ptr<DataLoader>> alone = DataLoader::Open(config, Split::kVal, 40, 8, 3);
  ASSERT_TRUE(alone.ok()) << alone.status().message();
  config.synthetic.seed = 99;  // a different chain in between must not be handed to val
  ASSERT_TRUE(DataLoader::Open(config, Split::kTrain, 40, 8, 3).ok());
  config.synthetic.seed = SyntheticDataConfig().seed;
  Result<std::unique_ptr<DataLoader>> train = DataLoader::Open(config, Split::kTrain, 40, 8, 3);
  Result<std::unique_ptr<DataLoader>> handed = DataLoader::Open(config, Split::kVal, 40, 8, 3);
  ASSERT_TRUE(train.ok() && handed.ok());
  EXPECT_EQ((*handed)->entropy_floor(), (*alone)->entropy_floor());
  EXPECT_EQ((*handed)->Describe(), (*alone)->Describe());
  EXPECT_EQ(batch(**handed), batch(**alone));
  // A different vocab is a different chain.
  Result<std::unique_ptr<DataLoader>> other = DataLoader::Open(config, Split::kVal, 41, 8, 3);
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)->entropy_floor(), (*alone)->entropy_floor());
}

TEST(DataLoader, OpensSyntheticAndShardSplits) {
  DataConfig config;
  config.synthetic.num_tokens = 5000;
  config.synthetic.order = 2;
  Result<std::unique_ptr<DataLoader>> train = DataLoader::Open(config, Split::kTrain, 32, 8, 1);
  Result<std::unique_ptr<DataLoader>> val = DataLoader::Open(config, Split::kVal, 32, 8, 1);
  ASSERT_TRUE(train.ok() && val.ok()) << train.status().message();
  ASSERT_TRUE((*train)->entropy_floor().has_value());
  EXPECT_EQ((*train)->entropy_floor(), (*val)->entropy_floor());
  EXPECT_GT(*(*train)->entropy_floor(), 0.0);
  const std::string description = (*train)->Describe();
  std::printf("%s\n", description.c_str());
  EXPECT_NE(description.find("order 2"), std::string::npos);
  EXPECT_NE(description.find("nats/token"), std::string::npos);
  std::vector<int32_t> a(8), b(8), c(8), d(8);
  EXPECT_TRUE((*train)->NextBatch(1, a.data(), b.data()).ok());
  EXPECT_TRUE((*val)->NextBatch(1, c.data(), d.data()).ok());
  EXPECT_NE(a, c);  // different streams
  EXPECT_TRUE(DataLoader::HasSplit(config, Split::kVal));
  EXPECT_EQ(DataLoader::Open(config, Split::kTrain, 32, 5000, 1).status().code(),
            StatusCode::kInvalidArgument);

  const std::string dir = TempDir("loader_shards");
  std::vector<int32_t> tokens(300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 50);
  ASSERT_TRUE(WriteTokenShard(dir + "/train.bin", tokens, 2, 50).ok());
  ASSERT_TRUE(IndexTokenShardDirectory(dir).ok());
  DataConfig shards;
  shards.source = DataSource::kShards;
  shards.train_path = dir + "/train.bin";
  EXPECT_FALSE(DataLoader::HasSplit(shards, Split::kVal));
  EXPECT_EQ(DataLoader::Open(shards, Split::kVal, 64, 8, 1).status().code(),
            StatusCode::kFailedPrecondition);
  Result<std::unique_ptr<DataLoader>> loader = DataLoader::Open(shards, Split::kTrain, 64, 8, 1);
  ASSERT_TRUE(loader.ok()) << loader.status().message();
  EXPECT_FALSE((*loader)->entropy_floor().has_value());
  EXPECT_EQ((*loader)->num_windows(), 37);
  Status s = DataLoader::Open(shards, Split::kTrain, 40, 8, 1).status();  // vocab too small
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = DataLoader::Open(shards, Split::kTrain, 64, 300, 1).status();  // too few tokens
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, shards.train_path) && Contains(s, "300 tokens")) << s.message();

  // Synthetic training with held-out shards for evaluation.
  config.val_path = shards.train_path;
  Result<std::unique_ptr<DataLoader>> held_out = DataLoader::Open(config, Split::kVal, 64, 8, 1);
  ASSERT_TRUE(held_out.ok()) << held_out.status().message();
  EXPECT_EQ((*held_out)->source().num_tokens(), 300);
  EXPECT_FALSE((*held_out)->entropy_floor().has_value());
}

}  // namespace
}  // namespace tessera
