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
#include "models/param_layout.h"
#include "optimizer/grad_clip.h"
#include "optimizer/lr_schedule.h"
#include "runtime/core/file_util.h"
#include "runtime/core/json.h"
#include "runtime/kernels/cpu/bench.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/train/env_info.h"
#include "runtime/train/metrics.h"
#include "runtime/train/rank_layout.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

// The MFU denominator in FLOP/s. Measuring it costs ~0.7 s of sgemm on one thread, which a
// restart under the supervisor would pay again before its first step; a resumed run on the
// same host reuses the figure the run it continues measured (also keeping MFU comparable
// across the restart), kept in <out_dir>/sgemm_peak.txt as "HOST GFLOPS".
double PeakSgemmFlops(const std::string& out_dir, bool resumed) {
  const std::string path = out_dir + "/sgemm_peak.txt";
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
  const double gflops = cpu::MeasurePeakSgemmGflops();
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  char line[320];
  std::snprintf(line, sizeof line, "%s %.3f\n", host, gflops);
  (void)WriteFileAtomic(path, line);  // best effort: only costs a re-measurement
  return gflops * 1e9;
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
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
  ASSIGN_OR_RETURN(auto model, Transformer::Create(config.model, config.train.micro_batch_size,
                                                   config.train.seq_len, memory));
  const std::string& weights = weights_override.empty() ? config.init_from : weights_override;
  if (weights.empty()) {
    model->InitRandom(config.train.seed);
  } else {
    RETURN_IF_ERROR(LoadHfWeights(weights, config.model, model->parameters()));
  }
  return model;
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
    auto steps = CommittedSteps(config.checkpoint.dir);
    if (steps.ok() && !steps->empty()) {
      return InvalidArgument("checkpoint.dir " + config.checkpoint.dir +
                             " already holds committed checkpoints (newest: step " +
                             std::to_string(steps->front()) +
                             "): set resume: auto to continue from them, or use another "
                             "checkpoint.dir for a fresh run");
    }
  }
  const int64_t tokens = config.train.micro_batch_size * T;
  t->inputs_.resize(tokens);
  t->targets_.resize(tokens);
  // The MFU denominator: what sgemm reaches on this machine right now (the same measurement
  // `tessera bench` uses). Rank 0 reports it; the others would only contend for the cores.
  if (t->is_root()) {
    t->peak_flops_ = config.train.peak_gflops > 0
                         ? config.train.peak_gflops * 1e9
                         : PeakSgemmFlops(config.train.out_dir, t->start_step_ > 0);
  }
  if (link != nullptr) link->SetStep(t->start_step_);
  return t;
}


// The parameter state (sharded as configured), the model on top of it, and the initial
// weights: random (each rank initialises only what it holds) or init_from.
Status Trainer::SetUpParameters() {
  const Config& c = config_;
  ParamShardsOptions o;
  o.zero = c.parallel.zero;
  o.param_dtype = PrecisionDType(c.precision);
  o.reduce_dtype = c.mixed_precision.reduce_in_low ? o.param_dtype : DType::kF32;
  o.grad_accum_steps = c.train.grad_accum_steps;
  o.bucket_elems = std::max<int64_t>(
      1, static_cast<int64_t>(c.comm.bucket_mb * 1048576.0 / sizeof(float)));
  // ParamShards checks that this rank's share of parameters, gradients and optimizer state
  // fits before reserving it; Transformer::Create then checks the activations.
  // This rank's share of the model (tensor parallelism, pipeline chunks: models/partition.h,
  // rank_layout.h; else all of it).
  ASSIGN_OR_RETURN(ModelPartition partition, RankPartition(c, world_rank_));
  partition_.emplace(std::move(partition));
  for (size_t k = 1; k < partition_->chunks().size(); ++k) {
    o.embedding_units.push_back(partition_->chunk_unit_begin(static_cast<int>(k)));
  }
  ASSIGN_OR_RETURN(shards_, ParamShards::Create(o, c.optimizer, partition_->unit_bounds(),
                                                DecayRanges(*partition_, c.optimizer), dp_, &memory_));
  ModelOptions mo;
  mo.store = shards_.get();
  if (link_ != nullptr) {
    phase_store_ = std::make_unique<PhaseReportingStore>(*shards_, *link_);
    mo.store = phase_store_.get();
  }
  mo.activation_dtype = o.param_dtype;
  mo.tp = tp_;
  mo.sequence_parallel = c.parallel.sequence_parallel;
  mo.partition = &*partition_;
  if (pp_ == nullptr) {
    ASSIGN_OR_RETURN(model_, Transformer::Create(c.model, c.train.micro_batch_size,
                                                 c.train.seq_len, &memory_, mo));
  } else {
    // One model per chunk, each keeping as many micro-batches' activations as the schedule
    // has in flight on it.
    PipelineOptions po;
    po.schedule = c.parallel.pipeline_schedule;
    po.pp = pp_->size();
    po.stage = pp_->rank();
    po.virtual_stages = c.parallel.virtual_stages;
    po.micro_batches = static_cast<int>(c.train.grad_accum_steps);
    const std::vector<int> contexts = PipelineContextsPerChunk(po);
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
  if (c.init_from.empty()) {
    shards_->Load([&](int64_t b, int64_t e, float* out) {
      partition_->InitRange(c.train.seed, b, e, out);
    });
  } else if (auto dir = ResolveCheckpointDir(c.init_from); dir.ok()) {
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
    // The whole file is read on every rank (each keeps its pieces): a transient full fp32
    // copy of the global model, released before training starts.
    std::vector<float> full(static_cast<size_t>(UnitBounds(c.model).back()));
    std::vector<Parameter> views = GlobalViews(c.model, full.data());
    RETURN_IF_ERROR(LoadHfWeights(c.init_from, c.model, views));
    shards_->Load([&](int64_t b, int64_t e, float* out) {
      FillFromGlobal(*partition_, full.data(), b, e, out);
    });
  }
  if (c.precision == Precision::kFp16) {
    LossScaleConfig ls;
    ls.dynamic = c.mixed_precision.loss_scale == LossScaleMode::kDynamic;
    ls.initial = c.mixed_precision.initial_scale;
    ls.growth_interval = c.mixed_precision.growth_interval;
    ls.min_scale = c.mixed_precision.min_scale;
    ls.max_scale = std::max(ls.max_scale, ls.initial);
    loss_scaler_.emplace(ls);
  }
  return Status::Ok();
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
  if (pipeline_) {
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
  return EvaluateLoss(*model_, *val_data_, batches, [this] {
    RETURN_IF_ERROR(shards_->status());
    return model_->comm_status();
  });
}

// One optimizer step over the global batch: this rank's micro-batches (their gradients reduced
// unit by unit as backward finishes them), unscaling and clipping, the update of this rank's
// pieces and, for zero 1/2, their all-gather.
Result<Trainer::StepResult> Trainer::TrainStep(float lr) {
  const TrainConfig& tc = config_.train;
  const int64_t B = tc.micro_batch_size, accum = tc.grad_accum_steps;
  const double scale = loss_scaler_ ? loss_scaler_->scale() : 1.0;
  // Each micro-batch's loss is scaled by 1/(global micro-batches); the reduction then sums.
  // The fp16 loss scale is a power of two, so this product is exact.
  const float grad_scale = static_cast<float>(scale / static_cast<double>(accum * dp_size_));
  RETURN_IF_ERROR(shards_->status());
  shards_->BeginStep();
  train_data_->Skip(dp_rank_ * accum * B);  // the micro-batches of lower ranks
  double loss_sum = 0;
  if (pipeline_) {
    // All of the step's micro-batches first: the schedule interleaves them.
    const int64_t tokens = B * tc.seq_len;
    step_inputs_.resize(static_cast<size_t>(accum * tokens));
    step_targets_.resize(static_cast<size_t>(accum * tokens));
    for (int64_t micro = 0; micro < accum; ++micro) {
      RETURN_IF_ERROR(train_data_->NextBatch(B, step_inputs_.data() + micro * tokens,
                                             step_targets_.data() + micro * tokens));
    }
    Phase(TrainPhase::kForward);
    ASSIGN_OR_RETURN(loss_sum, pipeline_->TrainStep(step_inputs_.data(), step_targets_.data(),
                                                    grad_scale));
  } else {
    for (int64_t micro = 0; micro < accum; ++micro) {
      Phase(TrainPhase::kForward);  // backward: reported by phase_store_ when it starts
      shards_->BeginMicroBatch(micro);
      RETURN_IF_ERROR(train_data_->NextBatch(B, inputs_.data(), targets_.data()));
      loss_sum += model_->ForwardBackward(inputs_.data(), targets_.data(), grad_scale);
      RETURN_IF_ERROR(shards_->status());
      RETURN_IF_ERROR(model_->comm_status());
    }
  }
  train_data_->Skip((dp_size_ - 1 - dp_rank_) * accum * B);  // same position on every rank
  RETURN_IF_ERROR(shards_->FinishGradients());  // still backward: its last reductions
  if (pipeline_) RETURN_IF_ERROR(pipeline_->SyncTiedEmbeddings());
  Phase(TrainPhase::kOptimizer);
  StepResult r;
  r.loss_scale = scale;
  if (dp_ != nullptr) {
    // Serial order of the per-rank sums = the order one rank adds its micro-batch losses.
    ASSIGN_OR_RETURN(std::vector<double> sums, AllGatherDoubles(dp_, {loss_sum}));
    loss_sum = 0;
    for (double v : sums) loss_sum += v;
  }
  if (pipeline_) {
    ASSIGN_OR_RETURN(loss_sum, FromLastStage(loss_sum));
  }
  r.loss = loss_sum / static_cast<double>(accum * dp_size_);
  ASSIGN_OR_RETURN(const ClippedNorm clipped, ClipGradients());
  r.grad_norm = clipped.norm;
  // Every rank sees the same norm and loss, so every rank reaches the same verdict.
  const bool overflow = !std::isfinite(r.grad_norm) || !std::isfinite(r.loss);
  const bool can_back_off = loss_scaler_ && config_.mixed_precision.loss_scale == LossScaleMode::kDynamic &&
                            loss_scaler_->scale() > config_.mixed_precision.min_scale;
  r.guard = guard_->Decide(r.loss, r.grad_norm, can_back_off);
  if (r.guard.verdict == StepGuard::Verdict::kStop) return r;  // nothing changed: the caller stops
  if (loss_scaler_) (void)loss_scaler_->Update(overflow);
  r.skipped = r.guard.verdict != StepGuard::Verdict::kApply;
  if (r.skipped) return r;
  checkpointer_->WaitForStateCopy();  // a save in flight still reads the state Step changes
  RETURN_IF_ERROR(shards_->Step(lr, clipped.grad_scale));
  return r;
}

// clip_grad_norm_ over the global (unscaled) gradient with the same bits as one rank
// (ParamShards::GradSumOfSquares); only this rank's pieces are scaled, inside Step. Under tensor
// parallelism each tp rank sums its own parameters (copies of replicated ones only on tp
// rank 0) and the tp ranks' sums are added in rank order: every rank gets the same norm.
Result<Trainer::ClippedNorm> Trainer::ClipGradients() {
  double sum_sq = 0;
  if (tp_ == nullptr && pp_ == nullptr) {
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


Result<std::vector<double>> Trainer::GatherMemory() {
  std::vector<double> mine;
  for (int k = 0; k < static_cast<int>(MemoryKind::kCount); ++k) {
    mine.push_back(static_cast<double>(memory_.reserved(static_cast<MemoryKind>(k))));
  }
  if (all_ == nullptr) return mine;
  return AllGatherDoubles(all_, mine);
}

namespace {

// <out_dir>/memory.json: the layout and each rank's peak reserved bytes by kind.
std::string MemoryJson(const Config& c, const std::vector<double>& all, int ranks) {
  const int kinds = static_cast<int>(MemoryKind::kCount);
  JsonWriter w;
  w.BeginObject();
  w.Key("dp").Int(c.parallel.dp);
  w.Key("tp").Int(c.parallel.tp);
  w.Key("pp").Int(c.parallel.pp);
  w.Key("sequence_parallel").Bool(c.parallel.sequence_parallel);
  w.Key("zero").Int(c.parallel.zero);
  w.Key("precision").String(PrecisionName(c.precision));
  w.Key("offload").String(OptimizerOffloadName(c.optimizer.offload));
  w.Key("ranks").BeginArray();
  for (int r = 0; r < ranks; ++r) {
    w.BeginObject().Key("rank").Int(r);
    for (int k = 0; k < kinds; ++k) {
      std::string name = MemoryKindName(static_cast<MemoryKind>(k));
      std::replace(name.begin(), name.end(), ' ', '_');
      w.Key(name + "_bytes").Int(static_cast<int64_t>(all[r * kinds + k]));
    }
    w.EndObject();
  }
  w.EndArray().EndObject();
  return w.str() + "\n";
}

}  // namespace

Result<TrainSummary> Trainer::Run(FILE* out) {
  const TrainConfig& tc = config_.train;
  const bool root = is_root();
  std::unique_ptr<MetricsFile> metrics;
  if (root) {
    std::error_code ec;  // out_dir exists: Create made it (CheckOutputs)
    // Weights of an earlier run in the same directory must not outlive its metrics: a run
    // that is interrupted leaves no model.safetensors rather than one of another run.
    std::filesystem::remove(tc.out_dir + "/model.safetensors", ec);
    RETURN_IF_ERROR(WriteFileAtomic(tc.out_dir + "/config.yaml", config_.resolved_yaml));
    RETURN_IF_ERROR(WriteFileAtomic(tc.out_dir + "/env.json", EnvironmentFingerprintJson() + "\n"));
    // A resumed run continues the metrics of the run it resumes, from the resumed step: lines
    // the interrupted run wrote past its checkpoint are dropped (they are redone).
    const std::string metrics_path = tc.out_dir + "/metrics.jsonl";
    if (start_step_ > 0) RETURN_IF_ERROR(TruncateMetrics(metrics_path, start_step_));
    ASSIGN_OR_RETURN(metrics, MetricsFile::Create(metrics_path, start_step_ > 0));
  }

  const int64_t B = tc.micro_batch_size, T = tc.seq_len, accum = tc.grad_accum_steps;
  const int64_t tokens_per_step = B * T * accum * dp_size_;
  const std::optional<double> floor = train_data_->entropy_floor();
  // This rank's share of the FLOPs per token (tp already divides it; pp splits the layers).
  const double flops_per_token =
      model_ ? model_->TrainFlopsPerToken()
             : chunks_.front()->TrainFlopsPerToken() / static_cast<double>(pp_->size());
  if (root) {
    std::fprintf(out, "tessera: %s model, %.2fM parameters, %lld layers, %s recompute\n",
                 ModelFamilyName(config_.model.family), UnitBounds(config_.model).back() / 1e6,
                 static_cast<long long>(config_.model.num_layers),
                 RecomputePolicyName(config_.model.recompute));
    std::fprintf(out, "tessera: data: %s\n", train_data_->Describe().c_str());
    if (dp_size_ > 1 || config_.parallel.zero > 0 || config_.precision != Precision::kFp32 ||
        config_.optimizer.offload != OptimizerOffload::kNone) {
      std::fprintf(out, "tessera: data parallel: dp=%d, %s, optimizer offload %s\n", dp_size_,
                   shards_->Describe().c_str(), OptimizerOffloadName(config_.optimizer.offload));
    }
    if (tp_ != nullptr) {
      std::fprintf(out,
                   "tessera: tensor parallel: tp=%d (%lld heads, %lld kv heads, %lld MLP columns "
                   "and %lld vocabulary rows per rank%s), %.2fM parameters per rank\n",
                   tp_->size(), static_cast<long long>(config_.model.num_heads / tp_->size()),
                   static_cast<long long>(config_.model.kv_heads() / tp_->size()),
                   static_cast<long long>(config_.model.ffn_size() / tp_->size()),
                   static_cast<long long>(partition_->vocab_per_rank()),
                   config_.parallel.sequence_parallel ? ", sequence parallel" : "",
                   partition_->num_local() / 1e6);
    }
    if (pp_ != nullptr) {
      const ParallelConfig& par = config_.parallel;
      const int v = par.virtual_stages;
      auto split = PipelineLayerSplit(config_.model.num_layers, pp_->size() * v,
                                      par.pipeline_split, par.account_for_embedding_and_head);
      std::string layers;
      for (int64_t n : split.ok() ? *split : std::vector<int64_t>()) {
        layers += (layers.empty() ? "" : ", ") + std::to_string(n);
      }
      std::fprintf(out,
                   "tessera: pipeline parallel: pp=%d, %s%s, %lld micro-batches per step, layers "
                   "per virtual stage [%s], theoretical bubble %.1f%%\n",
                   pp_->size(), PipelineScheduleName(par.pipeline_schedule),
                   v > 1 ? (" x " + std::to_string(v) + " chunks per rank").c_str() : "",
                   static_cast<long long>(accum), layers.c_str(),
                   100 * TheoreticalBubble(par.pipeline_schedule, pp_->size(),
                                           static_cast<int>(accum), v));
    }
    if (loss_scaler_) {
      std::fprintf(out, "tessera: fp16 %s loss scaling from %g\n",
                   LossScaleModeName(config_.mixed_precision.loss_scale), loss_scaler_->scale());
    }
    std::fprintf(out,
                 "tessera: %lld steps x %lld tokens (micro-batch %lld x seq %lld x accum %lld x "
                 "dp %d), threads %s, %s %.1f GFLOP/s (MFU denominator)\n",
                 static_cast<long long>(tc.steps), static_cast<long long>(tokens_per_step),
                 static_cast<long long>(B), static_cast<long long>(T),
                 static_cast<long long>(accum), dp_size_, threads_.c_str(),
                 tc.peak_gflops > 0 ? "train.peak_gflops" : "sgemm peak", peak_flops_ / 1e9);
    std::fflush(out);
  }

  TrainSummary summary;
  summary.floor = floor;
  summary.best_loss = INFINITY;
  double interval_loss = 0;
  int64_t interval_steps = 0;
  const auto start = Clock::now();

  if (root && start_step_ > 0) {
    std::fprintf(out, "tessera: resumed at step %lld of %lld%s\n", static_cast<long long>(start_step_),
                 static_cast<long long>(tc.steps),
                 start_step_ >= tc.steps ? " (nothing left to train: raise train.steps to go on)" : "");
  }
  for (int64_t step = start_step_; step < tc.steps; ++step) {
    const auto t0 = Clock::now();
    const float lr = LearningRate(config_.schedule, config_.optimizer.lr, step, tc.steps);
    ASSIGN_OR_RETURN(StepResult r, TrainStep(lr));
    if (r.guard.verdict == StepGuard::Verdict::kStop) {
      return StopNonFinite(step + 1, r, NonFinite("step " + std::to_string(step + 1) + ": " + r.guard.reason),
                           metrics.get(), out);
    }
    if (link_ != nullptr) link_->SetStep(step + 1);
    const double loss = r.loss;
    StepMetrics m;
    m.skipped = r.skipped;
    m.nonfinite = r.guard.verdict == StepGuard::Verdict::kSkipNonFinite;
    if (r.guard.has_zscore) m.spike_z = r.guard.zscore;
    if (loss_scaler_) m.loss_scale = r.loss_scale;
    if (root && (r.guard.spike || m.nonfinite)) {
      std::fprintf(out, "tessera: step %lld: %s\n", static_cast<long long>(step + 1),
                   r.guard.reason.c_str());
      std::fflush(out);
    }
    const auto t1 = Clock::now();

    summary.steps = step + 1 - start_step_;
    summary.tokens += tokens_per_step;
    summary.skipped_steps += m.skipped;
    summary.nonfinite_steps += m.nonfinite;
    summary.spikes += r.guard.spike;
    if (std::isfinite(loss)) {  // a skipped non-finite step says nothing about the loss level
      summary.best_loss = std::min(summary.best_loss, loss);
      interval_loss += loss;
      ++interval_steps;
    }
    const bool last = step + 1 == tc.steps;
    if (val_data_ && ((tc.eval_interval > 0 && (step + 1) % tc.eval_interval == 0) || last)) {
      Phase(TrainPhase::kEval);
      ASSIGN_OR_RETURN(double val, Evaluate(tc.eval_batches));
      m.val_loss = val;
      summary.val_loss = val;
    }
    // Checkpoints: complete a save whose writers are done; start one when due (every rank).
    Phase(TrainPhase::kCheckpoint);
    RETURN_IF_ERROR(checkpointer_->Poll(/*block=*/false));
    bool saved_this_step = false;
    if (checkpointer_->Due(step + 1, tc.steps)) {
      const int64_t skipped = checkpointer_->stats().skipped;
      // The final save is never skipped (on_busy: skip): the one in flight completes first.
      RETURN_IF_ERROR(last ? SaveNow(step + 1)
                           : checkpointer_->Save(step + 1, *shards_, StateJson(step + 1), LayoutJson()));
      saved_this_step = checkpointer_->stats().skipped == skipped;
    }
    Phase(TrainPhase::kIdle);
    if (root) {
      m.step = step + 1;
      m.total_steps = tc.steps;
      m.loss = loss;
      m.floor = floor;
      m.lr = lr;
      m.grad_norm = r.grad_norm;
      m.tokens = tokens_per_step;
      m.total_tokens = summary.tokens;
      m.step_seconds = Seconds(t0, t1);
      m.elapsed_seconds = Seconds(start, t1);
      // Rates over the whole run so far: steady, and honest about startup costs.
      m.tokens_per_second = summary.tokens / m.elapsed_seconds;
      // Against the peak of every rank of the job (rank 0's measurement times the ranks).
      m.mfu = peak_flops_ > 0 ? m.tokens_per_second * flops_per_token / (peak_flops_ * dp_size_) : 0;
      m.eta_seconds = m.elapsed_seconds / (m.step - start_step_) * (tc.steps - m.step);
      RETURN_IF_ERROR(metrics->Append(m));
      if (m.step % tc.log_interval == 0 || last || m.step == 1) {
        std::fprintf(out, "%s\n", FormatProgressLine(m).c_str());
        std::fflush(out);
        summary.final_loss = interval_loss / interval_steps;
        summary.final_loss_steps = interval_steps;
        interval_loss = 0;
        interval_steps = 0;
      }
    }
    // The last step needs no agreement: the run ends (and saves, if at_end asks) anyway.
    if (link_ != nullptr && !last) {
      bool stop = false;
      RETURN_IF_ERROR(HandleLinkRequests(step + 1, saved_this_step, out, &stop));
      if (stop) {
        summary.stopped = true;
        summary.wall_seconds = Seconds(start, Clock::now());
        if (root) {
          std::fprintf(out, "tessera: stopped after %lld steps this run (%lld..%lld) in %s%s\n",
                       static_cast<long long>(summary.steps),
                       static_cast<long long>(start_step_ + 1), static_cast<long long>(step + 1),
                       FormatDuration(summary.wall_seconds).c_str(),
                       checkpointer_->enabled() ? "; resume: auto continues from its checkpoint"
                                                : "");
          std::fflush(out);
        }
        return summary;
      }
    }
  }
  Phase(TrainPhase::kCheckpoint);
  RETURN_IF_ERROR(checkpointer_->Poll(/*block=*/true));
  Phase(TrainPhase::kIdle);
  if (checkpointer_->Due(tc.steps, tc.steps) && start_step_ < tc.steps &&
      checkpointer_->stats().last_committed_step != tc.steps) {
    // The run's last word is its final checkpoint: a run that could not save it has not
    // finished (a restart resumes from the newest committed one and saves again).
    return IoError("the final checkpoint (step " + std::to_string(tc.steps) + ") was not committed "
                   "(see the checkpoint messages above); newest committed: " +
                   (checkpointer_->stats().last_committed_step >= 0
                        ? "step " + std::to_string(checkpointer_->stats().last_committed_step)
                        : std::string("none this run")));
  }
  summary.wall_seconds = Seconds(start, Clock::now());
  ASSIGN_OR_RETURN(std::vector<double> memory, GatherMemory());
  ASSIGN_OR_RETURN(std::vector<float> full, GatherGlobalWeights());
  std::vector<double> idle;  // per rank: idle share of the pipelined passes
  if (pipeline_) {
    ASSIGN_OR_RETURN(idle, AllGatherDoubles(all_, {pipeline_->stats().mean_idle_fraction()}));
  }
  if (!root) return summary;
  const std::string weights = tc.out_dir + "/model.safetensors";
  RETURN_IF_ERROR(ExportHfWeights(weights, config_.model, GlobalViews(config_.model, full.data()),
                                  DType::kF32));
  const int ranks = all_ != nullptr ? all_->size() : 1;
  RETURN_IF_ERROR(WriteFileAtomic(tc.out_dir + "/memory.json", MemoryJson(config_, memory, ranks)));

  std::string report = memory_.Report();
  if (ranks > 1) report += FormatMemoryTable(memory, ranks);
  std::fputs(FormatSummary(summary, report, tc.out_dir).c_str(), out);
  if (checkpointer_->enabled()) {
    const CheckpointStats& cs = checkpointer_->stats();
    std::fprintf(out,
                 "  checkpoints      %lld committed, %lld failed, %lld skipped under %s; training "
                 "stalled %.1f ms for them in all\n",
                 static_cast<long long>(cs.committed), static_cast<long long>(cs.failed),
                 static_cast<long long>(cs.skipped), config_.checkpoint.dir.c_str(),
                 1e3 * cs.stall_seconds);
  }
  if (!idle.empty() && pipeline_->stats().steps > 1) {
    double mean = 0;
    for (double v : idle) mean += v / static_cast<double>(idle.size());
    std::fprintf(out,
                 "  pipeline         ranks idle %.1f%% of the pipelined passes on average "
                 "(theoretical bubble %.1f%%; the rest: transfers and stage imbalance)\n",
                 100 * mean,
                 100 * TheoreticalBubble(config_.parallel.pipeline_schedule, pp_->size(),
                                         static_cast<int>(tc.grad_accum_steps),
                                         config_.parallel.virtual_stages));
  }
  std::fflush(out);
  return summary;
}

}  // namespace tessera
