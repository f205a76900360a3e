// models/lora_export.cc — the merged model and PEFT's adapter files (lora_export.h).
#include "models/lora_export.h"

#include "models/hf_weights.h"
#include "models/lora.h"
#include "models/param_layout.h"
#include "models/safetensors.h"
#include "runtime/core/check.h"
#include "runtime/core/file_util.h"
#include "runtime/core/json.h"

namespace tessera {
namespace {

const Parameter& Named(const std::vector<Parameter>& specs, const std::string& name) {
  for (const Parameter& p : specs) {
    if (p.name() == name) return p;
  }
  TESSERA_CHECK_MSG(false, "no parameter %s", name.c_str());
  return specs.front();
}

}  // namespace

std::vector<float> MergeLoraWeights(const ModelConfig& config, std::span<const float> full) {
  const std::vector<Parameter> specs = HfGlobalSpecs(config);
  // The base's parameters come first, at the base model's own offsets.
  std::vector<float> merged(full.begin(), full.begin() + UnitBounds(BaseModelConfig(config)).back());
  const int64_t r = config.lora.rank;
  const float s = config.lora.scale();
  for (int64_t i = 0; i < config.num_layers; ++i) {
    for (const LoraTarget& t : LoraTargetsOf(config, i)) {
      const std::string p = BlockPrefix(config, i) + t.module;
      float* w = merged.data() + Named(specs, p + ".weight").offset;
      const float* a = full.data() + Named(specs, p + ".lora_A.weight").offset;
      const float* b = full.data() + Named(specs, p + ".lora_B.weight").offset;
      // W (out, in) += s * B (out, r) A (r, in), each element summed over r in order.
#pragma omp parallel for schedule(static)
      for (int64_t o = 0; o < t.out; ++o) {
        for (int64_t c = 0; c < t.in; ++c) {
          float acc = 0.0f;
          for (int64_t k = 0; k < r; ++k) acc += b[o * r + k] * a[k * t.in + c];
          w[o * t.in + c] += s * acc;
        }
      }
    }
  }
  return merged;
}

Status ExportLoraAdapter(const std::string& dir, const ModelConfig& config,
                         std::span<const float> full, const std::string& base_model) {
  RETURN_IF_ERROR(MakeDirs(dir));
  const std::string prefix =
      config.family == ModelFamily::kGpt2 ? "base_model.model.transformer." : "base_model.model.";
  std::vector<SafetensorsTensorOut> tensors;
  for (const Parameter& p : HfGlobalSpecs(config)) {
    if (p.name().find(".lora_") == std::string::npos) continue;
    tensors.push_back({prefix + p.name(), p.spec.global_shape, full.data() + p.offset,
                       DType::kF32, DType::kF32});
  }
  RETURN_IF_ERROR(WriteSafetensors(dir + "/adapter_model.safetensors", tensors,
                                   {{"format", "pt"}}));
  JsonWriter j;
  j.BeginObject();
  j.Key("peft_type").String("LORA");
  j.Key("task_type").String("CAUSAL_LM");
  j.Key("base_model_name_or_path").String(base_model);
  j.Key("r").Int(config.lora.rank);
  j.Key("lora_alpha").Double(config.lora.alpha);
  j.Key("lora_dropout").Double(config.lora.dropout);
  j.Key("target_modules").BeginArray();
  for (const std::string& m : LoraModuleNames(config)) j.String(m);
  j.EndArray();
  j.Key("fan_in_fan_out").Bool(config.family == ModelFamily::kGpt2);
  j.Key("bias").String("none");
  j.Key("use_rslora").Bool(false);
  j.Key("inference_mode").Bool(true);
  j.EndObject();
  return WriteFileAtomic(dir + "/adapter_config.json", j.str() + "\n");
}

}  // namespace tessera
