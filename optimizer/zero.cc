// optimizer/zero.cc — partition arithmetic and ShardedAdamW (see zero.h).
#include "optimizer/zero.h"

#include <algorithm>

#include "optimizer/offload.h"
#include "runtime/core/check.h"

namespace tessera {

Partitioning::Partitioning(int64_t num_params, int ranks, int64_t align)
    : num_params_(num_params), ranks_(ranks) {
  TESSERA_CHECK(num_params >= 0 && ranks >= 1 && align >= 1);
  const int64_t per_rank = (num_params + ranks - 1) / ranks;
  padded_size_ = std::max<int64_t>(1, (per_rank + align - 1) / align) * align;
}

int64_t Partitioning::real_begin(int r) const {
  TESSERA_CHECK(0 <= r && r < ranks_);
  return std::min(begin(r), num_params_);
}

int64_t Partitioning::real_end(int r) const {
  TESSERA_CHECK(0 <= r && r < ranks_);
  return std::min(padded_end(r), num_params_);
}

int64_t Partitioning::real_size(int r) const { return real_end(r) - real_begin(r); }

std::vector<ParamRange> ClipParamRanges(const std::vector<ParamRange>& ranges, int64_t begin,
                                        int64_t end) {
  std::vector<ParamRange> out;
  for (const ParamRange& r : ranges) {
    const int64_t b = std::max(begin, r.offset), e = std::min(end, r.offset + r.size);
    if (e <= b) continue;
    out.push_back({b - begin, e - b, r.decay, r.name});
  }
  return out;
}

ShardedAdamW::ShardedAdamW(const AdamWConfig& config, int64_t begin, int64_t end,
                           const std::vector<ParamRange>& ranges, MemoryTracker* tracker)
    : begin_(begin),
      end_(end),
      adamw_(config, end - begin, ClipParamRanges(ranges, begin, end), tracker) {
  TESSERA_CHECK(0 <= begin && begin <= end);
}

void ShardedAdamW::Step(float* params, const float* shard_grads, float lr) {
  if (adamw_.config().offload == OptimizerOffload::kCpu) {
    StepOffloaded(adamw_, params + begin_, shard_grads, lr);
  } else {
    adamw_.Step(params + begin_, shard_grads, lr);
  }
}

}  // namespace tessera
