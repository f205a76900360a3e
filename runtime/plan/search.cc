// runtime/plan/search.cc — see search.h.
#include "runtime/plan/search.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <numeric>

#include "models/partition.h"
#include "models/transformer.h"
#include "runtime/train/pipeline_schedule.h"
#include "runtime/train/rank_layout.h"
#include "runtime/train/rank_state.h"

namespace tessera {
namespace {

// One pipeline stage's chunks: what makes two stages' partitions alike.
std::string ChunkSignature(const ModelConfig& m, const std::vector<PipelineChunk>& chunks) {
  std::string s;
  for (const PipelineChunk& c : chunks) {
    s += std::to_string(c.layer_end - c.layer_begin) + "/" +
         std::to_string(m.moe_layers_before(c.layer_end) - m.moe_layers_before(c.layer_begin)) +
         (c.first ? "f" : "") + (c.last ? "l" : "") + ";";
    // MoE blocks at other places in the chunk change nothing a partition holds.
  }
  return s;
}

std::string LayoutKey(const ParallelConfig& p) {
  std::string k = std::to_string(p.tp) + "." + std::to_string(p.pp) + "." +
                  std::to_string(p.virtual_stages) + "." + std::to_string(p.ep) + "." +
                  std::to_string(p.dp) + (p.account_for_embedding_and_head ? "e" : "");
  for (int64_t n : p.pipeline_split) k += "," + std::to_string(n);
  return k;
}

// Partitions, stage shapes and the two halves of memory, shared by every candidate with the
// same key.
class PlanCache {
 public:
  // Each stage's representative: the first stage with its chunk signature.
  struct Stages {
    std::vector<int> rep;                  // per stage: the stage whose partition it shares
    std::vector<StageShape> shapes;        // per stage
  };

  Result<const Stages*> StagesOf(const Config& c) {
    const std::string key = LayoutKey(c.parallel);
    auto it = stages_.find(key);
    if (it != stages_.end()) return it->second.get();
    auto st = std::make_unique<Stages>();
    const ParallelConfig& p = c.parallel;
    ASSIGN_OR_RETURN(const ModelPartition* whole, Whole(c));
    std::map<std::string, int> first_of;
    for (int s = 0; s < p.pp; ++s) {
      ASSIGN_OR_RETURN(std::vector<PipelineChunk> chunks,
                       PipelineChunks(c.model.num_layers, p.pp, s, p.virtual_stages,
                                      p.pipeline_split, p.account_for_embedding_and_head));
      auto [at, fresh] = first_of.emplace(ChunkSignature(c.model, chunks), s);
      st->rep.push_back(at->second);
      st->shapes.push_back(ShapeFromUnits(c.model, *whole, chunks));
    }
    return (stages_[key] = std::move(st)).get();
  }

  // Memory of every stage of `c` (its layout already in StagesOf).
  Result<std::vector<RankMemory>> Memory(const Config& c, int64_t* dry_runs) {
    ASSIGN_OR_RETURN(const Stages* st, StagesOf(c));
    const ParallelConfig& p = c.parallel;
    const std::string layout = LayoutKey(p);
    const std::string state_key = layout + "|" + std::to_string(p.zero) + "." +
                                  std::to_string(static_cast<int>(c.optimizer.offload)) + "." +
                                  (c.train.grad_accum_steps > 1 ? "a" : "") +
                                  (c.mixed_precision.reduce_in_low ? "r" : "");
    const std::string model_key = layout + "|" + std::to_string(c.train.micro_batch_size) + "." +
                                  std::to_string(static_cast<int>(c.model.recompute)) +
                                  (p.sequence_parallel ? "s" : "");
    std::vector<RankMemory> stages;
    for (int s = 0; s < p.pp; ++s) {
      const int rep = st->rep[static_cast<size_t>(s)];
      ASSIGN_OR_RETURN(const ModelPartition* built, Partition(c, rep));
      const ModelPartition& part = *built;
      const int rank = rep * p.dp * p.ep * p.tp;
      const std::string sk = state_key + "#" + std::to_string(rep), mk = model_key + "#" + std::to_string(rep);
      if (!state_.count(sk)) {
        ASSIGN_OR_RETURN(state_[sk], PlanStateMemory(c, rank, part));
        ++*dry_runs;
      }
      if (!chunks_.count(mk)) {
        ASSIGN_OR_RETURN(chunks_[mk], PlanChunkArenas(c, rank, part));
        ++*dry_runs;
      }
      RankMemory state = state_[sk];
      state.stage = s;
      state.rank = s * p.dp * p.ep * p.tp;
      stages.push_back(CombineRankMemory(c, state, chunks_[mk]));
    }
    return stages;
  }

 // TrainFlopsPerToken at `c`'s tp (the rest of what it reads is the base config's).
  double FlopsPerToken(const Config& c) {
    auto [it, fresh] = flops_.emplace(c.parallel.tp, 0.0);
    if (fresh) it->second = TrainFlopsPerToken(c.model, c.train.seq_len, c.parallel.tp, c.model.lora.enabled());
    return it->second;
  }

 private:
  std::map<int, double> flops_;
  // The whole model's partition at `c`'s tp and ep (its unit sizes give every stage's shape).
  Result<const ModelPartition*> Whole(const Config& c) {
    const std::string key = std::to_string(c.parallel.tp) + "." + std::to_string(c.parallel.ep);
    auto it = whole_.find(key);
    if (it != whole_.end()) return it->second.get();
    ASSIGN_OR_RETURN(ModelPartition part, ModelPartition::Create(c.model, c.parallel.tp, 0, {}, c.parallel.ep, 0));
    return (whole_[key] = std::make_unique<ModelPartition>(std::move(part))).get();
  }
  // Pipeline stage `stage`'s partition (a dry construction's).
  Result<const ModelPartition*> Partition(const Config& c, int stage) {
    const std::string key = LayoutKey(c.parallel) + "#" + std::to_string(stage);
    auto it = partitions_.find(key);
    if (it != partitions_.end()) return it->second.get();
    const ParallelConfig& p = c.parallel;
    ASSIGN_OR_RETURN(ModelPartition part, RankPartition(c, stage * p.dp * p.ep * p.tp));
    return (partitions_[key] = std::make_unique<ModelPartition>(std::move(part))).get();
  }

  std::map<std::string, std::unique_ptr<ModelPartition>> whole_, partitions_;
  std::map<std::string, std::unique_ptr<Stages>> stages_;
  std::map<std::string, RankMemory> state_;
  std::map<std::string, std::vector<ChunkArenas>> chunks_;
};

// Memory of a layout by where it lives (search.h), against the cluster.
struct Fit {
  bool ok = false;
  std::string why;  // when not: the rejection reason (grouped in the report)
};

Fit Place(const ClusterSpec& cl, PlanEntry& e) {
  const Config& c = e.config;
  const bool host_opt = c.optimizer.offload == OptimizerOffload::kCpu && !cl.host_is_device();
  size_t worst = 0;
  for (const RankMemory& m : e.stages) {
    size_t dev = m.resident();
    if (host_opt) dev -= m.of(MemoryKind::kOptimizerState);
    if (dev >= worst) {
      worst = dev;
      e.worst_stage = m.stage;
    }
    if (host_opt) e.host_bytes = std::max(e.host_bytes, m.of(MemoryKind::kOptimizerState) * cl.devices_per_host);
    e.nvme_bytes = std::max(e.nvme_bytes, m.of(MemoryKind::kOffloaded) * cl.devices_per_host);
  }
  e.device_bytes = worst;
  if (static_cast<double>(worst) > cl.device_memory) {
    RankMemory on_device = e.stages[static_cast<size_t>(e.worst_stage)];
    if (host_opt) on_device.bytes[static_cast<int>(MemoryKind::kOptimizerState)] = 0;
    return {false, std::string("does not fit the device (largest: ") + MemoryKindName(on_device.largest()) + ")"};
  }
  if (host_opt && static_cast<double>(e.host_bytes) > cl.host_memory) {
    return {false, "offloaded optimizer state does not fit the host's memory"};
  }
  if (e.nvme_bytes > 0 && static_cast<double>(e.nvme_bytes) > cl.nvme_capacity) {
    return {false, "offloaded optimizer state does not fit the host's NVMe"};
  }
  return {true, ""};
}

// The layer split of `stages` virtual stages: even; else the embeddings and head counted as
// a layer each; else as even as it gets with the remainder on the middle stages.
bool ChooseSplit(int64_t layers, int stages, ParallelConfig& p) {
  p.pipeline_split.clear();
  p.account_for_embedding_and_head = false;
  if (stages == 1) return true;
  if (layers < stages) return false;
  if (layers % stages == 0) return true;
  if ((layers + 2) % stages == 0 && (layers + 2) / stages >= 2) {
    p.account_for_embedding_and_head = true;
    return true;
  }
  p.pipeline_split.assign(static_cast<size_t>(stages), layers / stages);
  for (int64_t r = 0; r < layers % stages; ++r) p.pipeline_split[static_cast<size_t>(1 + r % std::max(1, stages - 2))]++;
  return true;
}

std::vector<int> PowersOfTwoUpTo(int n) {
  std::vector<int> v;
  for (int k = 1; k <= n; k *= 2) v.push_back(k);
  return v;
}

// One candidate's knobs (the Config is built from them when needed).
struct Knobs {
  int layout = 0;  // index into the layouts
  int64_t mbs = 1, accum = 1;
  int zero = 0;
  RecomputePolicy recompute = RecomputePolicy::kNone;
  bool sp = false;
  OptimizerOffload offload = OptimizerOffload::kNone;
  bool reduce_low = false;  // mixed_precision.reduce_dtype: low
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  double seconds = 0;
};

// `c` (already holding `layout`'s parallel section) with the knobs of `k`: set in place, so
// timing a candidate copies nothing.
void SetKnobs(const Knobs& k, Config& c) {
  c.parallel.zero = k.zero;
  c.parallel.sequence_parallel = k.sp;
  c.parallel.pipeline_schedule = k.schedule;
  c.train.micro_batch_size = k.mbs;
  c.train.grad_accum_steps = k.accum;
  c.model.recompute = k.recompute;
  c.optimizer.offload = k.offload;
  c.mixed_precision.reduce_in_low = k.reduce_low;
}

Config Apply(const Config& base, const ParallelConfig& layout, const Knobs& k) {
  Config c = base;
  c.parallel = layout;
  SetKnobs(k, c);
  // offload_dir belongs to nvme only (the config check refuses it otherwise).
  if (k.offload != OptimizerOffload::kNvme) {
    c.optimizer.offload_dir.clear();
  } else if (c.optimizer.offload_dir.empty()) {
    c.optimizer.offload_dir = c.train.out_dir;
  }
  return c;
}

void Count(std::map<std::string, int64_t>& m, const std::string& why, int64_t n = 1) { m[why] += n; }

// Whether the parameters, gradients and optimizer state alone exceed the device on some stage,
// counted from the stage's parameters as ParamShards holds them (param_shards.h: dense
// state over dp x ep ranks, experts over dp; ZeRO 3 shards the parameters, 2 and 3 the
// gradients, 1-3 the optimizer state; padding left out, so this is a lower bound). Returns
// the largest of the three kinds' names, or null when they fit.
const char* StateExceeds(const Config& c, const ClusterSpec& cl, const std::vector<StageShape>& stages) {
  const ParallelConfig& p = c.parallel;
  if (c.model.lora.enabled()) return nullptr;  // a frozen base has no gradients or moments
  const bool low = c.precision != Precision::kFp32;
  const double dense_shard = static_cast<double>(p.dp) * p.ep, expert_shard = p.dp;
  const int zero = dense_shard > 1 ? p.zero : 0;
  const bool host_opt = c.optimizer.offload == OptimizerOffload::kNvme ||
                        (c.optimizer.offload == OptimizerOffload::kCpu && !cl.host_is_device());
  for (const StageShape& s : stages) {
    const double e = static_cast<double>(s.expert_params), d = static_cast<double>(s.params) - e;
    auto share = [&](bool sharded) { return sharded ? d / dense_shard + e / expert_shard : d + e; };
    const double params = (low ? 2.0 : 4.0) * share(zero == 3);
    const double grads = 4.0 * share(zero >= 2);
    const double opt = host_opt ? 0.0 : (low ? 12.0 : 8.0) * share(zero >= 1);
    if (params + grads + opt > cl.device_memory) {
      return opt >= params && opt >= grads ? "optimizer state" : grads >= params ? "gradients" : "parameters";
    }
  }
  return nullptr;
}

}  // namespace

std::string DescribeLayout(const Config& c) {
  const ParallelConfig& p = c.parallel;
  std::string s = "dp " + std::to_string(p.dp) + " x tp " + std::to_string(p.tp) + " x pp " +
                  std::to_string(p.pp);
  if (p.virtual_stages > 1) s += " (v " + std::to_string(p.virtual_stages) + ")";
  if (!p.pipeline_split.empty()) {
    s += " split";
    for (size_t i = 0; i < p.pipeline_split.size(); ++i) s += (i ? "," : " ") + std::to_string(p.pipeline_split[i]);
  }
  if (p.ep > 1) s += " x ep " + std::to_string(p.ep);
  s += ", zero " + std::to_string(p.zero) + ", recompute " + RecomputePolicyName(c.model.recompute);
  if (p.sequence_parallel) s += ", sp";
  s += ", mbs " + std::to_string(c.train.micro_batch_size) + " x " +
       std::to_string(c.train.grad_accum_steps);
  if (c.optimizer.offload != OptimizerOffload::kNone) {
    s += std::string(", offload ") + OptimizerOffloadName(c.optimizer.offload);
  }
  if (c.mixed_precision.reduce_in_low) s += ", gradients reduced in " + std::string(PrecisionName(c.precision));
  if (p.pp > 1) s += std::string(", ") + PipelineScheduleName(p.pipeline_schedule);
  return s;
}

Result<PlanEntry> PlanLayout(const Config& config, const ClusterSpec& cluster) {
  PlanCache cache;
  int64_t dry = 0;
  PlanEntry e;
  e.config = config;
  ASSIGN_OR_RETURN(e.stages, cache.Memory(config, &dry));
  ASSIGN_OR_RETURN(const PlanCache::Stages* stages, cache.StagesOf(config));
  e.time = PredictStepTime(config, cluster, stages->shapes, cache.FlopsPerToken(config));
  const Fit fit = Place(cluster, e);
  e.fits = fit.ok;
  e.why = fit.why;
  return e;
}

Result<PlanReport> PlanLayouts(const Config& base, const ClusterSpec& cl, const PlanOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& m = base.model;
  const int world = static_cast<int>(o.ranks > 0 ? o.ranks : cl.devices());
  const int64_t data_ranks = static_cast<int64_t>(base.parallel.dp) * base.parallel.ep;
  const int64_t G = o.global_batch > 0 ? o.global_batch
                                       : base.train.micro_batch_size * base.train.grad_accum_steps * data_ranks;
  PlanReport report;
  std::map<std::string, int64_t> rejected;
  PlanCache cache;
  // The layouts: tp x pp x v x ep x dp.
  std::vector<ParallelConfig> layouts;
  for (int tp : PowersOfTwoUpTo(std::min(cl.devices_per_host, world))) {
    if (world % tp != 0) continue;
    if (!ValidateTensorParallel(m, tp).ok()) {
      Count(rejected, "tp does not divide the heads or MLP width");
      continue;
    }
    for (int pp = 1; pp <= std::min<int64_t>(world / tp, m.num_layers); ++pp) {
      if ((world / tp) % pp != 0) continue;
      for (int v : {1, 2, 4}) {
        if (v > 1 && pp < 2) continue;
        ParallelConfig p = base.parallel;
        p.tp = tp;
        p.pp = pp;
        p.virtual_stages = v;
        p.pipeline_schedule = v > 1 ? PipelineSchedule::kInterleaved : PipelineSchedule::k1F1B;
        if (!ChooseSplit(m.num_layers, pp * v, p)) continue;
        const int rest = world / (tp * pp);
        for (int ep = 1; ep <= rest; ++ep) {
          if (rest % ep != 0) continue;
          if (ep > 1 && (!m.moe.enabled() || m.moe.num_experts % ep != 0 || m.lora.enabled())) continue;
          p.ep = ep;
          p.dp = rest / ep;
          layouts.push_back(p);
        }
      }
    }
  }
  // Every candidate timed.
  std::vector<Knobs> knobs;
  const std::vector<RecomputePolicy> policies = {RecomputePolicy::kNone, RecomputePolicy::kSelective,
                                                 RecomputePolicy::kFull};
  for (size_t li = 0; li < layouts.size(); ++li) {
    const ParallelConfig& p = layouts[li];
    const int64_t data = static_cast<int64_t>(p.dp) * p.ep;
    if (G % data != 0) {
      Count(rejected, "the global batch does not divide among the data-parallel ranks");
      continue;
    }
    Config probe = base;
    probe.parallel = p;
    ASSIGN_OR_RETURN(const PlanCache::Stages* stages, cache.StagesOf(probe));
    const double flops = cache.FlopsPerToken(probe);
    for (int64_t mbs = 1; mbs <= G / data; mbs *= 2) {
      if ((G / data) % mbs != 0) continue;
      const int64_t accum = G / data / mbs;
      if (accum > (int64_t{1} << 20)) continue;  // train.grad_accum_steps' bound
      // 1F1B or GPipe with one chunk per rank; interleaved with several.
      std::vector<PipelineSchedule> schedules = {p.pipeline_schedule};
      if (p.pp > 1 && p.virtual_stages == 1) schedules = {PipelineSchedule::k1F1B, PipelineSchedule::kGpipe};
      for (PipelineSchedule sched : schedules) {
        if (p.pp > 1 && !CheckPipelineSchedule(sched, p.pp, static_cast<int>(accum), p.virtual_stages).ok()) {
          Count(rejected, "too few micro-batches for the pipeline schedule");
          continue;
        }
        for (int zero = 0; zero <= 3; ++zero) {
          if (zero > 0 && data < 2) continue;
          for (RecomputePolicy rc : policies) {
            for (bool sp : {false, true}) {
              if (sp && (p.tp < 2 || m.moe.enabled() || (mbs * base.train.seq_len) % p.tp != 0)) continue;
              for (bool reduce_low : {false, true}) {
                if (reduce_low && (base.precision == Precision::kFp32 || data < 2)) continue;
                for (OptimizerOffload off : o.offloads) {
                  if (off == OptimizerOffload::kNvme && cl.nvme_bandwidth <= 0) continue;
                  // Where the device is the host, cpu offload holds and moves what none does.
                  if (off == OptimizerOffload::kCpu && cl.host_is_device()) continue;
                  Knobs k{static_cast<int>(li), mbs, accum, zero, rc, sp, off, reduce_low, sched, 0};
                  SetKnobs(k, probe);
                  k.seconds = PredictStepTime(probe, cl, stages->shapes, flops).total;
                  knobs.push_back(k);
                }
              }
            }
          }
        }
      }
    }
  }
  report.candidates = static_cast<int64_t>(knobs.size());
  std::sort(knobs.begin(), knobs.end(), [](const Knobs& a, const Knobs& b) { return a.seconds < b.seconds; });
  // Fastest first, until `top` fit.
  size_t i = 0;
  for (; i < knobs.size() && static_cast<int>(report.best.size()) < o.top; ++i) {
    const Knobs& k = knobs[i];
    PlanEntry e;
    e.config = Apply(base, layouts[static_cast<size_t>(k.layout)], k);
    ASSIGN_OR_RETURN(const PlanCache::Stages* stages, cache.StagesOf(e.config));
    // A lower bound of the state's bytes that needs no dry construction.
    if (const char* kind = StateExceeds(e.config, cl, stages->shapes)) {
      Count(rejected, std::string("does not fit the device (largest: ") + kind + ")");
      continue;
    }
    ASSIGN_OR_RETURN(e.stages, cache.Memory(e.config, &report.memory_checked));
    const Fit fit = Place(cl, e);
    if (!fit.ok) {
      Count(rejected, fit.why);
      continue;
    }
    e.time = PredictStepTime(e.config, cl, stages->shapes, cache.FlopsPerToken(e.config));
    e.fits = true;
    report.best.push_back(std::move(e));
  }
  if (i < knobs.size()) Count(rejected, "slower than the layouts shown (memory not checked)", static_cast<int64_t>(knobs.size() - i));
  report.rejected.assign(rejected.begin(), rejected.end());
  std::stable_sort(report.rejected.begin(), report.rejected.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace tessera
