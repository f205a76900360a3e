// runtime/train/memory_plan.h — what each rank of a run reserves, by memory kind, known before
// it reserves anything: the numbers <out_dir>/memory.json reports after the run.
//
// How: the rank's own construction, dry. Its partition (rank_layout.h), parameter state
// (rank_state.h: ParamShards / ExpertSplitState / LoraState, ZeRO, offload) and models (one
// per pipeline chunk, with the schedule's activation contexts) are built exactly as the
// trainer builds them, on a sizing backend (measuring_backend.h: arenas that book their
// capacity and hold nothing) and in-process groups of the layout's sizes that never carry a
// message. The models run their measuring passes as in a run. So every kind is the trainer's
// own accounting, not a formula beside it; the checkpoint staging a save adds is counted from
// the state's save spans as the checkpointer stages them.
// Ranks of one pipeline stage reserve the same (tp ranks hold equal shares, the vocabulary
// padded; dp and ep ranks equal pieces), so a run's memory is one RankMemory per stage.
// `tessera train` refuses a layout whose largest stage does not fit (CheckMemoryFits) before any
// work; `tessera plan` (runtime/plan) searches layouts with it.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "models/partition.h"
#include "runtime/core/memory.h"
#include "runtime/core/status.h"
#include "runtime/train/config.h"

namespace tessera {

struct RankMemory {
  int stage = 0;  // pipeline stage
  int rank = 0;   // the world rank booked (tp, ep and dp index 0 of the stage)
  std::array<size_t, static_cast<int>(MemoryKind::kCount)> bytes{};

  // Of those, the bytes on the rank's GPU (train.device: cuda: the model's arenas and the
  // DeviceMirrorStore's copies); 0 on CPU.
  size_t device = 0;

  size_t of(MemoryKind k) const { return bytes[static_cast<int>(k)]; }
  // Every kind held in memory (all but kOffloaded).
  size_t resident() const;
  // What stays in host memory: resident() less `device`.
  size_t host() const { return resident() - device; }
  // The resident kind with the most bytes.
  MemoryKind largest() const;
};

// World rank `rank` of a run of `config` (validated), booked by its dry construction.
// Errors are the config's (a layout the run itself would refuse, said the same way).
Result<RankMemory> PlanRankMemory(const Config& config, int rank);

// The two halves of PlanRankMemory, for a search that varies one without the other (both
// dry constructions on `partition`, RankPartition(config, rank)):
// the parameter state's kinds (parameters, gradients, optimizer state, unit buffers,
// offloaded, checkpoint staging) ...
Result<RankMemory> PlanStateMemory(const Config& config, int rank, const ModelPartition& partition);
// ... and each pipeline chunk's model arenas for ONE activation context (the trainer reserves
// one activation arena per context: ChunkContexts) ...
struct ChunkArenas {
  size_t activations = 0, workspace = 0;
};
Result<std::vector<ChunkArenas>> PlanChunkArenas(const Config& config, int rank,
                                                 const ModelPartition& partition);
// ... which this adds up as the rank reserves them.
RankMemory CombineRankMemory(const Config& config, const RankMemory& state,
                             const std::vector<ChunkArenas>& chunks);

// One RankMemory per pipeline stage, in stage order.
Result<std::vector<RankMemory>> PlanStageMemory(const Config& config);

// Bytes one rank may hold: train.memory_limit_mb when set, else this host's physical memory
// over the ranks it runs (the launcher's local rank count).
size_t RankMemoryLimit(const Config& config);

// The trainer's check before it reserves anything: Ok when every stage's resident bytes fit
// in `limit`; else InvalidArgument (a layout the run cannot hold: exit 3) naming the stage, its bytes by kind (the largest first)
// and, when one of them fits on the same ranks, the settings of a layout that does (higher
// ZeRO stage, more recomputation, sequence parallelism, smaller micro-batches with more
// accumulation, optimizer offload), found with the same plan.
Status CheckMemoryFits(const Config& config, size_t limit);

// "parameters 1.2 GiB, optimizer state 2.3 GiB, ..." (non-zero kinds, largest first).
std::string DescribeRankMemory(const RankMemory& m);

}  // namespace tessera
