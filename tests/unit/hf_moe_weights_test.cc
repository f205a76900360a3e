// links: tessera_models
// tests/unit/hf_moe_weights_test.cc — mixture-of-experts models in Hugging Face files
// (models/hf_weights.h): stacked Tessera experts written per expert in Mixtral's names or in
// Qwen2-MoE's / DeepSeek's, read back bit for bit in either, the routing bias as DeepSeek's
// e_score_correction_bias, and damaged files refused before anything is loaded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "models/hf_weights.h"
#include "models/param_layout.h"
#include "models/safetensors.h"
#include "tests/testing/temp_dir.h"

namespace tessera {
namespace {

ModelConfig Moe(bool mixtral) {
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
  if (!mixtral) {
    c.moe.score = RouterScore::kSigmoid;
    c.moe.shared_experts = 1;
    c.moe.first_dense_layers = 1;
  }
  return c;
}

// The model's parameters, whole, over buffers this struct owns, filled with distinct values.
struct Params {
  std::vector<std::vector<float>> buffers;
  std::vector<Parameter> params;

  Params(const ModelConfig& c, float seed) {
    for (const ParamDecl& d : DeclareParameters(c)) {
      std::vector<float>& b = buffers.emplace_back(static_cast<size_t>(d.shape.numel()));
      for (size_t i = 0; i < b.size(); ++i) b[i] = seed + 0.01f * static_cast<float>(buffers.size() * 97 + i);
    }
    const std::vector<ParamDecl> decls = DeclareParameters(c);
    for (size_t k = 0; k < decls.size(); ++k) {
      Parameter p;
      p.spec = ShardedTensor::Whole(decls[k].name, decls[k].shape);
      p.kind = decls[k].kind;
      p.value = Tensor(buffers[k].data(), DType::kF32, decls[k].shape);
      params.push_back(p);
    }
  }
};

std::vector<std::string> Names(const std::string& path) {
  auto f = SafetensorsFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  std::vector<std::string> names;
  for (const auto& t : (*f)->tensors()) names.push_back(t.name);
  return names;
}

bool Has(const std::vector<std::string>& names, const std::string& n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

TEST(HfMoe, MixtralShapedExportsPerExpertInMixtralsNamesAndReadsBackBitForBit) {
  testing::ScopedTempDir dir("hf_moe_mixtral");
  const ModelConfig c = Moe(true);
  ASSERT_EQ(DefaultHfMoeNames(c), HfMoeNames::kMixtral);
  Params out(c, 1.0f);
  const std::string path = dir / "m.safetensors";
  ASSERT_TRUE(ExportHfWeights(path, c, out.params).ok());
  const std::vector<std::string> names = Names(path);
  EXPECT_TRUE(Has(names, "model.layers.1.block_sparse_moe.gate.weight"));
  EXPECT_TRUE(Has(names, "model.layers.1.block_sparse_moe.experts.3.w1.weight"));
  EXPECT_TRUE(Has(names, "model.layers.1.block_sparse_moe.experts.3.w2.weight"));
  EXPECT_TRUE(Has(names, "model.layers.1.block_sparse_moe.experts.3.w3.weight"));
  EXPECT_FALSE(Has(names, "model.layers.1.mlp.experts.gate_up_proj"));
  Params in(c, -5.0f);
  ASSERT_TRUE(LoadHfWeights(path, c, in.params).ok());
  EXPECT_EQ(in.buffers, out.buffers);
  // Expert 2's gate rows are w1 of expert 2: rows [2 * 2 * 6, 2 * 2 * 6 + 6) of gate_up_proj.
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  for (const auto& t : (*f)->tensors()) {
    if (t.name != "model.layers.0.block_sparse_moe.experts.2.w1.weight") continue;
    std::vector<float> w1(static_cast<size_t>(t.shape.numel()));
    ASSERT_TRUE((*f)->ReadAsF32(t, w1.data()).ok());
    const Parameter* gate_up = nullptr;
    for (const Parameter& p : out.params) {
      if (p.name() == "model.layers.0.mlp.experts.gate_up_proj") gate_up = &p;
    }
    ASSERT_NE(gate_up, nullptr);
    EXPECT_EQ(0, std::memcmp(w1.data(), gate_up->value.f32() + 2 * 12 * 8, w1.size() * 4));
  }
}

TEST(HfMoe, DeepSeekShapedUsesQwenNamesAndCarriesTheRoutingBias) {
  testing::ScopedTempDir dir("hf_moe_deepseek");
  const ModelConfig c = Moe(false);
  ASSERT_EQ(DefaultHfMoeNames(c), HfMoeNames::kQwenMoe);
  Params out(c, 2.0f);
  HfExtras extras;
  extras.moe_bias = {{0.5f, -0.25f, 0.0f, 1.0f}};  // one MoE block (the first is dense)
  const std::string path = dir / "d.safetensors";
  ASSERT_TRUE(ExportHfWeights(path, c, out.params, DType::kF32, &extras).ok());
  const std::vector<std::string> names = Names(path);
  EXPECT_TRUE(Has(names, "model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(Has(names, "model.layers.1.mlp.experts.0.gate_proj.weight"));
  EXPECT_TRUE(Has(names, "model.layers.1.mlp.shared_experts.down_proj.weight"));
  EXPECT_TRUE(Has(names, "model.layers.1.mlp.gate.e_score_correction_bias"));
  EXPECT_TRUE(Has(names, "model.layers.0.mlp.gate_proj.weight"));  // the dense block
  Params in(c, 0.0f);
  HfExtras read;
  ASSERT_TRUE(LoadHfWeights(path, c, in.params, &read).ok());
  EXPECT_EQ(in.buffers, out.buffers);
  EXPECT_EQ(read.moe_bias, extras.moe_bias);
  // A caller that cannot take the bias is refused rather than routing differently.
  Params blind(c, 0.0f);
  Status s = LoadHfWeights(path, c, blind.params);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("e_score_correction_bias"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("nothing was loaded"), std::string::npos) << s.message();
}

TEST(HfMoe, EitherDialectLoadsAndAMissingExpertIsNamed) {
  testing::ScopedTempDir dir("hf_moe_dialect");
  // A Mixtral-named file loads into a model that would export Qwen names (same shapes).
  ModelConfig mixtral = Moe(true);
  Params out(mixtral, 3.0f);
  const std::string path = dir / "m.safetensors";
  ASSERT_TRUE(ExportHfWeights(path, mixtral, out.params).ok());
  ModelConfig grouped = mixtral;
  grouped.moe.groups = 2;  // routing differs, tensors do not: exports Qwen names
  ASSERT_EQ(DefaultHfMoeNames(grouped), HfMoeNames::kQwenMoe);
  Params in(grouped, 0.0f);
  ASSERT_TRUE(LoadHfWeights(path, grouped, in.params).ok());
  EXPECT_EQ(in.buffers, out.buffers);
  // A model with more experts than the file: the missing ones are named, nothing is loaded.
  ModelConfig more = mixtral;
  more.moe.num_experts = 5;
  Params bigger(more, 7.0f);
  const std::vector<std::vector<float>> before = bigger.buffers;
  Status s = LoadHfWeights(path, more, bigger.params);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("block_sparse_moe.experts.4.w1.weight"), std::string::npos) << s.message();
  EXPECT_EQ(bigger.buffers, before);
}

// Rewrites the safetensors file at `in` into `out`, every tensor as read (f32), with `edit`
// applied to the list first (tensors may be changed, removed or added).
template <typename Edit>
void Rewrite(const std::string& in, const std::string& out, Edit edit) {
  auto file = SafetensorsFile::Open(in);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsTensorOut> tensors;
  for (const SafetensorsTensorInfo& t : (*file)->tensors()) {
    data.emplace_back(static_cast<size_t>(t.numel()));
    ASSERT_TRUE((*file)->ReadAsF32(t, data.back().data()).ok());
  }
  for (size_t i = 0; i < data.size(); ++i) {
    const SafetensorsTensorInfo& t = (*file)->tensors()[i];
    tensors.push_back({t.name, t.shape, data[i].data(), DType::kF32, DType::kF32});
  }
  std::vector<float> extra(4096, 0.5f);
  edit(tensors, extra.data());
  ASSERT_TRUE(WriteSafetensors(out, tensors, {{"format", "pt"}}).ok());
}

// Qwen2-MoE's gated shared expert: refused by name under a config without the gate (an
// ungated model would compute something else), loaded bit for bit under one with it.
TEST(HfMoe, QwenMoesGatedSharedExpertNeedsTheGateInTheConfig) {
  testing::ScopedTempDir dir("hf_moe_qwen_shared");
  ModelConfig c = Moe(false);  // sigmoid, one shared expert: Qwen / DeepSeek names
  Params out(c, 1.0f);
  const std::string path = dir / "m.safetensors", qwen = dir / "qwen.safetensors";
  ASSERT_TRUE(ExportHfWeights(path, c, out.params).ok());
  // Qwen2-MoE's layout: a singular shared_expert whose output a sigmoid gate scales.
  Rewrite(path, qwen, [&](std::vector<SafetensorsTensorOut>& t, const float* extra) {
    for (SafetensorsTensorOut& x : t) {
      const size_t at = x.name.find("mlp.shared_experts.");
      if (at != std::string::npos) x.name.replace(at, 19, "mlp.shared_expert.");
    }
    t.push_back({"model.layers.1.mlp.shared_expert_gate.weight", Shape({1, c.hidden_size}), extra,
                 DType::kF32, DType::kF32});
  });
  Params in(c, 9.0f);
  const std::vector<std::vector<float>> before = in.buffers;
  Status s = LoadHfWeights(qwen, c, in.params);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.layers.1.mlp.shared_expert_gate.weight"), std::string::npos)
      << s.message();
  EXPECT_EQ(in.buffers, before);

  ModelConfig gated = c;
  gated.moe.shared_expert_gate = true;
  Params src(gated, 3.0f);
  const std::string exported = dir / "gated.safetensors";
  ASSERT_TRUE(ExportHfWeights(exported, gated, src.params).ok());
  auto f = SafetensorsFile::Open(exported);
  ASSERT_TRUE(f.ok());
  EXPECT_NE((*f)->Find("model.layers.1.mlp.shared_expert_gate.weight"), nullptr);
  EXPECT_NE((*f)->Find("model.layers.1.mlp.shared_expert.down_proj.weight"), nullptr);
  Params dst(gated, 7.0f);
  ASSERT_TRUE(LoadHfWeights(exported, gated, dst.params).ok());
  EXPECT_EQ(dst.buffers, src.buffers);
}

TEST(HfMoe, AnExpertOfTheWrongShapeOrDtypeIsNamedAndNothingLoads) {
  testing::ScopedTempDir dir("hf_moe_shape");
  ModelConfig c = Moe(true);
  Params out(c, 1.0f);
  const std::string path = dir / "m.safetensors";
  ASSERT_TRUE(ExportHfWeights(path, c, out.params).ok());
  const std::string expert = "model.layers.1.block_sparse_moe.experts.2.w3.weight";
  // One expert's up projection one row short.
  const std::string shape = dir / "shape.safetensors";
  Rewrite(path, shape, [&](std::vector<SafetensorsTensorOut>& t, const float*) {
    for (SafetensorsTensorOut& x : t) {
      if (x.name == expert) x.shape = Shape({x.shape[0] - 1, x.shape[1]});
    }
  });
  Params in(c, 9.0f);
  const std::vector<std::vector<float>> before = in.buffers;
  Status s = LoadHfWeights(shape, c, in.params);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(expert), std::string::npos) << s.message();
  EXPECT_EQ(in.buffers, before);
  // The same expert stored as int32: a dtype the weights cannot take.
  const std::string dtype = dir / "dtype.safetensors";
  std::vector<int32_t> ints(64, 1);
  Rewrite(path, dtype, [&](std::vector<SafetensorsTensorOut>& t, const float*) {
    for (SafetensorsTensorOut& x : t) {
      if (x.name != expert) continue;
      x.data = ints.data();
      x.source_dtype = x.dtype = DType::kI32;
    }
  });
  s = LoadHfWeights(dtype, c, in.params);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(expert), std::string::npos) << s.message();
  EXPECT_EQ(in.buffers, before);
}

TEST(HfMoe, MixtralsNamesOnlyForWhatMixtralComputes) {
  ModelConfig c = Moe(true);
  EXPECT_EQ(DefaultHfMoeNames(c), HfMoeNames::kMixtral);
  c.moe.route_scale = 2.0f;
  EXPECT_EQ(DefaultHfMoeNames(c), HfMoeNames::kQwenMoe);
  c = Moe(true);
  c.moe.normalize_gates = false;
  EXPECT_EQ(DefaultHfMoeNames(c), HfMoeNames::kQwenMoe);
  // A routing bias makes even a Mixtral-shaped export use DeepSeek's names.
  testing::ScopedTempDir dir("hf_moe_bias_names");
  c = Moe(true);
  Params out(c, 1.0f);
  HfExtras extras;
  extras.moe_bias = {{0, 0, 0, 0}, {0, 0.5f, 0, 0}};
  ASSERT_TRUE(ExportHfWeights(dir / "b.safetensors", c, out.params, DType::kF32, &extras).ok());
  const std::vector<std::string> names = Names(dir / "b.safetensors");
  EXPECT_TRUE(Has(names, "model.layers.1.mlp.experts.0.gate_proj.weight"));
  EXPECT_TRUE(Has(names, "model.layers.1.mlp.gate.e_score_correction_bias"));
  // An all-zero bias is no bias: Mixtral's names, no bias tensor.
  extras.moe_bias = {{0, 0, 0, 0}, {0, 0, 0, 0}};
  ASSERT_TRUE(ExportHfWeights(dir / "z.safetensors", c, out.params, DType::kF32, &extras).ok());
  EXPECT_FALSE(Has(Names(dir / "z.safetensors"), "model.layers.1.mlp.gate.e_score_correction_bias"));
}

TEST(HfMoe, ANonFiniteRoutingBiasIsRefusedBeforeAnyParameterIsWritten) {
  testing::ScopedTempDir dir("hf_moe_nan_bias");
  const ModelConfig c = Moe(false);
  Params out(c, 2.0f);
  HfExtras extras;
  extras.moe_bias = {{0.5f, NAN, 0.0f, 1.0f}};
  ASSERT_TRUE(ExportHfWeights(dir / "n.safetensors", c, out.params, DType::kF32, &extras).ok());
  Params in(c, 9.0f);
  const std::vector<std::vector<float>> before = in.buffers;
  HfExtras read;
  Status s = LoadHfWeights(dir / "n.safetensors", c, in.params, &read);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("e_score_correction_bias"), std::string::npos) << s.message();
  EXPECT_EQ(in.buffers, before) << "parameters written before the bias was checked";
}

}  // namespace
}  // namespace tessera
