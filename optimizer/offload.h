// optimizer/offload.h — the host ("CPU offload") AdamW step: the update of a flat buffer run
// as a sequence of fixed-size chunks.
//
// Owns: nothing; a function over an AdamW. With a GPU backend, the master weights and moments
// of an offloaded optimizer stay in host memory and each chunk is the unit of the pipeline
// "copy gradients down -> host AdamW -> copy parameters up", so transfers of chunk k+1 overlap
// the update of chunk k. On this CPU-only build there is no device to offload from: the
// parameters, gradients and moments already live in host memory, so the pipeline degenerates
// to the chunked host update below (vectorised, OpenMP-parallel inside each chunk through
// AdamW::StepRange). AdamW is elementwise, so the bits equal AdamW::Step's for any chunk size.
// Thread-safety: as AdamW (one driving thread).
#pragma once

#include <cstdint>

#include "optimizer/adamw.h"

namespace tessera {

// Elements per host chunk: 4 Mi floats = 16 MiB of each of the four streams (large enough for
// full bandwidth on 2-16 threads, small enough to double-buffer device copies).
inline constexpr int64_t kOffloadChunk = int64_t{1} << 22;

// Takes step t = adamw.step() + 1 over all elements in chunks of chunk_elems (> 0), then sets
// adamw.step() to t. Same result as adamw.Step(params, grads, lr).
// grad_scale as in AdamW::Step.
void StepOffloaded(AdamW& adamw, float* params, const float* grads, float lr,
                   int64_t chunk_elems = kOffloadChunk, float grad_scale = 1.0f);

// The update of step t (>= 1) for elements [begin, end) of adamw's coordinates, held in
// buffers that start at element `begin` (AdamW::StepSlice), in chunks of chunk_elems (> 0)
// counted from `begin`; does not touch adamw.step(). Same bits as adamw.StepSlice. A ZeRO rank
// (optimizer/zero.h) steps each of its pieces this way.
void StepSliceOffloaded(AdamW& adamw, float* params, const float* grads, int64_t begin,
                        int64_t end, float lr, int64_t t, int64_t chunk_elems = kOffloadChunk,
                        float grad_scale = 1.0f);

}  // namespace tessera
