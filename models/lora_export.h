// models/lora_export.h — what a LoRA fine-tune leaves behind (finetune.lora, lora.h): the merged
// model, and the adapters alone in the layout PEFT's PeftModel.from_pretrained loads.
//
// Both read the LoRA model's global fp32 weights in one flat buffer (DeclareParameters order:
// the base model's parameters first, at the base model's own offsets, then the adapters).
//   merged    every adapted projection W (out, in) becomes W + (alpha / r) B A; the result is
//             the base model's flat buffer (BaseModelConfig), which exports as any model does
//   adapters  <dir>/adapter_model.safetensors: "base_model.model.<name>" per adapter tensor
//             (<name> = its HF name, "transformer." before GPT-2's, as GPT2LMHeadModel names
//             them), f32, A (r, in) and B (out, r) as nn.Linear stores them; and
//             <dir>/adapter_config.json: peft_type LORA, r, lora_alpha, lora_dropout,
//             target_modules, fan_in_fan_out (GPT-2's Conv1D), bias "none", task_type
//             CAUSAL_LM, base_model_name_or_path
// Thread-safety: none; pure but for the files written.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "runtime/core/status.h"

namespace tessera {

// The base model's flat weights with every adapter merged in. `full` holds the LoRA model's.
std::vector<float> MergeLoraWeights(const ModelConfig& config, std::span<const float> full);

// The adapters of `full` as a PEFT adapter directory `dir` (created; files replaced
// atomically). `base_model` is written as base_model_name_or_path ("" when trained from
// a seed).
Status ExportLoraAdapter(const std::string& dir, const ModelConfig& config,
                         std::span<const float> full, const std::string& base_model);

}  // namespace tessera
