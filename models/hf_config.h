// models/hf_config.h — a Hugging Face model directory's config.json, read as Tessera's model
// config: the day-0 intake (`init_from: HF_DIR`, `tessera inspect HF_DIR`).
//
// Families read: gpt2; llama, mistral, qwen2 (dense Llama-family shapes); mixtral, qwen2_moe,
// qwen3_moe (the MoE of model.moe). Each config.json field that decides the model is mapped to
// a `model.*` key (fields() says which from which, for the config loader's conflict check),
// and everything the file asks for that Tessera does not compute is listed in missing() —
// every missing operator or field with what Tessera supports instead — so that such a model is
// refused whole, never built as a silently different one. Fields that do not change what is
// computed (dtype, architectures, token ids, use_cache, ...) are ignored.
// Errors: kNotFound / kDataLoss naming the file (missing, unreadable, not JSON, not an
// object); a field of the wrong type is kDataLoss naming the field.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/model_config.h"
#include "runtime/core/json.h"
#include "runtime/core/status.h"

namespace tessera {

// One model.* key config.json decided: its YAML key, the config.json field it came from and
// the value as YAML would write it.
struct HfField {
  std::string key;       // "model.hidden_size"
  std::string hf_field;  // "hidden_size", or "rms_norm_eps (absent: the default)"
  std::string value;     // "4096"
  bool suggested = false;  // a training coefficient (router_aux_loss_coef): the YAML's wins
};

struct HfModelIntake {
  std::string path;        // the config.json read
  std::string model_type;  // as written ("llama", "qwen2_moe", ...)
  ModelConfig model;       // the mapped fields; every other field keeps ModelConfig's default
  std::vector<HfField> fields;
  // What the file asks for that Tessera lacks, one line each: "sliding-window attention
  // (sliding_window=4096 < max_position_embeddings=32768): Tessera attends to the whole causal
  // context". Empty: Tessera builds exactly this model.
  std::vector<std::string> missing;
};

// The model types read (for messages): "gpt2, llama, mistral, qwen2, mixtral, qwen2_moe,
// qwen3_moe".
std::string SupportedHfModelTypes();

// Maps a parsed config.json (`where` names it in messages).
Result<HfModelIntake> MapHfConfig(const JsonValue& config, const std::string& where);

// `path`: a config.json, or a directory holding one. kNotFound when there is none.
Result<HfModelIntake> ReadHfConfig(const std::string& path);

// The config.json that goes with an init_from value, if any: PATH/config.json for a directory,
// the file's own directory's config.json for a .safetensors file or a
// model.safetensors.index.json; "" when there is none (a Tessera checkpoint, a bare file).
std::string HfConfigBeside(const std::string& init_from);

// The mapped model.* values as YAML lines ("  model.hidden_size: 4096    # hidden_size"), in
// fields() order.
std::string DescribeHfFields(const HfModelIntake& intake);

// The value of a model.* key an intake can set, as YAML writes it ("4096", "1.0e-05",
// "llama", "true"; num_kv_heads and ffn_hidden_size by effect: 0 reads as the rule's value);
// "" for a key intakes never set. Two configs agree on a key when these texts are equal.
std::string ModelKeyText(const ModelConfig& m, const std::string& key);
// Copies that key's value from `from` into `to`.
void CopyModelKey(const ModelConfig& from, ModelConfig* to, const std::string& key);

// The other direction (hf_config_json.cc): the config.json of the supported model type that
// computes exactly `m` — gpt2; llama, mistral (a sliding window), qwen2 (q/k/v biases, with or
// without a window); mixtral (experts whose routing is Mixtral's in every block, no routing
// bias); qwen2_moe (a gated shared expert, q/k/v biases, softmax routing) — such that MapHfConfig reads it back as `m` (every key it maps agrees). `dtype` is
// written as torch_dtype. kFailedPrecondition naming what no supported type computes (GPT-2
// experts, DeepSeek-style routing, dense blocks between MoE blocks, ...): a wrong config.json
// would load as a different model, so none is written.
Result<std::string> HfConfigJson(const ModelConfig& m, std::string_view torch_dtype,
                                 bool routing_bias);

}  // namespace tessera
