// runtime/train/trainer.h — the training loop: data -> model -> gradient reduction -> clip ->
// AdamW over this rank's ZeRO pieces (param_shards.h), with progress lines, a metrics file,
// evaluation and an end-of-run summary.
//
// Owns the model (whose parameters and gradients live in ParamShards, the model's ParamStore),
// the parameter state, the loss scaler (fp16), the data loaders and the run's output directory
// (written by rank 0 only):
//   <out_dir>/metrics.jsonl     one JSON object per step
//   <out_dir>/config.yaml       the effective config (after --set overrides)
//   <out_dir>/env.json          the environment fingerprint (tessera env)
//   <out_dir>/memory.json       peak bytes by memory kind, per rank
//   <out_dir>/model.safetensors final fp32 (master) weights, Hugging Face names
// and, with checkpoint.dir, asynchronous sharded checkpoints there (checkpointer.h);
// resume: auto continues from the newest usable one with bit-identical results.
// Data parallelism (config.h, TrainConfig): rank r of dp takes micro-batches
// [r*accum, (r+1)*accum) of each global step of accum*dp micro-batches, scales its loss by
// 1/(accum*dp), and the gradients are summed over ranks in rank order. Each micro-batch's
// gradient is computed from zero and added to the previous ones (g = ((g_0 + g_1) + g_2) +
// ...), so a 1-rank run with accum = dp and a dp-rank run with accum 1 perform the same float
// additions and end with bit-identical weights under ZeRO 0-3, with optimizer.offload cpu and
// with bf16/fp16 storage when gradients are reduced in fp32 (tests/multirank). With accum > 1
// per rank the dp run adds ((g_0+g_1) + (g_2+g_3)) where one rank adds (((g_0+g_1)+g_2)+g_3):
// equal within float rounding, not bit for bit; likewise reductions in a low type.
// Mixed precision: precision bf16/fp16 stores parameters (and rounds activations and
// gradients) in that type, the optimizer keeps fp32 master weights; fp16 multiplies the loss
// by a dynamic loss scale and skips steps whose gradients overflow (reported per step and in
// the summary).
// Determinism: same config, layout and seed => bit-identical weights (fixed-order kernels,
// counter-based randomness, explicit data position, rank-order reductions).
// Supervision (run_link.h): with a RunLink the trainer publishes its step and phase, sends the
// coordinator's catalog records to link->catalog(), and at each step boundary (after that
// step's checkpoint handling) samples the link's requests, agrees on them across all ranks
// (one max-reduction of two flags over the world communicator: every rank saves and stops
// after the same step) and acts: a checkpoint request saves now; a stop saves this step (if
// not saved already), waits for its commit and returns from Run with summary.stopped set and
// no final export. Without a link none of this runs (no extra collective); with one the
// numerics are the same bits (the agreement moves two ints, never touches training state).
// Single-threaded driver; kernels parallelise inside; the comm backend moves data on its own
// thread while backward runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/transformer.h"
#include "optimizer/adamw.h"
#include "optimizer/loss_scale.h"
#include "runtime/core/memory.h"
#include "runtime/kernels/backend.h"
#include "runtime/train/moe_balance.h"
#include "runtime/train/checkpointer.h"
#include "runtime/train/config.h"
#include "runtime/train/data/data_loader.h"
#include "runtime/train/device_mirror.h"
#include "runtime/train/param_shards.h"
#include "runtime/train/pipeline.h"
#include "runtime/train/metrics.h"
#include "runtime/train/run_link.h"
#include "runtime/train/saved_state.h"
#include "runtime/train/step_guard.h"
#include "runtime/train/world.h"

namespace tessera {

class Trainer {
 public:
  // Builds everything the config asks for: model (random init or init_from), optimizer,
  // train (and, when available, validation) loaders. Errors: bad init_from weights, missing
  // or malformed data files — as Status, before any step runs.
  // `world` (may be null: one process) gives the rank and the dp group; it must outlive the
  // trainer. `link` (may be null: a standalone run) is the supervisor's seam (run_link.h);
  // it must outlive the trainer too.
  static Result<std::unique_ptr<Trainer>> Create(const Config& config, World* world = nullptr,
                                                 RunLink* link = nullptr);

  // Trains config.train.steps steps, writing progress to `out` and files to out_dir (rank 0;
  // other ranks print nothing and write nothing). A failed collective comes back as its
  // Status; in a multi-rank job the caller must then end the job (AbortJob). Stopped on the
  // link's request: returns early with summary.stopped (no model.safetensors, memory.json or
  // full summary; one line says where it stopped and what was committed).
  Result<TrainSummary> Run(FILE* out);

  // Mean loss over `batches` validation micro-batches from the start of the held-out split.
  // kNotFound if the run has no held-out data. A collective under ZeRO-3 (the parameter
  // gathers): every rank must call it; a failed gather ends it with that error.
  Result<double> Evaluate(int64_t batches);

  // The whole model (null under pipeline parallelism: each rank holds chunks).
  Transformer* model() { return model_.get(); }
  const MemoryTracker& memory() const { return memory_; }
  // The pipeline executor's timing (pp > 1), else null.
  const PipelineStats* pipeline_stats() const {
    return pp_ != nullptr ? &pipeline_->stats() : nullptr;
  }

 private:
  struct StepResult {
    double loss = 0;  // mean over the global batch
    double grad_norm = 0;
    bool skipped = false;
    double loss_scale = 1.0;  // what the loss was multiplied by (fp16)
    StepGuard::Decision guard;  // why it was applied, skipped (or the run stops)
    MoeStepReport moe;          // the MoE blocks' routing over the job (empty: dense)
  };

  using Clock = std::chrono::steady_clock;

  // What one step's forward and backward passes over this rank's micro-batches produced.
  // Errors (a failed reduction, gather or transfer inside them) come back as the Result's
  // Status, never as state to poll afterwards.
  struct ForwardBackwardResult {
    double loss_sum = 0;        // sum of the micro-batches' mean losses (0 off the last stage)
    int64_t micro_batches = 0;  // this rank's: grad_accum_steps
    int64_t tokens = 0;         // this rank's: micro_batches * micro_batch_size * seq_len
  };

  // Run's state across steps.
  struct RunProgress {
    TrainSummary summary;
    std::unique_ptr<MetricsFile> metrics;  // rank 0 only
    int64_t tokens_per_step = 0;           // the global batch
    double flops_per_token = 0;            // this rank's share
    double interval_loss = 0;              // since the last progress line (finite losses)
    int64_t interval_steps = 0;
    Clock::time_point start;  // after the banner: rates and elapsed time count from here
    // The MoE blocks' counts summed over the last kMoeHistogramSteps steps, for the summary.
    std::deque<std::vector<MoeLayerReport>> moe_recent;
    // optimizer.offload: nvme: each offload file's counters when the loop started.
    std::vector<OffloadIoStats> offload_start;
    double step_seconds = 0;  // the steps' own time (no evaluation, no logging)
  };
  static constexpr size_t kMoeHistogramSteps = 50;

  Trainer(const Config& config) : config_(config) {}
  // The MoE blocks this rank's model(s) hold (model.moe), with their global indices.
  std::vector<LocalMoeLayer> LocalMoeLayers();
  std::vector<Transformer*> Models();  // the whole model, or this rank's chunks
  Status FinishMoe(StepResult& r);
  std::string MoeHistogram(const RunProgress& run) const;
  // optimizer.offload: nvme: the summary's line (resident vs on disk, bytes per step, the
  // share of the steps' time spent waiting for the disk).
  std::string OffloadSummary(const RunProgress& run) const;
  Status SetUpParameters();
  Status BuildModels(ModelOptions mo);
  Status LoadInitialWeights();
  Status LoadHfInitialWeights();
  void SetUpLossScaler();  // fp16
  // resume: auto — the newest usable checkpoint's tensors and state (step, data position,
  // loss scale); a fresh start when there is none.
  Status ResumeFromCheckpoint();
  // init_from a Tessera checkpoint (a step_<N> directory or a root): through the checkpointer,
  // which falls back past damaged checkpoints of a root.
  Status InitFromCheckpoint();
  Status RestoreState(const SavedTrainerState& s, const std::string& where);
  JsonValue StateJson(int64_t step) const;
  // A step whose loss or gradient norm is NaN/Inf under on_nonfinite stop (or past the skip
  // bound): completes a save in flight (its state is from before the step), records the step
  // in metrics.jsonl, says where the run stands and returns the kNonFinite status (exit 10).
  Status StopNonFinite(int64_t step, const StepResult& r, const Status& why, MetricsFile* metrics,
                       FILE* out);
  JsonValue LayoutJson() const;

  // The loop's phases (Run reads as their sequence; trainer.cc, trainer_report.cc).
  Result<RunProgress> BeginRun(FILE* out);
  void PrintLoraBanner(FILE* out) const;
  void PrintBanner(int64_t tokens_per_step, FILE* out) const;
  void PrintHfLoadBanner(FILE* out) const;
  void PrintTensorParallelBanner(FILE* out) const;
  std::string DataRanks() const;
  void PrintPipelineBanner(FILE* out) const;
  Result<StepResult> TrainStep(float lr);
  Result<ForwardBackwardResult> ForwardBackward(float grad_scale);
  Status LoadStepBatches();
  Status PassStatus(const Transformer& model) const;
  Status SyncGrads();
  Result<double> GlobalLoss(const ForwardBackwardResult& pass);
  void Guard(StepResult& r);
  Result<bool> AfterStep(int64_t done, float lr, const StepResult& r, Clock::time_point t0,
                         RunProgress& run, FILE* out);
  void Account(const StepResult& r, const StepMetrics& m, RunProgress& run);
  Status MaybeEval(int64_t done, bool last, StepMetrics& m, TrainSummary& summary);
  Result<bool> MaybeCheckpoint(int64_t done, bool last);
  Status Log(int64_t done, float lr, const StepResult& r, double step_seconds,
             double elapsed_seconds, bool last, StepMetrics& m, RunProgress& run, FILE* out);
  void ReportStopped(int64_t done, RunProgress& run, FILE* out);
  Status FinishCheckpoints();
  Result<TrainSummary> Finish(RunProgress& run, FILE* out);
  void PrintSummaryExtras(const std::vector<double>& idle, FILE* out) const;
  static double Seconds(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }
  // The global gradient norm (unscaled) and the clipping factor for Step to fold in.
  struct ClippedNorm {
    double norm = 0;
    float grad_scale = 1.0f;  // ClipScale(norm, grad_clip): 1 = no clipping
  };
  // Unscales (fp16) this rank's reduced gradients and measures the global norm; the clipping
  // itself is left to ParamShards::Step (grad_scale), which reads the gradients anyway.
  Result<ClippedNorm> ClipGradients();
  void Phase(TrainPhase phase) {
    if (link_ != nullptr) link_->SetPhase(phase);
  }
  // The step-boundary part of supervision after `steps_done` steps (see the file comment).
  // `saved_this_step`: a save of this step was started at this boundary already. Sets *stop
  // when the run must return now.
  Status HandleLinkRequests(int64_t steps_done, bool saved_this_step, FILE* out, bool* stop);
  // Starts the save of `steps_done` now, after completing one in flight (so checkpoint.on_busy
  // skip cannot drop a requested save).
  Status SaveNow(int64_t steps_done);
  // Per-rank peak bytes by kind: the table for the summary and <out_dir>/memory.json.
  Result<std::vector<double>> GatherMemory();
  // The global weights on world rank 0 (see the .cc); every rank must call it.
  Result<std::vector<float>> GatherGlobalWeights();
  Result<double> FromLastStage(double value);
  bool is_root() const { return world_rank_ == 0; }
  // Whether the backend multiplies in bf16 (cpu-bf16): MFU is then taken against bf16 GEMMs.
  bool bf16_gemms() const { return std::string_view(backend_->name()) == "cpu-bf16"; }

  Config config_;
  MemoryTracker memory_;
  // The kernels every model of this rank runs on (ChooseComputeBackend: cpu-fp32, or cpu-bf16
  // where bf16 GEMMs run on oneDNN), and its banner line. Before the models: they point to it.
  std::unique_ptr<Backend> backend_;
  std::string compute_;
  double rated_peak_flops_ = 0;  // a GPU's rated peak (compute_device.h), 0 on CPU
  std::string peak_source_;
  // train.device: cuda: the models' parameters and gradients on the device, in front of the
  // host state (device_mirror.h); null on CPU.
  std::unique_ptr<DeviceMirrorStore> device_store_;
  std::unique_ptr<ParamState> shards_;  // before model_: the model points into it
  std::unique_ptr<ParamStore> phase_store_;  // with a link: shards_ seen through a store that
                                             //   reports backward's start (before model_ too)
  std::unique_ptr<Transformer> model_;  // the whole model (pp = 1)
  // Pipeline (pp > 1): one model per chunk of this rank.
  std::vector<std::unique_ptr<Transformer>> chunks_;
  // model.moe's balancing bias of every MoE block of the job (not only this rank's), after the
  // last step: what a checkpoint saves (StateJson on any rank writes all of it).
  std::vector<std::vector<float>> moe_bias_;
  std::string lora_base_;  // finetune.lora: LoraBaseIdentity, saved and checked on resume
  // The schedule's executor over model_ (pp = 1: its one-stage case) or chunks_; every step
  // and evaluation runs through it.
  std::unique_ptr<PipelineRunner> pipeline_;
  Communicator* pp_ = nullptr;  // the pipeline group (null: pp = 1)
  std::vector<int32_t> step_inputs_, step_targets_;  // a step's micro-batches
  std::optional<LossScaler> loss_scaler_;  // fp16 only
  std::optional<StepGuard> guard_;          // non-finite and loss-spike policy (step_guard.h)
  bool init_from_checkpoint_ = false;       // init_from names a Tessera checkpoint
  // init_from an HF checkpoint: every rank's {bytes read, peak resident growth (-1: not
  // measured), parameters held} in rank order, and rank 0's description of its load (the
  // banner prints it).
  static constexpr size_t kHfLoadFields = 3;
  std::vector<double> hf_load_;
  std::string hf_load_line_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<Checkpointer> memory_tier_;  // checkpoint.memory_interval_steps > 0 only
  RunLink* link_ = nullptr;             // null: standalone
  Communicator* agree_comm_ = nullptr;  // the world group the link's requests are agreed on
                                        //   (null: one rank, or no link)
  int64_t start_step_ = 0;  // steps already done (resumed from a checkpoint)
  // Data parallelism. dp_ == nullptr: one rank (no communication at all).
  Communicator* dp_ = nullptr;
  int dp_rank_ = 0, dp_size_ = 1;
  // Expert parallelism (ep >= 2): the ep group and the expert-data-parallel group (null when
  // it has one rank).
  Communicator* ep_ = nullptr;
  Communicator* expert_dp_ = nullptr;
  std::string threads_;  // the banner's pool size and why: "1 per rank (2 cores / 2 ranks on this host)"
  // Tensor parallelism: the tp group (null: tp = 1) and this rank's share of the model.
  Communicator* tp_ = nullptr;
  std::optional<ModelPartition> partition_;
  Communicator* all_ = nullptr;  // every rank of the job (null: one process)
  int world_rank_ = 0;
  std::unique_ptr<DataLoader> train_data_;
  std::unique_ptr<DataLoader> val_data_;  // may be null
  std::vector<int32_t> inputs_, targets_;  // (B*T) token ids of the current micro-batch
  double peak_flops_ = 0;  // measured sgemm (bf16 GEMM: bf16_gemms()) FLOP/s, the MFU denominator
};

// Mean loss (nats/token) of `model` over `batches` micro-batches read from the start of
// `data` (it is Reset first, so every evaluation sees the same tokens). Forward only.
// `after_batch`, when set, runs after each micro-batch; its first error ends the evaluation
// and is returned (a sharded model's gathers can fail inside Forward).
Result<double> EvaluateLoss(Transformer& model, DataLoader& data, int64_t batches,
                            const std::function<Status()>& after_batch = {});

// Builds a self-contained fp32 model (no sharding: for eval and export) for `config` at
// micro-batch shape (micro_batch_size, seq_len) and loads init_from (or `weights_override`
// when non-empty) if given, else random init from the seed. Under finetune.lora the model is
// the base one (a LoRA run's model.safetensors is merged: the base model's layout).
Result<std::unique_ptr<Transformer>> BuildModel(const Config& config, MemoryTracker* memory,
                                                const std::string& weights_override = "");

// Sets the routing bias of `model`'s MoE blocks from `bias` (one row per MoE block of the
// global model, in layer order); nothing when `bias` is empty.
void SetMoeBias(const ModelConfig& config, Transformer& model,
                const std::vector<std::vector<float>>& bias);

}  // namespace tessera
