// runtime/train/trainer.cc — the training loop and its outputs (see trainer.h for the
// contract). Single-threaded driver; kernels parallelise inside.
#include "runtime/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "models/hf_weights.h"
#include "optimizer/grad_clip.h"
#include "optimizer/lr_schedule.h"
#include "runtime/core/file_util.h"
#include "runtime/kernels/cpu/bench.h"
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

Result<std::unique_ptr<Trainer>> Trainer::Create(const Config& config) {
  std::unique_ptr<Trainer> t(new Trainer(config));
  cpu::SetNumThreads(config.train.threads);
  ASSIGN_OR_RETURN(t->model_, BuildModel(config, &t->memory_));
  t->optimizer_ = std::make_unique<AdamW>(config.optimizer, t->model_->num_params(),
                                          t->DecayRanges(), &t->memory_);
  const int64_t V = config.model.vocab_size, T = config.train.seq_len;
  ASSIGN_OR_RETURN(t->train_data_,
                   DataLoader::Open(config.data, Split::kTrain, V, T, config.train.seed));
  if (DataLoader::HasSplit(config.data, Split::kVal)) {
    // A held-out split that was asked for and is broken fails here, before any step runs.
    ASSIGN_OR_RETURN(t->val_data_, DataLoader::Open(config.data, Split::kVal, V, T, config.train.seed));
  }
  const int64_t tokens = config.train.micro_batch_size * T;
  t->inputs_.resize(tokens);
  t->targets_.resize(tokens);
  // The MFU denominator: what sgemm reaches on this machine right now (the same measurement
  // `tessera bench` uses).
  t->peak_flops_ = cpu::MeasurePeakSgemmGflops() * 1e9;
  return t;
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

Result<TrainSummary> Trainer::Run(FILE* out) {
  const TrainConfig& tc = config_.train;
  std::error_code ec;
  std::filesystem::create_directories(tc.out_dir, ec);
  if (ec) return IoError(tc.out_dir + ": cannot create output directory: " + ec.message());
  // Weights of an earlier run in the same directory must not outlive its metrics: a run that
  // is interrupted leaves no model.safetensors rather than one that belongs to another run.
  std::filesystem::remove(tc.out_dir + "/model.safetensors", ec);
  RETURN_IF_ERROR(WriteFileAtomic(tc.out_dir + "/config.yaml", config_.resolved_yaml));
  RETURN_IF_ERROR(WriteFileAtomic(tc.out_dir + "/env.json", EnvironmentFingerprintJson() + "\n"));
  ASSIGN_OR_RETURN(auto metrics, MetricsFile::Create(tc.out_dir + "/metrics.jsonl"));

  const int64_t B = tc.micro_batch_size, T = tc.seq_len, accum = tc.grad_accum_steps;
  const int64_t tokens_per_step = B * T * accum;
  const std::optional<double> floor = train_data_->entropy_floor();
  const double flops_per_token = model_->TrainFlopsPerToken();
  std::fprintf(out, "tessera: %s model, %.2fM parameters, %lld layers, %s recompute\n",
               ModelFamilyName(config_.model.family), model_->num_params() / 1e6,
               static_cast<long long>(config_.model.num_layers),
               RecomputePolicyName(config_.model.recompute));
  std::fprintf(out, "tessera: data: %s\n", train_data_->Describe().c_str());
  std::fprintf(out,
               "tessera: %lld steps x %lld tokens (micro-batch %lld x seq %lld x accum %lld), "
               "%d threads, sgemm peak %.1f GFLOP/s (MFU denominator)\n",
               static_cast<long long>(tc.steps), static_cast<long long>(tokens_per_step),
               static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(accum),
               cpu::NumThreads(), peak_flops_ / 1e9);
  std::fflush(out);

  float* params = model_->flat_params().f32();
  float* grads = model_->flat_grads().f32();
  const int64_t n = model_->num_params();
  TrainSummary summary;
  summary.floor = floor;
  summary.best_loss = INFINITY;
  double interval_loss = 0;
  int64_t interval_steps = 0;
  const auto start = Clock::now();

  for (int64_t step = 0; step < tc.steps; ++step) {
    const auto t0 = Clock::now();
    const float lr = LearningRate(config_.schedule, config_.optimizer.lr, step, tc.steps);
    model_->ZeroGrads();
    double loss = 0;
    for (int64_t micro = 0; micro < accum; ++micro) {
      train_data_->NextBatch(B, inputs_.data(), targets_.data());
      loss += model_->ForwardBackward(inputs_.data(), targets_.data(), 1.0f / accum);
    }
    loss /= static_cast<double>(accum);
    const double norm = ClipGradNorm(grads, n, config_.optimizer.grad_clip);
    StepMetrics m;
    m.skipped = !std::isfinite(norm) || !std::isfinite(loss);
    if (!m.skipped) optimizer_->Step(params, grads, lr);
    const auto t1 = Clock::now();

    summary.steps = step + 1;
    summary.tokens += tokens_per_step;
    summary.skipped_steps += m.skipped;
    summary.best_loss = std::min(summary.best_loss, loss);
    interval_loss += loss;
    ++interval_steps;

    m.step = step + 1;
    m.total_steps = tc.steps;
    m.loss = loss;
    m.floor = floor;
    m.lr = lr;
    m.grad_norm = norm;
    m.tokens = tokens_per_step;
    m.total_tokens = summary.tokens;
    m.step_seconds = Seconds(t0, t1);
    m.elapsed_seconds = Seconds(start, t1);
    // Rates over the whole run so far: steady, and honest about startup costs.
    m.tokens_per_second = summary.tokens / m.elapsed_seconds;
    m.mfu = peak_flops_ > 0 ? m.tokens_per_second * flops_per_token / peak_flops_ : 0;
    m.eta_seconds = m.elapsed_seconds / m.step * (tc.steps - m.step);
    const bool last = m.step == tc.steps;
    if (val_data_ && ((tc.eval_interval > 0 && m.step % tc.eval_interval == 0) || last)) {
      ASSIGN_OR_RETURN(double val, Evaluate(tc.eval_batches));
      m.val_loss = val;
      summary.val_loss = val;
    }
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
  const std::string weights = tc.out_dir + "/model.safetensors";
  RETURN_IF_ERROR(ExportHfWeights(weights, config_.model, model_->parameters(), DType::kF32));

  std::fputs(FormatSummary(summary, memory_.Report(), tc.out_dir).c_str(), out);
  std::fflush(out);
  return summary;
}

}  // namespace tessera
