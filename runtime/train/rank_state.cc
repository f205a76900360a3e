// runtime/train/rank_state.cc — see rank_state.h.
#include "runtime/train/rank_state.h"

#include <algorithm>
#include <string>

#include "runtime/kernels/cpu/thread_count.h"
#include "runtime/train/expert_split_state.h"
#include "runtime/train/lora_state.h"
#include "runtime/train/pipeline.h"
#include "runtime/train/rank_layout.h"

namespace tessera {

ParamShardsOptions ParamStateOptions(const Config& c, const ModelPartition& partition, int rank) {
  ParamShardsOptions o;
  o.zero = c.parallel.zero;
  o.param_dtype = PrecisionDType(c.precision);
  o.reduce_dtype = c.mixed_precision.reduce_in_low ? o.param_dtype : DType::kF32;
  o.grad_accum_steps = c.train.grad_accum_steps;
  o.bucket_elems = std::max<int64_t>(
      1, static_cast<int64_t>(c.comm.bucket_mb * 1048576.0 / sizeof(float)));
  for (size_t k = 1; k < partition.chunks().size(); ++k) {
    o.embedding_units.push_back(partition.chunk_unit_begin(static_cast<int>(k)));
  }
  o.expert_units = partition.expert_units();
  if (c.optimizer.offload == OptimizerOffload::kNvme) {  // each rank's own file(s)
    ShardedAdamWDisk disk;
    disk.path = c.optimizer.offload_dir + "/tessera-optimizer-rank" + std::to_string(rank);
    disk.pool_bytes = c.optimizer.offload_buffer_mb << 20;
    disk.host_ranks = cpu::ThreadInputsFromEnvironment(0).local_ranks;  // same config, same dir
    o.disk = disk;
  }
  return o;
}

Result<std::unique_ptr<ParamState>> CreateParamState(const Config& c, const ParamShardsOptions& o,
                                                     const ModelPartition& partition,
                                                     Communicator* dp, Communicator* expert_dp,
                                                     Communicator* ep, MemoryTracker* tracker) {
  const std::vector<ParamRange> ranges = DecayRanges(partition, c.optimizer);
  if (c.model.lora.enabled()) {  // the base frozen, the adapters trained (lora_state.h)
    ASSIGN_OR_RETURN(auto s, LoraState::Create(o, c.optimizer, partition.unit_bounds(), ranges,
                                               partition.adapter_units(), c.model.lora.base_bf16,
                                               dp, tracker));
    return std::unique_ptr<ParamState>(std::move(s));
  }
  if (ep == nullptr) {
    ASSIGN_OR_RETURN(auto s, ParamShards::Create(o, c.optimizer, partition.unit_bounds(), ranges,
                                                 dp, tracker));
    return std::unique_ptr<ParamState>(std::move(s));
  }
  // The experts' state over their own data-parallel group (expert_split_state.h).
  ASSIGN_OR_RETURN(auto s, ExpertSplitState::Create(o, c.optimizer, partition.unit_bounds(), ranges,
                                                    dp, expert_dp, ep, tracker));
  return std::unique_ptr<ParamState>(std::move(s));
}

std::vector<int> ChunkContexts(const Config& c, int stage) {
  if (c.parallel.pp <= 1) return {1};
  PipelineOptions po;
  po.schedule = c.parallel.pipeline_schedule;
  po.pp = c.parallel.pp;
  po.stage = stage;
  po.virtual_stages = c.parallel.virtual_stages;
  po.micro_batches = static_cast<int>(c.train.grad_accum_steps);
  return PipelineContextsPerChunk(po);
}

}  // namespace tessera
