// runtime/train/memory_plan.cc — see memory_plan.h.
#include "runtime/train/memory_plan.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <utility>

#include "comm/fake_communicator.h"
#include "models/param_store.h"
#include "models/transformer.h"
#include "runtime/kernels/cpu/thread_count.h"
#include "runtime/kernels/cuda_backend.h"
#include "runtime/kernels/measuring_backend.h"
#include "runtime/train/checkpointer.h"
#include "runtime/train/compute_device.h"
#include "runtime/train/rank_layout.h"
#include "runtime/train/rank_state.h"

namespace tessera {
namespace {

constexpr int kKinds = static_cast<int>(MemoryKind::kCount);

// In-process groups of the layout's sizes, one rank's end of each: the dry construction only
// asks them their size and rank.
class DryGroups {
 public:
  Communicator* Group(const char* name, int size, int rank) {
    if (size <= 1) return nullptr;
    hubs_.push_back(FakeHub::Create(size));
    CommOptions o;
    o.name = name;
    comms_.push_back(hubs_.back()->Connect(rank, o));
    return comms_.back().get();
  }

 private:
  std::vector<std::shared_ptr<FakeHub>> hubs_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

// What one save stages on this rank (Checkpointer::PlanSegments): each saved, main-replica
// element of its save spans as value, exp_avg and exp_avg_sq, 4 bytes each when resident;
// what lives in an offload file is streamed through one buffer of up to 1M elements. The
// memory tier stages only that stream buffer. Nothing without a checkpoint directory.
size_t StagingBytes(const Config& c, const ParamState& state, const ModelPartition& partition) {
  if (c.checkpoint.dir.empty()) return 0;
  constexpr int64_t kStreamElems = int64_t{1} << 20;
  const std::vector<int> saved_index = SavedParameterIndex(c.model);
  const bool disk = c.optimizer.offload == OptimizerOffload::kNvme;
  const bool low = c.precision != Precision::kFp32;
  // Resident sources of the three saved streams: values (low precision: the master weights,
  // in the file under nvme), the two moments (in the file under nvme).
  const int resident = (disk && low ? 0 : 1) + (disk ? 0 : 2);
  const bool streams = resident < 3;
  size_t staged = 0;
  int64_t stream = 0;
  for (const ParamState::SaveSpan& span : state.SaveSpans()) {
    partition.ForEachGlobalPiece(span.begin, span.end,
                                 [&](const TpParam& p, int64_t, int64_t length, int64_t) {
                                   if (!p.tensor.IsMainReplica() ||
                                       saved_index[static_cast<size_t>(p.global_index)] < 0) {
                                     return;
                                   }
                                   staged += static_cast<size_t>(length) * sizeof(float) * resident;
                                   if (streams) stream = std::max(stream, std::min(length, kStreamElems));
                                 });
  }
  const size_t buffer = static_cast<size_t>(stream) * sizeof(float);
  return staged + buffer + (c.checkpoint.MemoryTierOn() ? buffer : 0);
}

}  // namespace

size_t RankMemory::resident() const {
  size_t sum = 0;
  for (int k = 0; k < kKinds; ++k) {
    if (static_cast<MemoryKind>(k) != MemoryKind::kOffloaded) sum += bytes[k];
  }
  return sum;
}

MemoryKind RankMemory::largest() const {
  int best = 0;
  for (int k = 1; k < kKinds; ++k) {
    if (static_cast<MemoryKind>(k) != MemoryKind::kOffloaded && bytes[k] > bytes[best]) best = k;
  }
  return static_cast<MemoryKind>(best);
}

namespace {

// The groups of world rank `rank` under `c`'s layout, sized as the trainer's (DryGroups).
struct RankGroups {
  Communicator* dense_dp = nullptr;  // dp x ep ranks
  Communicator* expert_dp = nullptr;
  Communicator* ep = nullptr;
  Communicator* tp = nullptr;
};

RankGroups MakeGroups(const ParallelConfig& p, int rank, DryGroups& groups) {
  const int dp_i = DpRankOf(p, rank), ep_i = EpRankOf(p, rank);
  RankGroups g;
  g.dense_dp = groups.Group("dp", p.dp * p.ep, dp_i * p.ep + ep_i);
  g.expert_dp = p.ep > 1 ? groups.Group("expert_dp", p.dp, dp_i) : nullptr;
  g.ep = groups.Group("ep", p.ep, ep_i);
  g.tp = groups.Group("tp", p.tp, TpRankOf(p, rank));
  return g;
}

void Book(const MemoryTracker& tracker, RankMemory& m) {
  for (int k = 0; k < kKinds; ++k) m.bytes[k] += tracker.reserved(static_cast<MemoryKind>(k));
}

}  // namespace

Result<RankMemory> PlanStateMemory(const Config& c, int rank, const ModelPartition& partition) {
  MemoryTracker tracker;
  RankMemory m;
  m.rank = rank;
  m.stage = PipelineStageOf(c.parallel, rank);
  MeasuringBackend sizing = MeasuringBackend::Sizing();
  DryGroups groups;
  const RankGroups g = MakeGroups(c.parallel, rank, groups);
  ParamShardsOptions o = ParamStateOptions(c, partition, rank);
  o.backend = &sizing;
  o.sizing = true;
  ASSIGN_OR_RETURN(std::unique_ptr<ParamState> state,
                   CreateParamState(c, o, partition, g.dense_dp, g.expert_dp, g.ep, &tracker));
  Book(tracker, m);
  m.bytes[static_cast<int>(MemoryKind::kCheckpointStaging)] += StagingBytes(c, *state, partition);
  if (c.train.device == ComputeDevice::kCuda) {  // the DeviceMirrorStore's two device copies
    const std::vector<int64_t>& u = partition.unit_bounds();
    const size_t mirror = static_cast<size_t>(u.back() - u.front()) * sizeof(float);
    m.bytes[static_cast<int>(MemoryKind::kParameters)] += mirror;
    m.bytes[static_cast<int>(MemoryKind::kGradients)] += mirror;
    m.device += 2 * mirror;
  }
  return m;
}

Result<std::vector<ChunkArenas>> PlanChunkArenas(const Config& c, int rank,
                                                 const ModelPartition& partition) {
  // The device the models run on: a device model also stages its token ids in its arena, and
  // its attention saves statistics, not probabilities.
  MeasuringBackend sizing = SizingBackendFor(c);
  DryGroups groups;
  const RankGroups g = MakeGroups(c.parallel, rank, groups);
  MeasuringStore no_store;
  ModelOptions mo;
  mo.store = &no_store;
  mo.activation_dtype = PrecisionDType(c.precision);
  mo.backend = &sizing;
  mo.tp = g.tp;
  mo.ep = g.ep;
  mo.sequence_parallel = c.parallel.sequence_parallel;
  mo.partition = &partition;
  mo.sizing = true;
  std::vector<ChunkArenas> chunks;
  for (size_t k = 0; k < partition.chunks().size(); ++k) {
    MemoryTracker tracker;
    mo.chunk = static_cast<int>(k);
    ASSIGN_OR_RETURN(auto model, Transformer::Create(c.model, c.train.micro_batch_size,
                                                     c.train.seq_len, &tracker, mo));
    chunks.push_back({tracker.reserved(MemoryKind::kActivations),
                      tracker.reserved(MemoryKind::kWorkspace)});
  }
  return chunks;
}

RankMemory CombineRankMemory(const Config& c, const RankMemory& state,
                             const std::vector<ChunkArenas>& chunks) {
  RankMemory m = state;
  const std::vector<int> contexts = ChunkContexts(c, state.stage);
  for (size_t k = 0; k < chunks.size(); ++k) {
    const size_t n = static_cast<size_t>(contexts[std::min(k, contexts.size() - 1)]);
    m.bytes[static_cast<int>(MemoryKind::kActivations)] += n * chunks[k].activations;
    m.bytes[static_cast<int>(MemoryKind::kWorkspace)] += chunks[k].workspace;
    if (c.train.device == ComputeDevice::kCuda) {
      m.device += n * chunks[k].activations + chunks[k].workspace;
    }
  }
  return m;
}

Result<RankMemory> PlanRankMemory(const Config& c, int rank) {
  ASSIGN_OR_RETURN(ModelPartition partition, RankPartition(c, rank));
  ASSIGN_OR_RETURN(RankMemory state, PlanStateMemory(c, rank, partition));
  ASSIGN_OR_RETURN(std::vector<ChunkArenas> chunks, PlanChunkArenas(c, rank, partition));
  return CombineRankMemory(c, state, chunks);
}

Result<std::vector<RankMemory>> PlanStageMemory(const Config& c) {
  const ParallelConfig& p = c.parallel;
  std::vector<RankMemory> stages;
  // Rank ((stage * dp + 0) * ep + 0) * tp + 0 (rank_layout.h's mesh order).
  for (int s = 0; s < std::max(1, p.pp); ++s) {
    ASSIGN_OR_RETURN(RankMemory m, PlanRankMemory(c, s * p.dp * p.ep * p.tp));
    stages.push_back(m);
  }
  return stages;
}

size_t RankMemoryLimit(const Config& c) {
  if (c.train.memory_limit_mb > 0) return static_cast<size_t>(c.train.memory_limit_mb) << 20;
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  const int local = std::max(1, cpu::ThreadInputsFromEnvironment(0).local_ranks);
  return static_cast<size_t>(ram / local);
}

std::string DescribeRankMemory(const RankMemory& m) {
  std::vector<int> order;
  for (int k = 0; k < kKinds; ++k) {
    if (m.bytes[k] > 0) order.push_back(k);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return m.bytes[a] > m.bytes[b]; });
  std::string s;
  for (int k : order) {
    if (!s.empty()) s += ", ";
    s += std::string(MemoryKindName(static_cast<MemoryKind>(k))) + " " + FormatBytes(m.bytes[k]);
  }
  return s;
}

namespace {

// The stage with the most bytes in host memory.
const RankMemory& Largest(const std::vector<RankMemory>& stages) {
  return *std::max_element(stages.begin(), stages.end(), [](const RankMemory& a, const RankMemory& b) {
    return a.host() < b.host();
  });
}

// What the CUDA backend holds beside the arenas: cuBLAS's workspace, the bf16 operand copies
// and the scratch of its reductions; a bound, not a measurement.
constexpr size_t kGpuBackendReserve = size_t{512} << 20;

// train.device: cuda: the stage whose GPU part is largest against GPU 0's memory (skipped
// where no GPU is usable: the run itself then says why it cannot start).
Status CheckGpuFits(const std::vector<RankMemory>& stages) {
  const RankMemory& worst = *std::max_element(
      stages.begin(), stages.end(),
      [](const RankMemory& a, const RankMemory& b) { return a.device < b.device; });
  Result<CudaDeviceInfo> gpu = CudaDevice(0);
  if (worst.device == 0 || !gpu.ok()) return Status::Ok();
  const size_t have = static_cast<size_t>(gpu->memory_bytes);
  if (worst.device + kGpuBackendReserve <= have) return Status::Ok();
  return InvalidArgument("memory: this layout needs " + FormatBytes(worst.device) +
                         " of GPU memory on each rank of pipeline stage " +
                         std::to_string(worst.stage) + " (activations, workspace and the device "
                         "copies of parameters and gradients) plus " +
                         FormatBytes(kGpuBackendReserve) + " for the backend, but " + gpu->name +
                         " has " + FormatBytes(have) + ": try model.recompute=full, a smaller "
                         "train.micro_batch_size, or more data-parallel ranks with ZeRO");
}

// Settings that keep the ranks and the global batch, each lowering some kind, in the order a
// user would reach for them; each is tried on top of the ones before that helped. A remedy
// changes the config and says how, as the --set a user would write; "" when it does not apply.
using Remedy = std::function<std::string(Config&)>;

std::vector<Remedy> Remedies() {
  return {
      [](Config& c) -> std::string {
        if (c.parallel.dp * c.parallel.ep < 2 || c.parallel.zero == 3) return "";
        c.parallel.zero = 3;
        return "parallel.zero=3";
      },
      [](Config& c) -> std::string {
        if (c.parallel.tp < 2 || c.parallel.sequence_parallel || c.model.moe.enabled()) return "";
        if ((c.train.micro_batch_size * c.train.seq_len) % c.parallel.tp != 0) return "";
        c.parallel.sequence_parallel = true;
        return "parallel.sequence_parallel=true";
      },
      [](Config& c) -> std::string {
        if (c.model.recompute == RecomputePolicy::kFull) return "";
        c.model.recompute = RecomputePolicy::kFull;
        return "model.recompute=full";
      },
      [](Config& c) -> std::string {
        if (c.train.micro_batch_size == 1) return "";
        c.train.grad_accum_steps *= c.train.micro_batch_size;
        c.train.micro_batch_size = 1;
        return "train.micro_batch_size=1 train.grad_accum_steps=" + std::to_string(c.train.grad_accum_steps);
      },
      [](Config& c) -> std::string {
        if (c.optimizer.offload == OptimizerOffload::kNvme) return "";
        c.optimizer.offload = OptimizerOffload::kNvme;
        if (c.optimizer.offload_dir.empty()) c.optimizer.offload_dir = c.train.out_dir;
        return "optimizer.offload=nvme optimizer.offload_dir=" + c.optimizer.offload_dir;
      },
  };
}

}  // namespace

Status CheckMemoryFits(const Config& config, size_t limit) {
  ASSIGN_OR_RETURN(std::vector<RankMemory> stages, PlanStageMemory(config));
  RETURN_IF_ERROR(CheckGpuFits(stages));
  const RankMemory& worst = Largest(stages);
  if (worst.host() <= limit) return Status::Ok();
  std::string msg = "memory: this layout needs " + FormatBytes(worst.host()) + " on each rank of pipeline stage " +
                    std::to_string(worst.stage) + " (" + DescribeRankMemory(worst) + ") but a rank may hold " +
                    FormatBytes(limit) + " (train.memory_limit_mb, else physical memory / ranks on the host); "
                    "the largest is " + MemoryKindName(worst.largest());
  Config c = config;
  std::string changes;
  for (const Remedy& remedy : Remedies()) {
    Config trial = c;
    const std::string setting = remedy(trial);
    if (setting.empty()) continue;
    Result<std::vector<RankMemory>> planned = PlanStageMemory(trial);
    if (!planned.ok() || Largest(*planned).host() >= Largest(stages).host()) continue;
    c = trial;
    stages = *planned;
    changes += std::string(changes.empty() ? "" : ", ") + setting;
    if (Largest(stages).host() <= limit) {
      return InvalidArgument(msg + ". A layout on the same ranks that fits: " + changes + " (" +
                               FormatBytes(Largest(stages).host()) + " per rank; `tessera plan` "
                               "searches every layout)");
    }
  }
  return InvalidArgument(msg + ". No setting on the same ranks makes it fit" +
                           (changes.empty() ? std::string() : " (" + changes + " leaves " +
                                FormatBytes(Largest(stages).host()) + ")") +
                           ": use more ranks (`tessera plan` searches layouts) or a smaller model");
}

}  // namespace tessera
