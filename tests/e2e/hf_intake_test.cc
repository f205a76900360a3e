// tests/e2e/hf_intake_test.cc — a Hugging Face model directory through the CLI: `tessera
// inspect` shows the mapped model section and the weights; `tessera train
// configs/finetune.yaml --set init_from=DIR` trains it with no shape in the YAML (llama,
// mistral with its sliding window, qwen2 with its q/k/v biases); a key that
// disagrees with config.json and a model Tessera cannot build are refused (exit 3) with the
// reason, before anything loads. The directory is written here: a short llama-tiny run's
// weights (HF names) and a config.json of the same shapes, as a release ships them.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "runtime/core/exit_codes.h"
#include "tests/e2e/cli_util.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

constexpr char kLlamaTinyConfig[] = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "hidden_size": 64, "intermediate_size": 192, "max_position_embeddings": 64,
  "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": null,
  "tie_word_embeddings": false, "torch_dtype": "float32", "vocab_size": 64
})";

// kLlamaTinyConfig as another model type, with `extra` fields.
std::string WithType(const std::string& type, const std::string& extra) {
  std::string c = kLlamaTinyConfig;
  c.replace(c.find("\"model_type\": \"llama\""), 21, "\"model_type\": \"" + type + "\", " + extra);
  return c;
}

class HfIntake : public ::testing::Test {
 protected:
  void SetUp() override {
    CommandResult base = Tessera("train " + Repo("configs/llama-tiny.yaml") +
                                 " --set train.steps=3 --set train.threads=1 --set train.peak_gflops=1"
                                 " --set train.out_dir=" + (dir_ / "base"));
    ASSERT_EQ(base.exit_code, 0) << base.output;
    fs::create_directories(hf_);
    fs::copy_file(dir_ / "base/model.safetensors", hf_ + "/model.safetensors");
    WriteFile(hf_ + "/config.json", kLlamaTinyConfig);
  }
  std::string Finetune(const std::string& extra = "") const {
    return "train " + Repo("configs/finetune.yaml") + " --set init_from=" + hf_ +
           " --set train.steps=3 --set train.threads=1 --set train.peak_gflops=1"
           " --set train.out_dir=" + (dir_ / "ft") + " " + extra;
  }
  TempDir dir_{"hf_intake"};
  const std::string hf_ = dir_ / "Llama-Tiny";
};

TEST_F(HfIntake, InspectShowsTheModelSectionAndTheWeights) {
  CommandResult r = Tessera("inspect " + hf_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "model_type \"llama\"")) << r.output;
  EXPECT_TRUE(Contains(r.output, "model.hidden_size: 64    # hidden_size")) << r.output;
  EXPECT_TRUE(Contains(r.output, "model.num_kv_heads: 2    # num_key_value_heads")) << r.output;
  EXPECT_TRUE(Contains(r.output, "weights: 21 tensors, 106816 parameters")) << r.output;
  EXPECT_TRUE(Contains(r.output, "supported: ")) << r.output;
}

TEST_F(HfIntake, FinetuneTrainsItWithNoShapeInTheYaml) {
  CommandResult r = Tessera(Finetune());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "llama")) << r.output;
  const std::string resolved = ReadFile(dir_ / "ft/config.yaml");
  EXPECT_TRUE(Contains(resolved, "family: llama")) << resolved;
  EXPECT_TRUE(Contains(resolved, "num_kv_heads: 2")) << resolved;
  // The weights loaded are the base run's: its final loss, not a fresh model's ln(64) = 4.16.
  EXPECT_TRUE(fs::exists(dir_ / "ft/model.safetensors"));
}

TEST_F(HfIntake, ADisagreeingKeyAndAMissingOperatorAreRefusedBeforeLoading) {
  CommandResult r = Tessera(Finetune("--set model.num_heads=8"));
  EXPECT_EQ(r.exit_code, kExitBadConfig) << r.output;
  EXPECT_TRUE(Contains(r.output, "--set model.num_heads=8: model.num_heads=8 disagrees with "
                                 "num_attention_heads=4 in " + hf_ + "/config.json")) << r.output;
  // Llama's attention_bias (o_proj biased too): named by inspect and by train, nothing trained.
  WriteFile(hf_ + "/config.json", WithType("llama", "\"attention_bias\": true"));
  CommandResult i = Tessera("inspect " + hf_);
  EXPECT_EQ(i.exit_code, kExitBadConfig) << i.output;
  EXPECT_TRUE(Contains(i.output, "  - attention_bias=true: biases on the q/k/v AND o projections"))
      << i.output;
  CommandResult t = Tessera(Finetune());
  EXPECT_EQ(t.exit_code, kExitBadConfig) << t.output;
  EXPECT_TRUE(Contains(t.output, "describes a model Tessera cannot build as it is; nothing was "
                                 "loaded")) << t.output;
  EXPECT_FALSE(fs::exists(dir_ / "ft/metrics.jsonl"));
}

// configs/finetune-lora.yaml as shipped on the directory: the base frozen, the merged model and
// PEFT's adapter directory written, the merged model loadable as the base model it is; a
// target the family lacks is refused at its place in the YAML.
TEST_F(HfIntake, ALoraFinetuneWritesTheMergedModelAndPeftAdapters) {
  CommandResult r = Tessera("train " + Repo("configs/finetune-lora.yaml") + " --set init_from=" +
                            hf_ + " --set train.steps=3 --set train.threads=1 "
                            "--set train.peak_gflops=1 --set train.out_dir=" + (dir_ / "lora"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "finetune.lora: rank 16, alpha 32 (scale 2) on "
                                 "q_proj,k_proj,v_proj,o_proj")) << r.output;
  EXPECT_TRUE(Contains(r.output, "frozen base")) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "lora/adapter/adapter_model.safetensors"));
  const std::string adapter_config = ReadFile(dir_ / "lora/adapter/adapter_config.json");
  EXPECT_TRUE(Contains(adapter_config, "\"target_modules\":[\"q_proj\",\"k_proj\",\"v_proj\","
                                       "\"o_proj\"]")) << adapter_config;
  EXPECT_TRUE(Contains(adapter_config, "\"base_model_name_or_path\":\"" + hf_ + "\""))
      << adapter_config;
  // The merged model is a plain Llama: it loads where the base does.
  CommandResult again = Tessera("train " + Repo("configs/llama-tiny.yaml") + " --set init_from=" +
                                (dir_ / "lora/model.safetensors") + " --set train.steps=1 "
                                "--set train.threads=1 --set train.peak_gflops=1 "
                                "--set train.out_dir=" + (dir_ / "merged"));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  const std::string yaml = dir_ / "bad-lora.yaml";
  WriteFile(yaml, "finetune:\n  lora:\n    rank: 4\n    targets: [q_proj, x_proj]\n");
  CommandResult bad = Tessera("train " + yaml + " --set init_from=" + hf_);
  EXPECT_EQ(bad.exit_code, kExitBadConfig) << bad.output;
  EXPECT_TRUE(Contains(bad.output, yaml + ":4:")) << bad.output;
  EXPECT_TRUE(Contains(bad.output, "\"x_proj\" is not a projection of llama")) << bad.output;
}

// Mistral v0.1's sliding window: the same tensors as Llama, the window taken from config.json.
TEST_F(HfIntake, AMistralDirectoryTrainsWithItsWindow) {
  WriteFile(hf_ + "/config.json", WithType("mistral", "\"sliding_window\": 16"));
  CommandResult i = Tessera("inspect " + hf_);
  ASSERT_EQ(i.exit_code, 0) << i.output;
  EXPECT_TRUE(Contains(i.output, "model.sliding_window: 16    # sliding_window")) << i.output;
  CommandResult r = Tessera(Finetune());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(ReadFile(dir_ / "ft/config.yaml"), "sliding_window: 16"));
}

// Qwen2: q/k/v biases in the file (a run with model.qkv_bias wrote them); the same weights
// under model_type llama are refused by name, nothing loaded.
TEST_F(HfIntake, AQwen2DirectoryTrainsWithItsBiases) {
  CommandResult base = Tessera("train " + Repo("configs/llama-tiny.yaml") +
                               " --set model.qkv_bias=true --set train.steps=3 --set train.threads=1"
                               " --set train.peak_gflops=1 --set train.out_dir=" + (dir_ / "qwen"));
  ASSERT_EQ(base.exit_code, 0) << base.output;
  fs::copy_file(dir_ / "qwen/model.safetensors", hf_ + "/model.safetensors",
                fs::copy_options::overwrite_existing);
  CommandResult as_llama = Tessera(Finetune());
  EXPECT_NE(as_llama.exit_code, 0) << as_llama.output;
  EXPECT_TRUE(Contains(as_llama.output, "model.layers.0.self_attn.q_proj.bias")) << as_llama.output;
  EXPECT_FALSE(fs::exists(dir_ / "ft/model.safetensors"));
  WriteFile(hf_ + "/config.json", WithType("qwen2", "\"use_sliding_window\": false"));
  CommandResult r = Tessera(Finetune());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(ReadFile(dir_ / "ft/config.yaml"), "qkv_bias: true"));
}

// Qwen3: q/k norms in the file (a run with model.qk_norm wrote them, head_dim 16 = 64 / 4 given
// explicitly, as Qwen3's config.json does); exported as a directory whose config.json says
// qwen3, which then fine-tunes with no shape in the YAML.
TEST_F(HfIntake, AQwen3DirectoryTrainsWithItsQkNorms) {
  CommandResult base = Tessera("train " + Repo("configs/llama-tiny.yaml") +
                               " --set model.qk_norm=true --set train.steps=3 --set train.threads=1"
                               " --set train.peak_gflops=1 --set train.out_dir=" + (dir_ / "q3"));
  ASSERT_EQ(base.exit_code, 0) << base.output;
  const std::string exported = dir_ / "Qwen3-Tiny";
  CommandResult e = Tessera("export " + Repo("configs/llama-tiny.yaml") +
                            " --set model.qk_norm=true --init-from " + (dir_ / "q3/model.safetensors") +
                            " --out " + exported);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const std::string config = ReadFile(exported + "/config.json");
  EXPECT_TRUE(Contains(config, "\"model_type\":\"qwen3\"")) << config;
  EXPECT_TRUE(Contains(config, "\"head_dim\":16")) << config;
  CommandResult i = Tessera("inspect " + exported);
  ASSERT_EQ(i.exit_code, 0) << i.output;
  EXPECT_TRUE(Contains(i.output, "model.qk_norm: true")) << i.output;
  EXPECT_TRUE(Contains(i.output, "weights: 25 tensors")) << i.output;  // llama-tiny's 21 + 2 x 2 norms
  CommandResult r = Tessera("train " + Repo("configs/finetune.yaml") + " --set init_from=" + exported +
                            " --set train.steps=3 --set train.threads=1 --set train.peak_gflops=1"
                            " --set train.out_dir=" + (dir_ / "ft"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(ReadFile(dir_ / "ft/config.yaml"), "qk_norm: true"));
}

// The round trip: a sharded model directory written by `tessera export --out DIR` (shards,
// index, config.json), fine-tuned from, exported again as a directory, and read back: the
// re-export of what was loaded is the fine-tuned run's own file, byte for byte (fp32).
TEST_F(HfIntake, ExportedDirectoryRoundTripsBitForBit) {
  const std::string exported = dir_ / "Llama-Tiny-sharded";
  CommandResult e = Tessera("export " + Repo("configs/llama-tiny.yaml") + " --init-from " +
                            (dir_ / "base/model.safetensors") + " --out " + exported +
                            " --max-shard-size 100KB");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_TRUE(Contains(e.output, "5 shards, 427264 bytes of weights, config.json")) << e.output;
  EXPECT_TRUE(fs::exists(exported + "/model-00005-of-00005.safetensors"));
  EXPECT_TRUE(Contains(ReadFile(exported + "/config.json"), "\"model_type\":\"llama\""));

  CommandResult ft = Tessera("train " + Repo("configs/finetune.yaml") + " --set init_from=" + exported +
                             " --set train.steps=3 --set train.threads=1 --set train.peak_gflops=1"
                             " --set train.out_dir=" + (dir_ / "ft"));
  ASSERT_EQ(ft.exit_code, 0) << ft.output;
  const std::string again = dir_ / "again";
  CommandResult e2 = Tessera("export " + Repo("configs/finetune.yaml") + " --set init_from=" + exported +
                             " --init-from " + (dir_ / "ft/model.safetensors") + " --out " + again +
                             " --max-shard-size 100KB");
  ASSERT_EQ(e2.exit_code, 0) << e2.output;
  CommandResult e3 = Tessera("export " + Repo("configs/finetune.yaml") + " --set init_from=" + again +
                             " --init-from " + again + " --out " + (dir_ / "again.safetensors"));
  ASSERT_EQ(e3.exit_code, 0) << e3.output;
  EXPECT_EQ(ReadFile(dir_ / "again.safetensors"), ReadFile(dir_ / "ft/model.safetensors"));
  // An export never writes into a directory that holds something.
  CommandResult busy = Tessera("export " + Repo("configs/finetune.yaml") + " --set init_from=" + again +
                               " --init-from " + again + " --out " + exported);
  EXPECT_NE(busy.exit_code, 0);
  EXPECT_TRUE(Contains(busy.output, "exists and is not empty")) << busy.output;
}

}  // namespace
}  // namespace tessera::testing
