// links: tessera_train
// models/hf_export + HfConfigJson: a model as a Hugging Face model directory. config.json read
// back by the intake is the same model (every mapped key agrees) for each type written, and
// refused with the reason for models no type computes; shards respect the size limit, the
// index names every tensor once with the right total, and loading the directory gives the
// parameters bit for bit; a non-empty target and a failing disk leave nothing behind.
#include "models/hf_export.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "models/hf_config.h"
#include "models/param_layout.h"
#include "runtime/train/rank_layout.h"
#include "tests/fault/faulty_file_system.h"
#include "tests/testing/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

ModelConfig Llama() {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.vocab_size = 64;
  c.max_seq_len = 32;
  c.num_layers = 3;
  c.hidden_size = 32;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.ffn_hidden_size = 48;
  c.norm_eps = 1e-6f;
  c.rope_theta = 500000.0f;
  c.tie_embeddings = false;
  return c;
}

// MapHfConfig(HfConfigJson(c)): no missing item, and every key the intake maps agrees with c.
void ExpectReadsBackAs(const ModelConfig& c, const std::string& type) {
  auto json = HfConfigJson(c, "float32", false);
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  auto parsed = ParseJson(*json);
  ASSERT_TRUE(parsed.ok()) << *json;
  auto intake = MapHfConfig(*parsed, "config.json");
  ASSERT_TRUE(intake.ok()) << intake.status().ToString() << "\n" << *json;
  EXPECT_EQ(intake->model_type, type) << *json;
  EXPECT_TRUE(intake->missing.empty()) << intake->missing.front();
  for (const HfField& f : intake->fields) {
    EXPECT_EQ(ModelKeyText(intake->model, f.key), ModelKeyText(c, f.key))
        << type << ": " << f.key << " from " << f.hf_field << "\n" << *json;
  }
}

TEST(HfConfigJson, EachTypeReadsBackAsTheSameModel) {
  ModelConfig gpt2;
  gpt2.vocab_size = 50257;
  gpt2.max_seq_len = 1024;
  gpt2.num_layers = 12;
  gpt2.hidden_size = 768;
  gpt2.num_heads = 12;
  ExpectReadsBackAs(gpt2, "gpt2");
  gpt2.ffn_hidden_size = 1000;  // not the 4C rule: n_inner written
  gpt2.tie_embeddings = false;
  ExpectReadsBackAs(gpt2, "gpt2");

  ModelConfig llama = Llama();
  ExpectReadsBackAs(llama, "llama");
  llama.rope_scaling.type = RopeScalingType::kLlama3;
  llama.rope_scaling.factor = 8.0f;
  llama.rope_scaling.original_max_position = 16;
  ExpectReadsBackAs(llama, "llama");
  llama.rope_scaling = {};
  llama.rope_scaling.type = RopeScalingType::kLinear;
  llama.rope_scaling.factor = 2.0f;
  ExpectReadsBackAs(llama, "llama");

  ModelConfig mistral = Llama();
  mistral.sliding_window = 8;
  ExpectReadsBackAs(mistral, "mistral");
  mistral.sliding_window = 0;
  mistral.head_dim = 12;  // Mistral-Nemo's kind: heads x head_dim != hidden_size
  ExpectReadsBackAs(mistral, "llama");

  ModelConfig qwen2 = Llama();
  qwen2.qkv_bias = true;
  qwen2.tie_embeddings = true;
  ExpectReadsBackAs(qwen2, "qwen2");
  qwen2.sliding_window = 8;  // every layer windowed: max_window_layers 0
  ExpectReadsBackAs(qwen2, "qwen2");

  ModelConfig mixtral = Llama();
  mixtral.moe.num_experts = 4;
  mixtral.moe.top_k = 2;
  mixtral.moe.expert_ffn_size = 48;
  mixtral.moe.aux_loss = 0.02f;
  mixtral.sliding_window = 16;
  ExpectReadsBackAs(mixtral, "mixtral");

  ModelConfig qwen2_moe = Llama();  // Qwen1.5-MoE-like: every block MoE, then every other
  qwen2_moe.qkv_bias = true;
  qwen2_moe.moe.num_experts = 6;
  qwen2_moe.moe.top_k = 2;
  qwen2_moe.moe.expert_ffn_size = 16;
  qwen2_moe.moe.normalize_gates = false;
  qwen2_moe.moe.shared_experts = 4;
  qwen2_moe.moe.shared_expert_gate = true;
  ExpectReadsBackAs(qwen2_moe, "qwen2_moe");
  qwen2_moe.moe.layer_interval = 2;
  qwen2_moe.moe.first_dense_layers = 1;
  ExpectReadsBackAs(qwen2_moe, "qwen2_moe");

  ModelConfig qwen3 = Llama();  // q/k norms; head_dim written even when it is C / heads
  qwen3.qk_norm = true;
  ExpectReadsBackAs(qwen3, "qwen3");
  qwen3.head_dim = 12;
  ExpectReadsBackAs(qwen3, "qwen3");

  ModelConfig qwen3_moe = qwen3;  // softmax top-k renormalised, no shared experts
  qwen3_moe.moe.num_experts = 4;
  qwen3_moe.moe.top_k = 2;
  qwen3_moe.moe.expert_ffn_size = 16;
  ExpectReadsBackAs(qwen3_moe, "qwen3_moe");
}

TEST(HfConfigJson, ModelsNoTypeComputesAreRefusedWithTheReason) {
  auto refused = [](const ModelConfig& c, bool routing_bias, const std::string& why) {
    auto json = HfConfigJson(c, "float32", routing_bias);
    ASSERT_FALSE(json.ok()) << *json;
    EXPECT_EQ(json.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(json.status().message().find(why), std::string::npos) << json.status().message();
  };
  ModelConfig gpt2_moe;
  gpt2_moe.moe.num_experts = 4;
  refused(gpt2_moe, false, "GPT-2-family experts");
  ModelConfig gpt2_window;
  gpt2_window.sliding_window = 4;
  refused(gpt2_window, false, "GPT-2 has no sliding window");
  ModelConfig deepseek = Llama();
  deepseek.moe.num_experts = 4;
  deepseek.moe.score = RouterScore::kSigmoid;
  refused(deepseek, false, "is not Mixtral's");
  ModelConfig biased = Llama();
  biased.moe.num_experts = 4;
  refused(biased, true, "a routing bias");
  ModelConfig dense_first = biased;
  dense_first.moe.first_dense_layers = 1;
  refused(dense_first, false, "dense blocks");
  ModelConfig gated = Llama();
  gated.moe.num_experts = 4;
  gated.moe.shared_experts = 1;
  gated.moe.shared_expert_gate = true;
  refused(gated, false, "has q/k/v biases");
}

TEST(ShardSize, ParsesUnitsAndRefusesNonsense) {
  EXPECT_EQ(*ParseShardSize("5GB"), 5000000000u);
  EXPECT_EQ(*ParseShardSize("500MB"), 500000000u);
  EXPECT_EQ(*ParseShardSize("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseShardSize("4KiB"), 4096u);
  EXPECT_EQ(*ParseShardSize("1234"), 1234u);
  for (const char* bad : {"", "0", "GB", "-5GB", "5 GB", "5TB", "1.5GB", "99999999999999999999GB"}) {
    EXPECT_FALSE(ParseShardSize(bad).ok()) << bad;
  }
}

// A model's parameters over one buffer, filled with distinct values.
struct Model {
  explicit Model(const ModelConfig& c) : config(c) {
    int64_t total = 0;
    for (const ParamDecl& d : DeclareParameters(c)) total += d.shape.numel();
    values.resize(static_cast<size_t>(total));
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.001f * static_cast<float>(i % 997) - 0.3f;
    params = GlobalViews(c, values.data());
  }
  ModelConfig config;
  std::vector<float> values;
  std::vector<Parameter> params;
};

class HfExportDir : public ::testing::Test {
 protected:
  testing::ScopedTempDir tmp_{"hf_export"};
};

TEST_F(HfExportDir, ShardsIndexAndConfigLoadBackBitForBit) {
  ModelConfig c = Llama();
  c.qkv_bias = true;
  Model src(c);
  const std::string dir = tmp_ / "Qwen2-Tiny";
  const uint64_t limit = 20000;  // bytes: several shards of whole tensors
  auto r = ExportHfModelDir(dir, c, src.params, DType::kF32, nullptr, limit);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->shards, 2);
  EXPECT_TRUE(r->no_config.empty()) << r->no_config;
  EXPECT_EQ(r->weight_bytes, src.values.size() * 4);
  EXPECT_FALSE(fs::exists(dir + ".partial"));

  // The index: total_size, every tensor once, each shard within the limit unless one tensor.
  auto index = ReadInputFile(dir + "/model.safetensors.index.json", 1 << 20, "index");
  ASSERT_TRUE(index.ok());
  auto json = ParseJson(*index);
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(json->Find("metadata")->Find("total_size")->as_int(),
            static_cast<int64_t>(r->weight_bytes));
  auto map = ParseSafetensorsIndex(*index, dir);
  ASSERT_TRUE(map.ok());
  std::map<std::string, uint64_t> shard_bytes;
  for (const auto& [tensor, file] : *map) {
    auto f = SafetensorsFile::Open(dir + "/" + file);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const SafetensorsTensorInfo* info = (*f)->Find(tensor);
    ASSERT_NE(info, nullptr) << tensor << " not in " << file;
    shard_bytes[file] += info->shape.numel() * 4;
  }
  EXPECT_EQ(map->size(), src.params.size());
  EXPECT_EQ(shard_bytes.size(), static_cast<size_t>(r->shards));
  EXPECT_TRUE(shard_bytes.count("model-00001-of-0000" + std::to_string(r->shards) + ".safetensors"));
  for (const auto& [file, bytes] : shard_bytes) {
    auto f = SafetensorsFile::Open(dir + "/" + file);
    EXPECT_TRUE(bytes <= limit || (*f)->tensors().size() == 1) << file << ": " << bytes;
  }

  // config.json is the same model; the directory loads back bit for bit.
  auto intake = ReadHfConfig(dir);
  ASSERT_TRUE(intake.ok()) << intake.status().ToString();
  EXPECT_EQ(intake->model_type, "qwen2");
  EXPECT_TRUE(intake->model.qkv_bias);
  Model dst(c);
  std::fill(dst.values.begin(), dst.values.end(), 0.0f);
  ASSERT_TRUE(LoadHfWeights(dir, c, dst.params).ok());
  EXPECT_EQ(std::memcmp(src.values.data(), dst.values.data(), src.values.size() * 4), 0);
}

TEST_F(HfExportDir, OneShardIsModelSafetensorsWithoutAnIndex) {
  Model src(Llama());
  const std::string dir = tmp_ / "one";
  fs::create_directories(dir);  // an empty directory may be the target
  // A trailing slash names the same directory; missing parents are created.
  auto nested = ExportHfModelDir(tmp_ / "a/b/c/", src.config, src.params, DType::kF32, nullptr);
  ASSERT_TRUE(nested.ok()) << nested.status().ToString();
  EXPECT_TRUE(fs::exists(tmp_ / "a/b/c/model.safetensors"));
  EXPECT_FALSE(fs::exists(tmp_ / "a/b/c/.partial"));
  EXPECT_FALSE(fs::exists(tmp_ / "a/b/c.partial"));
  auto r = ExportHfModelDir(dir, src.config, src.params, DType::kBF16, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files, (std::vector<std::string>{"model.safetensors", "config.json"}));
  EXPECT_NE(ReadInputFile(dir + "/config.json", 1 << 20, "config")->find("\"torch_dtype\":\"bfloat16\""),
            std::string::npos);
}

TEST_F(HfExportDir, ANonEmptyTargetOrAFailedWriteLeavesNothingBehind) {
  Model src(Llama());
  const std::string busy = tmp_ / "busy";
  fs::create_directories(busy);
  ASSERT_TRUE(WriteFileAtomic(busy + "/notes.txt", "mine").ok());
  auto r = ExportHfModelDir(busy, src.config, src.params, DType::kF32, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exists and is not empty"), std::string::npos);
  EXPECT_EQ(std::distance(fs::directory_iterator(busy), fs::directory_iterator()), 1);

  // The disk fails on the 3rd write (inside the second shard): no directory, no leftovers.
  for (int at : {1, 3, 6}) {
    testing::FaultyFileSystem faulty;
    faulty.fail_write_at = at;
    const std::string dir = tmp_ / ("failed" + std::to_string(at));
    auto f = ExportHfModelDir(dir, src.config, src.params, DType::kF32, nullptr, 20000, faulty);
    ASSERT_FALSE(f.ok()) << at;
    EXPECT_EQ(f.status().code(), StatusCode::kIoError);
    EXPECT_FALSE(fs::exists(dir)) << at;
    EXPECT_FALSE(fs::exists(dir + ".partial")) << at;
  }
  // A model no type computes: weights and index, no config.json, and the reason.
  ModelConfig deepseek = Llama();
  deepseek.moe.num_experts = 4;
  deepseek.moe.shared_experts = 1;
  Model moe(deepseek);
  auto d = ExportHfModelDir(tmp_ / "ds", deepseek, moe.params, DType::kF32, nullptr);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_NE(d->no_config.find("not Mixtral's"), std::string::npos) << d->no_config;
  EXPECT_FALSE(fs::exists(tmp_ / "ds/config.json"));
  ASSERT_TRUE(LoadHfWeights(tmp_ / "ds", deepseek, moe.params).ok());
}

}  // namespace
}  // namespace tessera
