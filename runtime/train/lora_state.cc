// runtime/train/lora_state.cc — the frozen base and the trained adapters (lora_state.h).
#include "runtime/train/lora_state.h"

#include <algorithm>
#include <cstring>

#include "runtime/core/check.h"
#include "runtime/kernels/cpu_backend.h"

namespace tessera {
namespace {

// The model holds at most two units at once (a block and its experts; the final unit and the
// embeddings its tied head reads), and prefetches nothing of a frozen base: two buffers, of the
// largest and second-largest unit, hold any two units (Acquire takes the smallest that fits).
constexpr int kUnitBuffers = 2;
// A bf16 base is filled through an fp32 buffer of at most this many elements (64 MiB): large
// enough that a fill spans many tensors (the HF loader reads a call's tensors in parallel).
constexpr int64_t kLoadChunk = int64_t{1} << 24;

}  // namespace

Result<std::unique_ptr<LoraState>> LoraState::Create(
    const ParamShardsOptions& options, const AdamWConfig& adamw, std::vector<int64_t> bounds,
    const std::vector<ParamRange>& ranges, const std::vector<int>& adapter_units, bool base_bf16,
    Communicator* dp, MemoryTracker* tracker) {
  TESSERA_CHECK(bounds.size() >= 2 && !adapter_units.empty());
  std::unique_ptr<LoraState> s(new LoraState());
  const int U = static_cast<int>(bounds.size()) - 1;
  std::vector<bool> held(static_cast<size_t>(U), false);
  for (int u : adapter_units) held[static_cast<size_t>(u)] = true;
  s->adapter_units_ = UnitSubset(bounds, held);
  s->dp_ = dp;
  s->backend_ = options.backend != nullptr ? options.backend : &CpuReferenceBackend();
  s->base_dtype_ = base_bf16 ? DType::kBF16 : DType::kF32;
  // The adapters: no experts (never adapted), no embedding copies among their units.
  ParamShardsOptions o = options;
  o.embedding_units.clear();
  o.expert_units.clear();
  ASSIGN_OR_RETURN(s->adapters_, ParamShards::Create(o, adamw, s->adapter_units_.bounds(),
                                                     s->adapter_units_.ToPart(ranges), dp, tracker));
  // The base units packed one after the other (the adapters are the ParamShards').
  for (int u = 0; u < U; ++u) {
    s->base_at_.push_back(s->base_elements_);
    if (!held[static_cast<size_t>(u)]) s->base_elements_ += bounds[u + 1] - bounds[u];
  }
  const int64_t n = std::max<int64_t>(s->base_elements_, 1);
  s->arenas_.push_back(s->backend_->MakeArena(
      MemoryKind::kParameters, static_cast<size_t>(n) * DTypeSize(s->base_dtype_) + Arena::kAlignment,
      tracker));
  s->base_ = s->arenas_.back().Allocate(s->base_dtype_, {n});
  s->backend_->Zero(s->base_.data(), s->base_.nbytes());
  if (base_bf16) {
    std::vector<int64_t> sizes;
    for (int u = 0; u < U; ++u) {
      if (!held[static_cast<size_t>(u)]) sizes.push_back(bounds[u + 1] - bounds[u]);
    }
    std::sort(sizes.rbegin(), sizes.rend());
    sizes.resize(kUnitBuffers, 1);
    for (int64_t size : sizes) {
      size = std::max<int64_t>(size, 1);
      s->arenas_.push_back(s->backend_->MakeArena(
          MemoryKind::kUnitBuffers, static_cast<size_t>(size) * sizeof(float) + Arena::kAlignment,
          tracker));
      s->buffers_.push_back({-1, s->arenas_.back().Allocate(DType::kF32, {size})});
    }
  }
  return s;
}

Status LoraState::Load(const Fill& fill) {
  RETURN_IF_ERROR(LoadFrozen(fill));
  return LoadTrainable(fill);
}

Status LoraState::LoadTrainable(const Fill& fill) {
  return adapters_->Load(adapter_units_.ToModel(fill));
}

Status LoraState::LoadFrozen(const Fill& fill) {
  const std::vector<int64_t>& bounds = adapter_units_.model_bounds();
  std::vector<float> chunk;
  for (int u = 0; u + 1 < static_cast<int>(bounds.size()); ++u) {
    if (adapter_units_.holds(u)) continue;
    if (base_dtype_ == DType::kF32) {  // straight into place, the whole unit in one fill
      if (bounds[u + 1] > bounds[u]) fill(bounds[u], bounds[u + 1], base_.f32() + base_at_[u]);
      continue;
    }
    for (int64_t b = bounds[u]; b < bounds[u + 1]; b += kLoadChunk) {
      const int64_t e = std::min(bounds[u + 1], b + kLoadChunk);
      chunk.resize(static_cast<size_t>(e - b));
      fill(b, e, chunk.data());
      const int64_t at = base_at_[u] + (b - bounds[u]);
      backend_->ConvertFromF32(base_dtype_, chunk.data(),
                               static_cast<char*>(base_.data()) + at * DTypeSize(base_dtype_), e - b);
    }
  }
  return Status::Ok();
}

void LoraState::ReadBase(int unit, float* out) const {
  const std::vector<int64_t>& bounds = adapter_units_.model_bounds();
  const int64_t n = bounds[unit + 1] - bounds[unit], at = base_at_[unit];
  if (base_dtype_ == DType::kF32) {
    std::memcpy(out, base_.f32() + at, static_cast<size_t>(n) * sizeof(float));
  } else {
    backend_->ConvertToF32(base_dtype_, static_cast<const char*>(base_.data()) + at * DTypeSize(base_dtype_),
                           out, n);
  }
}

Result<double> LoraState::GradSumOfSquaresExcluding(
    const std::vector<std::pair<int64_t, int64_t>>& exclude) {
  return adapters_->GradSumOfSquaresExcluding(adapter_units_.ToPart(exclude));
}

std::span<float> LoraState::ReducedGrads(int unit) {
  if (!adapter_units_.holds(unit)) return {};
  return adapters_->ReducedGrads(unit);
}

Status LoraState::Step(float lr, float grad_scale) { return adapters_->Step(lr, grad_scale); }

Result<std::vector<float>> LoraState::GatherFull(int root) {
  ASSIGN_OR_RETURN(std::vector<float> adapters, adapters_->GatherFull(root));
  if (dp_ != nullptr && dp_->rank() != root) return std::vector<float>();
  const std::vector<int64_t>& bounds = adapter_units_.model_bounds();
  std::vector<float> full(static_cast<size_t>(bounds.back()));
  for (int u = 0; u + 1 < static_cast<int>(bounds.size()); ++u) {
    if (!adapter_units_.holds(u)) ReadBase(u, full.data() + bounds[u]);
  }
  adapter_units_.Place(adapters, full.data());
  return full;
}

std::vector<ParamState::SaveSpan> LoraState::SaveSpans() const {
  std::vector<SaveSpan> spans;
  adapter_units_.AppendModelSpans(adapters_->SaveSpans(), &spans);
  return spans;
}

Status LoraState::LoadMoments(const Fill& fill_m, const Fill& fill_v, int64_t adamw_step) {
  return adapters_->LoadMoments(adapter_units_.ToModel(fill_m), adapter_units_.ToModel(fill_v),
                                adamw_step);
}

std::string LoraState::Describe() const {
  const double mb = static_cast<double>(base_elements_) * DTypeSize(base_dtype_) / (1 << 20);
  char buf[160];
  std::snprintf(buf, sizeof(buf), "frozen base %.1fM params in %s (%.1f MiB, whole on every dp rank); adapters ",
                static_cast<double>(base_elements_) / 1e6, std::string(DTypeName(base_dtype_)).c_str(), mb);
  return buf + adapters_->Describe();
}

const float* LoraState::Acquire(int unit) {
  if (adapter_units_.holds(unit)) return adapters_->Acquire(unit);
  const int64_t b = adapter_units_.model_bounds()[unit];
  const int64_t e = adapter_units_.model_bounds()[unit + 1];
  if (base_dtype_ == DType::kF32) return base_.f32() + base_at_[unit];
  Buffer* best = nullptr;  // the smallest free buffer that holds the unit
  for (Buffer& buf : buffers_) {
    if (buf.unit < 0 && buf.values.numel() >= e - b &&
        (best == nullptr || buf.values.numel() < best->values.numel())) {
      best = &buf;
    }
  }
  TESSERA_CHECK_MSG(best != nullptr, "no free unit buffer for frozen unit %d (%ld elements)", unit,
                    static_cast<long>(e - b));
  best->unit = unit;
  ReadBase(unit, best->values.f32());
  return best->values.f32();
}

void LoraState::Release(int unit) {
  if (adapter_units_.holds(unit)) {
    adapters_->Release(unit);
    return;
  }
  for (Buffer& buf : buffers_) {
    if (buf.unit == unit) buf.unit = -1;
  }
}

void LoraState::Prefetch(int unit) {
  const int U = static_cast<int>(adapter_units_.model_bounds().size()) - 1;
  if (unit >= 0 && unit < U && adapter_units_.holds(unit)) adapters_->Prefetch(unit);
}

float* LoraState::Grads(int unit) {
  return adapter_units_.holds(unit) ? adapters_->Grads(unit) : nullptr;
}

void LoraState::GradsDone(int unit) {
  if (adapter_units_.holds(unit)) adapters_->GradsDone(unit);
}

}  // namespace tessera
