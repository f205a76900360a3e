// runtime/plan/search.h — which layout of a model trains fastest on a cluster and fits.
//
// Candidates: every tp (powers of two up to a host, dividing heads, kv heads and MLP
// widths) x pp (up to the layers; an even layer split, else one with the embeddings and head
// counted, else the nearest even explicit split) x virtual stages (1, 2, 4: interleaved) x ep
// (dividing the experts) x dp (the rest of the ranks) x micro-batch (powers of two dividing
// the global batch's share of a data rank; accumulation makes up the rest) x ZeRO 0-3 x
// recompute none/selective/full x sequence parallelism x optimizer offload none/cpu/nvme,
// at the config's precision and global batch. Each candidate is timed (step_time.h); then,
// fastest first, each is checked for memory with the trainer's own dry construction
// (runtime/train/memory_plan.h, halves cached across candidates that share them) until the
// best `top` that fit are known. A layout whose parameters alone exceed the device is
// rejected without a dry construction.
// Memory per device: every resident kind, except that optimizer.offload cpu on a cluster with
// a host link keeps the optimizer state in the host's memory (checked against host.memory_gb
// with every device of the host), and nvme keeps it in files (checked against the host's NVMe
// capacity).
// Thread-safety: pure functions (single-threaded).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/plan/cluster.h"
#include "runtime/plan/step_time.h"
#include "runtime/train/config.h"
#include "runtime/train/memory_plan.h"

namespace tessera {

struct PlanOptions {
  int top = 5;
  int ranks = 0;               // devices the job uses; 0: the whole cluster
  int64_t global_batch = 0;    // sequences per step; 0: the config's
  std::vector<OptimizerOffload> offloads = {OptimizerOffload::kNone, OptimizerOffload::kCpu,
                                            OptimizerOffload::kNvme};
};

struct PlanEntry {
  Config config;                   // the layout, as `tessera train` takes it
  std::vector<RankMemory> stages;  // per pipeline stage
  int worst_stage = 0;             // the stage with the most device bytes
  size_t device_bytes = 0;         // on each device of the worst stage
  size_t host_bytes = 0;           // on each host (optimizer.offload cpu with a host link)
  size_t nvme_bytes = 0;           // on each host's NVMe (optimizer.offload nvme)
  StepTime time;
  bool fits = false;  // on the cluster (device, host memory, NVMe)
  std::string why;    // when not: what does not fit
};

struct PlanReport {
  std::vector<PlanEntry> best;  // the fastest that fit, fastest first
  int64_t candidates = 0;       // layouts enumerated and timed
  int64_t memory_checked = 0;   // dry constructions made
  // Why the others were not chosen: reason -> layouts, most first.
  std::vector<std::pair<std::string, int64_t>> rejected;
  double seconds = 0;
};

// Searches `base`'s layouts (its model, precision, sequence length, optimizer and global
// batch kept) on `cluster`.
Result<PlanReport> PlanLayouts(const Config& base, const ClusterSpec& cluster, const PlanOptions& o);

// The config's own layout: memory per stage and the step time. Its ranks are the layout's.
Result<PlanEntry> PlanLayout(const Config& config, const ClusterSpec& cluster);

// "dp 8 x tp 4 x pp 4 (v 2, interleaved) x ep 16, zero 1, recompute full, sp, mbs 1 x 16,
// offload nvme".
std::string DescribeLayout(const Config& c);

}  // namespace tessera
