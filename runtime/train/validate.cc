// runtime/train/validate.cc — the layer file and its comparison (validate.h).
#include "runtime/train/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "models/safetensors.h"

namespace tessera {

std::vector<int32_t> FixedValidationInput(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(B * T));
  uint64_t x = seed * 2862933555777941757ull + 3037000493ull;
  for (int32_t& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;  // Knuth's MMIX LCG
    id = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab));
  }
  return ids;
}

Result<std::vector<int32_t>> ReadValidationInput(const std::string& path, int64_t vocab,
                                                 int64_t* B, int64_t* T) {
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::Open(path));
  const SafetensorsTensorInfo* info = f->Find("input_ids");
  if (info == nullptr || info->dtype != DType::kI32 || info->shape.rank() != 2) {
    return DataLoss(path + ": no input_ids tensor (I32, batch x sequence) to validate with");
  }
  std::vector<int32_t> ids(static_cast<size_t>(info->numel()));
  RETURN_IF_ERROR(f->ReadRaw(*info, ids.data()));
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      return DataLoss(path + ": input_ids holds token " + std::to_string(id) +
                      ", outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  *B = info->shape[0];
  *T = info->shape[1];
  return ids;
}

Status WriteLayerFile(const std::string& path, const std::vector<int32_t>& input_ids, int64_t B,
                      int64_t T, const std::vector<Transformer::LayerOutput>& outputs,
                      const std::string& producer) {
  std::vector<SafetensorsTensorOut> tensors;
  tensors.push_back({"input_ids", Shape{B, T}, input_ids.data(), DType::kI32, DType::kI32});
  for (const Transformer::LayerOutput& o : outputs) {
    tensors.push_back({o.name, Shape{B, T, o.cols}, o.values.data(), DType::kF32, DType::kF32});
  }
  return WriteSafetensors(path, tensors, {{"format", "pt"}, {"producer", producer}});
}

namespace {

LayerDiff Compare(const Transformer::LayerOutput& o, const std::vector<float>& ref,
                  double tolerance) {
  LayerDiff d;
  d.name = o.name;
  d.compared = true;
  d.cols = o.cols;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = std::abs(static_cast<double>(o.values[i]) - ref[i]);
    d.ref_max = std::max(d.ref_max, std::abs(static_cast<double>(ref[i])));
    // A NaN on either side is the worst error there is.
    if (diff > d.max_abs || std::isnan(diff)) {
      d.max_abs = std::isnan(diff) ? INFINITY : diff;
      d.worst = static_cast<int64_t>(i);
      d.ours = o.values[i];
      d.theirs = ref[i];
    }
  }
  d.rel = d.max_abs / std::max(d.ref_max, 1e-30);
  d.within = d.rel <= tolerance;
  return d;
}

}  // namespace

Result<std::vector<LayerDiff>> CompareWithReference(
    const std::vector<Transformer::LayerOutput>& outputs, const std::string& path,
    double tolerance) {
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::Open(path));
  std::vector<LayerDiff> diffs;
  bool any = false;
  for (const Transformer::LayerOutput& o : outputs) {
    const SafetensorsTensorInfo* info = f->Find(o.name);
    if (info == nullptr) {
      LayerDiff absent;
      absent.name = o.name;
      diffs.push_back(absent);
      continue;
    }
    if (info->numel() != o.rows * o.cols || info->shape[info->shape.rank() - 1] != o.cols) {
      return DataLoss(path + ": " + o.name + " has " + std::to_string(info->numel()) +
                      " elements in rows of " + std::to_string(info->shape[info->shape.rank() - 1]) +
                      "; Tessera's has " + std::to_string(o.rows) + " rows of " +
                      std::to_string(o.cols) + " (another input or model?)");
    }
    std::vector<float> ref(static_cast<size_t>(info->numel()));
    RETURN_IF_ERROR(f->ReadAsF32(*info, ref.data()));
    diffs.push_back(Compare(o, ref, tolerance));
    any = true;
  }
  if (!any) {
    return InvalidArgument(path + ": holds none of the layer outputs Tessera records "
                           "(embeddings, layers.{i}.attention, layers.{i}.mlp, final_norm, logits)");
  }
  return diffs;
}

std::string DescribeLayerDiffs(const std::vector<LayerDiff>& diffs, int64_t T, double tolerance) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-22s %12s %12s %12s\n", "layer", "max abs", "max |ref|", "rel");
  out += line;
  const LayerDiff* first = nullptr;
  int compared = 0;
  for (const LayerDiff& d : diffs) {
    if (!d.compared) {
      out += d.name + std::string(d.name.size() < 22 ? 22 - d.name.size() : 0, ' ') +
             "  (not in the reference)\n";
      continue;
    }
    ++compared;
    std::snprintf(line, sizeof line, "%-22s %12.3e %12.3e %12.3e%s\n", d.name.c_str(), d.max_abs,
                  d.ref_max, d.rel, d.within ? "" : "  DIVERGES");
    out += line;
    if (!d.within && first == nullptr) first = &d;
  }
  if (first == nullptr) {
    std::snprintf(line, sizeof line, "all %d layers within rel %.1e of the reference\n", compared,
                  tolerance);
    return out + line;
  }
  const int64_t row = first->worst / first->cols, col = first->worst % first->cols;
  std::snprintf(line, sizeof line,
                "first divergence: %s: max abs %.3e (rel %.3e > %.1e) at batch %lld, position "
                "%lld, column %lld: tessera %.8g vs reference %.8g\n",
                first->name.c_str(), first->max_abs, first->rel, tolerance,
                static_cast<long long>(row / T), static_cast<long long>(row % T),
                static_cast<long long>(col), first->ours, first->theirs);
  return out + line;
}

}  // namespace tessera
