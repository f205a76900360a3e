// optimizer/offload.h — the chunk of the host ("CPU offload") AdamW step.
//
// Owns: one constant. With optimizer.offload: cpu, ShardedAdamW (zero.h) steps its packed state
// in kOffloadChunk pieces — the unit that, with a GPU backend, would pipeline "copy gradients
// down -> host AdamW -> copy parameters up" so the transfers of one chunk overlap the update of
// the next. On this CPU-only build the state already lives in host memory, so the pieces are
// only that: a chunked host update, bit-identical to one pass (AdamW is elementwise). The disk
// tier (offload: nvme) cuts its own chunks from the buffer pool (offload_file.h).
#pragma once

#include <cstdint>

namespace tessera {

// Elements per host chunk: 4 Mi floats = 16 MiB of each of the four streams (large enough for
// full bandwidth on 2-16 threads, small enough to double-buffer device copies).
inline constexpr int64_t kOffloadChunk = int64_t{1} << 22;

}  // namespace tessera
