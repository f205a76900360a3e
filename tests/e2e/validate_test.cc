// tests/e2e/validate_test.cc — `tessera validate` against the independent NumPy implementation
// (tests/e2e/reference/hf_reference.py --layers), layer by layer, for every family Tessera
// builds: GPT-2, Llama, Qwen2/Mistral (q/k/v biases and a sliding window), Mixtral-shaped and
// DeepSeek-shaped MoE; in fp32 and bf16; read from a sharded model directory; and the
// negative cases: a model that differs (rope_theta) is reported at the first layer it
// touches (exit 11), a reference of another shape is refused (exit 4).
#include <gtest/gtest.h>

#include <string>

#include "runtime/core/exit_codes.h"
#include "tests/e2e/cli_util.h"

namespace tessera::testing {
namespace {

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

bool HaveNumpy() { return RunCommand("/usr/bin/python3 -c 'import numpy'").exit_code == 0; }

class Validate : public ::testing::Test {
 protected:
  // Trains `cfg` + `sets` for 10 steps, writes Tessera's layer file for its weights, and the
  // reference's answer for the same input_ids (`ref_args`: what config.json would tell it).
  void Prepare(const std::string& cfg, const std::string& sets, const std::string& family,
               const std::string& ref_args) {
    cfg_ = Repo(cfg);
    sets_ = sets;
    CommandResult t = Tessera("train " + cfg_ + sets_ + " --set train.steps=10 --set train.threads=1"
                              " --set train.peak_gflops=1 --set train.out_dir=" + (dir_ / "run"));
    ASSERT_EQ(t.exit_code, 0) << t.output;
    weights_ = dir_ / "run/model.safetensors";
    CommandResult v = Tessera("validate " + cfg_ + sets_ + " --init-from " + weights_ +
                              " --out " + (dir_ / "tessera.safetensors"));
    ASSERT_EQ(v.exit_code, 0) << v.output;
    CommandResult r = RunCommand("/usr/bin/python3 " + Repo("tests/e2e/reference/hf_reference.py") +
                                 " --family " + family + " --weights " + weights_ + ref_args +
                                 " --layers " + (dir_ / "tessera.safetensors") + " --layers-out " +
                                 (dir_ / "ref.safetensors"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  CommandResult Compare(const std::string& extra = "") {
    return Tessera("validate " + cfg_ + sets_ + extra + " --init-from " + weights_ +
                   " --reference " + (dir_ / "ref.safetensors"));
  }
  // Every layer compared and within tolerance.
  void ExpectAgrees(int layers, const std::string& extra = "") {
    CommandResult c = Compare(extra);
    EXPECT_EQ(c.exit_code, 0) << c.output;
    EXPECT_TRUE(Contains(c.output, "all " + std::to_string(layers) + " layers within")) << c.output;
    EXPECT_FALSE(Contains(c.output, "not in the reference")) << c.output;
  }
  TempDir dir_{"validate"};
  std::string cfg_, sets_, weights_;
};

TEST_F(Validate, Gpt2AgreesLayerByLayerInFp32AndBf16) {
  if (!HaveNumpy()) GTEST_SKIP() << "python3-numpy is not installed";
  Prepare("configs/tiny.yaml", "", "gpt2", " --heads 4");
  ExpectAgrees(1 + 2 * 2 + 2);  // embeddings, 2 blocks x 2, final_norm, logits
  ExpectAgrees(7, " --set precision=bf16");
}

TEST_F(Validate, LlamaAgreesAndADifferentModelIsReportedWhereItFirstDiffers) {
  if (!HaveNumpy()) GTEST_SKIP() << "python3-numpy is not installed";
  Prepare("configs/llama-tiny.yaml", "", "llama", " --heads 4 --kv-heads 2");
  ExpectAgrees(7);
  // RoPE's base touches the first attention: the embeddings agree, layers.0.attention not.
  CommandResult c = Compare(" --set model.rope_theta=20000");
  EXPECT_EQ(c.exit_code, kExitDiverged) << c.output;
  EXPECT_TRUE(Contains(c.output, "first divergence: layers.0.attention: max abs")) << c.output;
  EXPECT_TRUE(Contains(c.output, ": tessera ")) << c.output;
  // A reference for another input shape (fewer positions) is refused, not compared.
  CommandResult small = Tessera("validate " + cfg_ + " --init-from " + weights_ + " --seq 8 --out " +
                                (dir_ / "short.safetensors"));
  ASSERT_EQ(small.exit_code, 0) << small.output;
  CommandResult r = RunCommand("/usr/bin/python3 " + Repo("tests/e2e/reference/hf_reference.py") +
                               " --family llama --weights " + weights_ + " --heads 4 --kv-heads 2"
                               " --layers " + (dir_ / "short.safetensors") + " --layers-out " +
                               (dir_ / "short_ref.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  CommandResult mixed = Tessera("validate " + cfg_ + " --init-from " + weights_ + " --seq 8 --reference " +
                                (dir_ / "ref.safetensors") + " --out " + (dir_ / "x.safetensors"));
  EXPECT_EQ(mixed.exit_code, 0) << mixed.output;  // the reference's own input_ids are used
  CommandResult garbage = Tessera("validate " + cfg_ + " --init-from " + weights_ + " --reference " +
                                  weights_);
  EXPECT_EQ(garbage.exit_code, kExitBadInput) << garbage.output;
  EXPECT_TRUE(Contains(garbage.output, "no input_ids tensor")) << garbage.output;
}

TEST_F(Validate, Qwen2AndMistralOperatorsAgree) {
  if (!HaveNumpy()) GTEST_SKIP() << "python3-numpy is not installed";
  Prepare("configs/llama-tiny.yaml", " --set model.qkv_bias=true --set model.sliding_window=5",
          "llama", " --heads 4 --kv-heads 2 --sliding-window 5");
  ExpectAgrees(7);
}

// Mistral-Nemo-like heads: 4 heads of 24 over a width of 64.
TEST_F(Validate, AnExplicitHeadDimAgrees) {
  if (!HaveNumpy()) GTEST_SKIP() << "python3-numpy is not installed";
  Prepare("configs/llama-tiny.yaml", " --set model.head_dim=24", "llama", " --heads 4 --kv-heads 2");
  ExpectAgrees(7);
}

// Qwen3-shaped: every query and key head RMSNormed before RoPE, 4 heads of 24 over 64.
TEST_F(Validate, Qwen3QkNormsAgree) {
  if (!HaveNumpy()) GTEST_SKIP() << "python3-numpy is not installed";
  Prepare("configs/llama-tiny.yaml", " --set model.qk_norm=true --set model.head_dim=24", "llama",
          " --heads 4 --kv-heads 2");
  ExpectAgrees(7);
}

// Qwen3-MoE-shaped: q/k norms and Mixtral-like routing (softmax top-k renormalised).
TEST_F(Validate, Qwen3MoeShapedAgrees) {
  if (!HaveNumpy()) GTEST_SKIP() << "python3-numpy is not installed";
  Prepare("configs/moe-mixtral-tiny.yaml", " --set model.qk_norm=true", "llama",
          " --heads 4 --kv-heads 2 --top-k 2 --score softmax");
  ExpectAgrees(7);
}

TEST_F(Validate, MixtralShapedExpertsAgree) {
  if (!HaveNumpy()) GTEST_SKIP() << "python3-numpy is not installed";
  Prepare("configs/moe-mixtral-tiny.yaml", "", "llama", " --heads 4 --kv-heads 2 --top-k 2 --score softmax");
  ExpectAgrees(7);
}

// Qwen2-MoE-shaped: q/k/v biases, softmax gates not renormalised, a gated shared expert.
TEST_F(Validate, Qwen2MoeShapedExpertsAgree) {
  if (!HaveNumpy()) GTEST_SKIP() << "python3-numpy is not installed";
  Prepare("configs/moe-mixtral-tiny.yaml",
          " --set model.qkv_bias=true --set model.moe.normalize_gates=false"
          " --set model.moe.shared_experts=1 --set model.moe.shared_expert_gate=true",
          "llama", " --heads 4 --kv-heads 2 --top-k 2 --score softmax --no-norm-topk");
  ExpectAgrees(7);
}

TEST_F(Validate, DeepSeekShapedExpertsAgree) {
  if (!HaveNumpy()) GTEST_SKIP() << "python3-numpy is not installed";
  Prepare("configs/moe-deepseek-tiny.yaml", "", "llama",
          " --heads 4 --kv-heads 2 --top-k 2 --score sigmoid --route-scale 2.5 --n-group 4 --topk-group 2");
  ExpectAgrees(1 + 3 * 2 + 2);  // a dense block, then two MoE blocks
}

// A sharded model directory (tessera export --out DIR) validates as the file it came from.
TEST_F(Validate, AShardedModelDirectoryAgrees) {
  if (!HaveNumpy()) GTEST_SKIP() << "python3-numpy is not installed";
  Prepare("configs/llama-tiny.yaml", "", "llama", " --heads 4 --kv-heads 2");
  const std::string hf = dir_ / "hf";
  CommandResult e = Tessera("export " + cfg_ + " --init-from " + weights_ + " --out " + hf +
                            " --max-shard-size 100KB");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  CommandResult c = Tessera("validate " + Repo("configs/finetune.yaml") + " --set init_from=" + hf +
                            " --reference " + (dir_ / "ref.safetensors"));
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_TRUE(Contains(c.output, "all 7 layers within")) << c.output;
}

}  // namespace
}  // namespace tessera::testing
