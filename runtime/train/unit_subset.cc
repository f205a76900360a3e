// runtime/train/unit_subset.cc — a subset of a model's units as its own flat space
// (unit_subset.h).
#include "runtime/train/unit_subset.h"

#include <algorithm>
#include <cstring>

#include "runtime/core/check.h"

namespace tessera {

UnitSubset::UnitSubset(std::vector<int64_t> model_bounds, std::vector<bool> held)
    : model_bounds_(std::move(model_bounds)), held_(std::move(held)) {
  TESSERA_CHECK(model_bounds_.size() == held_.size() + 1);
  bounds_.assign(1, 0);
  for (size_t u = 0; u < held_.size(); ++u) {
    const int64_t n = held_[u] ? model_bounds_[u + 1] - model_bounds_[u] : 0;
    bounds_.push_back(bounds_.back() + n);
  }
}

ParamState::Fill UnitSubset::ToModel(const ParamState::Fill& fill) const {
  return [this, fill](int64_t b, int64_t e, float* out) {
    ForEachRun(b, e, [&](int64_t model, int64_t n, int64_t at) {
      fill(model, model + n, out + (at - b));
    });
  };
}

std::vector<std::pair<int64_t, int64_t>> UnitSubset::ToPart(
    const std::vector<std::pair<int64_t, int64_t>>& ranges) const {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int U = static_cast<int>(bounds_.size()) - 1;
  for (const auto& [first, last] : ranges) {
    for (int u = 0; u < U; ++u) {
      if (bounds_[u + 1] == bounds_[u]) continue;  // not a held unit
      const int64_t b = std::max(first, model_bounds_[u]), e = std::min(last, model_bounds_[u + 1]);
      if (b >= e) continue;
      const int64_t at = bounds_[u] + (b - model_bounds_[u]);
      if (!out.empty() && out.back().second == at) {
        out.back().second = at + (e - b);
      } else {
        out.emplace_back(at, at + (e - b));
      }
    }
  }
  return out;
}

std::vector<ParamRange> UnitSubset::ToPart(const std::vector<ParamRange>& ranges) const {
  std::vector<ParamRange> out;
  for (const ParamRange& r : ranges) {
    const int u = static_cast<int>(std::upper_bound(model_bounds_.begin(), model_bounds_.end(),
                                                    r.offset) - model_bounds_.begin()) - 1;
    if (!holds(u)) continue;
    ParamRange p = r;
    p.offset = bounds_[u] + (r.offset - model_bounds_[u]);
    out.push_back(std::move(p));
  }
  return out;
}

void UnitSubset::AppendModelSpans(const std::vector<ParamState::SaveSpan>& part,
                                  std::vector<ParamState::SaveSpan>* out) const {
  for (const ParamState::SaveSpan& s : part) {
    ForEachRun(s.begin, s.end, [&](int64_t model, int64_t n, int64_t at) {
      const int64_t skip = at - s.begin;
      auto shift = [skip](const float* p) { return p != nullptr ? p + skip : nullptr; };
      ParamState::SpanRead read;
      if (s.read) {
        read = [read = s.read, skip](int kind, int64_t offset, int64_t len, float* dst) {
          return read(kind, skip + offset, len, dst);
        };
      }
      out->push_back({model, model + n, shift(s.values), shift(s.exp_avg), shift(s.exp_avg_sq),
                      std::move(read)});
    });
  }
}

void UnitSubset::Place(const std::vector<float>& values, float* model) const {
  ForEachRun(0, size(), [&](int64_t at_model, int64_t n, int64_t at) {
    std::memcpy(model + at_model, values.data() + at, static_cast<size_t>(n) * sizeof(float));
  });
}

}  // namespace tessera
