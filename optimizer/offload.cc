// optimizer/offload.cc — the chunked host AdamW step (see offload.h).
#include "optimizer/offload.h"

#include <algorithm>

#include "runtime/core/check.h"

namespace tessera {

void StepSliceOffloaded(AdamW& adamw, float* params, const float* grads, int64_t begin,
                        int64_t end, float lr, int64_t t, int64_t chunk_elems,
                        float grad_scale) {
  TESSERA_CHECK(chunk_elems > 0);
  TESSERA_CHECK(0 <= begin && begin <= end && end <= adamw.num_params());
  for (int64_t b = begin; b < end; b += chunk_elems) {
    const int64_t e = std::min(end, b + chunk_elems);
    adamw.StepSlice(params + (b - begin), grads + (b - begin), b, e, lr, t, grad_scale);
  }
}

void StepOffloaded(AdamW& adamw, float* params, const float* grads, float lr,
                   int64_t chunk_elems, float grad_scale) {
  const int64_t t = adamw.step() + 1;
  StepSliceOffloaded(adamw, params, grads, 0, adamw.num_params(), lr, t, chunk_elems,
                     grad_scale);
  adamw.set_step(t);
}

}  // namespace tessera
