// checkpoint/retention.cc — StepsToDelete (see retention.h). Pure; no I/O.
#include "checkpoint/retention.h"

#include <algorithm>
#include <functional>

namespace tessera {

std::vector<int64_t> StepsToDelete(const std::vector<int64_t>& committed, const RetentionPolicy& p) {
  std::vector<int64_t> newest_first = committed;
  std::sort(newest_first.begin(), newest_first.end(), std::greater<int64_t>());
  newest_first.erase(std::unique(newest_first.begin(), newest_first.end()), newest_first.end());
  // keep_last below 1 would allow deleting the newest checkpoint, the one a restart needs.
  const size_t keep_last = static_cast<size_t>(std::max<int64_t>(p.keep_last, 1));
  std::vector<int64_t> doomed;
  for (size_t i = keep_last; i < newest_first.size(); ++i) {
    const int64_t step = newest_first[i];
    if (p.keep_every > 0 && step % p.keep_every == 0) continue;  // a milestone
    doomed.push_back(step);
  }
  std::sort(doomed.begin(), doomed.end());
  return doomed;
}

}  // namespace tessera
