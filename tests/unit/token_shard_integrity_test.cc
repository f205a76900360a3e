// Token shards that cannot be trusted are refused: the completion index (index.json) vouches
// for a shard set at open (missing, malformed, a file added, removed, resized or with other
// bytes), and every read after open fails with kDataLoss naming the file and token position
// when a shard is truncated or rewritten underneath the reader — never SIGBUS.
// links: tessera_train
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>

#include "runtime/core/crc32c.h"
#include "runtime/train/data/byte_tokenizer.h"
#include "runtime/train/data/data_loader.h"
#include "runtime/train/data/token_shard.h"
#include "runtime/train/data/token_shard_index.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  fs::path dir = fs::path(testing::TempDir()) / ("tessera_shard_integrity_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Overwrites bytes at `offset` in place (same inode, same size), as an editor or a buggy
// writer would.
void OverwriteAt(const std::string& path, int64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Sets the modification time an hour back, so a later write is seen as a change even on a
// file system whose timestamps tick coarsely (a test writes within the same millisecond).
void AgeFile(const std::string& path) {
  fs::last_write_time(path, fs::last_write_time(path) - std::chrono::hours(1));
}

bool Contains(const Status& s, const std::string& needle) {
  return s.message().find(needle) != std::string::npos;
}

std::vector<int32_t> Iota(int64_t n, int32_t modulo) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i % modulo);
  return v;
}

// ---- The index ------------------------------------------------------------------------------

TEST(TokenShardIndex, TokenizeWritesAnIndexOfEveryShardWithCountsAndChecksums) {
  const std::string dir = TempDir("tokenize_index");
  WriteBytes(dir + "/a.txt", std::string(100, 'a') + std::string(20, 'b'));
  TokenizeStats stats;
  ASSERT_TRUE(TokenizeFiles({dir + "/a.txt"}, dir + "/out", 0.1, 40, &stats).ok());
  Result<TokenShardIndex> index = ReadTokenShardIndex(dir + "/out");
  ASSERT_TRUE(index.ok()) << index.status().message();
  ASSERT_EQ(index->files.size(), 4u);  // train 40 + 40 + 28, val 12
  const TokenShardIndexEntry& val = index->files[3];
  EXPECT_EQ(val.name, "val_000000.bin");
  EXPECT_EQ(val.split, "val");
  EXPECT_EQ(index->files[0].split, "train");
  EXPECT_EQ(val.num_tokens, 12);
  EXPECT_EQ(val.token_bytes, 2);
  EXPECT_EQ(val.vocab_size, 256u);
  const std::string bytes = ReadBytes(dir + "/out/val_000000.bin");
  EXPECT_EQ(val.bytes, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(val.crc32c, Crc32c(bytes.data(), bytes.size()));
  EXPECT_FALSE(fs::exists(dir + "/out/index.json.tmp"));
  // The index is the completion mark: tokenize never writes into a directory that has one.
  for (const std::string& f : stats.train_files) fs::remove(f);
  for (const std::string& f : stats.val_files) fs::remove(f);
  EXPECT_EQ(TokenizeFiles({dir + "/a.txt"}, dir + "/out", 0.1, 40, nullptr).code(),
            StatusCode::kFailedPrecondition);
}

TEST(TokenShardIndex, JsonRoundTripsAndMalformedIndexesAreRefusedWithThePath) {
  TokenShardIndex index;
  index.files.push_back({"a.bin", "", 4, 0, 7, 60, 0xFFFFFFFFu});
  index.files.push_back({"train_1.bin", "train", 2, 50257, 1, 34, 12345});
  Result<TokenShardIndex> back = ParseTokenShardIndex(TokenShardIndexToJson(index), "I");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->files, index.files);

  struct Case {
    std::string json, phrase;
  };
  const std::string head = "{\"format\":\"tessera-token-shard-index\",\"version\":1,\"files\":[";
  const std::string entry =
      "\"split\":\"\",\"token_bytes\":2,\"vocab_size\":0,\"num_tokens\":1,\"bytes\":34,"
      "\"crc32c\":1";
  for (const Case& c : {
           Case{"not json", "JSON error"},
           Case{"[]", "not a JSON object"},
           Case{"{\"format\":\"other\",\"version\":1,\"files\":[]}", "format is \"other\""},
           Case{head + "], \"extra\": 1}", "unknown key \"extra\""},
           Case{head + "{\"name\":\"x.bin\"," + entry + ",\"typo\":1}]}", "unknown key \"typo\""},
           Case{head + "{\"name\":\"../x.bin\"," + entry + "}]}", "not a file name"},
           Case{head + "{\"name\":\"x.bin\"," + entry + "},{\"name\":\"x.bin\"," + entry + "}]}",
                "listed twice"},
           Case{head + "{\"name\":\"x.bin\",\"num_tokens\":-1}]}", "\"split\""},
           Case{"{\"format\":\"tessera-token-shard-index\",\"version\":2,\"files\":[]}",
                "version 2"},
       }) {
    Status s = ParseTokenShardIndex(c.json, "dir/index.json").status();
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << c.json;
    EXPECT_TRUE(Contains(s, "dir/index.json: malformed shard index")) << s.message();
    EXPECT_TRUE(Contains(s, c.phrase)) << c.json << " -> " << s.message();
  }
}

// A directory of three shards (train_0, train_1, val_0) and its index.
std::string IndexedSet(const std::string& name) {
  const std::string dir = TempDir(name);
  EXPECT_TRUE(WriteTokenShard(dir + "/train_0.bin", Iota(100, 50), 2, 50).ok());
  EXPECT_TRUE(WriteTokenShard(dir + "/train_1.bin", Iota(80, 50), 2, 50).ok());
  EXPECT_TRUE(WriteTokenShard(dir + "/val_0.bin", Iota(60, 50), 2, 50).ok());
  EXPECT_TRUE(IndexTokenShardDirectory(dir).ok());
  return dir;
}

TEST(TokenShardHeader, ChecksOnBytesInMemoryAgainstTheFileSizeAsOpenDoes) {
  const std::string dir = TempDir("header");
  const std::string path = dir + "/train_000000.bin";
  ASSERT_TRUE(WriteTokenShard(path, Iota(10, 50), 2, 50).ok());
  const std::string bytes = ReadBytes(path);
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  Result<TokenShardInfo> info =
      ParseTokenShardHeader({u, kTokenShardHeaderBytes}, static_cast<int64_t>(bytes.size()), "s");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->num_tokens, 10);
  EXPECT_EQ(info->token_bytes, 2);
  EXPECT_EQ(info->vocab_size, 50u);
  // One byte more or less than the header promises, and a file too short to hold the magic.
  for (int64_t size : {int64_t{51}, int64_t{53}}) {
    Result<TokenShardInfo> r = ParseTokenShardHeader({u, kTokenShardHeaderBytes}, size, "s");
    ASSERT_FALSE(r.ok()) << size;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_TRUE(Contains(r.status(), "s: ")) << r.status().message();
  }
  Result<TokenShardInfo> tiny = ParseTokenShardHeader({u, 5}, 5, "s");
  EXPECT_TRUE(Contains(tiny.status(), "bad magic")) << tiny.status().message();
}

TEST(TokenShardSet, RefusesAShardSetWithoutAnIndexAndSaysHowToMakeOne) {
  const std::string dir = IndexedSet("no_index");
  ASSERT_TRUE(TokenShardSet::Open(dir + "/train_*.bin", 64).ok());
  fs::remove(dir + "/index.json");  // as a tokenize killed before its last write leaves it
  for (const std::string& path : {dir + "/train_*.bin", dir, dir + "/val_0.bin"}) {
    Status s = TokenShardSet::Open(path, 64).status();
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << path;
    EXPECT_TRUE(Contains(s, dir + "/index.json: missing")) << s.message();
    EXPECT_TRUE(Contains(s, "tessera data index " + dir)) << s.message();
  }
  // An index that is not a regular file is refused without blocking on it.
  ASSERT_EQ(::mkfifo((dir + "/index.json").c_str(), 0644), 0);
  Status s = TokenShardSet::Open(dir, 64).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, "index.json: is a FIFO, not a regular file")) << s.message();
  fs::remove(dir + "/index.json");
  ASSERT_TRUE(IndexTokenShardDirectory(dir).ok());
  EXPECT_TRUE(TokenShardSet::Open(dir, 64).ok());
}

TEST(TokenShardSet, RefusesAShardSetItsIndexDisagreesWith) {
  struct Case {
    const char* what;
    std::function<void(const std::string& dir)> damage;
    std::string selection, phrase;
  };
  const std::vector<Case> cases = {
      {"a byte flipped in a shard",
       [](const std::string& d) { OverwriteAt(d + "/train_1.bin", 40, std::string(1, '\x07')); },
       "/train_*.bin", "train_1.bin: CRC-32C"},
      {"a shard removed", [](const std::string& d) { fs::remove(d + "/train_1.bin"); },
       "/train_*.bin", "lists train_1.bin (80 tokens), which"},
      {"a shard added",
       [](const std::string& d) { fs::copy_file(d + "/train_0.bin", d + "/train_2.bin"); },
       "/train_*.bin", "train_2.bin: not listed in"},
      {"a count edited in the index",
       [](const std::string& d) {
         std::string json = ReadBytes(d + "/index.json");
         const size_t at = json.find("\"num_tokens\":80");
         json.replace(at, 15, "\"num_tokens\":81");
         WriteBytes(d + "/index.json", json);
       },
       "/train_*.bin", "train_1.bin: disagrees with"},
      {"a shard shortened, header and all",
       [](const std::string& d) {
         std::vector<int32_t> fewer = Iota(79, 50);
         ASSERT_TRUE(WriteTokenShard(d + "/train_1.bin", fewer, 2, 50).ok());
       },
       "/train_*.bin", "size (bytes) is 190 in the file but 192 in the index"},
      {"the index replaced by garbage",
       [](const std::string& d) { WriteBytes(d + "/index.json", "{\"files\": 3"); }, "",
       "index.json: malformed shard index"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string dir = IndexedSet("disagree");
    c.damage(dir);
    Status s = TokenShardSet::Open(dir + c.selection, 64).status();
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_TRUE(Contains(s, c.phrase)) << s.message();
    // After an intended change, `tessera data index` makes the set usable again.
    ASSERT_TRUE(IndexTokenShardDirectory(dir).ok());
    EXPECT_TRUE(TokenShardSet::Open(dir + c.selection, 64).ok());
  }
  // A file the selection does not match may come and go: it is not part of this set.
  const std::string dir = IndexedSet("unrelated");
  fs::remove(dir + "/val_0.bin");
  EXPECT_TRUE(TokenShardSet::Open(dir + "/train_*.bin", 64).ok());
  EXPECT_EQ(TokenShardSet::Open(dir, 64).status().code(), StatusCode::kDataLoss);
}

TEST(TokenShardSet, IndexingRefusesAShardThatIsNotWhole) {
  const std::string dir = IndexedSet("index_refuses");
  const std::string bytes = ReadBytes(dir + "/train_1.bin");
  WriteBytes(dir + "/train_1.bin", bytes.substr(0, bytes.size() - 2));
  Result<TokenShardIndex> index = IndexTokenShardDirectory(dir);
  EXPECT_EQ(index.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(index.status(), dir + "/train_1.bin: truncated")) << index.status().message();
  // The previous index is untouched (the new one is written only after every shard scanned).
  Result<TokenShardIndex> old = ReadTokenShardIndex(dir);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->Find("train_1.bin")->bytes, static_cast<int64_t>(bytes.size()));
  // An id above the header's own vocab_size is damage, not a model mismatch.
  std::string ids = ReadBytes(dir + "/train_0.bin");
  ids[32 + 2 * 7] = 60;  // token 7: 60 >= vocab_size 50
  WriteBytes(dir + "/train_0.bin", ids);
  index = WriteTokenShardIndex(dir, {"train_0.bin"});
  EXPECT_EQ(index.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(index.status(), "token id 60 at position 7 is >= the vocab_size 50"))
      << index.status().message();
}

// ---- Reads after open ------------------------------------------------------------------------

TEST(TokenShardSet, ATruncatedShardFailsTheNextReadWithFileAndPositionNotSigbus) {
  const std::string dir = TempDir("truncate_after_open");
  const std::string path = dir + "/train.bin";
  ASSERT_TRUE(WriteTokenShard(path, Iota(100000, 256), 2, 256).ok());  // 49 pages
  ASSERT_TRUE(IndexTokenShardDirectory(dir).ok());
  Result<std::unique_ptr<TokenShardSet>> set = TokenShardSet::Open(path, 256);
  ASSERT_TRUE(set.ok()) << set.status().message();
  std::vector<int32_t> window(65);
  ASSERT_TRUE((*set)->Read(90000, 65, window.data()).ok());
  EXPECT_EQ(window[0], 90000 % 256);

  fs::resize_file(path, 32 + 2 * 50000);  // half the tokens gone, mid-run
  // A window past the new end: the read itself comes up short.
  Status s = (*set)->Read(90000, 65, window.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), path + ": truncated while the run reads it: tokens at token position "
                                "90000..90064 lie past its end (now 100032 bytes, 200032 when "
                                "verified at open)");
  // A window before it: the bytes are there, but the file is not the one verified.
  s = (*set)->Read(100, 65, window.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, path + ": truncated while the run reads it: now 100032 bytes"))
      << s.message();
  EXPECT_TRUE(Contains(s, "token position 100")) << s.message();
}

TEST(TokenShardSet, AShardRewrittenInPlaceFailsTheNextReadNamingTheId) {
  const std::string dir = TempDir("rewrite_after_open");
  const std::string path = dir + "/train.bin";
  ASSERT_TRUE(WriteTokenShard(path, Iota(5000, 64), 2, 0).ok());  // no vocab in the header
  ASSERT_TRUE(IndexTokenShardDirectory(dir).ok());
  AgeFile(path);
  Result<std::unique_ptr<TokenShardSet>> set = TokenShardSet::Open(path, 64);
  ASSERT_TRUE(set.ok()) << set.status().message();
  std::vector<int32_t> window(17);
  ASSERT_TRUE((*set)->Read(1000, 17, window.data()).ok());

  const uint16_t bad = 1000;  // >= the model's vocab_size 64: would index past the embedding
  std::string bytes(2 * 17, '\0');
  for (int i = 0; i < 17; ++i) std::memcpy(&bytes[2 * i], &bad, 2);
  OverwriteAt(path, 32 + 2 * 1000, bytes);
  Status s = (*set)->Read(1000, 17, window.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), path + ": token id 1000 at token position 1000 is >= vocab_size 64: "
                                "the file changed after it was verified at open");
  // Elsewhere the ids are fine, but the file is not the one verified.
  s = (*set)->Read(3000, 17, window.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, path + ": modified while the run reads it")) << s.message();
  EXPECT_TRUE(Contains(s, "token position 3000")) << s.message();
}

TEST(TokenShardSet, AHeaderRewrittenInPlaceFailsTheNextRead) {
  const std::string dir = TempDir("header_after_open");
  const std::string path = dir + "/train.bin";
  ASSERT_TRUE(WriteTokenShard(path, Iota(500, 64), 4, 64).ok());
  ASSERT_TRUE(IndexTokenShardDirectory(dir).ok());
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  Result<std::unique_ptr<TokenShardSet>> set = TokenShardSet::Open(path, 64);
  ASSERT_TRUE(set.ok()) << set.status().message();
  OverwriteAt(path, 24, std::string(1, '\x20'));  // vocab_size 64 -> 32
  // Put the old modification time back, as a copy tool preserving times would.
  struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  std::vector<int32_t> window(9);
  Status s = (*set)->Read(8, 9, window.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), path + ": header changed while the run reads it (seen reading token "
                                "position 8)");
}

TEST(TokenShardSet, FilesPastTheDescriptorBudgetAreReopenedAndMustBeTheSameFile) {
  const std::string dir = TempDir("many_files");
  const size_t files = TokenShardSet::kMaxHeldShardFiles + 4;
  for (size_t i = 0; i < files; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "/s_%04zu.bin", i);
    ASSERT_TRUE(WriteTokenShard(dir + name, {{static_cast<int32_t>(i % 50), 1, 2}}, 2, 50).ok());
  }
  ASSERT_TRUE(IndexTokenShardDirectory(dir).ok());
  Result<std::unique_ptr<TokenShardSet>> set = TokenShardSet::Open(dir, 64);
  ASSERT_TRUE(set.ok()) << set.status().message();
  ASSERT_EQ((*set)->num_tokens(), static_cast<int64_t>(3 * files));
  std::vector<int32_t> all(3 * files);
  ASSERT_TRUE((*set)->Read(0, static_cast<int64_t>(all.size()), all.data()).ok());
  EXPECT_EQ(all[3 * (files - 1)], static_cast<int32_t>((files - 1) % 50));
  // The last file replaced by another with the same bytes (a new inode): refused.
  char name[32];
  std::snprintf(name, sizeof(name), "/s_%04zu.bin", files - 1);
  const std::string last = dir + name;
  fs::copy_file(last, dir + "/copy.tmp");
  fs::rename(dir + "/copy.tmp", last);
  Status s = (*set)->Read(static_cast<int64_t>(3 * (files - 1)), 3, all.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), last + ": replaced by another file after it was verified at open");
}

TEST(DataLoader, NextBatchReturnsTheShardErrorInsteadOfFeedingBadIds) {
  const std::string dir = TempDir("loader_error");
  const std::string path = dir + "/train.bin";
  ASSERT_TRUE(WriteTokenShard(path, Iota(4001, 64), 2, 64).ok());
  ASSERT_TRUE(IndexTokenShardDirectory(dir).ok());
  DataConfig config;
  config.source = DataSource::kShards;
  config.train_path = path;
  Result<std::unique_ptr<DataLoader>> loader = DataLoader::Open(config, Split::kTrain, 64, 16, 1);
  ASSERT_TRUE(loader.ok()) << loader.status().message();
  std::vector<int32_t> in(4 * 16), tgt(4 * 16);
  ASSERT_TRUE((*loader)->NextBatch(4, in.data(), tgt.data()).ok());
  fs::resize_file(path, 32);  // every token gone
  Status s = (*loader)->NextBatch(4, in.data(), tgt.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, path + ": truncated while the run reads it")) << s.message();
}

}  // namespace
}  // namespace tessera
