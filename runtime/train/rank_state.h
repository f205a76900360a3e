// runtime/train/rank_state.h — the parameter state and models a rank of a run builds, as
// functions of the config alone, so the trainer and the memory plan (memory_plan.h) build the
// same ones: the state's options, which ParamState implementation holds them, and how many
// activation contexts each pipeline chunk keeps.
// Pure functions of their arguments; thread-safe.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "models/partition.h"
#include "runtime/core/memory.h"
#include "runtime/core/status.h"
#include "runtime/train/config.h"
#include "runtime/train/param_shards.h"
#include "runtime/train/param_state.h"

namespace tessera {

// ParamShardsOptions of world rank `rank` (holding `partition`) under `c`: ZeRO stage,
// parameter and reduction types, accumulation, bucket, the embedding-copy and expert units and,
// with optimizer.offload nvme, the rank's offload file (path, pool, ranks sharing the host;
// the caller adds its owner line and fault seam). The backend is the caller's.
ParamShardsOptions ParamStateOptions(const Config& c, const ModelPartition& partition, int rank);

// The state of `c`'s parameters on one rank: LoraState (finetune.lora: the base frozen),
// ExpertSplitState (parallel.ep > 1: experts over their own data-parallel group) or
// ParamShards. `dp` is the dense data-parallel group (dp x ep ranks), `expert_dp` and `ep`
// the expert groups (each null when it has one rank).
Result<std::unique_ptr<ParamState>> CreateParamState(const Config& c, const ParamShardsOptions& o,
                                                     const ModelPartition& partition,
                                                     Communicator* dp, Communicator* expert_dp,
                                                     Communicator* ep, MemoryTracker* tracker);

// Activation contexts of each of pipeline stage `stage`'s chunks (ModelOptions::contexts): the
// micro-batches its schedule keeps in flight on the chunk; one chunk of one context without
// pipeline parallelism.
std::vector<int> ChunkContexts(const Config& c, int stage);

}  // namespace tessera
