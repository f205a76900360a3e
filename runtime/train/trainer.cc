// runtime/train/trainer.cc — the training loop and its outputs (see trainer.h for the
// contract). Single-threaded driver; kernels parallelise inside.
#include "runtime/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "models/hf_weights.h"
#include "optimizer/grad_clip.h"
#include "optimizer/lr_schedule.h"
#include "runtime/core/file_util.h"
#include "runtime/core/json.h"
#include "runtime/kernels/cpu/bench.h"
#include "runtime/kernels/cpu/ops.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/train/env_info.h"
#include "runtime/train/metrics.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
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

Result<std::unique_ptr<Trainer>> Trainer::Create(const Config& config, World* world) {
  std::unique_ptr<Trainer> t(new Trainer(config));
  cpu::SetNumThreads(config.train.threads);
  if (world != nullptr && world->dense_dp() != nullptr && world->dense_dp()->size() > 1) {
    t->dp_ = world->dense_dp();
    t->dp_rank_ = t->dp_->rank();
    t->dp_size_ = t->dp_->size();
  }
  ASSIGN_OR_RETURN(t->model_, BuildModel(config, &t->memory_));
  RETURN_IF_ERROR(t->SetUpParallel());
  const int64_t V = config.model.vocab_size, T = config.train.seq_len;
  ASSIGN_OR_RETURN(t->train_data_,
                   DataLoader::Open(config.data, Split::kTrain, V, T, config.train.seed));
  // Every rank evaluates (the same batches): ranks stay in step, so a long evaluation can
  // never look like a hung peer to the others' bounded collectives.
  if (DataLoader::HasSplit(config.data, Split::kVal)) {
    // A held-out split that was asked for and is broken fails here, before any step runs.
    ASSIGN_OR_RETURN(t->val_data_, DataLoader::Open(config.data, Split::kVal, V, T, config.train.seed));
  }
  const int64_t tokens = config.train.micro_batch_size * T;
  t->inputs_.resize(tokens);
  t->targets_.resize(tokens);
  // The MFU denominator: what sgemm reaches on this machine right now (the same measurement
  // `tessera bench` uses). Rank 0 reports it; the others would only contend for the cores.
  if (t->is_root()) t->peak_flops_ = cpu::MeasurePeakSgemmGflops() * 1e9;
  return t;
}

// The optimizer partition, the gradient buffers and the communication of the layout.
Status Trainer::SetUpParallel() {
  const int64_t n = model_->num_params();
  const int zero = config_.parallel.zero;
  const int64_t accum = config_.train.grad_accum_steps;
  main_grads_ = model_->flat_grads().f32();
  if (accum > 1) {
    // fp32 accumulation buffer: each micro-batch's gradient is computed from zero and added
    // here, so summation order does not depend on how micro-batches are spread over ranks.
    accum_arena_ = Arena(MemoryKind::kGradients, static_cast<size_t>(n) * sizeof(float), &memory_);
    main_grads_ = accum_arena_.Allocate(DType::kF32, {n}).f32();
  }
  int64_t shard_begin = 0, shard_end = n;
  if (zero >= 1) {
    partition_ = std::make_unique<Partitioning>(n, dp_size_, kNormBlock);
    shard_begin = partition_->real_begin(dp_rank_);
    shard_end = partition_->real_end(dp_rank_);
  }
  optimizer_ = std::make_unique<ShardedAdamW>(config_.optimizer, shard_begin, shard_end,
                                              DecayRanges(), &memory_);
  if (accum > 1 || dp_ != nullptr) {
    model_->SetGradReadyCallback([this](int64_t b, int64_t e) { OnGradReady(b, e); });
  }
  if (dp_ == nullptr) return Status::Ok();

  const int64_t bucket_elems =
      std::max<int64_t>(1, static_cast<int64_t>(config_.comm.bucket_mb * 1048576.0 / sizeof(float)));
  if (zero == 2) {
    const int64_t P = partition_->padded_size();
    part_grad_arena_ = Arena(MemoryKind::kGradients, static_cast<size_t>(P) * sizeof(float), &memory_);
    part_grads_ = part_grad_arena_.Allocate(DType::kF32, {P}).f32();
    reduce_scatter_ = std::make_unique<PartitionReduceScatter>(
        dp_, *partition_, std::max<int64_t>(1, bucket_elems / dp_size_), &memory_);
  } else {
    all_reduce_ = std::make_unique<BucketedAllReduce>(dp_, main_grads_, n, bucket_elems);
  }
  return Status::Ok();
}

// The model's hook: [begin, end) of its gradient buffer is final for micro-batch micro_.
void Trainer::OnGradReady(int64_t begin, int64_t end) {
  const int64_t accum = config_.train.grad_accum_steps;
  if (accum > 1) {
    const float* g = model_->flat_grads().f32();
    float* acc = main_grads_;
    if (micro_ == 0) {
      std::memcpy(acc + begin, g + begin, static_cast<size_t>(end - begin) * sizeof(float));
    } else {
      cpu::AddInPlace(acc + begin, g + begin, end - begin);  // elementwise: same bits any threads
    }
  }
  if (micro_ == accum - 1 && all_reduce_ != nullptr) all_reduce_->OnReady(begin, end);
}

std::vector<ParamRange> Trainer::DecayRanges() const {
  std::vector<ParamRange> ranges;
  const AdamWConfig& o = config_.optimizer;
  for (const Parameter& p : model_->parameters()) {
    bool decay = true;
    switch (p.kind) {
      case ParamKind::kMatrix: decay = true; break;
      case ParamKind::kNorm: decay = o.decay_norms; break;
      case ParamKind::kBias: decay = o.decay_biases; break;
      case ParamKind::kEmbedding: decay = o.decay_embeddings; break;
    }
    ranges.push_back({p.offset, p.numel(), decay, p.name()});
  }
  return ranges;
}

double EvaluateLoss(Transformer& model, DataLoader& data, int64_t batches) {
  const int64_t B = model.batch_size(), T = model.seq_len();
  std::vector<int32_t> inputs(B * T), targets(B * T);
  data.Reset();
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    data.NextBatch(B, inputs.data(), targets.data());
    sum += model.Forward(inputs.data(), targets.data());
  }
  return sum / static_cast<double>(batches);
}

Result<double> Trainer::Evaluate(int64_t batches) {
  if (!val_data_) return NotFound("no held-out data: set data.val to a token shard file or directory");
  return EvaluateLoss(*model_, *val_data_, batches);
}

// One optimizer step over the global batch: this rank's micro-batches, gradient reduction,
// clipping, the update of this rank's partition and the parameter all-gather.
Result<Trainer::StepResult> Trainer::TrainStep(float lr) {
  const TrainConfig& tc = config_.train;
  const int64_t B = tc.micro_batch_size, accum = tc.grad_accum_steps;
  // Each micro-batch's loss is scaled by 1/(global micro-batches); the reduction then sums.
  const float grad_scale = 1.0f / static_cast<float>(accum * dp_size_);
  if (all_reduce_) all_reduce_->Begin();
  train_data_->Skip(dp_rank_ * accum * B);  // the micro-batches of lower ranks
  double loss_sum = 0;
  for (micro_ = 0; micro_ < accum; ++micro_) {
    model_->ZeroGrads();
    train_data_->NextBatch(B, inputs_.data(), targets_.data());
    loss_sum += model_->ForwardBackward(inputs_.data(), targets_.data(), grad_scale);
  }
  train_data_->Skip((dp_size_ - 1 - dp_rank_) * accum * B);  // same position on every rank
  StepResult r;
  if (dp_ != nullptr) {
    if (all_reduce_) RETURN_IF_ERROR(all_reduce_->Finish());
    // Serial order of the per-rank sums = the order one rank adds its micro-batch losses.
    ASSIGN_OR_RETURN(std::vector<double> sums, AllGatherDoubles(dp_, {loss_sum}));
    loss_sum = 0;
    for (double v : sums) loss_sum += v;
  }
  r.loss = loss_sum / static_cast<double>(accum * dp_size_);

  // The gradients this rank's optimizer reads: its partition (shard-relative).
  float* shard_grads = main_grads_ + optimizer_->begin();
  if (reduce_scatter_) {
    RETURN_IF_ERROR(reduce_scatter_->Run(main_grads_, part_grads_));
    shard_grads = part_grads_;
  }
  ASSIGN_OR_RETURN(r.grad_norm, ClipGradients(shard_grads));
  // Every rank sees the same norm and loss, so every rank skips (or not) together.
  r.skipped = !std::isfinite(r.grad_norm) || !std::isfinite(r.loss);
  if (r.skipped) return r;
  optimizer_->Step(model_->flat_params().f32(), shard_grads, lr);
  if (partition_ && dp_ != nullptr) {
    RETURN_IF_ERROR(GatherPartitions(dp_, *partition_, model_->flat_params().f32()));
  }
  return r;
}

// clip_grad_norm_ over the global gradient (grad_clip.h), with the same bits as one rank:
// replicated gradients (zero 0/1) sum the whole buffer locally; partitioned ones (zero 2)
// combine per-block partials. Only this rank's shard is scaled (the rest is not read).
Result<double> Trainer::ClipGradients(float* shard_grads) {
  const int64_t n = model_->num_params();
  double sum_sq = 0;
  if (reduce_scatter_) {
    ASSIGN_OR_RETURN(sum_sq, PartitionedSumOfSquares(dp_, *partition_, part_grads_));
  } else {
    sum_sq = SumOfSquares(main_grads_, n);
  }
  const double norm = std::sqrt(sum_sq);
  ClipToNorm(shard_grads, optimizer_->end() - optimizer_->begin(), norm,
             config_.optimizer.grad_clip);
  return norm;
}

Result<std::vector<double>> Trainer::GatherMemory() {
  std::vector<double> mine;
  for (int k = 0; k < static_cast<int>(MemoryKind::kCount); ++k) {
    mine.push_back(static_cast<double>(memory_.reserved(static_cast<MemoryKind>(k))));
  }
  if (dp_ == nullptr) return mine;
  return AllGatherDoubles(dp_, mine);
}

namespace {

// <out_dir>/memory.json: the layout and each rank's peak reserved bytes by kind.
std::string MemoryJson(const Config& c, const std::vector<double>& all, int ranks) {
  const int kinds = static_cast<int>(MemoryKind::kCount);
  JsonWriter w;
  w.BeginObject();
  w.Key("dp").Int(c.parallel.dp);
  w.Key("zero").Int(c.parallel.zero);
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
    std::error_code ec;
    std::filesystem::create_directories(tc.out_dir, ec);
    if (ec) return IoError(tc.out_dir + ": cannot create output directory: " + ec.message());
    // Weights of an earlier run in the same directory must not outlive its metrics: a run
    // that is interrupted leaves no model.safetensors rather than one of another run.
    std::filesystem::remove(tc.out_dir + "/model.safetensors", ec);
    RETURN_IF_ERROR(WriteFileAtomic(tc.out_dir + "/config.yaml", config_.resolved_yaml));
    RETURN_IF_ERROR(WriteFileAtomic(tc.out_dir + "/env.json", EnvironmentFingerprintJson() + "\n"));
    ASSIGN_OR_RETURN(metrics, MetricsFile::Create(tc.out_dir + "/metrics.jsonl"));
  }

  const int64_t B = tc.micro_batch_size, T = tc.seq_len, accum = tc.grad_accum_steps;
  const int64_t tokens_per_step = B * T * accum * dp_size_;
  const std::optional<double> floor = train_data_->entropy_floor();
  const double flops_per_token = model_->TrainFlopsPerToken();
  if (root) {
    std::fprintf(out, "tessera: %s model, %.2fM parameters, %lld layers, %s recompute\n",
                 ModelFamilyName(config_.model.family), model_->num_params() / 1e6,
                 static_cast<long long>(config_.model.num_layers),
                 RecomputePolicyName(config_.model.recompute));
    std::fprintf(out, "tessera: data: %s\n", train_data_->Describe().c_str());
    if (dp_size_ > 1 || config_.parallel.zero > 0 ||
        config_.optimizer.offload != OptimizerOffload::kNone) {
      std::fprintf(out,
                   "tessera: data parallel: dp=%d, zero=%d, optimizer offload %s, %lld gradient "
                   "bucket(s) of %g MiB%s\n",
                   dp_size_, config_.parallel.zero, OptimizerOffloadName(config_.optimizer.offload),
                   static_cast<long long>(all_reduce_ ? all_reduce_->num_buckets() : 0),
                   static_cast<double>(config_.comm.bucket_mb),
                   reduce_scatter_ ? " (zero 2: reduce-scatter after backward)" : "");
    }
    std::fprintf(out,
                 "tessera: %lld steps x %lld tokens (micro-batch %lld x seq %lld x accum %lld x "
                 "dp %d), %d threads, sgemm peak %.1f GFLOP/s (MFU denominator)\n",
                 static_cast<long long>(tc.steps), static_cast<long long>(tokens_per_step),
                 static_cast<long long>(B), static_cast<long long>(T),
                 static_cast<long long>(accum), dp_size_, cpu::NumThreads(), peak_flops_ / 1e9);
    std::fflush(out);
  }

  TrainSummary summary;
  summary.floor = floor;
  summary.best_loss = INFINITY;
  double interval_loss = 0;
  int64_t interval_steps = 0;
  const auto start = Clock::now();

  for (int64_t step = 0; step < tc.steps; ++step) {
    const auto t0 = Clock::now();
    const float lr = LearningRate(config_.schedule, config_.optimizer.lr, step, tc.steps);
    ASSIGN_OR_RETURN(StepResult r, TrainStep(lr));
    const double loss = r.loss;
    StepMetrics m;
    m.skipped = r.skipped;
    const auto t1 = Clock::now();

    summary.steps = step + 1;
    summary.tokens += tokens_per_step;
    summary.skipped_steps += m.skipped;
    summary.best_loss = std::min(summary.best_loss, loss);
    interval_loss += loss;
    ++interval_steps;
    const bool last = step + 1 == tc.steps;
    if (val_data_ && ((tc.eval_interval > 0 && (step + 1) % tc.eval_interval == 0) || last)) {
      ASSIGN_OR_RETURN(double val, Evaluate(tc.eval_batches));
      m.val_loss = val;
      summary.val_loss = val;
    }
    if (!root) continue;

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
    m.eta_seconds = m.elapsed_seconds / m.step * (tc.steps - m.step);
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
  summary.wall_seconds = Seconds(start, Clock::now());
  ASSIGN_OR_RETURN(std::vector<double> memory, GatherMemory());
  if (!root) return summary;
  const std::string weights = tc.out_dir + "/model.safetensors";
  RETURN_IF_ERROR(ExportHfWeights(weights, config_.model, model_->parameters(), DType::kF32));
  RETURN_IF_ERROR(WriteFileAtomic(tc.out_dir + "/memory.json", MemoryJson(config_, memory, dp_size_)));

  std::string report = memory_.Report();
  if (dp_size_ > 1) report += FormatMemoryTable(memory, dp_size_);
  std::fputs(FormatSummary(summary, report, tc.out_dir).c_str(), out);
  std::fflush(out);
  return summary;
}

}  // namespace tessera
