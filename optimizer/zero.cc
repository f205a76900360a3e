// optimizer/zero.cc — ShardedAdamW: one packed AdamW stepping a rank's pieces (see zero.h).
#include "optimizer/zero.h"

#include <algorithm>
#include <cstring>

#include "optimizer/offload.h"
#include "runtime/core/check.h"

namespace tessera {
namespace {

size_t MasterBytes(int64_t packed_size) {
  const size_t bytes = static_cast<size_t>(packed_size) * sizeof(float);
  return (bytes + Arena::kAlignment - 1) / Arena::kAlignment * Arena::kAlignment;
}

}  // namespace

ShardedAdamW::ShardedAdamW(const AdamWConfig& config, const ShardLayout& layout, int rank,
                           const std::vector<ParamRange>& ranges, bool keep_master,
                           MemoryTracker* tracker)
    : layout_(layout),
      rank_(rank),
      keep_master_(keep_master),
      adamw_(config, layout.packed_size(), PackParamRanges(ranges, layout, rank), tracker),
      master_arena_(keep_master
                        ? Arena(MemoryKind::kOptimizerState, MasterBytes(layout.packed_size()),
                                tracker)
                        : Arena::Measuring(MemoryKind::kOptimizerState)) {
  TESSERA_CHECK(0 <= rank && rank < layout.ranks());
  // The arena is zero-filled, so padding starts (and stays) zero.
  if (keep_master_) master_ = master_arena_.Allocate(DType::kF32, {layout_.packed_size()});
}

float* ShardedAdamW::master(int u) {
  TESSERA_CHECK_MSG(keep_master_, "ShardedAdamW::master: built without master weights");
  TESSERA_CHECK(0 <= u && u < layout_.num_units());
  return master_.f32() + layout_.packed_offset(u);
}

void ShardedAdamW::LoadMaster(const float* full) {
  TESSERA_CHECK_MSG(keep_master_, "ShardedAdamW::LoadMaster: built without master weights");
  for (int u = 0; u < layout_.num_units(); ++u) {
    float* piece = master(u);
    const int64_t real = layout_.piece_real(u, rank_);
    if (real > 0) {
      std::memcpy(piece, full + layout_.piece_begin(u, rank_), real * sizeof(float));
    }
    std::fill(piece + real, piece + layout_.piece_size(u), 0.0f);
  }
}

void ShardedAdamW::Step(std::span<float* const> pieces, const float* packed_grads, float lr,
                        float grad_scale) {
  std::vector<const float*> grads(static_cast<size_t>(layout_.num_units()));
  for (int u = 0; u < layout_.num_units(); ++u) grads[u] = packed_grads + layout_.packed_offset(u);
  Step(pieces, grads, lr, grad_scale);
}

void ShardedAdamW::Step(std::span<float* const> pieces, std::span<const float* const> grads,
                        float lr, float grad_scale) {
  TESSERA_CHECK_MSG(static_cast<int>(grads.size()) == layout_.num_units(),
                    "ShardedAdamW::Step: %zu gradient pieces for %d units", grads.size(),
                    layout_.num_units());
  if (keep_master_) {
    TESSERA_CHECK_MSG(pieces.empty(), "ShardedAdamW::Step: master weights are stepped, "
                                      "pieces must be empty");
  } else {
    TESSERA_CHECK_MSG(static_cast<int>(pieces.size()) == layout_.num_units(),
                      "ShardedAdamW::Step: %zu pieces for %d units", pieces.size(),
                      layout_.num_units());
  }
  const bool offload = adamw_.config().offload == OptimizerOffload::kCpu;
  const int64_t t = adamw_.step() + 1;
  for (int u = 0; u < layout_.num_units(); ++u) {
    const int64_t real = layout_.piece_real(u, rank_);
    if (real == 0) continue;  // all padding: nothing to update
    float* params = keep_master_ ? master(u) : pieces[u];
    TESSERA_CHECK_MSG(params != nullptr, "ShardedAdamW::Step: no values for unit %d", u);
    const int64_t begin = layout_.packed_offset(u);
    if (offload) {
      StepSliceOffloaded(adamw_, params, grads[u], begin, begin + real, lr, t, kOffloadChunk,
                         grad_scale);
    } else {
      adamw_.StepSlice(params, grads[u], begin, begin + real, lr, t, grad_scale);
    }
  }
  adamw_.set_step(t);
}

}  // namespace tessera
