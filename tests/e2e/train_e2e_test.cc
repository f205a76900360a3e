// End to end through the real binary: determinism (bit-identical weights across runs),
// the default job reaching the entropy floor, eval/export round trips, and agreement with an
// independent NumPy implementation of GPT-2 and Llama (tests/e2e/reference/hf_reference.py).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <regex>

#include "runtime/core/json.h"
#include "tests/e2e/cli_util.h"

namespace tessera::testing {
namespace {

double ParseLoss(const std::string& output) {
  std::smatch m;
  static const std::regex re("loss ([0-9.]+)\\s*$");
  if (!std::regex_search(output, m, re)) return -1;
  return std::stod(m[1]);
}

std::string LastLine(const std::string& text) {
  size_t end = text.find_last_not_of('\n');
  size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

TEST(TrainE2E, SameConfigAndSeedGiveBitIdenticalWeights) {
  TempDir dir("determinism");
  for (const char* cfg : {"configs/tiny.yaml", "configs/llama-tiny.yaml"}) {
    std::string base = "train " + Repo(cfg) + " --set train.steps=12 --set train.grad_accum_steps=2";
    auto a = Tessera(base + " --set train.out_dir=" + dir / "a");
    auto b = Tessera(base + " --set train.out_dir=" + dir / "b");
    ASSERT_EQ(a.exit_code, 0) << a.output;
    ASSERT_EQ(b.exit_code, 0) << b.output;
    std::string wa = ReadFile(dir / "a/model.safetensors"), wb = ReadFile(dir / "b/model.safetensors");
    ASSERT_GT(wa.size(), 1000u);
    EXPECT_TRUE(wa == wb) << cfg << ": weights differ between two identical runs";
    auto c = Tessera(base + " --set train.seed=99 --set train.out_dir=" + dir / "c");
    ASSERT_EQ(c.exit_code, 0) << c.output;
    EXPECT_FALSE(wa == ReadFile(dir / "c/model.safetensors")) << cfg << ": seed had no effect";
  }
}

TEST(TrainE2E, RecomputePoliciesTrainToIdenticalWeights) {
  TempDir dir("recompute");
  std::string base = "train " + Repo("configs/llama-tiny.yaml") + " --set train.steps=5";
  std::string first;
  for (const char* policy : {"none", "selective", "full"}) {
    auto r = Tessera(base + " --set model.recompute=" + policy + " --set train.out_dir=" + dir / policy);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::string w = ReadFile(dir / (std::string(policy) + "/model.safetensors"));
    if (first.empty()) first = w;
    EXPECT_TRUE(w == first) << policy << " recompute changed the weights";
  }
}

// precision=bf16 through the CLI, on every bf16 GEMM path this CPU has (the default, and
// TESSERA_BF16_GEMM=fp32): the banner names the compute, the activations take at most 55 % of
// fp32's bytes (memory.json), the loss tracks fp32's and a rerun is bit-identical.
TEST(TrainE2E, Bf16HalvesActivationMemoryTracksFp32AndIsDeterministic) {
  TempDir dir("bf16");
  const std::string base = "train " + Repo("configs/tiny.yaml") + " --set train.steps=20";
  auto activations = [&](const std::string& run) {
    auto mem = ParseJson(ReadFile(dir / (run + "/memory.json")));
    EXPECT_TRUE(mem.ok()) << run;
    return mem.ok() ? mem->Find("ranks")->items()[0].Find("activations_bytes")->as_double() : 0;
  };
  auto final_loss = [&](const std::string& run) {
    auto last = ParseJson(LastLine(ReadFile(dir / (run + "/metrics.jsonl"))));
    EXPECT_TRUE(last.ok()) << run;
    return last.ok() ? last->Find("loss")->as_double() : -1;
  };
  auto fp32 = Tessera(base + " --set train.out_dir=" + dir / "fp32");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  EXPECT_NE(fp32.output.find("tessera: compute: cpu-fp32\n"), std::string::npos) << fp32.output;
  for (const std::string env : {"", "TESSERA_BF16_GEMM=fp32 "}) {
    SCOPED_TRACE(env.empty() ? "default bf16 GEMM path" : env);
    const std::string name = env.empty() ? "bf16" : "bf16_fp32_gemm";
    const std::string cmd = env + std::string(TESSERA_BINARY) + " " + base + " --set precision=bf16";
    auto a = RunCommand(cmd + " --set train.out_dir=" + dir / name);
    auto b = RunCommand(cmd + " --set train.out_dir=" + dir / (name + "_again"));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_NE(a.output.find("bf16 storage"), std::string::npos) << a.output;
    if (!env.empty()) {
      EXPECT_NE(a.output.find("compute: cpu-fp32: bf16 storage, fp32 compute"), std::string::npos)
          << a.output;
    }
    EXPECT_LE(activations(name), 0.55 * activations("fp32"));
    EXPECT_NEAR(final_loss(name), final_loss("fp32"), 0.02) << a.output;
    EXPECT_TRUE(ReadFile(dir / (name + "/model.safetensors")) ==
                ReadFile(dir / (name + "_again/model.safetensors")))
        << "two identical bf16 runs differ";
  }
}

TEST(TrainE2E, DefaultJobReachesTheEntropyFloor) {
  TempDir dir("floor");
  auto r = Tessera("train " + Repo("configs/tiny.yaml") + " --set train.out_dir=" + dir / "run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("== run summary =="), std::string::npos);
  auto last = ParseJson(LastLine(ReadFile(dir / "run/metrics.jsonl")));
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  const JsonValue* val = last->Find("val_loss");
  const JsonValue* gap = last->Find("floor_gap");
  const JsonValue* loss = last->Find("loss");
  ASSERT_TRUE(val && gap && loss) << r.output;
  const double floor = loss->as_double() - gap->as_double();
  EXPECT_LT(val->as_double() - floor, 0.1) << "held-out loss " << val->as_double() << " vs floor "
                                           << floor << "\n" << r.output;
  EXPECT_GT(val->as_double(), floor - 0.05) << "below the floor: the floor or the loss is wrong";
}

TEST(TrainE2E, EvalAndExportRoundTrip) {
  TempDir dir("export");
  const std::string cfg = Repo("configs/tiny.yaml");
  auto t = Tessera("train " + cfg + " --set train.steps=30 --set train.out_dir=" + dir / "run");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::string w = dir / "run/model.safetensors";
  auto e1 = Tessera("eval " + cfg + " --init-from " + w);
  ASSERT_EQ(e1.exit_code, 0) << e1.output;
  auto x = Tessera("export " + cfg + " --init-from " + w + " --out " + dir / "copy.safetensors");
  ASSERT_EQ(x.exit_code, 0) << x.output;
  EXPECT_TRUE(ReadFile(w) == ReadFile(dir / "copy.safetensors")) << "f32 export is not lossless";
  auto e2 = Tessera("eval " + cfg + " --init-from " + dir / "copy.safetensors");
  EXPECT_EQ(ParseLoss(e1.output), ParseLoss(e2.output));
  auto xb = Tessera("export " + cfg + " --init-from " + w + " --dtype bf16 --out " + dir / "bf16.safetensors");
  ASSERT_EQ(xb.exit_code, 0) << xb.output;
  auto e3 = Tessera("eval " + cfg + " --init-from " + dir / "bf16.safetensors");
  ASSERT_EQ(e3.exit_code, 0) << e3.output;
  EXPECT_NEAR(ParseLoss(e1.output), ParseLoss(e3.output), 0.02) << "bf16 weights changed the loss too much";
}

// Writes a shard of windows*seq_len+1 pseudo-random ids < vocab: exactly `windows` windows.
void WriteEvalShard(const std::string& path, int64_t windows, int64_t seq_len, uint32_t vocab) {
  uint64_t count = static_cast<uint64_t>(windows * seq_len + 1);
  std::string b("TSRTOKEN", 8);
  auto put = [&b](const void* p, size_t n) { b.append(static_cast<const char*>(p), n); };
  uint32_t version = 1, width = 2, reserved = 0;
  put(&version, 4);
  put(&width, 4);
  put(&count, 8);
  put(&vocab, 4);
  put(&reserved, 4);
  uint32_t x = 12345;
  for (uint64_t i = 0; i < count; ++i) {
    x = x * 1103515245u + 12345u;
    uint16_t t = static_cast<uint16_t>((x >> 16) % vocab);
    put(&t, 2);
  }
  WriteFile(path, b);
}

// Trains `cfg` (plus `sets`) for 40 steps, then compares `tessera eval` of its exported HF
// weights with the NumPy reference's loss on the same windows; `ref_args` carries options
// config.json would give the reference (MoE routing).
void CheckAgainstReference(const std::string& cfg, const std::string& family, int heads,
                           int kv_heads, const std::string& sets = "",
                           const std::string& ref_args = "") {
  if (RunCommand("/usr/bin/python3 -c 'import numpy'").exit_code != 0) {
    GTEST_SKIP() << "python3-numpy is not installed (tools/dev/install-deps.sh installs it)";
  }
  TempDir dir("reference_" + family);
  const int64_t B = 4, T = 16;
  std::string set = " --set train.micro_batch_size=4 --set train.seq_len=16" + sets;
  auto t = Tessera("train " + Repo(cfg) + set + " --set train.steps=40 --set train.out_dir=" + dir / "run");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  WriteEvalShard(dir / "eval.bin", B, T, 64);
  auto indexed = Tessera("data index " + dir.str());  // a shard from another writer needs one
  ASSERT_EQ(indexed.exit_code, 0) << indexed.output;
  // The shard holds exactly B windows, so one eval batch covers each once, in any order.
  auto e = Tessera("eval " + Repo(cfg) + set + " --batches 1 --data " + dir / "eval.bin" +
                   " --init-from " + dir / "run/model.safetensors");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  auto ref = RunCommand("/usr/bin/python3 " + Repo("tests/e2e/reference/hf_reference.py") +
                        " --family " + family + " --weights " + dir / "run/model.safetensors" +
                        " --tokens " + dir / "eval.bin" + " --heads " + std::to_string(heads) +
                        " --kv-heads " + std::to_string(kv_heads) + " --seq 16" + ref_args);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  double ours = ParseLoss(e.output), theirs = ParseLoss(ref.output);
  ASSERT_GT(theirs, 0) << ref.output;
  EXPECT_NEAR(ours, theirs, 2e-4) << "tessera " << ours << " vs NumPy reference " << theirs;
}

TEST(TrainE2E, Gpt2MatchesIndependentReference) {
  CheckAgainstReference("configs/tiny.yaml", "gpt2", 4, 4);
}

TEST(TrainE2E, LlamaMatchesIndependentReference) {
  CheckAgainstReference("configs/llama-tiny.yaml", "llama", 4, 2);
}

// Qwen2-shaped and Mistral-shaped at once: q/k/v biases, and a window of 5 of the 16 positions.
TEST(TrainE2E, QkvBiasesAndSlidingWindowMatchIndependentReference) {
  CheckAgainstReference("configs/llama-tiny.yaml", "llama", 4, 2,
                        " --set model.qkv_bias=true --set model.sliding_window=5",
                        " --sliding-window 5");
}

// Mixtral-shaped: exported with Mixtral's tensor names (block_sparse_moe.*), read back by both.
TEST(TrainE2E, MixtralShapedMoeMatchesIndependentReference) {
  CheckAgainstReference("configs/moe-mixtral-tiny.yaml", "llama", 4, 2, "",
                        " --top-k 2 --score softmax");
}

// DeepSeek-shaped (the shipped config): sigmoid scores, 4 groups of 2 scored by the sum of their
// top 2 with the best 2 kept, top-2, a shared expert, the first block dense, the trained
// e_score_correction_bias exported beside the router and used for the choice.
TEST(TrainE2E, DeepSeekShapedMoeMatchesIndependentReference) {
  CheckAgainstReference("configs/moe-deepseek-tiny.yaml", "llama", 4, 2, "",
                        " --top-k 2 --score sigmoid --route-scale 2.5 --n-group 4 --topk-group 2");
}

}  // namespace
}  // namespace tessera::testing
