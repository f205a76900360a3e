// End to end: the real `tessera train` on token shards that are damaged before or while it
// reads them. A shard truncated or rewritten under a running job ends it with exit 4 and a
// message naming the file and token position (never SIGBUS/SIGABRT, never out-of-range ids
// fed to the embedding); a shard directory whose completion index is missing or disagrees
// with its files is refused with exit 4 and the fix (`tessera data index`).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/e2e/cli_util.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

class ShardIntegrity : public ::testing::Test {
 protected:
  TempDir dir_{"shard_integrity"};

  // `tessera data tokenize` of `bytes` pseudo-random text into DIR/data (train shards only).
  std::string Tokenize(int64_t bytes, int64_t shard_tokens) {
    std::string text(static_cast<size_t>(bytes), '\0');
    uint32_t x = 7;
    for (char& c : text) {
      x = x * 1103515245u + 12345u;
      c = static_cast<char>('a' + (x >> 16) % 26);
    }
    WriteFile(dir_ / "input.txt", text);
    const std::string out = dir_ / "data";
    auto r = Tessera("data tokenize --input " + (dir_ / "input.txt") + " --out " + out +
                     " --val-fraction 0 --shard-tokens " + std::to_string(shard_tokens));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return out;
  }
  std::string TrainArgs(const std::string& data, int64_t steps) {
    return "train " + Repo("configs/tiny.yaml") + " --set train.steps=" + std::to_string(steps) +
           " --set train.out_dir=" + (dir_ / "run") + " --set data.source=shards" +
           " --set 'data.train=" + data + "/train_*.bin'";
  }
  // Starts a long run, waits until it has finished a step (it is reading the shards), and
  // pauses it.
  std::unique_ptr<BackgroundRun> StartAndPause(const std::string& data) {
    auto run = std::make_unique<BackgroundRun>(TrainArgs(data, 1000000), dir_ / "train.log");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline && run->Running()) {
      if (fs::exists(dir_ / "run/metrics.jsonl") && fs::file_size(dir_ / "run/metrics.jsonl") > 0) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(run->Running()) << run->Output();
    EXPECT_TRUE(fs::exists(dir_ / "run/metrics.jsonl")) << "no step within 120 s\n" << run->Output();
    EXPECT_TRUE(run->Stop());
    return run;
  }
  void ExpectRefused(const CommandResult& r, const std::vector<std::string>& needles) {
    EXPECT_EQ(r.exit_code, 4) << r.output;
    for (const std::string& n : needles) {
      EXPECT_NE(r.output.find(n), std::string::npos) << "missing '" << n << "' in:\n" << r.output;
    }
  }
};

TEST_F(ShardIntegrity, AShardTruncatedWhileTrainingReadsItEndsTheRunWithExit4) {
  const std::string data = Tokenize(400000, 100000000);
  const std::string shard = data + "/train_000000.bin";
  auto run = StartAndPause(data);
  fs::resize_file(shard, 32 + 2 * 10);  // every window now lies past the end
  run->Continue();
  const int code = run->Wait(std::chrono::seconds(120));
  const std::string out = run->Output();
  EXPECT_EQ(code, 4) << "want exit 4 (bad input), not a signal or a hang:\n" << out;
  EXPECT_NE(out.find(shard + ": truncated while the run reads it"), std::string::npos) << out;
  EXPECT_NE(out.find("token position"), std::string::npos) << out;
}

TEST_F(ShardIntegrity, AShardRewrittenWithAnOutOfRangeIdWhileTrainingReadsItEndsTheRunWithExit4) {
  const std::string data = Tokenize(400000, 100000000);
  const std::string shard = data + "/train_000000.bin";
  const int64_t tokens = static_cast<int64_t>(fs::file_size(shard) - 32) / 2;
  auto run = StartAndPause(data);
  {  // In place, same size: every token becomes 1000, past the model's vocab_size 256.
    std::string ids(static_cast<size_t>(2 * tokens), '\0');
    const uint16_t bad = 1000;
    for (int64_t i = 0; i < tokens; ++i) std::memcpy(&ids[static_cast<size_t>(2 * i)], &bad, 2);
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(32);
    f.write(ids.data(), static_cast<std::streamsize>(ids.size()));
  }
  run->Continue();
  const int code = run->Wait(std::chrono::seconds(120));
  const std::string out = run->Output();
  EXPECT_EQ(code, 4) << out;
  EXPECT_NE(out.find(shard + ": token id 1000 at token position"), std::string::npos) << out;
  EXPECT_NE(out.find("is >= vocab_size 256"), std::string::npos) << out;
}

TEST_F(ShardIntegrity, TrainingRefusesShardsWithoutAnIndexUntilDataIndexWritesOne) {
  const std::string data = Tokenize(20000, 8000);
  // As a tokenize killed before its last write (the index) leaves the directory.
  fs::remove(data + "/index.json");
  ExpectRefused(Tessera(TrainArgs(data, 2)),
                {data + "/index.json: missing", "tessera data index " + data});
  EXPECT_FALSE(fs::exists(dir_ / "run/metrics.jsonl")) << "a run started";
  auto indexed = Tessera("data index " + data);
  ASSERT_EQ(indexed.exit_code, 0) << indexed.output;
  EXPECT_NE(indexed.output.find("indexed 3 shard(s), 20000 tokens"), std::string::npos)
      << indexed.output;
  auto trained = Tessera(TrainArgs(data, 2));
  EXPECT_EQ(trained.exit_code, 0) << trained.output;
}

TEST_F(ShardIntegrity, TrainingRefusesShardsTheIndexDisagreesWith) {
  const std::string data = Tokenize(20000, 8000);  // train_000000..2: 8000, 8000, 4000 tokens
  const std::string index = ReadFile(data + "/index.json");
  const std::string first = ReadFile(data + "/train_000000.bin");
  auto restore = [&] {
    WriteFile(data + "/index.json", index);
    WriteFile(data + "/train_000000.bin", first);
    fs::remove(data + "/train_000003.bin");
    ASSERT_EQ(Tessera(TrainArgs(data, 1)).exit_code, 0);
  };
  restore();

  std::string flipped = first;
  flipped[1000] ^= 0x01;  // one bit, still a valid byte token
  WriteFile(data + "/train_000000.bin", flipped);
  ExpectRefused(Tessera(TrainArgs(data, 2)), {data + "/train_000000.bin: CRC-32C", "index.json"});
  restore();

  fs::copy_file(data + "/train_000002.bin", dir_ / "saved.bin");
  fs::remove(data + "/train_000002.bin");
  ExpectRefused(Tessera(TrainArgs(data, 2)), {"lists train_000002.bin", "missing"});
  fs::copy_file(dir_ / "saved.bin", data + "/train_000002.bin");
  restore();

  fs::copy_file(data + "/train_000001.bin", data + "/train_000003.bin");
  ExpectRefused(Tessera(TrainArgs(data, 2)), {data + "/train_000003.bin: not listed in"});
  restore();

  std::string edited = index;
  const size_t at = edited.find("\"num_tokens\":4000");
  ASSERT_NE(at, std::string::npos) << index;
  edited.replace(at, 17, "\"num_tokens\":3999");
  WriteFile(data + "/index.json", edited);
  ExpectRefused(Tessera(TrainArgs(data, 2)),
                {data + "/train_000002.bin: disagrees with", "num_tokens is 4000 in the file but "
                                                            "3999 in the index"});
  restore();

  // A change made on purpose: `tessera data index` accepts the files as they now are.
  WriteFile(data + "/train_000000.bin", flipped);
  ASSERT_EQ(Tessera("data index " + data).exit_code, 0);
  auto trained = Tessera(TrainArgs(data, 2));
  EXPECT_EQ(trained.exit_code, 0) << trained.output;
}

TEST_F(ShardIntegrity, DataIndexRefusesADamagedShardAndBadArguments) {
  const std::string data = Tokenize(20000, 8000);
  std::string bytes = ReadFile(data + "/train_000001.bin");
  WriteFile(data + "/train_000001.bin", bytes.substr(0, bytes.size() - 1));
  auto r = Tessera("data index " + data);
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find(data + "/train_000001.bin: truncated"), std::string::npos) << r.output;
  EXPECT_EQ(Tessera("data index").exit_code, 2);
  EXPECT_EQ(Tessera("data index " + (dir_ / "nope")).exit_code, 4);
  auto help = Tessera("data index --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("tessera data index DIR"), std::string::npos) << help.output;
}

}  // namespace
}  // namespace tessera::testing
