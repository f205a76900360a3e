// models/model_config.h: the rules of a model config are written once (ModelConfig::Check) —
// each range and each rule between keys names its keys and the numbers, in the order that
// never divides by a zero an earlier rule refuses, and Validate words it as "<key>: <problem>",
// which is how the model refuses it; the config loader reports the same problem at the key's
// file:line:col (config_test pins that).
// links: tessera_models
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "models/model_config.h"

namespace tessera {
namespace {

ModelConfig Gpt2() { return ModelConfig{}; }

ModelConfig Llama() {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  return c;
}

std::string Problem(const ModelConfig& c) {
  std::optional<ModelConfigProblem> p = c.Check();
  if (!p) return "ok";
  std::string keys;
  for (const std::string& k : p->keys) keys += (keys.empty() ? "" : ",") + k;
  return keys + ": " + p->problem;
}

TEST(ModelConfigCheck, TheDefaultsOfBothFamiliesHold) {
  EXPECT_EQ(Problem(Gpt2()), "ok");
  EXPECT_EQ(Problem(Llama()), "ok");
  EXPECT_TRUE(Gpt2().Validate().ok());
}

TEST(ModelConfigCheck, RangesNameTheKeyAndTheValue) {
  ModelConfig c = Gpt2();
  c.vocab_size = 1;
  EXPECT_EQ(Problem(c), "model.vocab_size: must be >= 2, got 1");
  c = Gpt2();
  c.num_layers = 0;
  EXPECT_EQ(Problem(c), "model.num_layers: must be >= 1, got 0");
  c = Gpt2();
  c.num_kv_heads = -1;
  EXPECT_EQ(Problem(c), "model.num_kv_heads: must be >= 0, got -1");
  c = Gpt2();
  c.norm_eps = 0;
  EXPECT_EQ(Problem(c), "model.norm_eps: must be > 0, got 0");
  c = Llama();
  c.rope_theta = -1;
  EXPECT_EQ(Problem(c), "model.rope_theta: must be > 0, got -1");
  c = Gpt2();
  c.rope_theta = -1;  // GPT-2 has no RoPE: its theta is never read
  EXPECT_EQ(Problem(c), "ok");
}

TEST(ModelConfigCheck, ZeroHeadsIsARangeProblemNotADivisionByZero) {
  ModelConfig c = Gpt2();
  c.num_heads = 0;
  EXPECT_EQ(Problem(c), "model.num_heads: must be >= 1, got 0");
}

TEST(ModelConfigCheck, RulesBetweenKeysNameEveryKeyMostSpecificFirst) {
  ModelConfig c = Gpt2();
  c.num_heads = 3;
  EXPECT_EQ(Problem(c), "model.num_heads,model.hidden_size: num_heads=3 does not divide hidden_size=64");
  c = Llama();
  c.num_kv_heads = 3;
  EXPECT_EQ(Problem(c), "model.num_kv_heads,model.num_heads: num_kv_heads=3 does not divide num_heads=4");
  c = Gpt2();
  c.num_kv_heads = 2;
  EXPECT_EQ(Problem(c),
            "model.num_kv_heads,model.family: gpt2 has no grouped-query attention: num_kv_heads=2 "
            "must equal num_heads=4 (or be 0)");
  c = Llama();
  c.hidden_size = 12;
  EXPECT_EQ(Problem(c),
            "model.hidden_size,model.num_heads,model.family: llama needs an even head size for "
            "RoPE, got hidden_size=12 / num_heads=4 = 3");
}

TEST(ModelConfigValidate, WordsTheFirstProblemAtItsMostSpecificKey) {
  ModelConfig c = Gpt2();
  c.num_heads = 3;
  const Status s = c.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "model.num_heads: num_heads=3 does not divide hidden_size=64");
}

}  // namespace
}  // namespace tessera
