// models/hf_weights.cc — HF safetensors -> Parameters: validate everything (HfWeightSource::Open),
// then read element ranges (HfWeightSource::Read). See hf_weights.h for the contracts.
#include "models/hf_weights.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "models/hf_layout.h"
#include "models/param_layout.h"
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

}  // namespace

std::vector<Parameter> HfGlobalSpecs(const ModelConfig& config) {
  std::vector<Parameter> specs;
  int64_t offset = 0;
  for (const ParamDecl& d : DeclareParameters(config)) {
    Parameter p;
    p.kind = d.kind;
    p.hf_transposed = d.hf_transposed;
    p.offset = offset;
    p.spec = ShardedTensor::Whole(d.name, d.shape);
    specs.push_back(std::move(p));
    offset += d.shape.numel();
  }
  return specs;
}

struct HfWeightSource::Piece {
  const SafetensorsCheckpoint::Entry* entry = nullptr;
  int64_t offset = 0;  // first element of the parameter it holds
  int64_t numel = 0;
  bool transposed = false;
};

HfWeightSource::~HfWeightSource() = default;
const std::string& HfWeightSource::path() const { return ckpt_->path(); }
size_t HfWeightSource::num_files() const { return ckpt_->files().size(); }

Result<std::unique_ptr<HfWeightSource>> HfWeightSource::Open(const std::string& path,
                                                             const ModelConfig& config,
                                                             std::span<const Parameter> params,
                                                             bool routing_bias, HfReadFault fault) {
  RETURN_IF_ERROR(CheckHfParams(params, /*values=*/false));
  std::unique_ptr<HfWeightSource> src(new HfWeightSource());
  src->fault_ = std::move(fault);
  ASSIGN_OR_RETURN(src->ckpt_, OpenCheckpoint(path));
  const SafetensorsCheckpoint& ckpt = *src->ckpt_;

  // File names -> Tessera names (GPT-2 files may carry the GPT2LMHeadModel prefix).
  std::map<std::string, const SafetensorsCheckpoint::Entry*, std::less<>> by_name;
  std::vector<std::string> names;
  for (const auto& [name, entry] : ckpt.entries()) {
    std::string canonical = name;
    if (config.family == ModelFamily::kGpt2 && canonical.starts_with(kGpt2Prefix)) {
      canonical.erase(0, std::string_view(kGpt2Prefix).size());
    }
    auto [it, inserted] = by_name.emplace(canonical, &entry);
    if (!inserted) {
      return InvalidArgument(ckpt.path() + ": tensor " + Quote(canonical) +
                             " is present both with and without the \"transformer.\" prefix");
    }
    names.push_back(canonical);
  }

  // Validate everything before anything can be read.
  const std::vector<HfTensor> layout = HfLayout(config, params, HfDialectOf(names));
  src->pieces_.resize(params.size());
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
    const Parameter& p = params[t.param];
    const std::string note = t.transposed ? " (HF (in, out) layout of Tessera " +
                                                p.spec.global_shape.ToString() + ")"
                                          : "";
    if (check_shape(*it->second, t.shape, note)) {
      src->pieces_[t.param].push_back({it->second, t.offset, t.shape.numel(), t.transposed});
    }
  }
  // The routing bias (all blocks or none).
  std::vector<const SafetensorsCheckpoint::Entry*> bias_entries;
  if (routing_bias) {
    for (const std::string& name : HfMoeBiasNames(config)) {
      auto it = by_name.find(name);
      if (it == by_name.end()) continue;
      expected.insert(it->first);
      if (check_shape(*it->second, Shape{config.moe.num_experts}, "")) bias_entries.push_back(it->second);
    }
    if (!bias_entries.empty() && bias_entries.size() != HfMoeBiasNames(config).size()) {
      mismatched.push_back(ckpt.path() + ": has e_score_correction_bias for " +
                           std::to_string(bias_entries.size()) + " of the " +
                           std::to_string(HfMoeBiasNames(config).size()) + " MoE blocks");
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [canonical, entry] : by_name) {
    if (!expected.count(canonical) && !HfIgnorable(canonical, config)) {
      unexpected.push_back(entry->info->name);
    }
  }
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string msg = ckpt.path() + ": weights do not match the " +
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
  for (auto& list : src->pieces_) {
    std::sort(list.begin(), list.end(), [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
  }
  for (const SafetensorsCheckpoint::Entry* entry : bias_entries) {
    std::vector<float>& row = src->bias_.emplace_back(static_cast<size_t>(config.moe.num_experts));
    const Request whole{0, config.moe.num_experts, row.data()};
    RETURN_IF_ERROR(src->ReadPiece({entry, 0, config.moe.num_experts, false},
                                   std::span<const Request>(&whole, 1)));
  }
  return src;
}

Status HfWeightSource::Read(size_t param, std::span<const Request> requests) const {
  TESSERA_CHECK(param < pieces_.size());
  std::vector<Request> mine;
  for (const Piece& piece : pieces_[param]) {
    mine.clear();  // the requests' parts inside this file tensor, in its element numbers
    for (const Request& r : requests) {
      const int64_t lo = std::max(r.begin, piece.offset);
      const int64_t hi = std::min(r.begin + r.n, piece.offset + piece.numel);
      if (lo < hi) mine.push_back({lo - piece.offset, hi - lo, r.out + (lo - r.begin)});
    }
    if (!mine.empty()) RETURN_IF_ERROR(ReadPiece(piece, mine));
  }
  return Status::Ok();
}

// The requests of one file tensor (element numbers in Tessera's layout); a failure or a
// non-finite value is retried once.
Status HfWeightSource::ReadPiece(const Piece& piece, std::span<const Request> requests) const {
  const SafetensorsFile& file = *piece.entry->file;
  const SafetensorsTensorInfo& info = *piece.entry->info;
  const std::string where = file.path() + ": tensor " + Quote(info.name);
  auto read = [&]() -> Status {
    if (piece.transposed) return ReadTransposed(piece, requests);
    for (const Request& r : requests) {
      RETURN_IF_ERROR(file.ReadRangeAsF32(info, r.begin, r.n, r.out));
      bytes_read_ += r.n * static_cast<int64_t>(DTypeSize(info.dtype));
    }
    return Status::Ok();
  };
  Status st = Status::Ok();
  for (int attempt = 0; attempt < 2; ++attempt) {
    st = fault_ ? fault_(info.name, attempt) : Status::Ok();
    if (st.ok()) st = read();
    if (!st.ok()) {
      st = st.WithPrefix(where);
      continue;
    }
    // NaN/Inf weights would train to NaN at the first step (or silently poison a fine-tune).
    for (const Request& r : requests) {
      const int64_t bad = FirstNonFinite(r.out, r.n, DType::kF32);
      if (bad < 0) continue;
      int64_t element = r.begin + bad;  // in the file's layout
      if (piece.transposed) {
        const int64_t in = info.shape[0], rows = info.shape[1];
        element = (element % in) * rows + element / in;
      }
      st = DataLoss(where + " holds a NaN or Inf (element " + std::to_string(element) +
                    "): refusing non-finite weights");
      break;
    }
    if (st.ok()) return st;
  }
  return Status(st.code(), st.message() + " (read twice)");
}

// GPT-2's Conv1D weights: the file holds (in, out), Tessera (out, in), so Tessera's row o is the
// file's column o. The requests, cut into pieces of one Tessera row each, are bounded by file
// rows [i_lo, i_hi) and columns [o_lo, o_hi); those file rows are read in blocks through the
// buffer (each block one contiguous range, from column o_lo of its first row to o_hi of its
// last) and each row piece takes its elements from every block.
Status HfWeightSource::ReadTransposed(const Piece& piece, std::span<const Request> requests) const {
  const SafetensorsFile& file = *piece.entry->file;
  const SafetensorsTensorInfo& info = *piece.entry->info;
  const int64_t in = info.shape[0], rows = info.shape[1];  // Tessera: rows x in
  struct RowPiece {
    int64_t o, i0, i1;
    float* out;  // element i0
  };
  std::vector<RowPiece> pieces;
  int64_t i_lo = in, i_hi = 0, o_lo = rows, o_hi = 0;
  for (const Request& r : requests) {
    for (int64_t t = r.begin; t < r.begin + r.n;) {
      const int64_t o = t / in, i0 = t % in, i1 = std::min(in, i0 + (r.begin + r.n - t));
      pieces.push_back({o, i0, i1, r.out + (t - r.begin)});
      i_lo = std::min(i_lo, i0), i_hi = std::max(i_hi, i1);
      o_lo = std::min(o_lo, o), o_hi = std::max(o_hi, o + 1);
      t += i1 - i0;
    }
  }
  if (pieces.empty()) return Status::Ok();
  const int64_t span = o_hi - o_lo;
  const int64_t per_read = std::max<int64_t>(1, (kHfReadBufferElems - span) / rows + 1);
  std::vector<float> buf(static_cast<size_t>((std::min(per_read, i_hi - i_lo) - 1) * rows + span));
  for (int64_t b0 = i_lo; b0 < i_hi; b0 += per_read) {
    const int64_t b1 = std::min(i_hi, b0 + per_read);
    const int64_t count = (b1 - b0 - 1) * rows + span;
    RETURN_IF_ERROR(file.ReadRangeAsF32(info, b0 * rows + o_lo, count, buf.data()));
    bytes_read_ += count * static_cast<int64_t>(DTypeSize(info.dtype));
    for (const RowPiece& p : pieces) {
      for (int64_t i = std::max(p.i0, b0); i < std::min(p.i1, b1); ++i) {
        p.out[i - p.i0] = buf[static_cast<size_t>((i - b0) * rows + (p.o - o_lo))];
      }
    }
  }
  return Status::Ok();
}

Status LoadHfWeights(const std::string& path, const ModelConfig& config,
                     std::span<Parameter> params, HfExtras* extras) {
  RETURN_IF_ERROR(CheckHfParams(params, /*values=*/true));
  ASSIGN_OR_RETURN(std::unique_ptr<HfWeightSource> src,
                   HfWeightSource::Open(path, config, params, extras != nullptr));
  for (size_t i = 0; i < params.size(); ++i) {
    Status st = src->Read(i, 0, params[i].value.numel(), params[i].value.f32());
    if (!st.ok()) return st.WithPrefix("parameters are partially loaded (restore or reload)");
  }
  if (extras != nullptr) extras->moe_bias = src->routing_bias();
  return Status::Ok();
}

}  // namespace tessera
