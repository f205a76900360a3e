// runtime/train/trainer_report.cc — what the Trainer (trainer.h) shows and writes around the
// loop: the run's output files and banner at its start (BeginRun), and at its end the final
// export, memory.json and the summary (Finish). Split from trainer.cc, which keeps the loop.
#include <algorithm>
#include <numeric>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "models/hf_weights.h"
#include "models/param_layout.h"
#include "runtime/core/file_util.h"
#include "runtime/core/json.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/train/env_info.h"
#include "runtime/train/metrics.h"
#include "runtime/train/rank_layout.h"
#include "models/lora.h"
#include "models/lora_export.h"
#include "runtime/train/trainer.h"

namespace tessera {
namespace {

// <out_dir>/memory.json: the layout and each rank's peak reserved bytes by kind.
std::string MemoryJson(const Config& c, const std::vector<double>& all, int ranks,
                       const std::vector<double>& hf_load, size_t hf_fields) {
  const int kinds = static_cast<int>(MemoryKind::kCount);
  JsonWriter w;
  w.BeginObject();
  w.Key("dp").Int(c.parallel.dp);
  w.Key("tp").Int(c.parallel.tp);
  w.Key("pp").Int(c.parallel.pp);
  w.Key("ep").Int(c.parallel.ep);
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
  w.EndArray();
  if (!hf_load.empty()) {  // init_from an HF checkpoint: what each rank's sharded load took
    w.Key("init_from_load").BeginArray();
    for (size_t r = 0; r < hf_load.size() / hf_fields; ++r) {  // Trainer::hf_load_'s fields
      const double* f = &hf_load[r * hf_fields];
      w.BeginObject().Key("rank").Int(static_cast<int64_t>(r));
      w.Key("bytes_read").Int(static_cast<int64_t>(f[0]));
      w.Key("peak_rss_growth_bytes").Int(static_cast<int64_t>(f[1]));
      w.Key("parameters_held").Int(static_cast<int64_t>(f[2]));
      w.EndObject();
    }
    w.EndArray();
  }
  w.EndObject();
  return w.str() + "\n";
}

}  // namespace

// Rank 0: the run's files (config.yaml, env.json, metrics.jsonl continued from the resumed
// step) and banner; every rank: the per-step constants and the clock the rates count from.
Result<Trainer::RunProgress> Trainer::BeginRun(FILE* out) {
  const TrainConfig& tc = config_.train;
  RunProgress run;
  if (is_root()) {
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
    ASSIGN_OR_RETURN(run.metrics, MetricsFile::Create(metrics_path, start_step_ > 0));
  }
  run.tokens_per_step = tc.micro_batch_size * tc.seq_len * tc.grad_accum_steps * dp_size_;
  // This rank's share of the FLOPs per token (tp already divides it; pp splits the layers).
  run.flops_per_token = model_ ? model_->TrainFlopsPerToken()
                               : chunks_.front()->TrainFlopsPerToken() / static_cast<double>(pp_->size());
  if (is_root()) PrintBanner(run.tokens_per_step, out);
  // Every rank says what its own files met (a replaced leftover, no O_DIRECT), each note once
  // (a rank's dense and expert files share a directory); ranks without the log (out is
  // rank 0's) on stderr, as their other messages.
  std::vector<std::string> said;
  FILE* notes_to = out != nullptr ? out : stderr;
  for (const OffloadFile* f : shards_->OffloadFiles()) {
    run.offload_start.push_back(f->stats());
    for (const std::string& note : f->notes()) {
      if (std::find(said.begin(), said.end(), note) != said.end()) continue;
      said.push_back(note);
      if (all_ != nullptr) {  // several ranks: say whose
        std::fprintf(notes_to, "tessera: rank %d: %s\n", world_rank_, note.c_str());
      } else {
        std::fprintf(notes_to, "tessera: %s\n", note.c_str());
      }
    }
  }
  run.summary.floor = train_data_->entropy_floor();
  run.summary.best_loss = INFINITY;
  run.start = Clock::now();
  if (is_root() && start_step_ > 0) {
    std::fprintf(out, "tessera: resumed at step %lld of %lld%s\n", static_cast<long long>(start_step_),
                 static_cast<long long>(tc.steps),
                 start_step_ >= tc.steps ? " (nothing left to train: raise train.steps to go on)" : "");
  }
  return run;
}

// The ranks that read their own micro-batches: "dp 2", or under expert parallelism "dp 1 x
// ep 2" (ep ranks are data ranks of the dense model).
std::string Trainer::DataRanks() const {
  if (ep_ == nullptr) return "dp " + std::to_string(dp_size_);
  return "dp " + std::to_string(dp_size_ / ep_->size()) + " x ep " + std::to_string(ep_->size());
}

// finetune.lora: what trains, of how much, and how the frozen base is held.
void Trainer::PrintLoraBanner(FILE* out) const {
  const LoraConfig& l = config_.model.lora;
  int64_t trainable = 0, total = 0;
  for (const ParamDecl& d : DeclareParameters(config_.model)) {
    total += d.shape.numel();
    trainable += d.frozen ? 0 : d.shape.numel();
  }
  std::string targets;
  for (const std::string& m : LoraModuleNames(config_.model)) targets += (targets.empty() ? "" : ",") + m;
  std::fprintf(out,
               "tessera: finetune.lora: rank %lld, alpha %g (scale %g) on %s: %.3fM trainable "
               "of %.2fM parameters (%.2f%%); %s\n",
               static_cast<long long>(l.rank), l.alpha, l.scale(), targets.c_str(),
               trainable / 1e6, total / 1e6, 100.0 * trainable / total, shards_->Describe().c_str());
}

// The model, data, parallel layout, precision and step shape, one line each.
void Trainer::PrintBanner(int64_t tokens_per_step, FILE* out) const {
  const TrainConfig& tc = config_.train;
  std::fprintf(out, "tessera: %s model, %.2fM parameters, %lld layers, %s recompute\n",
               ModelFamilyName(config_.model.family), UnitBounds(config_.model).back() / 1e6,
               static_cast<long long>(config_.model.num_layers),
               RecomputePolicyName(config_.model.recompute));
  std::fprintf(out, "tessera: data: %s\n", train_data_->Describe().c_str());
  if (!hf_load_line_.empty()) PrintHfLoadBanner(out);
  if (config_.model.lora.enabled()) PrintLoraBanner(out);
  if (dp_size_ > 1 || config_.parallel.zero > 0 || config_.precision != Precision::kFp32 ||
      config_.optimizer.offload != OptimizerOffload::kNone) {
    std::fprintf(out, "tessera: data parallel: %s, %s, optimizer offload %s\n",
                 DataRanks().c_str(), shards_->Describe().c_str(),
                 OptimizerOffloadName(config_.optimizer.offload));
  }
  if (ep_ != nullptr) {
    const int64_t E = config_.model.moe.num_experts, El = E / ep_->size();
    const int64_t first = El * partition_->ep_rank();
    std::fprintf(out,
                 "tessera: expert parallel: ep=%d, %lld of %lld experts per MoE block on each "
                 "rank (rank 0: %lld-%lld), token rows dispatched and returned by all-to-all\n",
                 ep_->size(), static_cast<long long>(El), static_cast<long long>(E),
                 static_cast<long long>(first), static_cast<long long>(first + El - 1));
  }
  std::fprintf(out, "tessera: compute: %s\n", compute_.c_str());
  if (tp_ != nullptr) PrintTensorParallelBanner(out);
  if (pp_ != nullptr) PrintPipelineBanner(out);
  if (loss_scaler_) {
    std::fprintf(out, "tessera: fp16 %s loss scaling from %g\n",
                 LossScaleModeName(config_.mixed_precision.loss_scale), loss_scaler_->scale());
  }
  std::fprintf(out,
               "tessera: %lld steps x %lld tokens (micro-batch %lld x seq %lld x accum %lld x "
               "%s), threads %s, %s %.1f GFLOP/s (MFU denominator)\n",
               static_cast<long long>(tc.steps), static_cast<long long>(tokens_per_step),
               static_cast<long long>(tc.micro_batch_size), static_cast<long long>(tc.seq_len),
               static_cast<long long>(tc.grad_accum_steps), DataRanks().c_str(), threads_.c_str(),
               tc.peak_gflops > 0       ? "train.peak_gflops"
               : rated_peak_flops_ > 0  ? peak_source_.c_str()
               : bf16_gemms()           ? "bf16 GEMM peak"
                                        : "sgemm peak",
               peak_flops_ / 1e9);
  std::fflush(out);
}

// init_from an HF checkpoint: rank 0's load, and with several ranks the largest of them.
void Trainer::PrintHfLoadBanner(FILE* out) const {
  std::fprintf(out, "tessera: init_from %s: %s\n", config_.init_from.c_str(), hf_load_line_.c_str());
  const size_t ranks = hf_load_.size() / kHfLoadFields;
  if (ranks < 2) return;
  double read = 0, peak = -1;
  size_t peak_rank = 0;
  for (size_t r = 0; r < ranks; ++r) {
    const double* f = &hf_load_[r * kHfLoadFields];
    read += f[0];
    if (f[1] > peak) peak = f[1], peak_rank = r;
  }
  std::fprintf(out, "tessera: init_from: %zu ranks read %.1f MiB in all", ranks, read / (1 << 20));
  if (peak >= 0) {
    std::fprintf(out, "; the largest peak memory growth was +%.1f MiB (rank %zu)", peak / (1 << 20),
                 peak_rank);
  }
  std::fprintf(out, "\n");
}

void Trainer::PrintTensorParallelBanner(FILE* out) const {
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

void Trainer::PrintPipelineBanner(FILE* out) const {
  const ParallelConfig& par = config_.parallel;
  const int v = par.virtual_stages;
  const int64_t accum = config_.train.grad_accum_steps;
  auto split = PipelineLayerSplit(config_.model.num_layers, pp_->size() * v, par.pipeline_split,
                                  par.account_for_embedding_and_head);
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
               100 * TheoreticalBubble(par.pipeline_schedule, pp_->size(), static_cast<int>(accum), v));
}

Result<std::vector<double>> Trainer::GatherMemory() {
  std::vector<double> mine;
  for (int k = 0; k < static_cast<int>(MemoryKind::kCount); ++k) {
    mine.push_back(static_cast<double>(memory_.reserved(static_cast<MemoryKind>(k))));
  }
  if (all_ == nullptr) return mine;
  return AllGatherDoubles(all_, mine);
}

// The end of a finished run (collective: every rank gathers): rank 0 exports the global fp32
// weights, writes memory.json and prints the summary.
Result<TrainSummary> Trainer::Finish(RunProgress& run, FILE* out) {
  const TrainConfig& tc = config_.train;
  TrainSummary& summary = run.summary;
  summary.wall_seconds = Seconds(run.start, Clock::now());
  ASSIGN_OR_RETURN(std::vector<double> memory, GatherMemory());
  ASSIGN_OR_RETURN(std::vector<float> full, GatherGlobalWeights());
  std::vector<double> idle;  // per rank: idle share of the pipelined passes (pp > 1)
  if (pp_ != nullptr) {
    ASSIGN_OR_RETURN(idle, AllGatherDoubles(all_, {pipeline_->stats().mean_idle_fraction()}));
  }
  if (!is_root()) return summary;
  const std::string weights = tc.out_dir + "/model.safetensors";
  HfExtras extras;
  extras.moe_bias = moe_bias_;
  if (config_.model.lora.enabled()) {
    // The merged model where a full fine-tune leaves its weights; the adapters beside it. A
    // base stored in bf16 is read again in fp32: the merged model is the real base + B A.
    if (config_.model.lora.base_bf16) RETURN_IF_ERROR(LoadLoraBase(config_, full.data()));
    std::vector<float> merged = MergeLoraWeights(config_.model, full);
    const ModelConfig base = BaseModelConfig(config_.model);
    RETURN_IF_ERROR(ExportHfWeights(weights, base, GlobalViews(base, merged.data()), DType::kF32,
                                    &extras));
    RETURN_IF_ERROR(ExportLoraAdapter(tc.out_dir + "/adapter", config_.model, full,
                                      config_.init_from));
  } else {
    RETURN_IF_ERROR(ExportHfWeights(weights, config_.model,
                                    GlobalViews(config_.model, full.data()), DType::kF32, &extras));
  }
  const int ranks = all_ != nullptr ? all_->size() : 1;
  RETURN_IF_ERROR(WriteFileAtomic(tc.out_dir + "/memory.json", MemoryJson(config_, memory, ranks, hf_load_, kHfLoadFields)));
  std::string report = memory_.Report();
  if (ranks > 1) report += FormatMemoryTable(memory, ranks);
  summary.moe_histogram = MoeHistogram(run);
  std::fputs(FormatSummary(summary, report, tc.out_dir).c_str(), out);
  PrintSummaryExtras(idle, out);
  std::fputs(OffloadSummary(run).c_str(), out);
  std::fflush(out);
  return summary;
}

// Rank 0's files: what of its optimizer state is resident (the pool) and what on disk, what a
// step reads and writes, and how much of the steps' time waited for the disk.
std::string Trainer::OffloadSummary(const RunProgress& run) const {
  const std::vector<const OffloadFile*> files = shards_->OffloadFiles();
  if (files.empty() || run.offload_start.size() != files.size()) return "";
  uint64_t resident = 0, on_disk = 0, read = 0, written = 0, ckpt = 0;
  double wait = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const OffloadIoStats now = files[i]->stats(),& then = run.offload_start[i];
    resident += files[i]->resident_bytes();
    on_disk += files[i]->file_bytes();
    read += now.bytes_read - then.bytes_read;
    written += now.bytes_written - then.bytes_written;
    ckpt += now.reader_bytes - then.reader_bytes;
    wait += now.wait_seconds - then.wait_seconds;
  }
  const double steps = std::max<int64_t>(run.summary.steps, 1);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "  optimizer state  rank 0: %s resident (the buffer pool), %s on disk (%s, %s); "
                "per step %s read and %s written; %s read for checkpoints and the export; waited %.2f s for "
                "the disk (%.1f%% of the steps' time)\n",
                FormatBytes(resident).c_str(), FormatBytes(on_disk).c_str(),
                config_.optimizer.offload_dir.c_str(), files[0]->direct() ? "O_DIRECT" : "buffered",
                FormatBytes(static_cast<size_t>(read / steps)).c_str(),
                FormatBytes(static_cast<size_t>(written / steps)).c_str(),
                FormatBytes(ckpt).c_str(), wait,
                100.0 * wait / std::max(run.step_seconds, 1e-9));
  return buf;
}

// The MoE blocks' counts summed over the run's last steps, as the summary's histogram.
std::string Trainer::MoeHistogram(const RunProgress& run) const {
  if (run.moe_recent.empty()) return "";
  std::vector<MoeLayerReport> sum = run.moe_recent.back();
  for (MoeLayerReport& l : sum) {
    std::fill(l.counts.begin(), l.counts.end(), 0);
    l.dropped = 0;
  }
  for (const std::vector<MoeLayerReport>& step : run.moe_recent) {
    for (size_t i = 0; i < sum.size(); ++i) {
      for (size_t e = 0; e < sum[i].counts.size(); ++e) sum[i].counts[e] += step[i].counts[e];
      sum[i].dropped += step[i].dropped / static_cast<double>(run.moe_recent.size());
    }
  }
  for (MoeLayerReport& l : sum) {
    const double total = std::accumulate(l.counts.begin(), l.counts.end(), 0.0);
    const double top = static_cast<double>(*std::max_element(l.counts.begin(), l.counts.end()));
    l.imbalance = total > 0 ? top / (total / static_cast<double>(l.counts.size())) : 0.0;
  }
  return FormatMoeHistogram(sum, static_cast<int64_t>(run.moe_recent.size()));
}

// The summary's checkpoint line and, pipelined, the measured idle share beside the bubble.
void Trainer::PrintSummaryExtras(const std::vector<double>& idle, FILE* out) const {
  if (checkpointer_->enabled()) {
    const CheckpointStats& cs = checkpointer_->stats();
    std::fprintf(out,
                 "  checkpoints      %lld committed, %lld failed, %lld skipped under %s; training "
                 "stalled %.1f ms for them in all\n",
                 static_cast<long long>(cs.committed), static_cast<long long>(cs.failed),
                 static_cast<long long>(cs.skipped), config_.checkpoint.dir.c_str(),
                 1e3 * cs.stall_seconds);
  }
  if (memory_tier_) {
    const CheckpointStats& ms = memory_tier_->stats();
    std::fprintf(out,
                 "  memory tier      %lld snapshots held (newest step %lld), %lld failed, %lld "
                 "skipped; training stalled %.1f ms for them in all\n",
                 static_cast<long long>(ms.committed), static_cast<long long>(ms.last_committed_step),
                 static_cast<long long>(ms.failed), static_cast<long long>(ms.skipped),
                 1e3 * ms.stall_seconds);
  }
  if (!idle.empty() && pipeline_->stats().steps > 1) {
    double mean = 0;
    for (double v : idle) mean += v / static_cast<double>(idle.size());
    std::fprintf(out,
                 "  pipeline         ranks idle %.1f%% of the pipelined passes on average "
                 "(theoretical bubble %.1f%%; the rest: transfers and stage imbalance)\n",
                 100 * mean,
                 100 * TheoreticalBubble(config_.parallel.pipeline_schedule, pp_->size(),
                                         static_cast<int>(config_.train.grad_accum_steps),
                                         config_.parallel.virtual_stages));
  }
}

}  // namespace tessera
