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
  Parameter* param;
  const SafetensorsCheckpoint::Entry* entry;
};

// Copies one validated tensor into its parameter, transposing (in, out) -> (out, in) if needed.
Status CopyIntoParam(const LoadItem& item, std::vector<float>& scratch) {
  const SafetensorsFile& file = *item.entry->file;
  const SafetensorsTensorInfo& info = *item.entry->info;
  Parameter& p = *item.param;
  // NaN/Inf weights would train to NaN at the first step (or silently poison a fine-tune).
  auto finite = [&](const float* values) -> Status {
    const int64_t bad = FirstNonFinite(values, info.shape.numel(), DType::kF32);
    if (bad < 0) return Status::Ok();
    return DataLoss(file.path() + ": tensor " + Quote(info.name) + " holds a NaN or Inf (element " +
                    std::to_string(bad) + "): refusing non-finite weights");
  };
  if (!p.hf_transposed) {
    RETURN_IF_ERROR(file.ReadAsF32(info, p.value.f32()));
    return finite(p.value.f32());
  }
  const int64_t in = info.shape[0], out = info.shape[1];  // HF Conv1D layout (in, out)
  scratch.resize(static_cast<size_t>(in * out));
  RETURN_IF_ERROR(file.ReadAsF32(info, scratch.data()));
  RETURN_IF_ERROR(finite(scratch.data()));
  float* dst = p.value.f32();  // (out, in)
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t o = 0; o < out; ++o) dst[o * in + i] = scratch[static_cast<size_t>(i * out + o)];
  }
  return Status::Ok();
}

}  // namespace

Status LoadHfWeights(const std::string& path, const ModelConfig& config,
                     std::span<Parameter> params) {
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
  std::vector<LoadItem> items;
  std::vector<std::string> missing, mismatched;
  std::set<std::string_view> param_names;
  for (Parameter& p : params) {
    param_names.insert(p.name());
    auto it = by_name.find(p.name());
    if (it == by_name.end()) {
      missing.push_back(p.name());
      continue;
    }
    const SafetensorsTensorInfo& info = *it->second->info;
    const std::string where = it->second->file->path() + ": tensor " + Quote(info.name);
    const Shape want = HfShape(p);
    if (!(info.shape == want)) {
      std::string layout = p.hf_transposed ? " (HF (in, out) layout of Tessera " +
                                                 p.spec.global_shape.ToString() + ")"
                                           : "";
      mismatched.push_back(where + ": shape mismatch: expected " + want.ToString() + layout +
                           ", got " + info.shape.ToString());
    } else if (info.dtype == DType::kI32) {
      mismatched.push_back(where + ": dtype mismatch: expected a float type (F32/F16/BF16), "
                           "got I32");
    } else {
      items.push_back({&p, it->second});
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [canonical, entry] : by_name) {
    if (!param_names.count(canonical) && !IsIgnorable(canonical, config)) {
      unexpected.push_back(entry->info->name);
    }
  }
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string msg = ckpt->path() + ": weights do not match the " +
                      ModelFamilyName(config.family) + " model; nothing was loaded";
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

  std::vector<float> scratch;
  for (const LoadItem& item : items) {
    Status st = CopyIntoParam(item, scratch);
    if (!st.ok()) return st.WithPrefix("parameters are partially loaded (restore or reload)");
  }
  return Status::Ok();
}

Status ExportHfWeights(const std::string& path, const ModelConfig& config,
                       std::span<const Parameter> params, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return InvalidArgument(path + ": HF export dtype must be f32, bf16 or f16, got " +
                           std::string(DTypeName(dtype)));
  }
  RETURN_IF_ERROR(CheckParams(params));
  std::vector<std::vector<float>> transposed;  // owns (in, out) copies of Conv1D weights
  transposed.reserve(params.size());
  std::vector<SafetensorsTensorOut> outs;
  for (const Parameter& p : params) {
    if (config.tie_embeddings && p.name() == "lm_head.weight") {
      return InvalidArgument(path + ": parameter 'lm_head.weight' exists but the config ties "
                             "embeddings");
    }
    SafetensorsTensorOut t;
    t.name = p.name();
    t.shape = HfShape(p);
    t.source_dtype = DType::kF32;
    t.dtype = dtype;
    t.data = p.value.data();
    if (p.hf_transposed) {
      const int64_t out = p.spec.global_shape[0], in = p.spec.global_shape[1];
      const float* src = p.value.f32();  // (out, in)
      std::vector<float>& dst = transposed.emplace_back(static_cast<size_t>(in * out));
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) dst[static_cast<size_t>(i * out + o)] = src[o * in + i];
      }
      t.data = dst.data();
    }
    outs.push_back(std::move(t));
  }
  return WriteSafetensors(path, outs, {{"format", "pt"}});
}

}  // namespace tessera
