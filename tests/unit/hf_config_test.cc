// links: tessera_train
// config.json intake (models/hf_config.h) on the shapes of real releases (their config.json
// fields as published, sizes kept), and the config loader's merge with a YAML config
// (init_from a model directory): values taken, conflicts named at both ends, the checklist of
// what Tessera lacks.
#include "models/hf_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/train/config.h"
#include "tests/testing/temp_dir.h"

namespace tessera {
namespace {

HfModelIntake Map(const std::string& json) {
  auto parsed = ParseJson(json);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto intake = MapHfConfig(*parsed, "config.json");
  EXPECT_TRUE(intake.ok()) << intake.status().ToString();
  return intake.ok() ? *intake : HfModelIntake{};
}

bool MissingMentions(const HfModelIntake& in, const std::string& what) {
  for (const std::string& m : in.missing) {
    if (m.find(what) != std::string::npos) return true;
  }
  return false;
}

// gpt2 (openai-community/gpt2).
constexpr char kGpt2[] = R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
  "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
  "n_inner": null, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257})";

TEST(HfConfig, Gpt2MapsEveryShapeField) {
  const HfModelIntake in = Map(kGpt2);
  EXPECT_TRUE(in.missing.empty());
  EXPECT_EQ(in.model.family, ModelFamily::kGpt2);
  EXPECT_EQ(in.model.vocab_size, 50257);
  EXPECT_EQ(in.model.max_seq_len, 1024);
  EXPECT_EQ(in.model.num_layers, 12);
  EXPECT_EQ(in.model.hidden_size, 768);
  EXPECT_EQ(in.model.num_heads, 12);
  EXPECT_EQ(in.model.ffn_size(), 3072);
  EXPECT_TRUE(in.model.tie_embeddings);
  EXPECT_EQ(ModelKeyText(in.model, "model.norm_eps"), "1.0e-05");
}

// A Llama-2-shaped config (meta-llama/Llama-2-7b-hf), and Llama 3.1's rope_scaling.
constexpr char kLlama2[] = R"({"architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
  "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 4096,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 32, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "tie_word_embeddings": false, "torch_dtype": "float16", "vocab_size": 32000})";

TEST(HfConfig, LlamaMapsWithLlama3RopeScalingAndOtherScalingsAreNamed) {
  const HfModelIntake in = Map(kLlama2);
  EXPECT_TRUE(in.missing.empty());
  EXPECT_EQ(in.model.family, ModelFamily::kLlama);
  EXPECT_EQ(in.model.ffn_size(), 11008);
  EXPECT_EQ(in.model.kv_heads(), 32);
  EXPECT_FALSE(in.model.tie_embeddings);
  EXPECT_EQ(in.model.rope_theta, 10000.0f);
  EXPECT_FALSE(in.model.moe.enabled());
  std::string llama31 = kLlama2;
  llama31.replace(llama31.find("\"rope_scaling\": null"), 20,
                  R"("rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                     "rope_theta": 500000.0)");
  const HfModelIntake l3 = Map(llama31);
  EXPECT_TRUE(l3.missing.empty());
  EXPECT_EQ(l3.model.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(l3.model.rope_scaling.factor, 8.0f);
  EXPECT_EQ(l3.model.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(l3.model.rope_scaling.original_max_position, 8192);
  EXPECT_EQ(l3.model.rope_theta, 500000.0f);
  // Scalings Tessera does not compute are named.
  std::string yarn = kLlama2;
  yarn.replace(yarn.find("\"rope_scaling\": null"), 20, R"("rope_scaling": {"factor": 4.0, "rope_type": "yarn"})");
  const HfModelIntake y = Map(yarn);
  ASSERT_EQ(y.missing.size(), 1u);
  EXPECT_TRUE(MissingMentions(y, "rope_scaling with rope_type \"yarn\"")) << y.missing[0];
}

TEST(HfConfig, MistralsSlidingWindowAndQwen2sBiasesAreMapped) {
  // mistralai/Mistral-7B-v0.1: a 4096-token window over 32768 positions.
  const HfModelIntake v01 = Map(R"({"model_type": "mistral", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false, "vocab_size": 32000})");
  EXPECT_TRUE(v01.missing.empty());
  EXPECT_EQ(v01.model.sliding_window, 4096);
  EXPECT_FALSE(v01.model.qkv_bias);
  // v0.3: no window, the plain model.
  const HfModelIntake v03 = Map(R"({"model_type": "mistral", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "sliding_window": null, "vocab_size": 32768})");
  EXPECT_TRUE(v03.missing.empty());
  EXPECT_EQ(v03.model.sliding_window, 0);
  EXPECT_EQ(v03.model.kv_heads(), 8);
  EXPECT_EQ(v03.model.rope_theta, 1e6f);
  // Qwen/Qwen2-0.5B: q/k/v biases, tied embeddings, no window in use.
  const HfModelIntake qwen2 = Map(R"({"model_type": "qwen2", "hidden_act": "silu", "hidden_size": 896,
    "intermediate_size": 4864, "max_position_embeddings": 131072, "max_window_layers": 24,
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072,
    "tie_word_embeddings": true, "use_sliding_window": false, "vocab_size": 151936})");
  EXPECT_TRUE(qwen2.missing.empty());
  EXPECT_TRUE(qwen2.model.qkv_bias);
  EXPECT_EQ(qwen2.model.sliding_window, 0);
  EXPECT_TRUE(qwen2.model.tie_embeddings);
  // use_sliding_window: every layer windowed (max_window_layers 0) maps; a split is named.
  const std::string windowed = R"({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
    "max_position_embeddings": 256, "num_attention_heads": 4, "num_hidden_layers": 4,
    "vocab_size": 64, "use_sliding_window": true, "sliding_window": 32, "max_window_layers": )";
  EXPECT_EQ(Map(windowed + "0}").model.sliding_window, 32);
  EXPECT_EQ(Map(windowed + "4}").model.sliding_window, 0);
  const HfModelIntake split = Map(windowed + "2}");
  ASSERT_EQ(split.missing.size(), 1u);
  EXPECT_TRUE(MissingMentions(split, "sliding window from layer max_window_layers=2 of 4 on"));
}

TEST(HfConfig, MixtralAndTheQwenMoesMapTheirExperts) {
  // mistralai/Mixtral-8x7B-v0.1.
  const HfModelIntake mixtral = Map(R"({"model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
    "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "num_local_experts": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02, "sliding_window": null, "vocab_size": 32000})");
  EXPECT_TRUE(mixtral.missing.empty());
  EXPECT_EQ(mixtral.model.moe.num_experts, 8);
  EXPECT_EQ(mixtral.model.moe.top_k, 2);
  EXPECT_EQ(mixtral.model.expert_ffn(), 14336);
  EXPECT_TRUE(mixtral.model.moe.normalize_gates);
  EXPECT_EQ(mixtral.model.moe.aux_loss, 0.02f);
  EXPECT_TRUE(mixtral.model.is_moe_layer(0) && mixtral.model.is_moe_layer(31));
  // Qwen/Qwen1.5-MoE-A2.7B (qwen2_moe): biases and the gated shared expert are missing.
  const HfModelIntake q2 = Map(R"({"model_type": "qwen2_moe", "decoder_sparse_step": 1, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 8192,
    "moe_intermediate_size": 1408, "mlp_only_layers": [], "norm_topk_prob": false,
    "num_attention_heads": 16, "num_experts": 60, "num_experts_per_tok": 4,
    "num_hidden_layers": 24, "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
    "shared_expert_intermediate_size": 5632, "vocab_size": 151936})");
  EXPECT_TRUE(q2.missing.empty());
  EXPECT_TRUE(q2.model.qkv_bias);
  EXPECT_EQ(q2.model.moe.shared_experts, 4);  // 5632 = 4 x 1408
  EXPECT_TRUE(q2.model.moe.shared_expert_gate);
  EXPECT_EQ(q2.model.moe.num_experts, 60);
  EXPECT_FALSE(q2.model.moe.normalize_gates);
  // Qwen/Qwen3-30B-A3B (qwen3_moe): q_norm/k_norm and head_dim 128 != 2048 / 32.
  const HfModelIntake q3 = Map(R"({"model_type": "qwen3_moe", "decoder_sparse_step": 1, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "mlp_only_layers": [], "moe_intermediate_size": 768,
    "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "vocab_size": 151936})");
  EXPECT_TRUE(q3.missing.empty());
  EXPECT_TRUE(q3.model.qk_norm);
  EXPECT_FALSE(q3.model.qkv_bias);
  EXPECT_EQ(q3.model.head_size(), 128);
  EXPECT_EQ(q3.model.moe.num_experts, 128);
  EXPECT_EQ(q3.model.moe.top_k, 8);
  EXPECT_EQ(q3.model.expert_ffn(), 768);
}

// Qwen/Qwen3-0.6B's config.json (qwen3): q/k norms, head_dim 128 (not 1024 / 16), tied.
// Without a head_dim the transformers default is 128, not hidden_size / heads.
TEST(HfConfig, Qwen3DenseMapsItsQkNormsAndHeadDim) {
  const HfModelIntake q = Map(R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02,
    "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
    "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null,
    "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 151936})");
  EXPECT_TRUE(q.missing.empty());
  EXPECT_TRUE(q.model.qk_norm);
  EXPECT_FALSE(q.model.qkv_bias);
  EXPECT_EQ(q.model.head_size(), 128);
  EXPECT_EQ(q.model.sliding_window, 0);
  EXPECT_TRUE(q.model.tie_embeddings);
  const HfModelIntake no_dim = Map(R"({"model_type": "qwen3", "hidden_act": "silu",
    "hidden_size": 64, "intermediate_size": 96, "max_position_embeddings": 128,
    "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
    "vocab_size": 64})");
  EXPECT_EQ(no_dim.model.head_size(), 128);
}

TEST(HfConfig, MlaAndUnknownTypesAreAChecklistNotAnError) {
  const HfModelIntake ds = Map(R"({"model_type": "deepseek_v3", "kv_lora_rank": 512, "q_lora_rank": 1536,
    "hidden_size": 7168, "n_routed_experts": 256})");
  EXPECT_TRUE(MissingMentions(ds, "multi-head latent attention (MLA: kv_lora_rank=512, q_lora_rank=1536)"));
  const HfModelIntake mamba = Map(R"({"model_type": "mamba", "hidden_size": 768})");
  ASSERT_EQ(mamba.missing.size(), 1u);
  EXPECT_TRUE(MissingMentions(mamba, "model_type \"mamba\": not a family Tessera knows (supported: gpt2, llama"));
  // Broken files are errors naming the field.
  auto no_type = MapHfConfig(*ParseJson(R"({"hidden_size": 8})"), "x/config.json");
  EXPECT_EQ(no_type.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(no_type.status().message().find("x/config.json: model_type: missing"), std::string::npos);
  auto bad = MapHfConfig(*ParseJson(R"({"model_type": "llama", "hidden_size": "4096"})"), "c.json");
  EXPECT_NE(bad.status().message().find("c.json: vocab_size: missing"), std::string::npos)
      << bad.status().message();
}

// ---- the config loader: init_from a model directory ------------------------------------------

class HfIntakeConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_ / "config.json")
        << R"({"model_type": "llama", "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 192,
               "max_position_embeddings": 128, "num_attention_heads": 4, "num_hidden_layers": 2,
               "num_key_value_heads": 2, "rms_norm_eps": 1e-05, "vocab_size": 64})";
  }
  Result<Config> Load(const std::string& yaml, std::vector<std::string> sets = {}) {
    const std::string path = dir_ / "run.yaml";
    std::ofstream(path) << yaml;
    sets.push_back("init_from=" + dir_.str());
    return LoadConfig(path, sets);
  }
  testing::ScopedTempDir dir_{"hf_intake_config"};
};

TEST_F(HfIntakeConfig, TheModelSectionComesFromConfigJson) {
  auto c = Load("train: {steps: 3, seq_len: 32}\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.family, ModelFamily::kLlama);
  EXPECT_EQ(c->model.hidden_size, 64);
  EXPECT_EQ(c->model.kv_heads(), 2);
  EXPECT_EQ(c->model.max_seq_len, 128);
  EXPECT_FALSE(c->model.tie_embeddings);
  // Keys config.json does not decide stay the YAML's.
  auto r = Load("model: {recompute: full, init_std: 0.01}\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model.recompute, RecomputePolicy::kFull);
  // A key that agrees is fine, also by effect: ffn_hidden_size 0 is Llama's rule, 8 * 64 / 3
  // rounded up to 64 = 192, the file's intermediate_size.
  EXPECT_TRUE(Load("model: {hidden_size: 64, family: llama, ffn_hidden_size: 0}\n").ok());
}

TEST_F(HfIntakeConfig, TheFilesAuxLossCoefficientIsASuggestion) {
  std::ofstream(dir_ / "config.json")
      << R"({"model_type": "mixtral", "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 96,
             "max_position_embeddings": 128, "num_attention_heads": 4, "num_hidden_layers": 2,
             "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
             "router_aux_loss_coef": 0.02, "vocab_size": 64})";
  auto taken = Load("train: {steps: 3}\n");
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->model.moe.aux_loss, 0.02f);
  EXPECT_EQ(taken->model.moe.num_experts, 4);
  auto mine = Load("model: {moe: {aux_loss: 0.0}}\n");
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_EQ(mine->model.moe.aux_loss, 0.0f);
  // Absent fields are the family's defaults, and still decided by the file.
  auto eps = Load("model: {norm_eps: 1.0e-3}\n");
  ASSERT_FALSE(eps.ok());
  EXPECT_NE(eps.status().message().find("rms_norm_eps (absent: the default)=1.0e-06"),
            std::string::npos) << eps.status().message();
}

TEST_F(HfIntakeConfig, AKeyThatDisagreesNamesBothPlaces) {
  auto c = Load("model:\n  hidden_size: 128\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("run.yaml:2:16: model.hidden_size=128 disagrees with "
                                      "hidden_size=64 in " + (dir_ / "config.json")),
            std::string::npos) << c.status().message();
  auto s = Load("train: {steps: 3}\n", {"model.family=gpt2"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("model.family=gpt2 disagrees with model_type=llama"),
            std::string::npos) << s.status().message();
}

TEST_F(HfIntakeConfig, WhatTesseraLacksIsListedWhole) {
  std::ofstream(dir_ / "config.json")
      << R"({"model_type": "qwen2", "hidden_act": "gelu", "hidden_size": 64, "intermediate_size": 192,
             "max_position_embeddings": 128, "num_attention_heads": 4, "num_hidden_layers": 2,
             "num_key_value_heads": 2, "vocab_size": 64, "attention_bias": true,
             "rope_scaling": {"type": "yarn", "factor": 4.0}})";
  auto c = Load("train: {steps: 3}\n");
  ASSERT_FALSE(c.ok());
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("init_from: " + (dir_ / "config.json") + " (model_type \"qwen2\") describes a "
                   "model Tessera cannot build as it is; nothing was loaded. Missing:"),
            std::string::npos) << m;
  EXPECT_NE(m.find("\n  - hidden_act=\"gelu\""), std::string::npos) << m;
  EXPECT_NE(m.find("\n  - rope_scaling with rope_type \"yarn\""), std::string::npos) << m;
  EXPECT_NE(m.find("\n  - attention_bias=true"), std::string::npos) << m;
  EXPECT_NE(m.find("q/k/v biases only (model.qkv_bias"), std::string::npos) << m;
}

}  // namespace
}  // namespace tessera
