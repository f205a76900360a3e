// runtime/train/trainer.cc — the training loop and its outputs (see trainer.h for the
// contract). Single-threaded driver; kernels parallelise inside.
#include "runtime/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "checkpoint/commit.h"
#include "models/hf_weights.h"
#include "models/lora.h"
#include "models/param_layout.h"
#include "optimizer/grad_clip.h"
#include "optimizer/lr_schedule.h"
#include "runtime/core/file_util.h"
#include "runtime/core/json.h"
#include "runtime/core/random.h"
#include "runtime/kernels/cpu/bench.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/thread_count.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/kernels/cpu_bf16_backend.h"
#include "runtime/train/compute_device.h"
#include "runtime/train/env_info.h"
#include "runtime/train/expert_split_state.h"
#include "runtime/train/grad_sync.h"
#include "runtime/train/hf_load.h"
#include "runtime/train/lora_state.h"
#include "runtime/train/metrics.h"
#include "runtime/train/rank_layout.h"
#include "runtime/train/rank_state.h"

namespace tessera {
namespace {

// The MFU denominator in FLOP/s: the peak of the GEMMs the run multiplies with — sgemm, or
// the bf16 GEMM where the backend multiplies in bf16 (as MFU on a GPU is taken against its
// bf16 peak). Measuring it costs ~0.7 s on one thread, which a restart under the supervisor
// would pay again before its first step; a resumed run on the same host reuses the figure the
// run it continues measured (also keeping MFU comparable across the restart), kept in
// <out_dir>/sgemm_peak.txt (bf16_gemm_peak.txt) as "HOST GFLOPS".
double PeakGemmFlops(const std::string& out_dir, bool resumed, bool bf16) {
  const std::string path = out_dir + (bf16 ? "/bf16_gemm_peak.txt" : "/sgemm_peak.txt");
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  if (resumed) {
    if (auto text = ReadFileToString(path, 4096); text.ok()) {
      char saved_host[256] = {};
      double gflops = 0;
      if (std::sscanf(text->c_str(), "%255s %lf", saved_host, &gflops) == 2 &&
          std::strcmp(saved_host, host) == 0 && gflops > 0 && std::isfinite(gflops)) {
        return gflops * 1e9;
      }
    }
  }
  const double gflops = bf16 ? cpu::MeasurePeakBf16GemmGflops() : cpu::MeasurePeakSgemmGflops();
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  char line[320];
  std::snprintf(line, sizeof line, "%s %.3f\n", host, gflops);
  (void)WriteFileAtomic(path, line);  // best effort: only costs a re-measurement
  return gflops * 1e9;
}

// The model's view of ParamShards under a supervisor: every call forwards unchanged; the
// first gradient buffer a ForwardBackward asks for (the LM head's backward) marks the start
// of backward for the link. Forward-only evaluation never asks for gradients.
class PhaseReportingStore final : public ParamStore {
 public:
  PhaseReportingStore(ParamStore& inner, RunLink& link) : inner_(inner), link_(link) {}
  const float* Acquire(int unit) override { return inner_.Acquire(unit); }
  void Release(int unit) override { inner_.Release(unit); }
  void Prefetch(int unit) override { inner_.Prefetch(unit); }
  float* Grads(int unit) override {
    link_.SetPhase(TrainPhase::kBackward);
    return inner_.Grads(unit);
  }
  void GradsDone(int unit) override { inner_.GradsDone(unit); }

 private:
  ParamStore& inner_;
  RunLink& link_;
};

// Before any work: train.out_dir exists (rank 0 creates it; a path that can never be a
// directory is bad input, exit 4), and init_from is not the file this run will replace
// (Run removes <out_dir>/model.safetensors at its start, so the input weights would be lost
// if the run then failed).
Status CheckOutputs(const Config& config, bool root) {
  namespace fs = std::filesystem;
  if (root) {
    if (Status s = MakeDirs(config.train.out_dir); !s.ok()) return s.WithPrefix("train.out_dir");
  }
  if (config.init_from.empty()) return Status::Ok();
  const fs::path output = fs::path(config.train.out_dir) / "model.safetensors";
  std::error_code ec;
  for (const fs::path& input : {fs::path(config.init_from), fs::path(config.init_from) / "model.safetensors"}) {
    if (fs::exists(output, ec) && fs::exists(input, ec) && fs::equivalent(input, output, ec)) {
      return InvalidArgument("init_from " + config.init_from + " is this run's own output " +
                             output.string() + ", which the run replaces: copy it elsewhere "
                             "first, or set another train.out_dir");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Transformer>> BuildModel(const Config& config, MemoryTracker* memory,
                                                const std::string& weights_override) {
  // A LoRA run's weights file is its merged model: the base model's shapes and names.
  const ModelConfig mc = BaseModelConfig(config.model);
  ASSIGN_OR_RETURN(auto model, Transformer::Create(mc, config.train.micro_batch_size,
                                                   config.train.seq_len, memory));
  const std::string& weights = weights_override.empty() ? config.init_from : weights_override;
  if (weights.empty()) {
    model->InitRandom(config.train.seed);
  } else {
    HfExtras extras;
    RETURN_IF_ERROR(LoadHfWeights(weights, mc, model->parameters(), &extras));
    SetMoeBias(mc, *model, extras.moe_bias);
  }
  return model;
}

void SetMoeBias(const ModelConfig& config, Transformer& model,
                const std::vector<std::vector<float>>& bias) {
  if (bias.empty()) return;
  const std::vector<int64_t> ids = model.moe_layer_ids();
  for (size_t i = 0; i < ids.size(); ++i) {
    model.moe_layers()[i].bias = bias[static_cast<size_t>(config.moe_layers_before(ids[i]))];
  }
}

Result<std::unique_ptr<Trainer>> Trainer::Create(const Config& config, World* world,
                                                  RunLink* link) {
  std::unique_ptr<Trainer> t(new Trainer(config));
  t->threads_ = cpu::SetThreadsForConfig(config.train.threads).Describe();
  // Subnormals flushed on this thread and the whole pool, whatever the caller chose before: a
  // diverging run must be seen diverging, not crawl through subnormal arithmetic (threads.h).
  cpu::SetFlushSubnormals(true);
  if (world != nullptr && world->dense_dp() != nullptr && world->dense_dp()->size() > 1) {
    t->dp_ = world->dense_dp();
    t->dp_rank_ = t->dp_->rank();
    t->dp_size_ = t->dp_->size();
  }
  if (world != nullptr && world->tp() != nullptr && world->tp()->size() > 1) t->tp_ = world->tp();
  if (world != nullptr && world->ep() != nullptr && world->ep()->size() > 1) {
    t->ep_ = world->ep();
    if (world->expert_dp()->size() > 1) t->expert_dp_ = world->expert_dp();
  }
  if (world != nullptr && world->pp() != nullptr && world->pp()->size() > 1) t->pp_ = world->pp();
  if (world != nullptr && world->world() != nullptr && world->world()->size() > 1) {
    t->all_ = world->world();
    t->world_rank_ = t->all_->rank();
  }
  t->link_ = link;
  if (link != nullptr && world != nullptr && world->world() != nullptr &&
      world->world()->size() > 1) {
    t->agree_comm_ = world->world();
  }
  t->guard_.emplace(config.train);
  RETURN_IF_ERROR(CheckOutputs(config, t->is_root()));
  RETURN_IF_ERROR(t->SetUpParameters());
  const int64_t V = config.model.vocab_size, T = config.train.seq_len;
  ASSIGN_OR_RETURN(t->train_data_,
                   DataLoader::Open(config.data, Split::kTrain, V, T, config.train.seed));
  // Every rank evaluates (the same batches): ranks stay in step, so a long evaluation can
  // never look like a hung peer to the others' bounded collectives.
  if (DataLoader::HasSplit(config.data, Split::kVal)) {
    // A held-out split that was asked for and is broken fails here, before any step runs.
    ASSIGN_OR_RETURN(t->val_data_, DataLoader::Open(config.data, Split::kVal, V, T, config.train.seed));
  }
  // Under a supervisor the coordinator's catalog records go to it (the catalog's single
  // writer); standalone, the coordinator opens <checkpoint.dir>/catalog itself.
  FileSystem* ckpt_fs = link != nullptr ? link->checkpoint_file_system() : nullptr;
  ASSIGN_OR_RETURN(t->checkpointer_,
                   Checkpointer::Create(t->config_, t->all_, t->is_root() ? stdout : nullptr,
                                        ckpt_fs != nullptr ? *ckpt_fs : DefaultFileSystem(),
                                        &t->memory_, link != nullptr ? link->catalog() : nullptr));
  if (t->checkpointer_->enabled() && config.checkpoint.MemoryTierOn()) {
    ASSIGN_OR_RETURN(t->memory_tier_,
                     Checkpointer::Create(t->config_, t->all_, t->is_root() ? stdout : nullptr,
                                          DefaultFileSystem(), &t->memory_,
                                          link != nullptr ? link->catalog() : nullptr,
                                          CheckpointTier::kMemory));
  }
  if (t->init_from_checkpoint_) {
    t->Phase(TrainPhase::kCheckpoint);
    RETURN_IF_ERROR(t->InitFromCheckpoint());
    t->Phase(TrainPhase::kIdle);
  }
  if (config.resume == ResumeMode::kAuto) {
    t->Phase(TrainPhase::kCheckpoint);
    RETURN_IF_ERROR(t->ResumeFromCheckpoint());
    t->Phase(TrainPhase::kIdle);
  } else if (t->checkpointer_->enabled()) {
    // A fresh run must not mix its checkpoints with another run's: a later resume would pick
    // whichever has the highest step number.
    // Every rank decides together (with checkpoint.local each host sees only its own root).
    ASSIGN_OR_RETURN(const int64_t newest, t->checkpointer_->NewestCommitted(/*any=*/true));
    if (newest >= 0) {
      return InvalidArgument("checkpoint.dir " + config.checkpoint.dir +
                             " already holds committed checkpoints (newest: step " +
                             std::to_string(newest) +
                             "): set resume: auto to continue from them, or use another "
                             "checkpoint.dir for a fresh run");
    }
  }
  const int64_t tokens = config.train.micro_batch_size * T;
  t->inputs_.resize(tokens);
  t->targets_.resize(tokens);
  // The MFU denominator: train.peak_gflops; on a GPU its rated peak (compute_device.h); on CPU
  // what the run's GEMM reaches on this machine right now (the same measurement `tessera
  // bench` uses). Rank 0 reports it; the others would only contend for the cores.
  if (t->is_root()) {
    t->peak_flops_ = config.train.peak_gflops > 0 ? config.train.peak_gflops * 1e9
                     : t->rated_peak_flops_ > 0   ? t->rated_peak_flops_
                                                  : PeakGemmFlops(config.train.out_dir,
                                                                  t->start_step_ > 0,
                                                                  t->bf16_gemms());
  }
  if (link != nullptr) link->SetStep(t->start_step_);
  return t;
}


namespace {

// Who writes an offload file, for its header and for the message of whoever finds it later
// (optimizer/offload_file.h): the run, the rank, the layout and the incarnation.
std::string OffloadOwner(const Config& c, int rank, const RunLink* link) {
  const ParallelConfig& p = c.parallel;
  std::string s = "the run writing " + c.train.out_dir + ", rank " + std::to_string(rank) + " of " +
                  std::to_string(p.world_size()) + " (dp=" + std::to_string(p.dp) +
                  " tp=" + std::to_string(p.tp) + " pp=" + std::to_string(p.pp) +
                  " ep=" + std::to_string(p.ep) + " zero=" + std::to_string(p.zero) + ", " +
                  PrecisionName(c.precision) + ")";
  if (link != nullptr && link->incarnation() >= 0) {
    s += ", incarnation " + std::to_string(link->incarnation());
  }
  return s;
}

}  // namespace

// The parameter state (sharded as configured), the model on top of it, and the initial
// weights: random (each rank initialises only what it holds) or init_from.
Status Trainer::SetUpParameters() {
  const Config& c = config_;
  // This rank's share of the model (tensor parallelism, pipeline chunks: models/partition.h,
  // rank_layout.h; else all of it) and its state's options (rank_state.h).
  ASSIGN_OR_RETURN(ModelPartition partition, RankPartition(c, world_rank_));
  partition_.emplace(std::move(partition));
  ParamShardsOptions o = ParamStateOptions(c, *partition_, world_rank_);
  // The compute backend first: on CPU the parameter state lives in its memory; a device
  // backend's models reach the state (kept in host memory) through a DeviceMirrorStore.
  ASSIGN_OR_RETURN(RankBackend compute, CreateRankBackend(c));
  backend_ = std::move(compute.backend);
  compute_ = std::move(compute.description);
  rated_peak_flops_ = compute.rated_peak_flops;
  peak_source_ = std::move(compute.peak_source);
  const bool on_device = backend_->device() != Device::kCpu;
  o.backend = on_device ? nullptr : backend_.get();  // null: host memory (the CPU reference)
  if (o.disk) {
    o.disk->run = OffloadOwner(c, world_rank_, link_);
    o.disk->faults = link_ != nullptr ? link_->offload_faults() : nullptr;
  }
  ASSIGN_OR_RETURN(shards_, CreateParamState(c, o, *partition_, dp_, expert_dp_, ep_, &memory_));
  ModelOptions mo;
  mo.store = shards_.get();
  if (link_ != nullptr) {
    phase_store_ = std::make_unique<PhaseReportingStore>(*shards_, *link_);
    mo.store = phase_store_.get();
  }
  if (on_device) {
    device_store_ = std::make_unique<DeviceMirrorStore>(*mo.store, *backend_,
                                                        partition_->unit_bounds(), &memory_);
    mo.store = device_store_.get();
  }
  mo.activation_dtype = o.param_dtype;
  mo.backend = backend_.get();
  mo.tp = tp_;
  mo.ep = ep_;
  mo.sequence_parallel = c.parallel.sequence_parallel;
  mo.partition = &*partition_;
  RETURN_IF_ERROR(BuildModels(mo));
  if (c.model.moe.enabled()) {  // every block starts unbiased (an HF file may set it)
    moe_bias_.assign(static_cast<size_t>(c.model.num_moe_layers()),
                     std::vector<float>(static_cast<size_t>(c.model.moe.num_experts), 0.0f));
  }
  if (c.model.lora.enabled()) {
    ASSIGN_OR_RETURN(lora_base_, LoraBaseIdentity(c));
  }
  RETURN_IF_ERROR(LoadInitialWeights());
  if (c.precision == Precision::kFp16) SetUpLossScaler();
  return Status::Ok();
}

// The whole model (pp = 1), or one model per chunk of this rank; and the pipeline executor
// that runs them (pp = 1 is its one-stage case: pipeline.h).
Status Trainer::BuildModels(ModelOptions mo) {
  const Config& c = config_;
  if (pp_ == nullptr) {
    ASSIGN_OR_RETURN(model_, Transformer::Create(c.model, c.train.micro_batch_size,
                                                 c.train.seq_len, &memory_, mo));
    PipelineOptions po;  // one stage, one chunk: 1F1B is F0 B0 F1 B1 ...
    po.micro_batches = static_cast<int>(c.train.grad_accum_steps);
    po.first_micro = dp_rank_ * c.train.grad_accum_steps;
    // Each micro-batch's forward is reported (backward: by phase_store_ when it starts).
    ASSIGN_OR_RETURN(pipeline_, PipelineRunner::Create(po, nullptr, {model_.get()}, shards_.get(),
                                                       [this] { Phase(TrainPhase::kForward); }));
  } else {
    // One model per chunk, each keeping as many micro-batches' activations as the schedule
    // has in flight on it.
    PipelineOptions po;
    po.schedule = c.parallel.pipeline_schedule;
    po.pp = pp_->size();
    po.stage = pp_->rank();
    po.virtual_stages = c.parallel.virtual_stages;
    po.micro_batches = static_cast<int>(c.train.grad_accum_steps);
    po.first_micro = dp_rank_ * c.train.grad_accum_steps;
    const std::vector<int> contexts = ChunkContexts(c, po.stage);
    std::vector<Transformer*> views;
    for (int k = 0; k < po.virtual_stages; ++k) {
      mo.chunk = k;
      mo.contexts = contexts[static_cast<size_t>(k)];
      ASSIGN_OR_RETURN(auto chunk, Transformer::Create(c.model, c.train.micro_batch_size,
                                                       c.train.seq_len, &memory_, mo));
      views.push_back(chunk.get());
      chunks_.push_back(std::move(chunk));
    }
    ASSIGN_OR_RETURN(pipeline_, PipelineRunner::Create(po, pp_, views, shards_.get()));
  }
  return Status::Ok();
}

// The initial weights: random (each rank initialises only what it holds), an init_from
// weights file, or (loaded later, see below) an init_from checkpoint.
Status Trainer::LoadInitialWeights() {
  const Config& c = config_;
  const ParamState::Fill seeded = [&](int64_t b, int64_t e, float* out) {
    partition_->InitRange(c.train.seed, b, e, out);
  };
  if (c.init_from.empty()) {
    RETURN_IF_ERROR(shards_->Load(seeded));
    return Status::Ok();
  }
  // finetune.lora: the adapters start from the seed, the frozen base from init_from.
  if (c.model.lora.enabled()) RETURN_IF_ERROR(shards_->LoadTrainable(seeded));
  if (auto dir = ResolveCheckpointDir(c.init_from); dir.ok()) {
    // Fine-tuning / continued pretraining from a checkpoint: its weights (and with
    // init_optimizer its moments and AdamW step); step, schedule and data start fresh. Loaded
    // once the checkpointer exists (Create: InitFromCheckpoint), which falls back past
    // damaged checkpoints of a root.
    init_from_checkpoint_ = true;
  } else if (c.init_optimizer) {
    return InvalidArgument("init_optimizer=true: init_from " + c.init_from +
                           " is not a checkpoint (" + dir.status().message() +
                           "); a weights file has no optimizer state");
  } else {
    RETURN_IF_ERROR(LoadHfInitialWeights());
  }
  return Status::Ok();
}

// init_from an HF checkpoint: each rank reads only what it holds (hf_load.h). Every rank
// learns whether every other one loaded, so a failure anywhere stops all of them before any
// training (never a job with one half-loaded rank).
Status Trainer::LoadHfInitialWeights() {
  const int threads = std::clamp(cpu::NumThreads(), 2, 8);
  Result<HfLoadReport> r = LoadHfShare(config_.init_from, *partition_, *shards_, threads);
  // A failing rank says why before the others learn of it: once any rank exits, mpirun ends
  // the job, and a message left for the exit could be lost.
  if (!r.ok()) {
    std::fprintf(stderr, "tessera: rank %d: %s\n", world_rank_, r.status().ToString().c_str());
    std::fflush(stderr);
  }
  // Per rank: its Status code (0: loaded), then the kHfLoadFields numbers of hf_load_.
  const std::vector<double> mine = {
      static_cast<double>(static_cast<int>(r.status().code())),
      r.ok() ? static_cast<double>(r->bytes_read) : 0.0,
      r.ok() ? static_cast<double>(r->peak_rss_growth) : -1.0,
      r.ok() ? static_cast<double>(r->share) : 0.0};
  const size_t fields = mine.size();
  std::vector<double> all = mine;
  if (all_ != nullptr) {
    ASSIGN_OR_RETURN(all, AllGatherDoubles(all_, mine));
  }
  if (!r.ok()) {
    return Status(r.status().code(), "init_from " + config_.init_from +
                                         ": this rank could not load its share (the line above)");
  }
  for (size_t rank = 0; rank < all.size() / fields; ++rank) {
    const double code = all[rank * fields];
    if (code != 0.0) {  // the same code, so every rank exits as the failed one does
      return Status(static_cast<StatusCode>(static_cast<int>(code)),
                    "init_from " + config_.init_from + ": rank " + std::to_string(rank) +
                        " could not load its share (see its message); no rank starts training");
    }
    hf_load_.insert(hf_load_.end(), all.begin() + rank * fields + 1, all.begin() + (rank + 1) * fields);
  }
  hf_load_line_ = DescribeHfLoad(*r);
  if (!r->routing_bias.empty()) {  // the file's routing bias (DeepSeek-V3's)
    moe_bias_ = r->routing_bias;
    for (Transformer* m : Models()) SetMoeBias(config_.model, *m, moe_bias_);
  }
  return Status::Ok();
}

void Trainer::SetUpLossScaler() {
  const MixedPrecisionConfig& mp = config_.mixed_precision;
  LossScaleConfig ls;
  ls.dynamic = mp.loss_scale == LossScaleMode::kDynamic;
  ls.initial = mp.initial_scale;
  ls.growth_interval = mp.growth_interval;
  ls.min_scale = mp.min_scale;
  ls.max_scale = std::max(ls.max_scale, ls.initial);
  loss_scaler_.emplace(ls);
}

Result<double> EvaluateLoss(Transformer& model, DataLoader& data, int64_t batches,
                            const std::function<Status()>& after_batch) {
  const int64_t B = model.batch_size(), T = model.seq_len();
  std::vector<int32_t> inputs(B * T), targets(B * T);
  data.Reset();
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    RETURN_IF_ERROR(data.NextBatch(B, inputs.data(), targets.data()));
    sum += model.Forward(inputs.data(), targets.data());
    if (after_batch) RETURN_IF_ERROR(after_batch());
  }
  return sum / static_cast<double>(batches);
}

Result<double> Trainer::Evaluate(int64_t batches) {
  if (!val_data_) return NotFound("no held-out data: set data.val to a token shard file or directory");
  // Each micro-batch through every virtual stage; the last stage's mean, then shared.
  val_data_->Reset();
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    RETURN_IF_ERROR(
        val_data_->NextBatch(config_.train.micro_batch_size, inputs_.data(), targets_.data()));
    ASSIGN_OR_RETURN(const double loss, pipeline_->Forward(inputs_.data(), targets_.data()));
    sum += loss;
  }
  ASSIGN_OR_RETURN(const double total, FromLastStage(sum));
  return total / static_cast<double>(batches);
}

// One optimizer step over the global batch, in phases: this rank's micro-batches forward and
// backward (their gradients reduced unit by unit as backward finishes them), the last
// reductions, the global loss, unscaling and clipping, the guard's verdict, and the update of
// this rank's pieces (for zero 1/2 with their all-gather).
Result<Trainer::StepResult> Trainer::TrainStep(float lr) {
  const int64_t accum = config_.train.grad_accum_steps;
  const double scale = loss_scaler_ ? loss_scaler_->scale() : 1.0;
  // Each micro-batch's loss is scaled by 1/(global micro-batches); the reduction then sums.
  // The fp16 loss scale is a power of two, so this product is exact.
  const float grad_scale = static_cast<float>(scale / static_cast<double>(accum * dp_size_));
  RETURN_IF_ERROR(shards_->status());
  shards_->BeginStep();
  ASSIGN_OR_RETURN(const ForwardBackwardResult pass, ForwardBackward(grad_scale));
  RETURN_IF_ERROR(SyncGrads());
  Phase(TrainPhase::kOptimizer);
  StepResult r;
  r.loss_scale = scale;
  ASSIGN_OR_RETURN(r.loss, GlobalLoss(pass));
  ASSIGN_OR_RETURN(const ClippedNorm clipped, ClipGradients());
  r.grad_norm = clipped.norm;
  Guard(r);
  if (r.guard.verdict == StepGuard::Verdict::kStop) return r;  // nothing changed: the caller stops
  if (!r.skipped) {
    checkpointer_->WaitForStateCopy();  // a save in flight still reads the state Step changes
    if (memory_tier_) memory_tier_->WaitForStateCopy();
    RETURN_IF_ERROR(shards_->Step(lr, clipped.grad_scale));
  }
  RETURN_IF_ERROR(FinishMoe(r));
  return r;
}

std::vector<Transformer*> Trainer::Models() {
  std::vector<Transformer*> models;
  if (model_) models.push_back(model_.get());
  for (auto& chunk : chunks_) models.push_back(chunk.get());
  return models;
}

std::vector<LocalMoeLayer> Trainer::LocalMoeLayers() {
  std::vector<LocalMoeLayer> local;
  for (Transformer* m : Models()) {
    const std::vector<int64_t> ids = m->moe_layer_ids();
    for (size_t i = 0; i < ids.size(); ++i) local.push_back({ids[i], &m->moe_layers()[i]});
  }
  return local;
}

// The MoE blocks after the step (moe_balance.h): statistics over the job, the balancing bias
// moved when the update was applied, the report; the bias of every block kept for checkpoints.
Status Trainer::FinishMoe(StepResult& r) {
  if (!config_.model.moe.enabled()) return Status::Ok();
  const std::vector<LocalMoeLayer> local = LocalMoeLayers();
  // Under finetune.lora the base, its routing bias included, stays as it was loaded.
  const bool update_bias = !r.skipped && !config_.model.lora.enabled();
  ASSIGN_OR_RETURN(r.moe, FinishMoeStep(config_.model, local, dp_, pp_, update_bias));
  moe_bias_.clear();
  for (const MoeLayerReport& l : r.moe.layers) moe_bias_.push_back(l.bias);
  return Status::Ok();
}

// The model's and the parameter state's errors after a pass (a failed reduction or gather
// inside backward or forward is kept there until asked).
Status Trainer::PassStatus(const Transformer& model) const {
  RETURN_IF_ERROR(shards_->status());
  return model.comm_status();
}

// This rank's micro-batches of the step, read at its place in the global batch (the data
// position ends the same on every rank), all at once: the schedule interleaves them (one
// stage: one after the other).
Result<Trainer::ForwardBackwardResult> Trainer::ForwardBackward(float grad_scale) {
  const int64_t B = config_.train.micro_batch_size, accum = config_.train.grad_accum_steps;
  ForwardBackwardResult pass;
  pass.micro_batches = accum;
  pass.tokens = accum * B * config_.train.seq_len;
  // finetune.lora.dropout: the step's masks follow from where it starts in the data, which a
  // resume restores (the pipeline gives micro k of the global batch its own key).
  const DataPosition at = train_data_->position();
  const uint64_t dropout_key =
      config_.model.lora.dropout > 0
          ? StreamKey(config_.train.seed, kLoraDropoutStream, static_cast<uint64_t>(at.epoch),
                      static_cast<uint64_t>(at.index))
          : 0;
  train_data_->Skip(dp_rank_ * accum * B);  // the micro-batches of lower ranks
  RETURN_IF_ERROR(LoadStepBatches());
  Phase(TrainPhase::kForward);
  ASSIGN_OR_RETURN(pass.loss_sum, pipeline_->TrainStep(step_inputs_.data(), step_targets_.data(),
                                                       grad_scale, dropout_key));
  train_data_->Skip((dp_size_ - 1 - dp_rank_) * accum * B);  // same position on every rank
  return pass;
}

// All of the step's micro-batches: micro k's token ids at k * B * T.
Status Trainer::LoadStepBatches() {
  const int64_t B = config_.train.micro_batch_size, accum = config_.train.grad_accum_steps;
  const int64_t tokens = B * config_.train.seq_len;
  step_inputs_.resize(static_cast<size_t>(accum * tokens));
  step_targets_.resize(static_cast<size_t>(accum * tokens));
  for (int64_t micro = 0; micro < accum; ++micro) {
    RETURN_IF_ERROR(train_data_->NextBatch(B, step_inputs_.data() + micro * tokens,
                                           step_targets_.data() + micro * tokens));
  }
  return Status::Ok();
}

// Still backward: the last gradient reductions, then (pp > 1, tied embeddings) the two
// stages' embedding gradients summed.
Status Trainer::SyncGrads() {
  RETURN_IF_ERROR(shards_->FinishGradients());
  return pipeline_->SyncTiedEmbeddings();
}

// The mean loss over the global batch, the same on every rank: the dp ranks' sums added in
// rank order (the order one rank adds its micro-batch losses), then the last stage's.
Result<double> Trainer::GlobalLoss(const ForwardBackwardResult& pass) {
  double loss_sum = pass.loss_sum;
  if (dp_ != nullptr) {
    ASSIGN_OR_RETURN(std::vector<double> sums, AllGatherDoubles(dp_, {loss_sum}));
    loss_sum = 0;
    for (double v : sums) loss_sum += v;
  }
  ASSIGN_OR_RETURN(loss_sum, FromLastStage(loss_sum));
  return loss_sum / static_cast<double>(pass.micro_batches * dp_size_);
}

// The guard's verdict on the step's global loss and norm (every rank sees the same ones, so
// every rank reaches the same verdict) and, unless the run stops, the loss scale's update.
void Trainer::Guard(StepResult& r) {
  const bool overflow = !std::isfinite(r.grad_norm) || !std::isfinite(r.loss);
  const bool can_back_off = loss_scaler_ && config_.mixed_precision.loss_scale == LossScaleMode::kDynamic &&
                            loss_scaler_->scale() > config_.mixed_precision.min_scale;
  r.guard = guard_->Decide(r.loss, r.grad_norm, can_back_off);
  if (r.guard.verdict == StepGuard::Verdict::kStop) return;
  if (loss_scaler_) (void)loss_scaler_->Update(overflow);
  r.skipped = r.guard.verdict != StepGuard::Verdict::kApply;
}

// clip_grad_norm_ over the global (unscaled) gradient with the same bits as one rank
// (ParamShards::GradSumOfSquares); only this rank's pieces are scaled, inside Step. Under tensor
// parallelism each tp rank sums its own parameters (copies of replicated ones only on tp
// rank 0) and the tp ranks' sums are added in rank order: every rank gets the same norm.
Result<Trainer::ClippedNorm> Trainer::ClipGradients() {
  double sum_sq = 0;
  if (tp_ == nullptr && pp_ == nullptr && ep_ == nullptr) {
    ASSIGN_OR_RETURN(sum_sq, shards_->GradSumOfSquares());
  } else {
    ASSIGN_OR_RETURN(const double mine,
                     shards_->GradSumOfSquaresExcluding(partition_->duplicate_ranges()));
    sum_sq = mine;
    if (tp_ != nullptr) {
      ASSIGN_OR_RETURN(std::vector<double> sums, AllGatherDoubles(tp_, {mine}));
      sum_sq = 0;
      for (double v : sums) sum_sq += v;
    }
  }
  if (pp_ != nullptr) {  // then the stages' sums, in stage order: the same on every rank
    ASSIGN_OR_RETURN(std::vector<double> sums, AllGatherDoubles(pp_, {sum_sq}));
    sum_sq = 0;
    for (double v : sums) sum_sq += v;
  }
  double norm = std::sqrt(sum_sq);
  if (!std::isfinite(norm)) return ClippedNorm{norm, 1.0f};  // the step is skipped
  if (loss_scaler_ && loss_scaler_->scale() != 1.0) {
    // Exact: the scale is a power of two.
    shards_->ScaleGradients(static_cast<float>(1.0 / loss_scaler_->scale()));
    norm /= loss_scaler_->scale();
  }
  return ClippedNorm{norm, ClipScale(norm, config_.optimizer.grad_clip)};
}


// The loop, as phases: BeginRun (outputs, banner); per step TrainStep (ForwardBackward,
// SyncGrads, clip, Guard, the update), then AfterStep (Account, MaybeEval, MaybeCheckpoint,
// Log, the supervisor's requests); FinishCheckpoints and Finish (export, summary).
Result<TrainSummary> Trainer::Run(FILE* out) {
  const TrainConfig& tc = config_.train;
  ASSIGN_OR_RETURN(RunProgress run, BeginRun(out));
  for (int64_t step = start_step_; step < tc.steps; ++step) {
    const auto t0 = Clock::now();
    const float lr = LearningRate(config_.schedule, config_.optimizer.lr, step, tc.steps);
    ASSIGN_OR_RETURN(StepResult r, TrainStep(lr));
    if (r.guard.verdict == StepGuard::Verdict::kStop) {
      return StopNonFinite(step + 1, r, NonFinite("step " + std::to_string(step + 1) + ": " + r.guard.reason),
                           run.metrics.get(), out);
    }
    ASSIGN_OR_RETURN(const bool stopped, AfterStep(step + 1, lr, r, t0, run, out));
    if (stopped) return run.summary;
  }
  RETURN_IF_ERROR(FinishCheckpoints());
  return Finish(run, out);
}

// Step `done` is trained (applied or skipped): its accounting, evaluation, checkpoint, metrics
// line and the supervisor's requests, in that order. True when the run stops here.
Result<bool> Trainer::AfterStep(int64_t done, float lr, const StepResult& r, Clock::time_point t0,
                                RunProgress& run, FILE* out) {
  if (link_ != nullptr) link_->SetStep(done);
  StepMetrics m;
  m.skipped = r.skipped;
  m.nonfinite = r.guard.verdict == StepGuard::Verdict::kSkipNonFinite;
  if (r.guard.has_zscore) m.spike_z = r.guard.zscore;
  if (loss_scaler_) m.loss_scale = r.loss_scale;
  if (is_root() && (r.guard.spike || m.nonfinite)) {
    std::fprintf(out, "tessera: step %lld: %s\n", static_cast<long long>(done), r.guard.reason.c_str());
    std::fflush(out);
  }
  const auto t1 = Clock::now();
  run.step_seconds += Seconds(t0, t1);
  Account(r, m, run);
  const bool last = done == config_.train.steps;
  RETURN_IF_ERROR(MaybeEval(done, last, m, run.summary));
  checkpointer_->NoteStepSeconds(Seconds(t0, t1));
  if (memory_tier_) memory_tier_->NoteStepSeconds(Seconds(t0, t1));
  ASSIGN_OR_RETURN(const bool saved_this_step, MaybeCheckpoint(done, last));
  if (is_root()) RETURN_IF_ERROR(Log(done, lr, r, Seconds(t0, t1), Seconds(run.start, t1), last, m, run, out));
  // The last step needs no agreement: the run ends (and saves, if at_end asks) anyway.
  if (link_ == nullptr || last) return false;
  bool stop = false;
  RETURN_IF_ERROR(HandleLinkRequests(done, saved_this_step, out, &stop));
  if (stop) ReportStopped(done, run, out);
  return stop;
}

// The run's totals after one more step.
void Trainer::Account(const StepResult& r, const StepMetrics& m, RunProgress& run) {
  TrainSummary& summary = run.summary;
  ++summary.steps;
  summary.tokens += run.tokens_per_step;
  summary.skipped_steps += m.skipped;
  summary.nonfinite_steps += m.nonfinite;
  summary.spikes += r.guard.spike;
  if (std::isfinite(r.loss)) {  // a skipped non-finite step says nothing about the loss level
    summary.best_loss = std::min(summary.best_loss, r.loss);
    run.interval_loss += r.loss;
    ++run.interval_steps;
  }
}

// The held-out loss every eval_interval steps and after the last one (every rank: ZeRO-3
// gathers and the pipeline's transfers are collective).
Status Trainer::MaybeEval(int64_t done, bool last, StepMetrics& m, TrainSummary& summary) {
  const TrainConfig& tc = config_.train;
  if (!val_data_ || !((tc.eval_interval > 0 && done % tc.eval_interval == 0) || last)) {
    return Status::Ok();
  }
  Phase(TrainPhase::kEval);
  ASSIGN_OR_RETURN(double val, Evaluate(tc.eval_batches));
  m.val_loss = val;
  summary.val_loss = val;
  return Status::Ok();
}

// Checkpoints: completes a save whose writers are done; starts one when due (every rank).
// True when a save of step `done` was started.
Result<bool> Trainer::MaybeCheckpoint(int64_t done, bool last) {
  Phase(TrainPhase::kCheckpoint);
  RETURN_IF_ERROR(checkpointer_->Poll(/*block=*/false));
  bool saved_this_step = false;
  if (checkpointer_->Due(done, config_.train.steps)) {
    const int64_t skipped = checkpointer_->stats().skipped;
    // The final save is never skipped (on_busy: skip): the one in flight completes first.
    RETURN_IF_ERROR(last ? SaveNow(done) : checkpointer_->Save(done, *shards_, StateJson(done), LayoutJson()));
    saved_this_step = checkpointer_->stats().skipped == skipped;
  }
  if (memory_tier_) {
    RETURN_IF_ERROR(memory_tier_->Poll(/*block=*/false));
    // Not at a step the disk tier saves: that one is as good and durable.
    if (!saved_this_step && memory_tier_->Due(done, config_.train.steps)) {
      RETURN_IF_ERROR(memory_tier_->Save(done, *shards_, StateJson(done), LayoutJson()));
    }
  }
  Phase(TrainPhase::kIdle);
  return saved_this_step;
}

// Rank 0: the step's metrics.jsonl line and, every log_interval steps (and the first and
// last), the progress line.
Status Trainer::Log(int64_t done, float lr, const StepResult& r, double step_seconds,
                    double elapsed_seconds, bool last, StepMetrics& m, RunProgress& run, FILE* out) {
  const TrainConfig& tc = config_.train;
  m.step = done;
  m.total_steps = tc.steps;
  m.loss = r.loss;
  m.floor = run.summary.floor;
  m.lr = lr;
  m.grad_norm = r.grad_norm;
  m.tokens = run.tokens_per_step;
  m.total_tokens = run.summary.tokens;
  m.step_seconds = step_seconds;
  m.elapsed_seconds = elapsed_seconds;
  // Rates over the whole run so far: steady, and honest about startup costs.
  m.tokens_per_second = run.summary.tokens / m.elapsed_seconds;
  // Against the peak of every rank of the job (rank 0's measurement times the ranks).
  m.mfu = peak_flops_ > 0 ? m.tokens_per_second * run.flops_per_token / (peak_flops_ * dp_size_) : 0;
  m.eta_seconds = m.elapsed_seconds / (m.step - start_step_) * (tc.steps - m.step);
  if (!r.moe.layers.empty()) {
    m.moe = r.moe;
    run.moe_recent.push_back(r.moe.layers);
    if (run.moe_recent.size() > kMoeHistogramSteps) run.moe_recent.pop_front();
  }
  RETURN_IF_ERROR(run.metrics->Append(m));
  if (m.step % tc.log_interval == 0 || last || m.step == 1) {
    std::fprintf(out, "%s\n", FormatProgressLine(m).c_str());
    std::fflush(out);
    run.summary.final_loss = run.interval_loss / run.interval_steps;
    run.summary.final_loss_steps = run.interval_steps;
    run.interval_loss = 0;
    run.interval_steps = 0;
  }
  return Status::Ok();
}

// Stopped on the supervisor's request after step `done`: the summary says so, rank 0 says
// where.
void Trainer::ReportStopped(int64_t done, RunProgress& run, FILE* out) {
  run.summary.stopped = true;
  run.summary.wall_seconds = Seconds(run.start, Clock::now());
  if (!is_root()) return;
  std::fprintf(out, "tessera: stopped after %lld steps this run (%lld..%lld) in %s%s\n",
               static_cast<long long>(run.summary.steps), static_cast<long long>(start_step_ + 1),
               static_cast<long long>(done), FormatDuration(run.summary.wall_seconds).c_str(),
               checkpointer_->enabled() ? "; resume: auto continues from its checkpoint" : "");
  std::fflush(out);
}

// Every save completed; the run's last word is its final checkpoint: a run that could not
// save it has not finished (a restart resumes from the newest committed one and saves again).
Status Trainer::FinishCheckpoints() {
  const int64_t steps = config_.train.steps;
  Phase(TrainPhase::kCheckpoint);
  RETURN_IF_ERROR(checkpointer_->Poll(/*block=*/true));
  if (memory_tier_) RETURN_IF_ERROR(memory_tier_->Poll(/*block=*/true));
  Phase(TrainPhase::kIdle);
  const int64_t newest = checkpointer_->stats().last_committed_step;
  if (checkpointer_->Due(steps, steps) && start_step_ < steps && newest != steps) {
    return IoError("the final checkpoint (step " + std::to_string(steps) + ") was not committed "
                   "(see the checkpoint messages above); newest committed: " +
                   (newest >= 0 ? "step " + std::to_string(newest) : std::string("none this run")));
  }
  // The run is over and on disk: the snapshots in memory (RAM on every host) are freed.
  if (memory_tier_ && newest == steps) memory_tier_->Discard();
  return Status::Ok();
}

}  // namespace tessera
