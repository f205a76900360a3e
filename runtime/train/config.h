// runtime/train/config.h — the whole job configuration, typed and validated once.
//
// LoadConfig reads YAML (yaml-cpp is hidden in config.cc), applies `--set key.path=value`
// overrides, rejects unknown keys with a suggestion, and reports every type, range and
// cross-field error as "file:line:col: dotted.key: what was expected". Everything downstream
// takes `const Config&` and trusts it. Plain data; no globals.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "optimizer/optimizer_config.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/train/pipeline_schedule.h"

namespace tessera {

enum class DataSource { kSynthetic, kShards };

struct SyntheticDataConfig {
  int64_t branching = 4;        // data.synthetic.branching: successors per (context) state,
                                //   1..vocab_size; lower = lower entropy floor
  int64_t order = 1;            // data.synthetic.order: Markov order (tokens of context), 1..2
  float concentration = 1.0f;   // data.synthetic.concentration: Dirichlet-like skew of the
                                //   transition probabilities, > 0 (smaller = peakier)
  uint64_t seed = 1;            // data.synthetic.seed: seed of the chain itself (not the sampler)
  int64_t num_tokens = 1 << 20; // data.synthetic.num_tokens: tokens generated per split, >= 2
};

struct DataConfig {
  DataSource source = DataSource::kSynthetic;  // data.source: synthetic | shards
  std::string train_path;   // data.train: shard file or directory of *.bin shards (shards only)
  std::string val_path;     // data.val: held-out shard file/dir; empty = synthetic val split
                            //   (synthetic) or no eval (shards)
  SyntheticDataConfig synthetic;  // data.synthetic.*
};

// Batch sizes follow Megatron: train.micro_batch_size is per rank, and one optimizer step
// consumes a global batch of micro_batch_size * grad_accum_steps * parallel.dp sequences.
// So a dp-rank run has the same global batch as a 1-rank run whose grad_accum_steps is
// multiplied by dp (e.g. dp=4, accum 2 == 1 rank, accum 8). Rank r of the dp group takes the
// contiguous block of micro-batches [r * accum, (r + 1) * accum) of each global step, in the
// loader's order; every rank advances the loader over the whole global batch, so the data
// position is identical on all ranks after every step.
// What a step whose loss or gradient norm is NaN/Inf does (beyond fp16's planned overflow
// skips, which back the loss scale off): the update is never applied either way.
enum class NonFinitePolicy { kStop, kSkip };
const char* NonFinitePolicyName(NonFinitePolicy p);  // "stop" | "skip"
enum class SpikeAction { kReport, kSkip };
const char* SpikeActionName(SpikeAction a);  // "report" | "skip"

// Where a rank's kernels run (train.device). cuda: the rank's model on a GPU (the CUDA
// backend, runtime/kernels/cuda_backend.h), its parameter state and optimizer in host memory
// (runtime/train/device_mirror.h), as DeepSpeed's CPU offload keeps them.
enum class ComputeDevice { kCpu, kCuda };
const char* ComputeDeviceName(ComputeDevice d);  // "cpu" | "cuda"

struct TrainConfig {
  int64_t steps = 100;             // train.steps: optimizer steps, >= 1
  int64_t micro_batch_size = 8;    // train.micro_batch_size: sequences per micro-batch PER RANK,
                                   //   >= 1
  int64_t grad_accum_steps = 1;    // train.grad_accum_steps: micro-batches per step per rank, >= 1
  int64_t seq_len = 64;            // train.seq_len: tokens per sequence, 1..model.max_seq_len
  uint64_t seed = 1234;            // train.seed: init and sampling seed
  int64_t log_interval = 10;       // train.log_interval: steps between progress lines, >= 1
  int64_t eval_interval = 0;       // train.eval_interval: steps between evals; 0 = end only
  int64_t eval_batches = 8;        // train.eval_batches: micro-batches per eval, >= 1
  int threads = 0;                 // train.threads: CPU threads per rank; 0 = OMP_NUM_THREADS if set, else
                                   //   cores / ranks on this host under mpirun, else all cores (cpu/thread_count.h)
  std::string out_dir = "runs/default";  // train.out_dir: metrics.jsonl and final weights go here
  float peak_gflops = 0.0f;  // train.peak_gflops: the MFU denominator per rank in GFLOP/s (e.g.
                             //   a GPU's rated bf16 peak); 0 = measure sgemm at startup
                             //   (~0.7 s on rank 0), >= 0
  ComputeDevice device = ComputeDevice::kCpu;  // train.device: cpu | cuda — cuda: each rank's
                             //   model on GPU (local rank mod GPUs); dp only (tp/pp/ep
                             //   exchange activations through host communicators)
  int64_t memory_limit_mb = 0;  // train.memory_limit_mb: bytes one rank may reserve (MiB); the
                                //   run refuses a layout the plan says exceeds it
                                //   (memory_plan.h); 0 = physical memory / ranks on the host
  NonFinitePolicy on_nonfinite = NonFinitePolicy::kStop;  // train.on_nonfinite: stop | skip —
                             //   a NaN/Inf loss or gradient norm: stop the run at once (exit
                             //   code 10, nothing non-finite saved) or skip that update and go on
  int64_t max_nonfinite_skips = 10;  // train.max_nonfinite_skips: with skip, consecutive
                             //   non-finite steps skipped before the run stops anyway (exit
                             //   10), >= 1
  float spike_zscore = 0.0f; // train.spike_zscore: loss-spike detection — a step whose loss is
                             //   more than this many standard deviations above the mean of the
                             //   previous spike_window steps is reported (progress line,
                             //   metrics.jsonl "spike_z"); 0 = off, else > 0 (llm.c uses 5)
  int64_t spike_window = 128;  // train.spike_window: steps in that window, 2..65536; the test
                             //   starts once the window is full
  SpikeAction spike_action = SpikeAction::kReport;  // train.spike_action: report | skip —
                             //   skip also leaves that step's update out (its loss still joins
                             //   the window, so a lasting change of level stops counting as a
                             //   spike after spike_window steps)
  bool strict_env = false;   // train.strict_env (or --strict-env): a checkpoint resumed or
                             //   loaded by init_from whose environment fingerprint differs from
                             //   this process's in what computes (code, compiler, libraries,
                             //   CPU) is refused, exit 4; false: the differences are printed
};

// How the world's ranks are laid out (comm/device_mesh.h: pp x dp x ep x tp, tp fastest).
// Under mpirun the world size must equal dp * tp * pp * ep.
struct ParallelConfig {
  int dp = 1;    // parallel.dp: data-parallel replicas, >= 1
  int tp = 1;    // parallel.tp: tensor-parallel ranks (Megatron: attention heads, kv heads and
                 //   MLP columns split, vocabulary-parallel embedding and loss; the
                 //   vocabulary is padded to a multiple of tp), >= 1; must divide num_heads,
                 //   the kv heads and the MLP width
  int pp = 1;    // parallel.pp: pipeline stages (layers split across ranks, micro-batches
                 //   pipelined; the embedding on the first stage, the LM head on the last), >= 1
  int ep = 1;    // parallel.ep: expert-parallel ranks (routed experts split E/ep per rank)
  int zero = 0;  // parallel.zero: ZeRO stage over the dp ranks, 0..3 (optimizer/shard_layout.h):
                 //   0 = replicated optimizer, gradients all-reduced in buckets during backward;
                 //   1 = AdamW moments (and master weights) partitioned across dp, 1/dp each,
                 //       updated pieces all-gathered after the step;
                 //   2 = 1 + each unit's gradients reduce-scattered into its owners' pieces as
                 //       soon as backward has finished the unit (no full gradient buffer);
                 //   3 = 2 + parameters partitioned: each unit all-gathered just before its
                 //       forward and backward (the next one prefetched) and freed after;
                 //       needs dp >= 2
  bool sequence_parallel = false;  // parallel.sequence_parallel: with tp > 1, norms, biases and
                                   //   residual adds run on 1/tp of each micro-batch's tokens
                                   //   and the tp all-reduces become reduce-scatter +
                                   //   all-gather (less activation memory per rank);
                                   //   micro_batch_size * seq_len must divide by tp
  // Pipeline (pp > 1): parallel.pipeline_schedule 1f1b (default) | gpipe | interleaved
  //   (runtime/train/pipeline_schedule.h); 1f1b and interleaved need train.grad_accum_steps
  //   (the micro-batches of a step) >= pp, interleaved also a multiple of pp.
  PipelineSchedule pipeline_schedule = PipelineSchedule::k1F1B;
  int virtual_stages = 1;  // parallel.virtual_stages: model chunks per pipeline rank (interleaved
                           //   only, >= 2 there), 1..1024
  std::vector<int64_t> pipeline_split;  // parallel.pipeline_split: layers per virtual stage
                           //   (pp * virtual_stages counts summing to model.num_layers); empty =
                           //   num_layers / (pp * virtual_stages) each, which must divide
  bool account_for_embedding_and_head = false;  // parallel.account_for_embedding_and_head:
                           //   without a split, count the embeddings and the LM head as one
                           //   layer each (first and last stage take a block fewer; needs
                           //   num_layers + 2 divisible by pp * virtual_stages)
  int world_size() const { return dp * tp * pp * ep; }
};

struct CommConfig {
  float timeout_s = 300.0f;  // comm.timeout_s: longest wait for any collective before the job
                             //   ends with a named timeout (exit code 6), seconds, > 0
  float bucket_mb = 25.0f;   // comm.bucket_mb: gradient reduction bucket size, MiB (2^20
                             //   bytes) of fp32 gradients, > 0; smaller = earlier overlap,
                             //   more messages
};

// precision: what parameters and activations are stored in. fp32 master weights live in the
// optimizer (its ZeRO partition) whenever the parameters are not fp32. On CPU every kernel
// computes in fp32 from the rounded values, so the numerics of low-precision storage are the
// ones a GPU run would see.
enum class Precision { kFp32, kBf16, kFp16 };
const char* PrecisionName(Precision p);  // "fp32" | "bf16" | "fp16"
DType PrecisionDType(Precision p);       // kF32 | kBF16 | kF16

enum class LossScaleMode { kDynamic, kStatic };
const char* LossScaleModeName(LossScaleMode m);  // "dynamic" | "static"

struct MixedPrecisionConfig {
  bool reduce_in_low = false;       // mixed_precision.reduce_dtype: fp32 | low — gradients are
                                    //   reduced across dp in fp32 or in the precision's type
  LossScaleMode loss_scale = LossScaleMode::kDynamic;  // mixed_precision.loss_scale (fp16 only):
                                    //   dynamic (skip overflowing steps, back off, regrow) | static
  float initial_scale = 65536.0f;   // mixed_precision.initial_scale: > 0 (fp16 only)
  int64_t growth_interval = 1000;   // mixed_precision.growth_interval: finite steps before the
                                    //   scale doubles, >= 1 (fp16 dynamic only)
  float min_scale = 1.0f;           // mixed_precision.min_scale: floor of the backoff, > 0
};

// checkpoint: asynchronous sharded checkpoints (checkpoint/ and runtime/train/checkpointer.h).
enum class CheckpointOnBusy { kWait, kSkip };
enum class CheckpointInterval { kSteps, kAuto };
struct CheckpointConfig {
  std::string dir;              // checkpoint.dir: root directory; empty = no checkpoints
  int64_t interval_steps = 0;   // checkpoint.interval_steps: save every N steps, >= 0 (0 = only
                                //   at the end of the run)
  CheckpointInterval interval = CheckpointInterval::kSteps;  // checkpoint.interval: steps (every
                                //   interval_steps) | auto (Young/Daly from the measured save
                                //   cost and the MTBF: checkpoint_interval.h)
  double mtbf_s = 0;            // checkpoint.mtbf_s: mean time between failures for `auto`, >= 0
                                //   (0 = measured by tessera launch, else a day)
  double measured_mtbf_s = 0;   // not a YAML key: tessera launch's measurement, handed to the
                                //   ranks in the environment (rank_env.h kEnvMeasuredMtbf)
  bool at_end = true;           // checkpoint.at_end: also save after the last step
  int64_t keep_last = 3;        // checkpoint.keep_last: newest committed checkpoints kept, >= 1
  int64_t keep_every = 0;       // checkpoint.keep_every: also keep steps that are multiples of
                                //   this (milestones), >= 0 (0 = none)
  bool async = true;            // checkpoint.async: write in the background while training
                                //   goes on (false: the step waits until the save committed)
  CheckpointOnBusy on_busy = CheckpointOnBusy::kWait;  // checkpoint.on_busy: wait | skip — the
                                //   previous save is still writing when the next one is due
  bool local = false;           // checkpoint.local: dir is on each host's own disk; each host
                                //   keeps its own ranks' shards (runtime/train/host_tier.h)
  bool MemoryTierOn() const {
    return memory_interval_steps > 0 || memory_interval == CheckpointInterval::kAuto;
  }
  int64_t max_failures = 3;     // checkpoint.max_failures: consecutive failed saves before the
                                //   run stops, >= 1
  // The tier in hosts' memory (runtime/train/host_tier.h), in front of the disk tier.
  int64_t memory_interval_steps = 0;  // checkpoint.memory_interval_steps: snapshot every N
                                //   steps into host memory, replicated to the next host, >= 0
                                //   (0 = off unless memory_interval: auto)
  CheckpointInterval memory_interval = CheckpointInterval::kSteps;  // checkpoint.memory_interval:
                                //   steps | auto (Young/Daly from the tier's own measured cost;
                                //   turns the tier on)
  std::string memory_dir = "/dev/shm/tessera";  // checkpoint.memory_dir: each host's directory
                                //   for it (a tmpfs: memory that outlives the processes)
  int64_t memory_keep = 2;      // checkpoint.memory_keep: snapshots each host keeps, >= 1
  std::string route_toward;     // not a YAML key: tessera launch's control address (rank_env.h
                                //   kEnvControlAddress); the memory tier publishes the local
                                //   address that routes there
};

enum class ResumeMode { kNone, kAuto };
const char* ResumeModeName(ResumeMode m);  // "none" | "auto"

struct Config {
  std::string path;                // the YAML file it came from
  Precision precision = Precision::kFp32;  // precision: fp32 | bf16 | fp16
  MixedPrecisionConfig mixed_precision;
  ParallelConfig parallel;
  CommConfig comm;
  ModelConfig model;
  AdamWConfig optimizer;
  LrScheduleConfig schedule;
  DataConfig data;
  TrainConfig train;
  std::string init_from;           // init_from: safetensors file, model.safetensors.index.json
                                   //   (Hugging Face names) or a checkpoint (a step_<N>
                                   //   directory, or a checkpoint root: its newest committed
                                   //   one) to start from; empty = random init
  bool init_optimizer = false;     // init_optimizer: with a checkpoint in init_from, also take
                                   //   its AdamW moments (continued pretraining); the step
                                   //   counter, schedule and data position start fresh
  // finetune.lora.* (LoRA adapters, the base frozen) is read into model.lora: the adapters are
  // part of the model's parameters (models/model_config.h LoraConfig documents the keys).
  CheckpointConfig checkpoint;     // checkpoint.*
  ResumeMode resume = ResumeMode::kNone;  // resume: none | auto — auto continues from the newest
                                   //   committed (and verified) checkpoint under checkpoint.dir,
                                   //   or starts fresh when there is none
  std::string resolved_yaml;       // the effective config after overrides, for the record
};

// Loads `path`, then applies each "dotted.key=value" of `overrides` (as YAML scalars) before
// validating. Errors: kNotFound (file), kInvalidArgument (anything else), message in the
// "file:line:col: key: problem" form (overrides say "--set key=value: problem").
Result<Config> LoadConfig(const std::string& path, const std::vector<std::string>& overrides = {});
// The same over YAML text already in memory (a checkpoint's manifest config_yaml); `origin`
// stands for the file name in errors ("step_00000100/manifest.json config_yaml") and becomes
// Config::path.
Result<Config> LoadConfigFromText(const std::string& text, const std::string& origin);

}  // namespace tessera
