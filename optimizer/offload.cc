// optimizer/offload.cc — the chunked host AdamW step (see offload.h).
#include "optimizer/offload.h"

#include <algorithm>

#include "runtime/core/check.h"

namespace tessera {

void StepOffloaded(AdamW& adamw, float* params, const float* grads, float lr,
                   int64_t chunk_elems) {
  TESSERA_CHECK(chunk_elems > 0);
  const int64_t t = adamw.step() + 1;
  for (int64_t b = 0; b < adamw.num_params(); b += chunk_elems) {
    const int64_t e = std::min(adamw.num_params(), b + chunk_elems);
    adamw.StepRange(params, grads, b, e, lr, t);
  }
  adamw.set_step(t);
}

}  // namespace tessera
