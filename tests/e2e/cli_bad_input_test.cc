// End to end: every bad input to the CLI gives a one-line error naming the file and the
// problem, a non-zero exit, no crash and no partial run (no metrics file appears).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>

#include "tests/e2e/cli_util.h"

namespace tessera::testing {
namespace {

// A token shard written by hand (the format of runtime/train/data/README.md).
std::string ShardBytes(uint64_t count, uint32_t vocab, const char* magic = "TSRTOKEN",
                       uint32_t version = 1, uint64_t actual_tokens = UINT64_MAX) {
  std::string b(magic, 8);
  auto put = [&b](const void* p, size_t n) { b.append(static_cast<const char*>(p), n); };
  uint32_t width = 2, reserved = 0;
  put(&version, 4);
  put(&width, 4);
  put(&count, 8);
  put(&vocab, 4);
  put(&reserved, 4);
  uint64_t n = actual_tokens == UINT64_MAX ? count : actual_tokens;
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t t = static_cast<uint16_t>(i % vocab);
    put(&t, 2);
  }
  return b;
}

class BadInput : public ::testing::Test {
 protected:
  TempDir dir_{"bad_input"};
  std::string Train(const std::string& extra) {
    return "train " + Repo("configs/tiny.yaml") + " --set train.steps=2 --set train.out_dir=" +
           dir_ / "run" + " " + extra;
  }
  void ExpectFailure(const CommandResult& r, const std::string& needle) {
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << "missing '" << needle << "' in:\n" << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir_ / "run/metrics.jsonl")) << "a partial run happened";
  }
};

TEST_F(BadInput, UsageErrors) {
  auto r = Tessera("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("usage: tessera"), std::string::npos);
  ExpectFailure(Tessera("frobnicate"), "unknown command 'frobnicate'");
  ExpectFailure(Tessera("train"), "expected exactly one CONFIG");
  ExpectFailure(Tessera(Train("--sett x=1")), "unknown option '--sett'");
}

TEST_F(BadInput, EveryCommandHasHelp) {
  for (const char* cmd : {"train", "eval", "export", "data", "data tokenize", "data index",
                          "bench", "bench optimizer", "bench comm", "env"}) {
    auto r = Tessera(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find("usage: tessera"), std::string::npos) << cmd;
  }
}

TEST_F(BadInput, MissingAndMalformedConfig) {
  ExpectFailure(Tessera("train " + (dir_ / "nope.yaml")), "nope.yaml");
  WriteFile(dir_ / "bad.yaml", "model:\n  family: gpt2\n  num_layers: [1, 2\n");
  ExpectFailure(Tessera("train " + (dir_ / "bad.yaml")), "bad.yaml:");
  WriteFile(dir_ / "typo.yaml", "model:\n  num_layer: 2\n");
  ExpectFailure(Tessera("train " + (dir_ / "typo.yaml")), "typo.yaml:2:3: model.num_layer: unknown key");
  WriteFile(dir_ / "type.yaml", "train:\n  steps: many\n");
  ExpectFailure(Tessera("train " + (dir_ / "type.yaml")), "type.yaml:2:10: train.steps");
  WriteFile(dir_ / "shape.yaml", "model:\n  hidden_size: 30\n  num_heads: 4\n");
  ExpectFailure(Tessera("train " + (dir_ / "shape.yaml")), "shape.yaml:");
  ExpectFailure(Tessera(Train("--set model.num_heads=0")), "model.num_heads");
}

TEST_F(BadInput, AbsurdSizesAreRefusedBeforeAllocating) {
  // Past the config caps: a range error naming the key.
  ExpectFailure(Tessera(Train("--set model.hidden_size=99999999999")), "model.hidden_size");
  // Within the caps but far beyond this machine: the model's memory check, not an abort.
  ExpectFailure(Tessera(Train("--set model.hidden_size=131072 --set model.num_layers=4096")),
                "GiB");
  ExpectFailure(Tessera(Train("--set train.micro_batch_size=1048576")), "GiB");
  // A float that is positive as written but 0 as a float.
  ExpectFailure(Tessera(Train("--set optimizer.eps=1e-50")), "optimizer.eps");
}

// optimizer.offload: nvme with a directory that cannot hold the state: refused before training
// with an exit code a supervisor does not restart (4 when the directory is checked, 3 when the
// config is), naming the directory and the problem.
TEST_F(BadInput, OffloadDirectoryThatCannotHoldTheState) {
  const std::string nvme = "--set optimizer.offload=nvme --set optimizer.offload_dir=";
  auto r = Tessera(Train(nvme + (dir_ / "nope")));
  ExpectFailure(r, "optimizer.offload_dir " + (dir_ / "nope") + ": does not exist");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  std::filesystem::create_directories(dir_ / "ck");
  r = Tessera(Train(nvme + (dir_ / "ck/opt") + " --set checkpoint.dir=" + (dir_ / "ck")));
  ExpectFailure(r, "is inside checkpoint.dir");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  ExpectFailure(Tessera(Train("--set optimizer.offload=nvme")), "offload=nvme needs offload_dir");
}

TEST_F(BadInput, MissingTruncatedAndForeignDataFiles) {
  const std::string shards = "--set data.source=shards --set data.train=";
  ExpectFailure(Tessera(Train(shards + (dir_ / "missing.bin"))), "missing.bin");

  WriteFile(dir_ / "trunc.bin", ShardBytes(5000, 64, "TSRTOKEN", 1, 4000));
  ExpectFailure(Tessera(Train(shards + (dir_ / "trunc.bin"))), "trunc.bin");

  WriteFile(dir_ / "magic.bin", ShardBytes(5000, 64, "NOTASHRD"));
  ExpectFailure(Tessera(Train(shards + (dir_ / "magic.bin"))), "magic.bin");

  WriteFile(dir_ / "version.bin", ShardBytes(5000, 64, "TSRTOKEN", 99));
  ExpectFailure(Tessera(Train(shards + (dir_ / "version.bin"))), "version.bin");

  // Well-formed shards (indexed, so the index is not what refuses them) that do not fit.
  std::filesystem::create_directories(dir_ / "sane");
  WriteFile(dir_ / "sane/vocab.bin", ShardBytes(5000, 1000));  // ids up to 999 > vocab 64
  WriteFile(dir_ / "sane/short.bin", ShardBytes(10, 64));      // fewer tokens than one sequence
  WriteFile(dir_ / "sane/ok.bin", ShardBytes(5000, 64));
  auto indexed = Tessera("data index " + (dir_ / "sane"));
  ASSERT_EQ(indexed.exit_code, 0) << indexed.output;
  ExpectFailure(Tessera(Train(shards + (dir_ / "sane/vocab.bin"))), "vocab.bin");
  ExpectFailure(Tessera(Train(shards + (dir_ / "sane/short.bin"))), "short.bin");
  ExpectFailure(Tessera(Train(shards + (dir_ / "sane/ok.bin") + " --set data.val=" +
                              (dir_ / "gone.bin"))),
                "gone.bin");
  // The same shard without its directory's index: refused, with the fix.
  WriteFile(dir_ / "unindexed.bin", ShardBytes(5000, 64));
  ExpectFailure(Tessera(Train(shards + (dir_ / "unindexed.bin"))), "tessera data index");
}

TEST_F(BadInput, MalformedSafetensors) {
  const std::string init = "--set init_from=";
  WriteFile(dir_ / "tiny.safetensors", "abc");
  ExpectFailure(Tessera(Train(init + (dir_ / "tiny.safetensors"))), "tiny.safetensors");

  std::string huge(8, '\0');
  huge[7] = 0x7f;  // header length of ~9e18 bytes
  WriteFile(dir_ / "huge.safetensors", huge + "{}");
  ExpectFailure(Tessera(Train(init + (dir_ / "huge.safetensors"))), "huge.safetensors");

  std::string json = "{\"wte.weight\": {\"dtype\": \"F32\", \"shape\": [2";
  std::string len(8, '\0');
  len[0] = static_cast<char>(json.size());
  WriteFile(dir_ / "json.safetensors", len + json);
  ExpectFailure(Tessera(Train(init + (dir_ / "json.safetensors"))), "json.safetensors");

  ExpectFailure(Tessera(Train(init + (dir_ / "absent.safetensors"))), "absent.safetensors");
}

TEST_F(BadInput, WeightsWithWrongNamesOrShapes) {
  // Export real weights of a 2-step run, then load them into models they do not fit.
  auto r = Tessera("train " + Repo("configs/tiny.yaml") + " --set train.steps=1 --set train.out_dir=" +
                   dir_ / "src");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string w = dir_ / "src/model.safetensors";
  // Llama names are not in a GPT-2 file.
  ExpectFailure(Tessera(Train("--set model.family=llama --set model.num_kv_heads=0 --set init_from=" + w)),
                "model.embed_tokens.weight");
  // A wider model: every shape is wrong; the message names a tensor and both shapes.
  ExpectFailure(Tessera(Train("--set model.hidden_size=256 --set init_from=" + w)), "wte.weight");
  // Fewer layers: h.1.* are unexpected extra tensors.
  ExpectFailure(Tessera(Train("--set model.num_layers=1 --set init_from=" + w)), "h.1.");
}

}  // namespace
}  // namespace tessera::testing
