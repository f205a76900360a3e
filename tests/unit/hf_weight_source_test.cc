// links: tessera_models
// tests/unit/hf_weight_source_test.cc — the sharded loader's source (models/hf_weights.h
// HfWeightSource): any element range of any parameter, alone or several per call, equals the
// same elements of a whole load (GPT-2's transposed weights, MoE experts split per expert in
// the file, F32 and BF16 files); only the requested bytes are read; a failed read is retried
// once and then refused naming file and tensor; non-finite values and a file that shrinks
// after opening are refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "models/hf_weights.h"
#include "models/param_layout.h"
#include "models/safetensors.h"
#include "tests/testing/temp_dir.h"

namespace tessera {
namespace {

ModelConfig Gpt2() {
  ModelConfig c;
  c.family = ModelFamily::kGpt2;
  c.vocab_size = 37;
  c.max_seq_len = 5;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_heads = 2;
  return c;
}

ModelConfig Mixtral() {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.vocab_size = 11;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.ffn_hidden_size = 12;
  c.tie_embeddings = false;
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.expert_ffn_size = 6;
  return c;
}

// The model's parameters, whole, with distinct values, over buffers this struct owns.
struct Model {
  std::vector<std::vector<float>> values;
  std::vector<Parameter> params;

  Model(const ModelConfig& c, float seed) : params(HfGlobalSpecs(c)) {
    values.resize(params.size());
    for (size_t k = 0; k < params.size(); ++k) {
      std::vector<float>& v = values[k];
      v.resize(static_cast<size_t>(params[k].spec.global_shape.numel()));
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = seed + 0.01f * static_cast<float>(k * 131 + i) - 0.3f * static_cast<float>(i % 5);
      }
      params[k].value = Tensor(v.data(), DType::kF32, params[k].spec.global_shape);
    }
  }
};

// Random ranges of every parameter, one per call and several per call, against a whole load.
void ExpectRangesMatchWholeLoad(const std::string& path, const ModelConfig& c) {
  Model whole(c, 0.0f);
  ASSERT_TRUE(LoadHfWeights(path, c, whole.params).ok());
  const std::vector<Parameter> specs = HfGlobalSpecs(c);
  auto src = HfWeightSource::Open(path, c, specs, /*routing_bias=*/false);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  std::mt19937 rng(7);
  for (size_t k = 0; k < specs.size(); ++k) {
    const int64_t n = specs[k].spec.global_shape.numel();
    const std::vector<float>& want = whole.values[k];
    for (int trial = 0; trial < 20; ++trial) {
      const int64_t b = static_cast<int64_t>(rng() % n), len = 1 + static_cast<int64_t>(rng() % (n - b));
      std::vector<float> got(static_cast<size_t>(len), -1.0f);
      ASSERT_TRUE((*src)->Read(k, b, len, got.data()).ok());
      for (int64_t i = 0; i < len; ++i) {
        ASSERT_EQ(got[i], want[b + i]) << specs[k].name() << " element " << b + i;
      }
    }
    // The whole tensor as disjoint pieces in one call (a rank's rows of a row-parallel tensor).
    std::vector<float> got(static_cast<size_t>(n), -1.0f);
    std::vector<HfWeightSource::Request> pieces;
    for (int64_t b = 0; b < n;) {
      const int64_t len = std::min<int64_t>(n - b, 1 + static_cast<int64_t>(rng() % 7));
      pieces.push_back({b, len, got.data() + b});
      b += len;
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    ASSERT_TRUE((*src)->Read(k, pieces).ok());
    EXPECT_EQ(got, want) << specs[k].name();
  }
}

TEST(HfWeightSource, AnyRangeOfAGpt2FileEqualsTheWholeLoadF32AndBf16) {
  testing::ScopedTempDir dir("hf_source_gpt2");
  const ModelConfig c = Gpt2();
  Model m(c, 1.0f);
  ASSERT_TRUE(ExportHfWeights(dir / "f32.safetensors", c, m.params).ok());
  ASSERT_TRUE(ExportHfWeights(dir / "bf16.safetensors", c, m.params, DType::kBF16).ok());
  ExpectRangesMatchWholeLoad(dir / "f32.safetensors", c);
  ExpectRangesMatchWholeLoad(dir / "bf16.safetensors", c);
}

TEST(HfWeightSource, AnyRangeOfStackedExpertsEqualsTheWholeLoad) {
  testing::ScopedTempDir dir("hf_source_moe");
  const ModelConfig c = Mixtral();
  Model m(c, 2.0f);
  ASSERT_TRUE(ExportHfWeights(dir / "m.safetensors", c, m.params).ok());
  ExpectRangesMatchWholeLoad(dir / "m.safetensors", c);
}

// Index of the parameter named `name` in HfGlobalSpecs order.
size_t IndexOf(const std::vector<Parameter>& specs, const std::string& name) {
  for (size_t k = 0; k < specs.size(); ++k) {
    if (specs[k].name() == name) return k;
  }
  ADD_FAILURE() << "no parameter " << name;
  return 0;
}

TEST(HfWeightSource, ReadsOnlyTheRequestedBytes) {
  testing::ScopedTempDir dir("hf_source_bytes");
  const ModelConfig c = Gpt2();
  Model m(c, 1.0f);
  ASSERT_TRUE(ExportHfWeights(dir / "m.safetensors", c, m.params).ok());
  const std::vector<Parameter> specs = HfGlobalSpecs(c);
  auto src = HfWeightSource::Open(dir / "m.safetensors", c, specs, false);
  ASSERT_TRUE(src.ok());
  std::vector<float> out(10);
  ASSERT_TRUE((*src)->Read(IndexOf(specs, "wte.weight"), 100, 10, out.data()).ok());
  EXPECT_EQ((*src)->bytes_read(), 40);
  // A transposed weight's one Tessera row is one file column: the rows of the file it crosses,
  // from that column of the first to that column of the last (C=8 rows of 3C=24 columns).
  ASSERT_TRUE((*src)->Read(IndexOf(specs, "h.0.attn.c_attn.weight"), 8 * 5, 8, out.data()).ok());
  EXPECT_EQ((*src)->bytes_read(), 40 + (7 * 24 + 1) * 4);
  EXPECT_EQ(out[3], m.values[IndexOf(specs, "h.0.attn.c_attn.weight")][8 * 5 + 3]);
}

TEST(HfWeightSource, AFailedReadIsRetriedOnceThenRefusedNamingFileAndTensor) {
  testing::ScopedTempDir dir("hf_source_retry");
  const ModelConfig c = Gpt2();
  Model m(c, 1.0f);
  const std::string path = dir / "m.safetensors";
  ASSERT_TRUE(ExportHfWeights(path, c, m.params).ok());
  const std::vector<Parameter> specs = HfGlobalSpecs(c);
  const size_t wte = IndexOf(specs, "wte.weight");
  std::vector<int> attempts;
  auto once = [&](std::string_view tensor, int attempt) -> Status {
    if (tensor != "wte.weight") return Status::Ok();
    attempts.push_back(attempt);
    return attempt == 0 ? IoError("injected: the first read fails") : Status::Ok();
  };
  auto src = HfWeightSource::Open(path, c, specs, false, once);
  ASSERT_TRUE(src.ok());
  std::vector<float> out(16);
  ASSERT_TRUE((*src)->Read(wte, 0, 16, out.data()).ok());
  EXPECT_EQ(attempts, (std::vector<int>{0, 1}));
  EXPECT_EQ(out[5], m.values[wte][5]);

  auto always = [](std::string_view tensor, int) -> Status {
    return tensor == "wte.weight" ? IoError("injected: the disk is gone") : Status::Ok();
  };
  auto failing = HfWeightSource::Open(path, c, specs, false, always);
  ASSERT_TRUE(failing.ok());
  Status st = (*failing)->Read(wte, 0, 16, out.data());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find(path + ": tensor 'wte.weight': injected: the disk is gone (read twice)"),
            std::string::npos) << st.ToString();
  EXPECT_TRUE((*failing)->Read(IndexOf(specs, "wpe.weight"), 0, 8, out.data()).ok());
}

TEST(HfWeightSource, NonFiniteValuesAndAShrunkenFileAreRefused) {
  testing::ScopedTempDir dir("hf_source_damage");
  const ModelConfig c = Gpt2();
  Model m(c, 1.0f);
  const std::vector<Parameter> specs = HfGlobalSpecs(c);
  const size_t attn = IndexOf(specs, "h.1.attn.c_attn.weight");
  // Tessera element (row 5, column 3) of the (24, 8) weight is the file's (3, 5): 3 * 24 + 5.
  m.values[attn][5 * 8 + 3] = std::numeric_limits<float>::quiet_NaN();
  const std::string path = dir / "m.safetensors";
  ASSERT_TRUE(ExportHfWeights(path, c, m.params).ok());
  auto src = HfWeightSource::Open(path, c, specs, false);
  ASSERT_TRUE(src.ok()) << "values are not read at Open";
  std::vector<float> out(24 * 8);
  EXPECT_TRUE((*src)->Read(attn, 0, 5 * 8, out.data()).ok()) << "rows before the NaN";
  Status st = (*src)->Read(attn, 0, 24 * 8, out.data());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("tensor 'h.1.attn.c_attn.weight' holds a NaN or Inf (element 77)"),
            std::string::npos) << st.ToString();
  // Everything at and after the last tensor's data is cut away after Open: a short read.
  const auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  uint64_t last = 0;
  std::string last_name;
  for (const SafetensorsTensorInfo& t : (*file)->tensors()) {
    if (t.data_begin >= last) last = t.data_begin, last_name = t.name;
  }
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(8 + (*file)->header_bytes() + last)), 0);
  st = (*src)->Read(IndexOf(specs, last_name), 0, 1, out.data());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("tensor '" + last_name + "'"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("unexpected end of file"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("(read twice)"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace tessera
