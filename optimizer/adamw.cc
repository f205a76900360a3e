// optimizer/adamw.cc — the fused AdamW loop (see adamw.h for the formulas and contract).
#include "optimizer/adamw.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace tessera {
namespace {

// Per-step scalars, computed once in double (as PyTorch does in Python) and rounded to float
// for the vector loop.
struct StepConstants {
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float step_size;     // lr / (1 - b1^t)
  float inv_bc2_sqrt;  // 1 / sqrt(1 - b2^t): a multiply instead of a divide per element
  float eps;
};

// The whole update for n contiguous elements sharing one decay factor (1 = no decay).
// kScaled: the gradient is read as g[i] * grad_scale, the float product ScaleInPlace would have
// stored (clipping folded into this pass: one read of the gradient instead of a read and write
// of a separate scaling pass, then the read here). Unscaled spans skip the multiply.
// __restrict: the four streams never alias, which lets gcc vectorise without runtime checks.
template <bool kScaled>
void UpdateSpan(float* __restrict p, const float* __restrict g, float* __restrict m,
                float* __restrict v, int64_t n, float decay, float grad_scale,
                const StepConstants& k) {
  const float b1 = k.beta1, omb1 = k.one_minus_beta1;
  const float b2 = k.beta2, omb2 = k.one_minus_beta2;
  const float step_size = k.step_size, inv_bc2_sqrt = k.inv_bc2_sqrt, eps = k.eps;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = kScaled ? g[i] * grad_scale : g[i];
    const float mi = b1 * m[i] + omb1 * gi;
    const float vi = b2 * v[i] + omb2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) * inv_bc2_sqrt + eps;
    p[i] = p[i] * decay - step_size * (mi / denom);
  }
}

}  // namespace

Status ValidateParamRanges(const std::vector<ParamRange>& ranges, int64_t num_params) {
  if (num_params < 0) return InvalidArgument("num_params " + std::to_string(num_params) + " < 0");
  std::vector<size_t> order(ranges.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return ranges[a].offset < ranges[b].offset; });
  const ParamRange* prev = nullptr;
  for (size_t idx : order) {
    const ParamRange& r = ranges[idx];
    if (r.size < 0 || r.offset < 0 || r.offset + r.size > num_params) {
      return InvalidArgument("parameter range '" + r.name + "' [" + std::to_string(r.offset) +
                             ", +" + std::to_string(r.size) + ") is outside [0, " +
                             std::to_string(num_params) + ")");
    }
    if (prev && prev->offset + prev->size > r.offset) {
      return InvalidArgument("parameter ranges '" + prev->name + "' and '" + r.name +
                             "' overlap");
    }
    prev = &r;
  }
  return Status::Ok();
}

size_t AdamW::StateBytes(int64_t num_params) {
  TESSERA_CHECK(num_params >= 0);
  // Two allocations, each starting on an Arena::kAlignment boundary.
  size_t one = static_cast<size_t>(num_params) * sizeof(float);
  one = (one + Arena::kAlignment - 1) / Arena::kAlignment * Arena::kAlignment;
  return 2 * one;
}

AdamW::AdamW(const AdamWConfig& config, int64_t num_params, std::vector<ParamRange> ranges,
             MemoryTracker* tracker, Moments moments)
    : config_(config),
      num_params_(num_params),
      ranges_(std::move(ranges)),
      arena_(moments == Moments::kOwn
                 ? Arena(MemoryKind::kOptimizerState, StateBytes(num_params), tracker)
             : moments == Moments::kSized
                 ? Arena::Sizing(MemoryKind::kOptimizerState, StateBytes(num_params), tracker)
                 : Arena::Measuring(MemoryKind::kOptimizerState)) {
  Status valid = ValidateParamRanges(ranges_, num_params_);
  TESSERA_CHECK_MSG(valid.ok(), "AdamW: %s", valid.message().c_str());
  std::sort(ranges_.begin(), ranges_.end(),
            [](const ParamRange& a, const ParamRange& b) { return a.offset < b.offset; });
  for (const ParamRange& r : ranges_) {
    if (r.decay && r.size > 0) decay_spans_.push_back({r.offset, r.offset + r.size});
  }
  if (moments != Moments::kOwn) return;
  exp_avg_ = arena_.Allocate(DType::kF32, {num_params_});
  exp_avg_sq_ = arena_.Allocate(DType::kF32, {num_params_});
}

void AdamW::set_step(int64_t step) {
  TESSERA_CHECK(step >= 0);
  step_ = step;
}

void AdamW::Step(float* params, const float* grads, float lr, float grad_scale) {
  StepRange(params, grads, 0, num_params_, lr, step_ + 1, grad_scale);
  ++step_;
}

void AdamW::StepRange(float* params, const float* grads, int64_t begin, int64_t end, float lr,
                      int64_t t, float grad_scale) {
  StepSlice(params + begin, grads + begin, begin, end, lr, t, grad_scale);
}

void AdamW::StepSlice(float* params, const float* grads, int64_t begin, int64_t end, float lr,
                      int64_t t, float grad_scale) {
  TESSERA_CHECK_MSG(exp_avg_.data() != nullptr, "AdamW::StepSlice: built without moments");
  StepSliceWith(params, grads, exp_avg_.f32() + begin, exp_avg_sq_.f32() + begin, begin, end, lr,
                t, grad_scale);
}

void AdamW::StepSliceWith(float* params, const float* grads, float* m, float* v, int64_t begin,
                          int64_t end, float lr, int64_t t, float grad_scale) {
  TESSERA_CHECK(0 <= begin && begin <= end && end <= num_params_);
  TESSERA_CHECK_MSG(t >= 1, "AdamW step t=%lld: t is 1-based", static_cast<long long>(t));
  const double lr_d = lr;
  const double bc1 = 1.0 - std::pow(static_cast<double>(config_.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(config_.beta2), static_cast<double>(t));
  const StepConstants k{
      config_.beta1,
      static_cast<float>(1.0 - config_.beta1),
      config_.beta2,
      static_cast<float>(1.0 - config_.beta2),
      static_cast<float>(lr_d / bc1),
      static_cast<float>(1.0 / std::sqrt(bc2)),
      config_.eps,
  };
  const float decay = static_cast<float>(1.0 - lr_d * config_.weight_decay);
  const std::vector<Span>& spans = decay_spans_;
  const int64_t num_chunks = (end - begin + kChunk - 1) / kChunk;
  // Multiplying by exactly 1 would not change a bit; skipping it keeps the unclipped loop as is.
  const bool scaled = grad_scale != 1.0f;

#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t chunk_begin = begin + c * kChunk;
    const int64_t chunk_end = std::min(end, chunk_begin + kChunk);
    // b, e are AdamW coordinates; params/grads/m/v start at `begin`.
    auto run = [&](int64_t b, int64_t e, float f) {
      if (e <= b) return;
      if (scaled) {
        UpdateSpan<true>(params + (b - begin), grads + (b - begin), m + (b - begin),
                         v + (b - begin), e - b, f,
                         grad_scale, k);
      } else {
        UpdateSpan<false>(params + (b - begin), grads + (b - begin), m + (b - begin),
                          v + (b - begin), e - b, f,
                          grad_scale, k);
      }
    };
    // First decay span that ends after chunk_begin; walk spans until the chunk is covered.
    auto it = std::upper_bound(spans.begin(), spans.end(), chunk_begin,
                               [](int64_t x, const Span& s) { return x < s.end; });
    int64_t pos = chunk_begin;
    for (; it != spans.end() && it->begin < chunk_end; ++it) {
      const int64_t decay_begin = std::max(pos, it->begin);
      const int64_t decay_end = std::min(chunk_end, it->end);
      run(pos, decay_begin, 1.0f);
      run(decay_begin, decay_end, decay);
      pos = decay_end;
    }
    run(pos, chunk_end, 1.0f);
  }
}

}  // namespace tessera
