// runtime/train/unit_subset.h — some of a model's units as a flat space of their own: what a
// ParamState that keeps two kinds of units apart (expert_split_state.h: dense and expert units
// over different groups; lora_state.h: frozen base and trainable adapters) hands to the
// ParamShards holding one kind.
//
// The subset keeps the model's unit numbering: its bounds have every unit, the units it does
// not hold empty, so unit u of the model is unit u of the subset and a ParamShards over the
// subset's bounds serves the model's Acquire / Grads calls for u unchanged. Part flat
// [bounds()[u], bounds()[u + 1]) is model flat [model_bounds[u], ...) for a held unit.
// Immutable value; thread-safe. A Fill from ToModel refers to this object: keep it alive.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "optimizer/adamw.h"
#include "runtime/train/param_state.h"

namespace tessera {

class UnitSubset {
 public:
  UnitSubset() = default;
  // `held[u]`: whether the subset holds model unit u (held.size() == model_bounds.size() - 1).
  UnitSubset(std::vector<int64_t> model_bounds, std::vector<bool> held);

  const std::vector<int64_t>& bounds() const { return bounds_; }
  const std::vector<int64_t>& model_bounds() const { return model_bounds_; }
  bool holds(int unit) const { return held_[static_cast<size_t>(unit)]; }
  int64_t size() const { return bounds_.back(); }

  // fn(model_begin, length, part_begin) for the runs of part flat [b, e), in order.
  template <typename Fn>
  void ForEachRun(int64_t b, int64_t e, Fn fn) const;
  // A fill of part flat ranges from a fill of model flat ones.
  ParamState::Fill ToModel(const ParamState::Fill& fill) const;
  // Model flat ranges -> the part's flat ranges (clipped to the held units).
  std::vector<std::pair<int64_t, int64_t>> ToPart(
      const std::vector<std::pair<int64_t, int64_t>>& ranges) const;
  // The decay ranges (each one parameter, inside one unit) of the held units, in part flat.
  std::vector<ParamRange> ToPart(const std::vector<ParamRange>& ranges) const;
  // The part's save spans as model flat spans (split where a span crosses units).
  void AppendModelSpans(const std::vector<ParamState::SaveSpan>& part,
                        std::vector<ParamState::SaveSpan>* out) const;
  // Copies the part's values (size() floats) to their model flat places in `model`.
  void Place(const std::vector<float>& values, float* model) const;

 private:
  std::vector<int64_t> model_bounds_, bounds_;
  std::vector<bool> held_;
};

template <typename Fn>
void UnitSubset::ForEachRun(int64_t b, int64_t e, Fn fn) const {
  const int U = static_cast<int>(bounds_.size()) - 1;
  int u = static_cast<int>(std::upper_bound(bounds_.begin(), bounds_.end(), b) - bounds_.begin()) - 1;
  for (; u < U && b < e; ++u) {
    const int64_t end = std::min(e, bounds_[u + 1]);
    if (end <= b) continue;  // an empty unit
    fn(model_bounds_[u] + (b - bounds_[u]), end - b, b);
    b = end;
  }
}

}  // namespace tessera
