// runtime/train/saved_state.cc — the trainer's saved state (contract in saved_state.h).
//
// The JSON form: {"step":N,"seed":S,"data_epoch":E,"data_index":I,"adamw_step":A,
// "nonfinite_streak":K[,"loss_scale":X,"loss_scale_good_steps":G,"loss_scale_skipped":Z]
// [,"loss_window":[...]][,"moe_bias":[[...],...]]}. The seed is a uint64 stored as the int64 with the same bits (JSON
// integers are signed here), so every seed round-trips.
#include "runtime/train/saved_state.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string_view>

#include "optimizer/loss_scale.h"

namespace tessera {
namespace {

constexpr std::string_view kKeys[] = {
    "step", "seed", "data_epoch", "data_index", "adamw_step", "nonfinite_streak",
    "loss_scale", "loss_scale_good_steps", "loss_scale_skipped", "loss_window", "moe_bias",
    "lora_base"};

// More MoE blocks or experts than any model has: a bound on what a manifest makes us allocate.
constexpr size_t kMaxSavedMoeValues = size_t{1} << 24;

class StateReader {
 public:
  StateReader(const JsonValue& state, const std::string& where) : state_(state), where_(where) {}

  Status Error(std::string_view key, const std::string& problem) const {
    return DataLoss(where_ + ": state." + std::string(key) + ": " + problem);
  }

  // An integer in [0, max].
  Result<int64_t> Count(std::string_view key, int64_t max) const {
    const JsonValue* v = state_.Find(key);
    if (v == nullptr) return Error(key, "missing");
    if (!v->is_integer()) return Error(key, "not an integer");
    if (v->as_int() < 0 || v->as_int() > max) {
      return Error(key, std::to_string(v->as_int()) + " is outside [0, " + std::to_string(max) + "]");
    }
    return v->as_int();
  }

 private:
  const JsonValue& state_;
  const std::string& where_;
};

bool IsPowerOfTwo(double v) {
  int exponent = 0;
  return v > 0 && std::isfinite(v) && std::frexp(v, &exponent) == 0.5;
}

Result<SavedLossScale> ParseLossScale(const StateReader& r, const JsonValue& state, int64_t step) {
  SavedLossScale ls;
  const JsonValue* scale = state.Find("loss_scale");
  if (scale == nullptr || !scale->is_number() || !IsPowerOfTwo(scale->as_double())) {
    return r.Error("loss_scale", "not a positive, finite power of two");
  }
  ls.scale = scale->as_double();
  ASSIGN_OR_RETURN(ls.good_steps, r.Count("loss_scale_good_steps", step));
  ASSIGN_OR_RETURN(ls.skipped, r.Count("loss_scale_skipped", step));
  return ls;
}

Result<std::vector<double>> ParseLossWindow(const StateReader& r, const JsonValue& w) {
  if (!w.is_array()) return r.Error("loss_window", "not an array");
  if (w.items().size() > kMaxSavedLossWindow) {
    return r.Error("loss_window", std::to_string(w.items().size()) + " values (at most " +
                                      std::to_string(kMaxSavedLossWindow) + ")");
  }
  std::vector<double> out;
  out.reserve(w.items().size());
  for (const JsonValue& v : w.items()) {
    if (!v.is_number() || !std::isfinite(v.as_double())) {
      return r.Error("loss_window", "holds something other than a finite number");
    }
    out.push_back(v.as_double());
  }
  return out;
}

// Rows of equal length of finite numbers, each a float as saved.
Result<std::vector<std::vector<float>>> ParseMoeBias(const StateReader& r, const JsonValue& b) {
  if (!b.is_array()) return r.Error("moe_bias", "not an array");
  std::vector<std::vector<float>> rows;
  size_t values = 0;
  for (const JsonValue& row : b.items()) {
    if (!row.is_array()) return r.Error("moe_bias", "a row that is not an array");
    if (!rows.empty() && row.items().size() != rows.front().size()) {
      return r.Error("moe_bias", "rows of different lengths");
    }
    values += row.items().size();
    if (values > kMaxSavedMoeValues) return r.Error("moe_bias", "too many values");
    std::vector<float> out;
    for (const JsonValue& v : row.items()) {
      const double d = v.is_number() ? v.as_double() : NAN;
      if (!std::isfinite(d) || static_cast<double>(static_cast<float>(d)) != d) {
        return r.Error("moe_bias", "holds something other than a finite 32-bit float");
      }
      out.push_back(static_cast<float>(d));
    }
    rows.push_back(std::move(out));
  }
  return rows;
}

}  // namespace

JsonValue SavedStateJson(const SavedTrainerState& s) {
  std::vector<std::pair<std::string, JsonValue>> m = {
      {"step", JsonValue::Integer(s.step)},
      {"seed", JsonValue::Integer(static_cast<int64_t>(s.seed))},
      {"data_epoch", JsonValue::Integer(s.data_epoch)},
      {"data_index", JsonValue::Integer(s.data_index)},
      {"adamw_step", JsonValue::Integer(s.adamw_step)},
      {"nonfinite_streak", JsonValue::Integer(s.nonfinite_streak)}};
  if (s.loss_scale) {
    m.push_back({"loss_scale", JsonValue::Number(s.loss_scale->scale)});
    m.push_back({"loss_scale_good_steps", JsonValue::Integer(s.loss_scale->good_steps)});
    m.push_back({"loss_scale_skipped", JsonValue::Integer(s.loss_scale->skipped)});
  }
  if (!s.loss_window.empty()) {
    std::vector<JsonValue> w;
    w.reserve(s.loss_window.size());
    for (double v : s.loss_window) w.push_back(JsonValue::Number(v));
    m.push_back({"loss_window", JsonValue::Array(std::move(w))});
  }
  if (!s.moe_bias.empty()) {
    std::vector<JsonValue> rows;
    for (const std::vector<float>& row : s.moe_bias) {
      std::vector<JsonValue> values;
      for (float v : row) values.push_back(JsonValue::Number(v));
      rows.push_back(JsonValue::Array(std::move(values)));
    }
    m.push_back({"moe_bias", JsonValue::Array(std::move(rows))});
  }
  if (!s.lora_base.empty()) m.push_back({"lora_base", JsonValue::String(s.lora_base)});
  return JsonValue::Object(std::move(m));
}

Result<SavedTrainerState> ParseSavedState(const JsonValue& state, int64_t manifest_step,
                                          const std::string& where) {
  const StateReader r(state, where);
  if (!state.is_object()) return DataLoss(where + ": state: not an object");
  for (const auto& [key, value] : state.members()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      return DataLoss(where + ": state: unknown key \"" + key.substr(0, 80) + "\"");
    }
  }
  SavedTrainerState s;
  ASSIGN_OR_RETURN(s.step, r.Count("step", kMaxSavedCount));
  if (s.step != manifest_step) {
    return r.Error("step", std::to_string(s.step) + " disagrees with the manifest's step " +
                               std::to_string(manifest_step));
  }
  const JsonValue* seed = state.Find("seed");
  if (seed == nullptr || !seed->is_integer()) return r.Error("seed", "missing or not an integer");
  s.seed = static_cast<uint64_t>(seed->as_int());
  ASSIGN_OR_RETURN(s.data_epoch, r.Count("data_epoch", kMaxSavedEpoch));
  ASSIGN_OR_RETURN(s.data_index, r.Count("data_index", kMaxSavedCount));
  ASSIGN_OR_RETURN(s.adamw_step, r.Count("adamw_step", kMaxSavedCount));
  ASSIGN_OR_RETURN(s.nonfinite_streak, r.Count("nonfinite_streak", s.step));
  const bool any_scale = state.Find("loss_scale") || state.Find("loss_scale_good_steps") ||
                         state.Find("loss_scale_skipped");
  if (any_scale) {
    ASSIGN_OR_RETURN(SavedLossScale ls, ParseLossScale(r, state, s.step));
    s.loss_scale = ls;
  }
  if (const JsonValue* w = state.Find("loss_window")) {
    ASSIGN_OR_RETURN(s.loss_window, ParseLossWindow(r, *w));
  }
  if (const JsonValue* b = state.Find("lora_base")) {
    if (!b->is_string() || b->as_string().empty() || b->as_string().size() > 4096) {
      return r.Error("lora_base", "not a non-empty string of at most 4096 bytes");
    }
    s.lora_base = b->as_string();
  }
  if (const JsonValue* b = state.Find("moe_bias")) {
    ASSIGN_OR_RETURN(s.moe_bias, ParseMoeBias(r, *b));
  }
  return s;
}

Status CheckStateFitsRun(const SavedTrainerState& s, const Config& config, int64_t num_windows,
                         const std::string& where) {
  if (s.seed != config.train.seed) {
    return InvalidArgument(where + ": saved with train.seed=" + std::to_string(s.seed) +
                           " but this config has " + std::to_string(config.train.seed) +
                           ": the data order would differ from the run being resumed");
  }
  if (s.step > config.train.steps) {
    return OutOfRange(where + ": saved after step " + std::to_string(s.step) +
                      ", beyond this run's train.steps=" + std::to_string(config.train.steps));
  }
  if (s.data_index >= num_windows) {
    return OutOfRange(where + ": data position {epoch " + std::to_string(s.data_epoch) +
                      ", index " + std::to_string(s.data_index) + "} is outside this run's " +
                      std::to_string(num_windows) +
                      " training windows (taken on different data or seq_len?)");
  }
  const MoeConfig& moe = config.model.moe;
  if (moe.enabled()) {
    const size_t blocks = static_cast<size_t>(config.model.num_moe_layers());
    if (s.moe_bias.size() != blocks ||
        (blocks > 0 && s.moe_bias.front().size() != static_cast<size_t>(moe.num_experts))) {
      return OutOfRange(where + ": holds " + std::to_string(s.moe_bias.size()) +
                        " MoE bias rows, but this run balances " + std::to_string(blocks) +
                        " MoE blocks of " + std::to_string(moe.num_experts) + " experts");
    }
  }
  if (s.loss_scale && config.precision == Precision::kFp16) {
    const LossScaleConfig defaults;
    const double lo = config.mixed_precision.min_scale;
    const double hi = std::max<double>(defaults.max_scale, config.mixed_precision.initial_scale);
    if (s.loss_scale->scale < lo || s.loss_scale->scale > hi) {
      return OutOfRange(where + ": fp16 loss scale " + std::to_string(s.loss_scale->scale) +
                        " is outside this run's [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "] (mixed_precision.min_scale, the largest scale)");
    }
  }
  return Status::Ok();
}

}  // namespace tessera
