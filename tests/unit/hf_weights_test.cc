// models/hf_weights: HF import (transposition, prefixes, ignorable buffers, every mismatch
// reported, all-or-nothing) and export -> import bit-identical round trips. Parameters are
// built by hand over test-owned buffers, independent of the Transformer implementation.
// links: tessera_models
#include "models/hf_weights.h"

#include <gtest/gtest.h>

#include <limits>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "models/safetensors.h"

#include "tests/testing/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// Parameters over buffers this struct owns; values are a deterministic function of a seed.
struct ParamSet {
  std::vector<std::unique_ptr<std::vector<float>>> buffers;
  std::vector<Parameter> params;

  void Add(const std::string& name, Shape shape, bool hf_transposed = false,
           ParamKind kind = ParamKind::kMatrix) {
    auto buf = std::make_unique<std::vector<float>>(static_cast<size_t>(shape.numel()), 0.0f);
    Parameter p;
    p.spec = ShardSpec::Whole(name, shape);
    p.kind = kind;
    p.value = Tensor(buf->data(), DType::kF32, shape);
    p.hf_transposed = hf_transposed;
    params.push_back(p);
    buffers.push_back(std::move(buf));
  }
  void Fill(float seed) {
    for (size_t k = 0; k < buffers.size(); ++k) {
      auto& b = *buffers[k];
      for (size_t i = 0; i < b.size(); ++i) {
        b[i] = seed + 0.001f * static_cast<float>(k * 1000 + i) - 0.37f * static_cast<float>(i % 7);
      }
    }
  }
  std::vector<std::vector<float>> Snapshot() const {
    std::vector<std::vector<float>> s;
    for (const auto& b : buffers) s.push_back(*b);
    return s;
  }
  float* Data(const std::string& name) {
    for (size_t k = 0; k < params.size(); ++k) {
      if (params[k].name() == name) return buffers[k]->data();
    }
    return nullptr;
  }
};

// Tiny GPT-2: V=5, C=4, 1 layer, max_seq_len=3; c_attn (3C, C) and c_fc (F=16, C) transposed.
ModelConfig Gpt2Config() {
  ModelConfig c;
  c.family = ModelFamily::kGpt2;
  c.vocab_size = 5;
  c.max_seq_len = 3;
  c.num_layers = 1;
  c.hidden_size = 4;
  c.num_heads = 2;
  c.tie_embeddings = true;
  return c;
}

void AddGpt2Params(ParamSet& ps) {
  ps.Add("wte.weight", Shape{5, 4}, false, ParamKind::kEmbedding);
  ps.Add("wpe.weight", Shape{3, 4}, false, ParamKind::kEmbedding);
  ps.Add("h.0.ln_1.weight", Shape{4}, false, ParamKind::kNorm);
  ps.Add("h.0.attn.c_attn.weight", Shape{12, 4}, true);
  ps.Add("h.0.attn.c_attn.bias", Shape{12}, false, ParamKind::kBias);
  ps.Add("h.0.mlp.c_fc.weight", Shape{16, 4}, true);
}

// A tensor to put in a hand-made HF file: name, HF shape, values in HF layout.
struct HfTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;
};

// value at (r, c) of a 2-D HF tensor: encodes the position so transposition is checkable.
float HfValue(int64_t r, int64_t c) { return static_cast<float>(r) * 100.0f + static_cast<float>(c); }

HfTensor MakeHf(const std::string& name, Shape shape) {
  HfTensor t{name, shape, std::vector<float>(static_cast<size_t>(shape.numel()))};
  if (shape.rank() == 2) {
    for (int64_t r = 0; r < shape[0]; ++r)
      for (int64_t c = 0; c < shape[1]; ++c) t.values[r * shape[1] + c] = HfValue(r, c);
  } else {
    for (size_t i = 0; i < t.values.size(); ++i) t.values[i] = 0.5f + static_cast<float>(i);
  }
  return t;
}

// The HF tensors matching AddGpt2Params (Conv1D weights in (in, out) layout), no prefix.
std::vector<HfTensor> Gpt2HfTensors(const std::string& prefix = "") {
  return {MakeHf(prefix + "wte.weight", Shape{5, 4}),
          MakeHf(prefix + "wpe.weight", Shape{3, 4}),
          MakeHf(prefix + "h.0.ln_1.weight", Shape{4}),
          MakeHf(prefix + "h.0.attn.c_attn.weight", Shape{4, 12}),
          MakeHf(prefix + "h.0.attn.c_attn.bias", Shape{12}),
          MakeHf(prefix + "h.0.mlp.c_fc.weight", Shape{4, 16})};
}

class HfWeightsTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_ / name; }

  static void Write(const std::string& path, const std::vector<HfTensor>& tensors,
                    DType dtype = DType::kF32) {
    std::vector<SafetensorsTensorOut> outs;
    for (const HfTensor& t : tensors) {
      outs.push_back({t.name, t.shape, t.values.data(), DType::kF32, dtype});
    }
    ASSERT_TRUE(WriteSafetensors(path, outs, {{"format", "pt"}}).ok());
  }

  // Checks the loaded GPT-2 params against Gpt2HfTensors' values.
  static void ExpectGpt2Loaded(ParamSet& ps) {
    const float* wte = ps.Data("wte.weight");
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(wte[r * 4 + c], HfValue(r, c));
    const float* attn = ps.Data("h.0.attn.c_attn.weight");  // ours (12, 4) = HF (4, 12)^T
    for (int64_t o = 0; o < 12; ++o)
      for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(attn[o * 4 + i], HfValue(i, o)) << o << "," << i;
    const float* fc = ps.Data("h.0.mlp.c_fc.weight");  // ours (16, 4) = HF (4, 16)^T
    for (int64_t o = 0; o < 16; ++o)
      for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(fc[o * 4 + i], HfValue(i, o));
    const float* bias = ps.Data("h.0.attn.c_attn.bias");
    for (int i = 0; i < 12; ++i) EXPECT_EQ(bias[i], 0.5f + static_cast<float>(i));
  }

  testing::ScopedTempDir dir_{"hf"};
};

TEST_F(HfWeightsTest, LoadsGpt2WithTranspositionAndIgnoresBuffers) {
  ParamSet ps;
  AddGpt2Params(ps);
  std::vector<HfTensor> file = Gpt2HfTensors();
  file.push_back(MakeHf("h.0.attn.bias", Shape{1, 1, 3, 3}));     // causal mask buffer
  file.push_back(MakeHf("h.0.attn.masked_bias", Shape{}));        // scalar buffer
  file.push_back(MakeHf("lm_head.weight", Shape{5, 4}));           // tied head
  Write(Path("model.safetensors"), file);
  Status st = LoadHfWeights(Path("model.safetensors"), Gpt2Config(), ps.params);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectGpt2Loaded(ps);
}

TEST_F(HfWeightsTest, AcceptsTransformerPrefixDirectoryAndF16) {
  ParamSet ps;
  AddGpt2Params(ps);
  std::vector<HfTensor> file = Gpt2HfTensors("transformer.");
  file.push_back(MakeHf("transformer.h.0.attn.bias", Shape{1, 1, 3, 3}));
  file.push_back(MakeHf("lm_head.weight", Shape{5, 4}));
  fs::create_directory(Path("ckpt"));
  // Values are integers < 2048 or small halves: exact in f16, so the checks stay exact.
  Write(Path("ckpt/model.safetensors"), file, DType::kF16);
  Status st = LoadHfWeights(Path("ckpt"), Gpt2Config(), ps.params);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectGpt2Loaded(ps);
}

TEST_F(HfWeightsTest, LoadsShardedDirectory) {
  ParamSet ps;
  AddGpt2Params(ps);
  std::vector<HfTensor> all = Gpt2HfTensors();
  std::vector<HfTensor> first(all.begin(), all.begin() + 3), second(all.begin() + 3, all.end());
  fs::create_directory(Path("sharded"));
  Write(Path("sharded/model-00001-of-00002.safetensors"), first);
  Write(Path("sharded/model-00002-of-00002.safetensors"), second);
  std::string map;
  for (const HfTensor& t : first) map += ",\"" + t.name + "\":\"model-00001-of-00002.safetensors\"";
  for (const HfTensor& t : second) map += ",\"" + t.name + "\":\"model-00002-of-00002.safetensors\"";
  std::ofstream(Path("sharded/model.safetensors.index.json"))
      << "{\"metadata\":{},\"weight_map\":{" << map.substr(1) << "}}";
  Status st = LoadHfWeights(Path("sharded"), Gpt2Config(), ps.params);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectGpt2Loaded(ps);
}

TEST_F(HfWeightsTest, MissingTensorsAreListedAndNothingIsLoaded) {
  ParamSet ps;
  AddGpt2Params(ps);
  ps.Fill(1.0f);
  auto before = ps.Snapshot();
  std::vector<HfTensor> file = Gpt2HfTensors();
  file.erase(file.begin() + 2);  // h.0.ln_1.weight
  Write(Path("m.safetensors"), file);
  Status st = LoadHfWeights(Path("m.safetensors"), Gpt2Config(), ps.params);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(Path("m.safetensors")), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("missing 1 tensor(s): 'h.0.ln_1.weight'"), std::string::npos)
      << st.message();
  EXPECT_EQ(ps.Snapshot(), before);

  // Many missing: the list is cut after five names.
  Write(Path("one.safetensors"), {MakeHf("wte.weight", Shape{5, 4})});
  st = LoadHfWeights(Path("one.safetensors"), Gpt2Config(), ps.params);
  EXPECT_NE(st.message().find("missing 5 tensor(s)"), std::string::npos) << st.message();
  ps.Add("ln_f.weight", Shape{4}, false, ParamKind::kNorm);
  st = LoadHfWeights(Path("one.safetensors"), Gpt2Config(), ps.params);
  EXPECT_NE(st.message().find("and 1 more"), std::string::npos) << st.message();
  EXPECT_EQ(std::vector<float>(ps.Data("wte.weight"), ps.Data("wte.weight") + 20), before[0]);
}

TEST_F(HfWeightsTest, UnexpectedTensorsAreErrors) {
  ParamSet ps;
  AddGpt2Params(ps);
  std::vector<HfTensor> file = Gpt2HfTensors();
  file.push_back(MakeHf("h.0.attn.c_proj.weight", Shape{4, 4}));  // not a parameter here
  file.push_back(MakeHf("h.1.attn.bias", Shape{1, 1, 3, 3}));     // layer 1 of a 1-layer model
  Write(Path("m.safetensors"), file);
  Status st = LoadHfWeights(Path("m.safetensors"), Gpt2Config(), ps.params);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("unexpected 2 tensor(s): 'h.0.attn.c_proj.weight', "
                              "'h.1.attn.bias'"),
            std::string::npos)
      << st.message();

  // lm_head.weight is only ignorable when embeddings are tied.
  ModelConfig untied = Gpt2Config();
  untied.tie_embeddings = false;
  file = Gpt2HfTensors();
  file.push_back(MakeHf("lm_head.weight", Shape{5, 4}));
  Write(Path("head.safetensors"), file);
  st = LoadHfWeights(Path("head.safetensors"), untied, ps.params);
  EXPECT_NE(st.message().find("unexpected 1 tensor(s): 'lm_head.weight'"), std::string::npos)
      << st.message();
}

TEST_F(HfWeightsTest, WrongShapeAndDtypeLeaveParamsUnchanged) {
  ParamSet ps;
  AddGpt2Params(ps);
  ps.Fill(2.0f);
  auto before = ps.Snapshot();
  std::vector<HfTensor> file = Gpt2HfTensors();
  file[3] = MakeHf("h.0.attn.c_attn.weight", Shape{12, 4});  // our layout, not HF's
  Write(Path("m.safetensors"), file);
  Status st = LoadHfWeights(Path("m.safetensors"), Gpt2Config(), ps.params);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor 'h.0.attn.c_attn.weight': shape mismatch: expected "
                              "[4, 12] (HF (in, out) layout of Tessera [12, 4]), got [12, 4]"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("nothing was loaded"), std::string::npos);
  // wte.weight sorts and iterates before the bad tensor, yet was not written.
  EXPECT_EQ(ps.Snapshot(), before);

  // An integer tensor where a float parameter is expected.
  std::vector<SafetensorsTensorOut> outs;
  file = Gpt2HfTensors();
  std::vector<int32_t> ids(4, 7);
  for (const HfTensor& t : file) {
    if (t.name == "h.0.ln_1.weight") {
      outs.push_back({t.name, t.shape, ids.data(), DType::kI32, DType::kI32});
    } else {
      outs.push_back({t.name, t.shape, t.values.data()});
    }
  }
  ASSERT_TRUE(WriteSafetensors(Path("i.safetensors"), outs, {}).ok());
  st = LoadHfWeights(Path("i.safetensors"), Gpt2Config(), ps.params);
  EXPECT_NE(st.message().find("tensor 'h.0.ln_1.weight': dtype mismatch"), std::string::npos)
      << st.message();
  EXPECT_EQ(ps.Snapshot(), before);
}

TEST_F(HfWeightsTest, MissingPathsAndMalformedFilesAreErrors) {
  ParamSet ps;
  AddGpt2Params(ps);
  Status st = LoadHfWeights(Path("absent.safetensors"), Gpt2Config(), ps.params);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  fs::create_directory(Path("empty"));
  st = LoadHfWeights(Path("empty"), Gpt2Config(), ps.params);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("neither model.safetensors nor"), std::string::npos);
  std::ofstream(Path("bad.safetensors")) << "xyz";
  st = LoadHfWeights(Path("bad.safetensors"), Gpt2Config(), ps.params);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
}

// NaN or Inf in imported weights would train to NaN at the first step: refused, naming the
// tensor, whatever the file's dtype.
TEST_F(HfWeightsTest, NonFiniteWeightsAreRefusedNamingTheTensor) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    ParamSet ps;
    AddGpt2Params(ps);
    std::vector<HfTensor> file = Gpt2HfTensors();
    file[3].values[5] = std::numeric_limits<float>::quiet_NaN();  // h.0.attn.c_attn.weight
    Write(Path("nan.safetensors"), file, dtype);
    Status st = LoadHfWeights(Path("nan.safetensors"), Gpt2Config(), ps.params);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
    EXPECT_NE(st.message().find("tensor 'h.0.attn.c_attn.weight' holds a NaN or Inf"), std::string::npos)
        << st.message();
    file[3].values[5] = 1.0f;
    file[0].values[0] = std::numeric_limits<float>::infinity();  // wte.weight
    Write(Path("inf.safetensors"), file, dtype);
    st = LoadHfWeights(Path("inf.safetensors"), Gpt2Config(), ps.params);
    EXPECT_NE(st.message().find("tensor 'wte.weight' holds a NaN or Inf"), std::string::npos)
        << st.message();
  }
}

TEST_F(HfWeightsTest, LlamaNamesAndRotaryBufferIgnored) {
  ModelConfig cfg;
  cfg.family = ModelFamily::kLlama;
  cfg.num_layers = 1;
  cfg.hidden_size = 4;
  cfg.num_heads = 2;
  cfg.vocab_size = 6;
  cfg.tie_embeddings = false;
  ParamSet ps;
  ps.Add("model.embed_tokens.weight", Shape{6, 4}, false, ParamKind::kEmbedding);
  ps.Add("model.layers.0.self_attn.q_proj.weight", Shape{4, 4});
  ps.Add("model.norm.weight", Shape{4}, false, ParamKind::kNorm);
  ps.Add("lm_head.weight", Shape{6, 4});
  std::vector<HfTensor> file = {MakeHf("model.embed_tokens.weight", Shape{6, 4}),
                                MakeHf("model.layers.0.self_attn.q_proj.weight", Shape{4, 4}),
                                MakeHf("model.norm.weight", Shape{4}),
                                MakeHf("lm_head.weight", Shape{6, 4}),
                                MakeHf("model.layers.0.self_attn.rotary_emb.inv_freq", Shape{1})};
  Write(Path("llama.safetensors"), file);
  Status st = LoadHfWeights(Path("llama.safetensors"), cfg, ps.params);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const float* q = ps.Data("model.layers.0.self_attn.q_proj.weight");  // not transposed
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(q[r * 4 + c], HfValue(r, c));
  EXPECT_EQ(ps.Data("lm_head.weight")[5 * 4 + 3], HfValue(5, 3));

  // "transformer." is a GPT-2 convention only: for Llama it is an unknown name.
  file.push_back(MakeHf("transformer.model.norm.weight", Shape{4}));
  Write(Path("llama2.safetensors"), file);
  st = LoadHfWeights(Path("llama2.safetensors"), cfg, ps.params);
  EXPECT_NE(st.message().find("unexpected 1 tensor(s): 'transformer.model.norm.weight'"),
            std::string::npos)
      << st.message();
}

TEST_F(HfWeightsTest, ExportThenLoadIsBitIdentical) {
  ModelConfig cfg = Gpt2Config();
  cfg.tie_embeddings = false;
  ParamSet src;
  AddGpt2Params(src);
  src.Add("lm_head.weight", Shape{5, 4});
  src.Fill(3.0f);
  src.Data("wpe.weight")[0] = 1e-40f;  // a subnormal survives f32 export
  ASSERT_TRUE(ExportHfWeights(Path("out.safetensors"), cfg, src.params).ok());

  auto f = SafetensorsFile::Open(Path("out.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  EXPECT_EQ((*f)->Find("h.0.attn.c_attn.weight")->shape, (Shape{4, 12}));  // HF (in, out)
  EXPECT_EQ((*f)->Find("h.0.mlp.c_fc.weight")->shape, (Shape{4, 16}));
  EXPECT_EQ((*f)->Find("wte.weight")->shape, (Shape{5, 4}));
  std::vector<float> hf_attn(48);
  ASSERT_TRUE((*f)->ReadAsF32(*(*f)->Find("h.0.attn.c_attn.weight"), hf_attn.data()).ok());
  const float* ours = src.Data("h.0.attn.c_attn.weight");
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 12; ++o) EXPECT_EQ(hf_attn[i * 12 + o], ours[o * 4 + i]);

  ParamSet dst;
  AddGpt2Params(dst);
  dst.Add("lm_head.weight", Shape{5, 4});
  ASSERT_TRUE(LoadHfWeights(Path("out.safetensors"), cfg, dst.params).ok());
  auto a = src.Snapshot(), b = dst.Snapshot();
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].size(), b[k].size());
    EXPECT_EQ(std::memcmp(a[k].data(), b[k].data(), a[k].size() * 4), 0) << k;
  }
}

TEST_F(HfWeightsTest, ExportBf16RoundsAndRejectsBadRequests) {
  ModelConfig cfg = Gpt2Config();
  ParamSet src;
  AddGpt2Params(src);
  src.Fill(0.3f);
  ASSERT_TRUE(ExportHfWeights(Path("bf.safetensors"), cfg, src.params, DType::kBF16).ok());
  ParamSet dst;
  AddGpt2Params(dst);
  ASSERT_TRUE(LoadHfWeights(Path("bf.safetensors"), cfg, dst.params).ok());
  auto a = src.Snapshot(), b = dst.Snapshot();
  for (size_t k = 0; k < a.size(); ++k)
    for (size_t i = 0; i < a[k].size(); ++i) EXPECT_EQ(b[k][i], Bf16ToF32(F32ToBf16(a[k][i])));

  Status st = ExportHfWeights(Path("x.safetensors"), cfg, src.params, DType::kI32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  src.Add("lm_head.weight", Shape{5, 4});
  st = ExportHfWeights(Path("x.safetensors"), cfg, src.params);  // tied config
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ties embeddings"), std::string::npos);
  EXPECT_FALSE(fs::exists(Path("x.safetensors")));
}

}  // namespace
}  // namespace tessera
