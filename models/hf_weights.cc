// models/hf_weights.cc — HF safetensors -> Parameters (validate everything, then copy) and
// Parameters -> one HF safetensors file. See hf_weights.h for the contracts.
#include "models/hf_weights.h"

#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "models/quote.h"
#include "models/safetensors.h"

namespace tessera {
namespace {

constexpr const char* kGpt2Prefix = "transformer.";
constexpr size_t kMaxNamesListed = 5;

// "'a', 'b', 'c' and 4 more"
std::string ListNames(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < kMaxNamesListed; ++i) {
    out += (i ? ", " : "") + Quote(names[i]);
  }
  if (names.size() > kMaxNamesListed) {
    out += " and " + std::to_string(names.size() - kMaxNamesListed) + " more";
  }
  return out;
}

// HF layout of a parameter: its global shape, or the 2-D transpose for Conv1D weights.
Shape HfShape(const Parameter& p) {
  if (!p.hf_transposed) return p.spec.global_shape;
  return Shape{p.spec.global_shape[1], p.spec.global_shape[0]};
}

// The parameters must be whole f32 CPU tensors with unique names (a caller bug otherwise, but
// reported as a Status because this sits on a user-facing path).
Status CheckParams(std::span<const Parameter> params) {
  std::set<std::string_view> seen;
  for (const Parameter& p : params) {
    const std::string where = "parameter " + Quote(p.name());
    if (!seen.insert(p.name()).second) return InvalidArgument("duplicate " + where);
    if (!p.spec.IsWhole()) {
      return InvalidArgument(where + ": holds a slice (" + p.spec.ToString() +
                             "): HF import/export takes whole tensors (gather them first)");
    }
    if (p.value.empty() && p.spec.global_shape.numel() > 0) {
      return InvalidArgument(where + ": no value buffer");
    }
    if (p.value.dtype() != DType::kF32 || p.value.device() != Device::kCpu) {
      return InvalidArgument(where + ": value must be an f32 CPU tensor");
    }
    if (p.value.numel() != p.spec.global_shape.numel()) {
      return InvalidArgument(where + ": value has " + std::to_string(p.value.numel()) +
                             " elements, spec shape " + p.spec.global_shape.ToString());
    }
    if (p.hf_transposed && p.spec.global_shape.rank() != 2) {
      return InvalidArgument(where + ": hf_transposed needs a 2-D shape, got " +
                             p.spec.global_shape.ToString());
    }
  }
  return Status::Ok();
}

// One tensor of an HF file and where it lives in Tessera: a parameter whole, or (routed experts,
// stacked on the expert axis in Tessera) one expert's block of it, contiguous at `offset`.
struct HfTensor {
  std::string name;
  Shape shape;            // in the file
  size_t param;           // index in the parameter list
  int64_t offset = 0;     // elements into its value
  bool transposed = false;  // GPT-2 Conv1D: (in, out) in the file
};

// "model.layers.3.mlp.experts.gate_up_proj" -> "model.layers.3." (empty if not a layer name).
std::string LayerPrefix(const std::string& name) {
  const size_t at = name.find(".mlp.");
  return at == std::string::npos ? std::string() : name.substr(0, at + 1);
}

// Every HF tensor of `params` (CheckParams passed). Llama-family MoE blocks are written per
// expert in one of the two HF dialects:
//   kMixtral   block_sparse_moe.gate.weight, block_sparse_moe.experts.N.{w1 (gate), w3 (up),
//              w2 (down)}.weight
//   kQwenMoe   mlp.gate.weight, mlp.experts.N.{gate,up,down}_proj.weight (Qwen2-MoE's and
//              DeepSeek's routed experts), the shared experts as mlp.shared_experts.* and the
//              routing bias as mlp.gate.e_score_correction_bias (DeepSeek's; Qwen2-MoE's
//              singular shared_expert with its shared_expert_gate is not modelled)
// GPT-2-family experts have no HF convention: their stacked tensors keep Tessera's names.
std::vector<HfTensor> HfLayout(const ModelConfig& config, std::span<const Parameter> params,
                               HfMoeNames dialect) {
  std::vector<HfTensor> out;
  const bool llama = config.family == ModelFamily::kLlama;
  const int64_t E = config.moe.num_experts, Fe = config.expert_ffn(), C = config.hidden_size;
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = params[i];
    const std::string& name = p.name();
    const bool mixtral = llama && dialect == HfMoeNames::kMixtral;
    if (mixtral && name.ends_with(".mlp.gate.weight")) {
      out.push_back({LayerPrefix(name) + "block_sparse_moe.gate.weight", p.spec.global_shape, i});
      continue;
    }
    if (!llama || name.find(".mlp.experts.") == std::string::npos) {
      out.push_back({name, HfShape(p), i, 0, p.hf_transposed});
      continue;
    }
    const std::string layer = LayerPrefix(name);
    const std::string experts = layer + (mixtral ? "block_sparse_moe.experts." : "mlp.experts.");
    const bool gate_up = name.ends_with("experts.gate_up_proj");
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = experts + std::to_string(e) + ".";
      if (gate_up) {  // (E, 2Fe, C): expert e's [gate | up] rows
        out.push_back({x + (mixtral ? "w1.weight" : "gate_proj.weight"), Shape{Fe, C}, i, e * 2 * Fe * C});
        out.push_back({x + (mixtral ? "w3.weight" : "up_proj.weight"), Shape{Fe, C}, i, e * 2 * Fe * C + Fe * C});
      } else {        // (E, C, Fe)
        out.push_back({x + (mixtral ? "w2.weight" : "down_proj.weight"), Shape{C, Fe}, i, e * C * Fe});
      }
    }
  }
  return out;
}

// The dialect of the file's MoE tensor names (Mixtral's when it has a block_sparse_moe tensor).
template <typename Map>
HfMoeNames DialectOf(const Map& by_name) {
  for (const auto& [name, entry] : by_name) {
    if (name.find(".block_sparse_moe.") != std::string::npos) return HfMoeNames::kMixtral;
  }
  return HfMoeNames::kQwenMoe;
}

// True if name == prefix + <layer index < num_layers> + suffix.
bool MatchesLayerPattern(std::string_view name, std::string_view prefix, std::string_view suffix,
                         int64_t num_layers) {
  if (name.size() <= prefix.size() + suffix.size()) return false;
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return false;
  std::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) return false;
  int64_t layer = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    layer = layer * 10 + (c - '0');
  }
  return layer < num_layers;
}

// Buffers HF files carry that are not parameters (recomputed by Tessera), and the tied head.
bool IsIgnorable(std::string_view name, const ModelConfig& config) {
  if (config.tie_embeddings && name == "lm_head.weight") return true;
  if (config.family == ModelFamily::kGpt2) {
    return MatchesLayerPattern(name, "h.", ".attn.bias", config.num_layers) ||
           MatchesLayerPattern(name, "h.", ".attn.masked_bias", config.num_layers);
  }
  return MatchesLayerPattern(name, "model.layers.", ".self_attn.rotary_emb.inv_freq",
                             config.num_layers);
}

Result<std::unique_ptr<SafetensorsCheckpoint>> OpenCheckpoint(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path single = fs::path(path) / "model.safetensors";
    const fs::path index = fs::path(path) / "model.safetensors.index.json";
    if (fs::exists(single, ec)) return SafetensorsCheckpoint::OpenFile(single.string());
    if (fs::exists(index, ec)) return SafetensorsCheckpoint::OpenIndex(index.string());
    return NotFound(path + ": directory contains neither model.safetensors nor "
                    "model.safetensors.index.json");
  }
  if (path.ends_with(".json")) return SafetensorsCheckpoint::OpenIndex(path);
  return SafetensorsCheckpoint::OpenFile(path);
}

struct LoadItem {
  const HfTensor* tensor;
  Parameter* param;
  const SafetensorsCheckpoint::Entry* entry;
};

// Copies one validated tensor into its parameter, transposing (in, out) -> (out, in) if needed.
Status CopyIntoParam(const LoadItem& item, std::vector<float>& scratch) {
  const SafetensorsFile& file = *item.entry->file;
  const SafetensorsTensorInfo& info = *item.entry->info;
  const HfTensor& t = *item.tensor;
  float* value = item.param->value.f32() + t.offset;
  // NaN/Inf weights would train to NaN at the first step (or silently poison a fine-tune).
  auto finite = [&](const float* values) -> Status {
    const int64_t bad = FirstNonFinite(values, info.shape.numel(), DType::kF32);
    if (bad < 0) return Status::Ok();
    return DataLoss(file.path() + ": tensor " + Quote(info.name) + " holds a NaN or Inf (element " +
                    std::to_string(bad) + "): refusing non-finite weights");
  };
  if (!t.transposed) {
    RETURN_IF_ERROR(file.ReadAsF32(info, value));
    return finite(value);
  }
  const int64_t in = info.shape[0], out = info.shape[1];  // HF Conv1D layout (in, out)
  scratch.resize(static_cast<size_t>(in * out));
  RETURN_IF_ERROR(file.ReadAsF32(info, scratch.data()));
  RETURN_IF_ERROR(finite(scratch.data()));
  float* dst = value;  // (out, in)
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t o = 0; o < out; ++o) dst[o * in + i] = scratch[static_cast<size_t>(i * out + o)];
  }
  return Status::Ok();
}

// The MoE blocks' routing-bias tensors of a file, by name (DeepSeek-V3's
// e_score_correction_bias beside the router, one per MoE block), in layer order.
std::vector<std::string> MoeBiasNames(const ModelConfig& config) {
  std::vector<std::string> names;
  const bool gpt2 = config.family == ModelFamily::kGpt2;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    if (!config.is_moe_layer(l)) continue;
    names.push_back(gpt2 ? "h." + std::to_string(l) + ".mlp.router.e_score_correction_bias"
                         : "model.layers." + std::to_string(l) + ".mlp.gate.e_score_correction_bias");
  }
  return names;
}

}  // namespace

HfMoeNames DefaultHfMoeNames(const ModelConfig& config) {
  const MoeConfig& e = config.moe;
  // Exactly what HF's Mixtral block computes: softmax, top-k renormalised, nothing else.
  const bool mixtral = e.score == RouterScore::kSoftmax && e.normalize_gates &&
                       e.route_scale == 1.0f && e.shared_experts == 0 && e.groups == 1;
  return mixtral ? HfMoeNames::kMixtral : HfMoeNames::kQwenMoe;
}

Status LoadHfWeights(const std::string& path, const ModelConfig& config,
                     std::span<Parameter> params, HfExtras* extras) {
  RETURN_IF_ERROR(CheckParams(params));
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsCheckpoint> ckpt, OpenCheckpoint(path));

  // File names -> Tessera names (GPT-2 files may carry the GPT2LMHeadModel prefix).
  std::map<std::string, const SafetensorsCheckpoint::Entry*, std::less<>> by_name;
  for (const auto& [name, entry] : ckpt->entries()) {
    std::string canonical = name;
    if (config.family == ModelFamily::kGpt2 && canonical.starts_with(kGpt2Prefix)) {
      canonical.erase(0, std::string_view(kGpt2Prefix).size());
    }
    auto [it, inserted] = by_name.emplace(canonical, &entry);
    if (!inserted) {
      return InvalidArgument(ckpt->path() + ": tensor " + Quote(canonical) +
                             " is present both with and without the \"transformer.\" prefix");
    }
  }

  // Validate everything before touching any parameter.
  const std::vector<HfTensor> layout = HfLayout(config, params, DialectOf(by_name));
  std::vector<LoadItem> items;
  std::vector<std::string> missing, mismatched;
  std::set<std::string_view> expected;
  auto check_shape = [&](const SafetensorsCheckpoint::Entry& entry, const Shape& want,
                         const std::string& layout_note) {
    const SafetensorsTensorInfo& info = *entry.info;
    const std::string where = entry.file->path() + ": tensor " + Quote(info.name);
    if (!(info.shape == want)) {
      mismatched.push_back(where + ": shape mismatch: expected " + want.ToString() + layout_note +
                           ", got " + info.shape.ToString());
      return false;
    }
    if (info.dtype == DType::kI32) {
      mismatched.push_back(where + ": dtype mismatch: expected a float type (F32/F16/BF16), "
                           "got I32");
      return false;
    }
    return true;
  };
  for (const HfTensor& t : layout) {
    expected.insert(t.name);
    auto it = by_name.find(t.name);
    if (it == by_name.end()) {
      missing.push_back(t.name);
      continue;
    }
    Parameter& p = params[t.param];
    const std::string note = t.transposed ? " (HF (in, out) layout of Tessera " +
                                                p.spec.global_shape.ToString() + ")"
                                          : "";
    if (check_shape(*it->second, t.shape, note)) items.push_back({&t, &p, it->second});
  }
  // The routing bias: read into `extras` when the caller takes it (all blocks or none).
  std::vector<const SafetensorsCheckpoint::Entry*> bias_entries;
  if (extras != nullptr) {
    for (const std::string& name : MoeBiasNames(config)) {
      auto it = by_name.find(name);
      if (it == by_name.end()) continue;
      expected.insert(it->first);
      if (check_shape(*it->second, Shape{config.moe.num_experts}, "")) bias_entries.push_back(it->second);
    }
    if (!bias_entries.empty() && bias_entries.size() != MoeBiasNames(config).size()) {
      mismatched.push_back(ckpt->path() + ": has e_score_correction_bias for " +
                           std::to_string(bias_entries.size()) + " of the " +
                           std::to_string(MoeBiasNames(config).size()) + " MoE blocks");
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [canonical, entry] : by_name) {
    if (!expected.count(canonical) && !IsIgnorable(canonical, config)) {
      unexpected.push_back(entry->info->name);
    }
  }
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string msg = ckpt->path() + ": weights do not match the " +
                      ModelFamilyName(config.family) + (config.moe.enabled() ? " MoE" : "") +
                      " model; nothing was loaded";
    if (!missing.empty()) {
      msg += "; missing " + std::to_string(missing.size()) + " tensor(s): " + ListNames(missing);
    }
    if (!unexpected.empty()) {
      msg += "; unexpected " + std::to_string(unexpected.size()) +
             " tensor(s): " + ListNames(unexpected);
    }
    for (size_t i = 0; i < mismatched.size() && i < kMaxNamesListed; ++i) {
      msg += "; " + mismatched[i];
    }
    if (mismatched.size() > kMaxNamesListed) {
      msg += "; and " + std::to_string(mismatched.size() - kMaxNamesListed) + " more mismatches";
    }
    return InvalidArgument(msg);
  }

  // The routing bias is read and checked first: nothing is written until all of it is good.
  std::vector<std::vector<float>> bias;
  for (const SafetensorsCheckpoint::Entry* entry : bias_entries) {
    std::vector<float>& row = bias.emplace_back(static_cast<size_t>(config.moe.num_experts));
    RETURN_IF_ERROR(entry->file->ReadAsF32(*entry->info, row.data()));
    if (FirstNonFinite(row.data(), static_cast<int64_t>(row.size()), DType::kF32) >= 0) {
      return DataLoss(entry->file->path() + ": tensor " + Quote(entry->info->name) +
                      " holds a NaN or Inf; nothing was loaded");
    }
  }
  std::vector<float> scratch;
  for (const LoadItem& item : items) {
    Status st = CopyIntoParam(item, scratch);
    if (!st.ok()) return st.WithPrefix("parameters are partially loaded (restore or reload)");
  }
  if (extras != nullptr) extras->moe_bias = std::move(bias);
  return Status::Ok();
}

Result<HfExportTensors> CollectHfExport(const std::string& where, const ModelConfig& config,
                                        std::span<const Parameter> params, DType dtype,
                                        const HfExtras* extras) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return InvalidArgument(where + ": HF export dtype must be f32, bf16 or f16, got " +
                           std::string(DTypeName(dtype)));
  }
  RETURN_IF_ERROR(CheckParams(params));
  for (const Parameter& p : params) {
    if (config.tie_embeddings && p.name() == "lm_head.weight") {
      return InvalidArgument(where + ": parameter 'lm_head.weight' exists but the config ties "
                             "embeddings");
    }
  }
  HfExportTensors out;
  if (extras != nullptr) {  // an all-zero bias is no bias: not written
    for (const std::vector<float>& row : extras->moe_bias) {
      for (float v : row) out.routing_bias |= v != 0.0f;
    }
  }
  // A routing bias is DeepSeek's: Mixtral's names would hide that the routing differs.
  out.moe_names = out.routing_bias ? HfMoeNames::kQwenMoe : DefaultHfMoeNames(config);
  const std::vector<HfTensor> layout = HfLayout(config, params, out.moe_names);
  out.owned.reserve(layout.size());  // (in, out) copies of Conv1D weights; never reallocated
  for (const HfTensor& h : layout) {
    SafetensorsTensorOut t;
    t.name = h.name;
    t.shape = h.shape;
    t.source_dtype = DType::kF32;
    t.dtype = dtype;
    const Parameter& p = params[h.param];
    t.data = p.value.f32() + h.offset;
    if (h.transposed) {
      const int64_t rows = p.spec.global_shape[0], cols = p.spec.global_shape[1];
      const float* src = p.value.f32();  // (out, in)
      std::vector<float>& dst = out.owned.emplace_back(static_cast<size_t>(cols * rows));
      for (int64_t o = 0; o < rows; ++o) {
        for (int64_t i = 0; i < cols; ++i) dst[static_cast<size_t>(i * rows + o)] = src[o * cols + i];
      }
      t.data = dst.data();
    }
    out.tensors.push_back(std::move(t));
  }
  if (!out.routing_bias) return out;
  const std::vector<std::string> bias_names = MoeBiasNames(config);
  if (extras->moe_bias.size() != bias_names.size()) {
    return InvalidArgument(where + ": " + std::to_string(extras->moe_bias.size()) +
                           " MoE bias rows for " + std::to_string(bias_names.size()) +
                           " MoE blocks");
  }
  for (size_t i = 0; i < bias_names.size(); ++i) {
    SafetensorsTensorOut t;
    t.name = bias_names[i];
    t.shape = Shape{static_cast<int64_t>(extras->moe_bias[i].size())};
    t.source_dtype = DType::kF32;
    t.dtype = DType::kF32;  // a selection bias: kept exact whatever the weights' dtype
    t.data = extras->moe_bias[i].data();
    out.tensors.push_back(std::move(t));
  }
  return out;
}

Status ExportHfWeights(const std::string& path, const ModelConfig& config,
                       std::span<const Parameter> params, DType dtype, const HfExtras* extras) {
  ASSIGN_OR_RETURN(HfExportTensors out, CollectHfExport(path, config, params, dtype, extras));
  return WriteSafetensors(path, out.tensors, {{"format", "pt"}});
}

}  // namespace tessera
