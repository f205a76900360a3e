// checkpoint/retention.h — which committed checkpoints to delete (pure policy).
//
// checkpoint.keep_last = K keeps the K newest committed checkpoints; checkpoint.keep_every = E
// (> 0) additionally keeps every checkpoint whose step is a multiple of E (milestones). The
// newest committed checkpoint is never deleted, whatever the settings. Checkpoints that are
// not committed (writing, failed, corrupt) are not this policy's business.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera {

struct RetentionPolicy {
  int64_t keep_last = 3;   // >= 1
  int64_t keep_every = 0;  // 0 = no milestones
};

// The steps of `committed` (any order, unique) to delete, ascending.
std::vector<int64_t> StepsToDelete(const std::vector<int64_t>& committed, const RetentionPolicy& p);

}  // namespace tessera
