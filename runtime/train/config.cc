// runtime/train/config.cc — LoadConfig: YAML file + `--set` overrides -> validated Config.
//
// Owns: the config's schema — which keys each section has, their ranges and defaults, and the
// checks between keys. Flow: read the file, parse it (runtime/core/yaml_tree.h), apply each
// override to the tree, then walk the tree section by section into the typed structs with the
// one strict reader (runtime/core/yaml_reader.h: every key optional, unknown keys rejected with
// a suggestion), then the cross-field checks, then Config::resolved_yaml. Every error is
// "WHERE: dotted.key: problem", WHERE being "file:line:col" (1-based) for file content or
// "--set key=value" for what an override wrote. Thread-safety: no shared state.
#include "runtime/train/config.h"

#include "runtime/train/data/markov_chain.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <utility>

#include "models/hf_config.h"
#include "models/partition.h"
#include "runtime/core/file_util.h"
#include "runtime/core/yaml_reader.h"
#include "runtime/core/yaml_tree.h"
#include "runtime/train/config_emit.h"
#include "runtime/train/pipeline_schedule.h"

namespace tessera {
namespace {

// comm.bucket_mb, MiB: at least 1 KiB per bucket (smaller buckets would mean one collective per
// few elements).
constexpr NumberRange kBucketRange{1.0 / 1024, true, 65536.0, true};

// Upper bounds of the sizes: far beyond any real model, low enough that products of them
// (V*C, B*T*C, ...) never overflow int64 before the model's memory check refuses them.
constexpr int64_t kMaxVocab = int64_t{1} << 24;      // 16.7M tokens
constexpr int64_t kMaxSeqLen = int64_t{1} << 20;     // 1M tokens
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxWidth = int64_t{1} << 17;      // hidden size 131072
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxExperts = 65536;
constexpr int64_t kMaxBatch = int64_t{1} << 20;
constexpr int64_t kMaxSyntheticTokens = int64_t{1} << 30;  // 4 GiB of int32 per split
constexpr int64_t kMaxSteps = int64_t{1} << 40;

// model.moe (absent: a dense model). Ranges here; the rules between keys are ModelConfig::Check's.
Status ReadMoe(YamlMap& s, MoeConfig* e) {
  RETURN_IF_ERROR(s.Int("num_experts", 0, kMaxExperts, &e->num_experts));
  RETURN_IF_ERROR(s.Int("top_k", 1, kMaxExperts, &e->top_k));
  RETURN_IF_ERROR(s.Int("expert_ffn_size", 0, kMaxWidth * 8, &e->expert_ffn_size));
  RETURN_IF_ERROR(s.Int("shared_experts", 0, kMaxExperts, &e->shared_experts));
  RETURN_IF_ERROR(s.Bool("shared_expert_gate", &e->shared_expert_gate));
  RETURN_IF_ERROR(s.Int("first_dense_layers", 0, kMaxLayers, &e->first_dense_layers));
  RETURN_IF_ERROR(s.Int("layer_interval", 1, kMaxLayers, &e->layer_interval));
  RETURN_IF_ERROR(s.Enum<RouterScore>(
      "score", {{"softmax", RouterScore::kSoftmax}, {"sigmoid", RouterScore::kSigmoid}}, &e->score));
  RETURN_IF_ERROR(s.Bool("normalize_gates", &e->normalize_gates));
  RETURN_IF_ERROR(s.Float("route_scale", kPositive, &e->route_scale));
  RETURN_IF_ERROR(s.Int("groups", 1, kMaxExperts, &e->groups));
  RETURN_IF_ERROR(s.Int("groups_kept", 1, kMaxExperts, &e->groups_kept));
  // "dropless" (the default) or a factor > 0; 0 is refused rather than read as dropless.
  if (const YamlNode* v = s.Get("capacity_factor"); v != nullptr) {
    if (v->IsPlainScalar() && v->scalar == "dropless") {
      e->capacity_factor = 0.0f;
    } else if (Result<float> f = ReadYamlFloat(s.context(), *v, s.Dotted("capacity_factor"),
                                               kPositive);
               f.ok()) {
      e->capacity_factor = *f;
    } else {
      return InvalidArgument(f.status().message() +
                             " (a factor > 0, e.g. 1.25, or dropless: no token is dropped)");
    }
  }
  RETURN_IF_ERROR(s.Float("aux_loss", kNonNegative, &e->aux_loss));
  RETURN_IF_ERROR(s.Float("seq_aux_loss", kNonNegative, &e->seq_aux_loss));
  RETURN_IF_ERROR(s.Float("z_loss", kNonNegative, &e->z_loss));
  RETURN_IF_ERROR(s.Float("bias_update_rate", kNonNegative, &e->bias_update_rate));
  return s.Finish();
}

// model.rope_scaling (absent: none). Ranges here; the rules between keys are ModelConfig's.
Status ReadRopeScaling(YamlMap& s, RopeScaling* r) {
  RETURN_IF_ERROR(s.Enum<RopeScalingType>("type",
                                          {{"none", RopeScalingType::kNone},
                                           {"linear", RopeScalingType::kLinear},
                                           {"llama3", RopeScalingType::kLlama3}},
                                          &r->type));
  RETURN_IF_ERROR(s.Float("factor", kPositive, &r->factor));
  RETURN_IF_ERROR(s.Float("low_freq_factor", kPositive, &r->low_freq_factor));
  RETURN_IF_ERROR(s.Float("high_freq_factor", kPositive, &r->high_freq_factor));
  RETURN_IF_ERROR(s.Int("original_max_position", 1, kMaxSeqLen, &r->original_max_position));
  return s.Finish();
}

Status ReadModel(YamlMap& s, ModelConfig* m) {
  RETURN_IF_ERROR(s.Enum<ModelFamily>(
      "family", {{"gpt2", ModelFamily::kGpt2}, {"llama", ModelFamily::kLlama}}, &m->family));
  RETURN_IF_ERROR(s.Int("vocab_size", 2, kMaxVocab, &m->vocab_size));
  RETURN_IF_ERROR(s.Int("max_seq_len", 1, kMaxSeqLen, &m->max_seq_len));
  RETURN_IF_ERROR(s.Int("num_layers", 1, kMaxLayers, &m->num_layers));
  RETURN_IF_ERROR(s.Int("hidden_size", 1, kMaxWidth, &m->hidden_size));
  RETURN_IF_ERROR(s.Int("num_heads", 1, kMaxHeads, &m->num_heads));
  RETURN_IF_ERROR(s.Int("num_kv_heads", 0, kMaxHeads, &m->num_kv_heads));
  RETURN_IF_ERROR(s.Int("head_dim", 0, kMaxWidth, &m->head_dim));
  RETURN_IF_ERROR(s.Int("ffn_hidden_size", 0, kMaxWidth * 8, &m->ffn_hidden_size));
  RETURN_IF_ERROR(s.Float("norm_eps", kPositive, &m->norm_eps));
  RETURN_IF_ERROR(s.Float("rope_theta", kPositive, &m->rope_theta));
  RETURN_IF_ERROR(s.Int("sliding_window", 0, kMaxSeqLen, &m->sliding_window));
  RETURN_IF_ERROR(s.Bool("qkv_bias", &m->qkv_bias));
  RETURN_IF_ERROR(s.Bool("qk_norm", &m->qk_norm));
  bool tie_given = false;
  RETURN_IF_ERROR(s.Bool("tie_embeddings", &m->tie_embeddings, &tie_given));
  if (!tie_given) m->tie_embeddings = m->family == ModelFamily::kGpt2;  // GPT-2 ties, Llama not
  RETURN_IF_ERROR(s.Float("init_std", kPositive, &m->init_std));
  RETURN_IF_ERROR(s.Enum<RecomputePolicy>("recompute",
                                          {{"none", RecomputePolicy::kNone},
                                           {"selective", RecomputePolicy::kSelective},
                                           {"full", RecomputePolicy::kFull}},
                                          &m->recompute));
  ASSIGN_OR_RETURN(YamlMap rope, s.Child("rope_scaling"));
  RETURN_IF_ERROR(ReadRopeScaling(rope, &m->rope_scaling));
  ASSIGN_OR_RETURN(YamlMap moe, s.Child("moe"));
  RETURN_IF_ERROR(ReadMoe(moe, &m->moe));
  return s.Finish();
}

Status ReadOptimizer(YamlMap& s, AdamWConfig* o) {
  RETURN_IF_ERROR(s.Float("lr", kPositive, &o->lr));
  RETURN_IF_ERROR(s.Float("beta1", kUnitOpen, &o->beta1));
  RETURN_IF_ERROR(s.Float("beta2", kUnitOpen, &o->beta2));
  RETURN_IF_ERROR(s.Float("eps", kPositive, &o->eps));
  RETURN_IF_ERROR(s.Float("weight_decay", kNonNegative, &o->weight_decay));
  RETURN_IF_ERROR(s.Bool("decay_norms", &o->decay_norms));
  RETURN_IF_ERROR(s.Bool("decay_biases", &o->decay_biases));
  RETURN_IF_ERROR(s.Bool("decay_embeddings", &o->decay_embeddings));
  RETURN_IF_ERROR(s.Float("grad_clip", kNonNegative, &o->grad_clip));
  RETURN_IF_ERROR(s.Enum<OptimizerOffload>(
      "offload",
      {{"none", OptimizerOffload::kNone}, {"cpu", OptimizerOffload::kCpu},
       {"nvme", OptimizerOffload::kNvme}},
      &o->offload));
  RETURN_IF_ERROR(s.String("offload_dir", &o->offload_dir));
  RETURN_IF_ERROR(s.Int("offload_buffer_mb", 1, 65536, &o->offload_buffer_mb));
  return s.Finish();
}

Status ReadSchedule(YamlMap& s, LrScheduleConfig* c) {
  RETURN_IF_ERROR(s.Int("warmup_steps", 0, kMaxSteps, &c->warmup_steps));
  RETURN_IF_ERROR(s.Enum<LrDecay>(
      "decay",
      {{"cosine", LrDecay::kCosine}, {"linear", LrDecay::kLinear}, {"constant", LrDecay::kConstant}},
      &c->decay));
  RETURN_IF_ERROR(s.Float("min_lr_ratio", kUnitClosed, &c->min_lr_ratio));
  RETURN_IF_ERROR(s.Int("decay_steps", 0, kMaxSteps, &c->decay_steps));
  return s.Finish();
}

Status ReadData(YamlMap& s, DataConfig* d) {
  RETURN_IF_ERROR(s.Enum<DataSource>(
      "source", {{"synthetic", DataSource::kSynthetic}, {"shards", DataSource::kShards}},
      &d->source));
  RETURN_IF_ERROR(s.String("train", &d->train_path));
  RETURN_IF_ERROR(s.String("val", &d->val_path));
  ASSIGN_OR_RETURN(YamlMap syn, s.Child("synthetic"));
  SyntheticDataConfig& c = d->synthetic;
  RETURN_IF_ERROR(syn.Int("branching", 1, kMaxVocab, &c.branching));
  RETURN_IF_ERROR(syn.Int("order", 1, 2, &c.order));
  RETURN_IF_ERROR(syn.Float("concentration", kPositive, &c.concentration));
  RETURN_IF_ERROR(syn.Uint("seed", &c.seed));
  RETURN_IF_ERROR(syn.Int("num_tokens", 2, kMaxSyntheticTokens, &c.num_tokens));
  RETURN_IF_ERROR(syn.Finish());
  return s.Finish();
}

Status ReadTrain(YamlMap& s, TrainConfig* t) {
  RETURN_IF_ERROR(s.Int("steps", 1, kMaxSteps, &t->steps));
  RETURN_IF_ERROR(s.Int("micro_batch_size", 1, kMaxBatch, &t->micro_batch_size));
  RETURN_IF_ERROR(s.Int("grad_accum_steps", 1, kMaxBatch, &t->grad_accum_steps));
  RETURN_IF_ERROR(s.Int("seq_len", 1, kMaxSeqLen, &t->seq_len));
  RETURN_IF_ERROR(s.Uint("seed", &t->seed));
  RETURN_IF_ERROR(s.Int("log_interval", 1, kMaxSteps, &t->log_interval));
  RETURN_IF_ERROR(s.Int("eval_interval", 0, kMaxSteps, &t->eval_interval));
  RETURN_IF_ERROR(s.Int("eval_batches", 1, kMaxBatch, &t->eval_batches));
  RETURN_IF_ERROR(s.Int("threads", 0, 4096, &t->threads));
  RETURN_IF_ERROR(s.Float("peak_gflops", kNonNegative, &t->peak_gflops));
  RETURN_IF_ERROR(s.Enum<ComputeDevice>(
      "device", {{"cpu", ComputeDevice::kCpu}, {"cuda", ComputeDevice::kCuda}}, &t->device));
  RETURN_IF_ERROR(s.Int("memory_limit_mb", 0, int64_t{1} << 40, &t->memory_limit_mb));
  // "" would scatter outputs into the current directory.
  RETURN_IF_ERROR(s.NonEmptyString("out_dir", &t->out_dir));
  RETURN_IF_ERROR(s.Enum<NonFinitePolicy>(
      "on_nonfinite", {{"stop", NonFinitePolicy::kStop}, {"skip", NonFinitePolicy::kSkip}},
      &t->on_nonfinite));
  RETURN_IF_ERROR(s.Int("max_nonfinite_skips", 1, kMaxSteps, &t->max_nonfinite_skips));
  RETURN_IF_ERROR(s.Float("spike_zscore", kNonNegative, &t->spike_zscore));
  RETURN_IF_ERROR(s.Int("spike_window", 2, 65536, &t->spike_window));
  RETURN_IF_ERROR(s.Enum<SpikeAction>(
      "spike_action", {{"report", SpikeAction::kReport}, {"skip", SpikeAction::kSkip}},
      &t->spike_action));
  RETURN_IF_ERROR(s.Bool("strict_env", &t->strict_env));
  return s.Finish();
}

constexpr int64_t kMaxRanks = int64_t{1} << 20;

Status ReadParallel(YamlMap& s, ParallelConfig* p) {
  RETURN_IF_ERROR(s.Int("dp", 1, kMaxRanks, &p->dp));
  RETURN_IF_ERROR(s.Int("tp", 1, kMaxRanks, &p->tp));
  RETURN_IF_ERROR(s.Int("pp", 1, kMaxRanks, &p->pp));
  RETURN_IF_ERROR(s.Int("ep", 1, kMaxRanks, &p->ep));
  RETURN_IF_ERROR(s.Int("zero", 0, 3, &p->zero));
  RETURN_IF_ERROR(s.Bool("sequence_parallel", &p->sequence_parallel));
  RETURN_IF_ERROR(s.Enum<PipelineSchedule>("pipeline_schedule",
                                           {{"1f1b", PipelineSchedule::k1F1B},
                                            {"gpipe", PipelineSchedule::kGpipe},
                                            {"interleaved", PipelineSchedule::kInterleaved}},
                                           &p->pipeline_schedule));
  RETURN_IF_ERROR(s.Int("virtual_stages", 1, 1024, &p->virtual_stages));
  RETURN_IF_ERROR(s.IntList("pipeline_split", 1, kMaxLayers, &p->pipeline_split));
  RETURN_IF_ERROR(s.Bool("account_for_embedding_and_head", &p->account_for_embedding_and_head));
  return s.Finish();
}

Status ReadMixedPrecision(YamlMap& s, MixedPrecisionConfig* m) {
  RETURN_IF_ERROR(s.Enum<bool>("reduce_dtype", {{"fp32", false}, {"low", true}}, &m->reduce_in_low));
  RETURN_IF_ERROR(s.Enum<LossScaleMode>(
      "loss_scale", {{"dynamic", LossScaleMode::kDynamic}, {"static", LossScaleMode::kStatic}},
      &m->loss_scale));
  RETURN_IF_ERROR(s.Float("initial_scale", kPositive, &m->initial_scale));
  RETURN_IF_ERROR(s.Int("growth_interval", 1, kMaxSteps, &m->growth_interval));
  RETURN_IF_ERROR(s.Float("min_scale", kPositive, &m->min_scale));
  return s.Finish();
}

Status ReadCheckpoint(YamlMap& s, CheckpointConfig* c) {
  RETURN_IF_ERROR(s.String("dir", &c->dir));
  RETURN_IF_ERROR(s.Int("interval_steps", 0, kMaxSteps, &c->interval_steps));
  RETURN_IF_ERROR(s.Enum<CheckpointInterval>(
      "interval", {{"steps", CheckpointInterval::kSteps}, {"auto", CheckpointInterval::kAuto}},
      &c->interval));
  RETURN_IF_ERROR(s.Number("mtbf_s", kNonNegative, &c->mtbf_s));
  RETURN_IF_ERROR(s.Bool("at_end", &c->at_end));
  RETURN_IF_ERROR(s.Int("keep_last", 1, kMaxSteps, &c->keep_last));
  RETURN_IF_ERROR(s.Int("keep_every", 0, kMaxSteps, &c->keep_every));
  RETURN_IF_ERROR(s.Bool("async", &c->async));
  RETURN_IF_ERROR(s.Enum<CheckpointOnBusy>(
      "on_busy", {{"wait", CheckpointOnBusy::kWait}, {"skip", CheckpointOnBusy::kSkip}},
      &c->on_busy));
  RETURN_IF_ERROR(s.Int("max_failures", 1, kMaxSteps, &c->max_failures));
  RETURN_IF_ERROR(s.Int("memory_interval_steps", 0, kMaxSteps, &c->memory_interval_steps));
  RETURN_IF_ERROR(s.Enum<CheckpointInterval>(
      "memory_interval", {{"steps", CheckpointInterval::kSteps}, {"auto", CheckpointInterval::kAuto}},
      &c->memory_interval));
  RETURN_IF_ERROR(s.String("memory_dir", &c->memory_dir));
  RETURN_IF_ERROR(s.Int("memory_keep", 1, kMaxSteps, &c->memory_keep));
  RETURN_IF_ERROR(s.Bool("local", &c->local));
  return s.Finish();
}

Status ReadComm(YamlMap& s, CommConfig* c) {
  RETURN_IF_ERROR(s.Float("timeout_s", kPositive, &c->timeout_s));
  // At least 1 KiB per bucket: smaller buckets would mean one collective per few elements.
  RETURN_IF_ERROR(s.Float("bucket_mb", kBucketRange, &c->bucket_mb));
  return s.Finish();
}

// finetune.lora (model_config.h LoraConfig): adapters on the base model, which is frozen.
Status ReadFinetune(YamlMap& s, LoraConfig* l) {
  ASSIGN_OR_RETURN(YamlMap lora, s.Child("lora"));
  RETURN_IF_ERROR(lora.Int("rank", 0, 4096, &l->rank));  // 0: no adapters
  RETURN_IF_ERROR(lora.Float("alpha", kPositive, &l->alpha));
  RETURN_IF_ERROR(lora.Float("dropout", kNonNegative, &l->dropout));
  ASSIGN_OR_RETURN(std::vector<const YamlNode*> targets,
                   lora.Sequence("targets", "projection names, e.g. [q_proj, v_proj]"));
  for (const YamlNode* t : targets) l->targets.push_back(t->scalar);
  RETURN_IF_ERROR(lora.Enum<bool>("base_dtype", {{"f32", false}, {"bf16", true}}, &l->base_bf16));
  const LoraConfig defaults;
  if (l->rank == 0 && (!l->targets.empty() || l->dropout != defaults.dropout ||
                       l->alpha != defaults.alpha || l->base_bf16)) {
    return lora.ValueError("rank", "finetune.lora is configured but rank is 0 (no adapters, a full "
                                   "fine-tune): set rank >= 1, or remove finetune.lora");
  }
  RETURN_IF_ERROR(lora.Finish());
  return s.Finish();
}

// The whole tree: sections in documented order, then unknown top-level keys.
Status ReadConfig(YamlContext* ctx, const YamlNode& root, Config* cfg) {
  ASSIGN_OR_RETURN(YamlMap top, YamlMap::Make(ctx, &root, ""));
  ASSIGN_OR_RETURN(YamlMap model, top.Child("model"));
  RETURN_IF_ERROR(ReadModel(model, &cfg->model));
  ASSIGN_OR_RETURN(YamlMap optimizer, top.Child("optimizer"));
  RETURN_IF_ERROR(ReadOptimizer(optimizer, &cfg->optimizer));
  ASSIGN_OR_RETURN(YamlMap schedule, top.Child("schedule"));
  RETURN_IF_ERROR(ReadSchedule(schedule, &cfg->schedule));
  ASSIGN_OR_RETURN(YamlMap data, top.Child("data"));
  RETURN_IF_ERROR(ReadData(data, &cfg->data));
  ASSIGN_OR_RETURN(YamlMap train, top.Child("train"));
  RETURN_IF_ERROR(ReadTrain(train, &cfg->train));
  ASSIGN_OR_RETURN(YamlMap parallel, top.Child("parallel"));
  RETURN_IF_ERROR(ReadParallel(parallel, &cfg->parallel));
  ASSIGN_OR_RETURN(YamlMap comm, top.Child("comm"));
  RETURN_IF_ERROR(ReadComm(comm, &cfg->comm));
  RETURN_IF_ERROR(top.Enum<Precision>(
      "precision",
      {{"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}, {"fp16", Precision::kFp16}},
      &cfg->precision));
  ASSIGN_OR_RETURN(YamlMap mixed, top.Child("mixed_precision"));
  RETURN_IF_ERROR(ReadMixedPrecision(mixed, &cfg->mixed_precision));
  ASSIGN_OR_RETURN(YamlMap checkpoint, top.Child("checkpoint"));
  RETURN_IF_ERROR(ReadCheckpoint(checkpoint, &cfg->checkpoint));
  RETURN_IF_ERROR(top.Enum<ResumeMode>("resume", {{"none", ResumeMode::kNone}, {"auto", ResumeMode::kAuto}},
                                       &cfg->resume));
  RETURN_IF_ERROR(top.String("init_from", &cfg->init_from));
  RETURN_IF_ERROR(top.Bool("init_optimizer", &cfg->init_optimizer));
  ASSIGN_OR_RETURN(YamlMap finetune, top.Child("finetune"));
  RETURN_IF_ERROR(ReadFinetune(finetune, &cfg->model.lora));
  return top.Finish();
}

std::string N(int64_t v) { return std::to_string(v); }

// init_from a Hugging Face model directory (a config.json beside the weights): the model
// section comes from config.json (models/hf_config.h). A model.* key the YAML or --set gives
// must agree with it; one it leaves out is taken from it. A model Tessera cannot build as the
// file describes is refused with the whole list of what it lacks.
Status TakeHfModel(const YamlContext& ctx, Config* cfg) {
  const std::string file = HfConfigBeside(cfg->init_from);
  if (file.empty()) return Status::Ok();
  auto intake = ReadHfConfig(file);
  if (!intake.ok()) return ctx.CrossFieldError({"init_from"}, intake.status().message());
  if (!intake->missing.empty()) {
    std::string list;
    for (const std::string& m : intake->missing) list += "\n  - " + m;
    return ctx.CrossFieldError(
        {"init_from"}, file + " (model_type \"" + intake->model_type + "\") describes a model "
                           "Tessera cannot build as it is; nothing was loaded. Missing:" + list);
  }
  for (const HfField& f : intake->fields) {  // the family first: the rules below depend on it
    const std::string* where = ctx.PositionOf(f.key);
    if (where == nullptr) {
      CopyModelKey(intake->model, &cfg->model, f.key);
      continue;
    }
    const std::string mine = ModelKeyText(cfg->model, f.key);
    const std::string theirs = ModelKeyText(intake->model, f.key);
    if (mine != theirs && !f.suggested) {
      return InvalidArgument(*where + ": " + f.key + "=" + mine + " disagrees with " + f.hf_field +
                             "=" + theirs + " in " + file + " (leave the key out to take the "
                             "file's value)");
    }
  }
  return Status::Ok();
}

// Constraints between keys, each reported at the most specific key the config set. In four
// groups: the model and its data, the parallel layout, mixed precision, and the run's keys.

Status CheckModelAndData(const YamlContext& ctx, const Config& c) {
  const ModelConfig& m = c.model;
  if (std::optional<ModelConfigProblem> p = m.Check()) {
    return ctx.CrossFieldError(p->keys, p->problem);
  }
  if (c.train.seq_len > m.max_seq_len) {
    return ctx.CrossFieldError({"train.seq_len", "model.max_seq_len"},
                               "seq_len=" + N(c.train.seq_len) + " exceeds model.max_seq_len=" +
                                   N(m.max_seq_len));
  }
  if (c.data.source == DataSource::kShards && c.data.train_path.empty()) {
    return ctx.CrossFieldError({"data.train", "data.source"},
                               "source=shards needs data.train (a shard file or directory)");
  }
  if (c.data.source == DataSource::kSynthetic) {
    const SyntheticDataConfig& syn = c.data.synthetic;
    if (syn.branching > m.vocab_size) {
      return ctx.CrossFieldError({"data.synthetic.branching", "model.vocab_size"},
                                 "branching=" + N(syn.branching) + " exceeds model.vocab_size=" +
                                     N(m.vocab_size));
    }
    // The chain's own limits (table size), reported here with a position rather than when
    // the data opens.
    if (Status shape = ValidateChainShape(syn, m.vocab_size); !shape.ok()) {
      return ctx.CrossFieldError({"data.synthetic.order", "data.synthetic.branching",
                                  "model.vocab_size"},
                                 shape.message());
    }
    // A training sequence needs seq_len inputs plus one more token for the last target.
    if (syn.num_tokens < c.train.seq_len + 1) {
      return ctx.CrossFieldError({"data.synthetic.num_tokens", "train.seq_len"},
                                 "num_tokens=" + N(syn.num_tokens) +
                                     " is too few for one sequence of train.seq_len=" +
                                     N(c.train.seq_len) + " (needs seq_len + 1)");
    }
  }
  return Status::Ok();
}

Status CheckParallel(const YamlContext& ctx, const Config& c) {
  const ParallelConfig& par = c.parallel;
  if (c.train.device == ComputeDevice::kCuda && c.train.seq_len < 2) {
    return ctx.CrossFieldError({"train.device", "train.seq_len"},
                               "train.device: cuda needs seq_len >= 2 (the GPU attention "
                               "kernels are not tested at T = 1)");
  }
  if (c.train.device == ComputeDevice::kCuda && (par.tp > 1 || par.pp > 1 || par.ep > 1)) {
    return ctx.CrossFieldError({"train.device", par.tp > 1 ? "parallel.tp"
                                                : par.pp > 1 ? "parallel.pp" : "parallel.ep"},
                               "train.device: cuda runs data parallelism only for now: tensor, "
                               "pipeline and expert parallelism pass activations between ranks "
                               "through host communicators, which never take device memory "
                               "(set parallel.tp, pp and ep to 1, or train.device: cpu)");
  }
  if (par.ep > 1 && !c.model.moe.enabled()) {
    return ctx.CrossFieldError({"parallel.ep", "model.moe.num_experts"},
                               "ep=" + N(par.ep) + " splits experts, but the model has none "
                               "(set model.moe.num_experts, or parallel.ep: 1)");
  }
  if (par.ep > 1 && c.model.moe.num_experts % par.ep != 0) {
    return ctx.CrossFieldError({"parallel.ep", "model.moe.num_experts"},
                               "ep=" + N(par.ep) + " does not divide num_experts=" +
                                   N(c.model.moe.num_experts) + " (every expert-parallel rank "
                                   "holds the same number of experts; use an ep that divides " +
                                   N(c.model.moe.num_experts) + ")");
  }
  if (par.sequence_parallel && par.tp > 1 && c.model.moe.enabled()) {
    return ctx.CrossFieldError({"parallel.sequence_parallel", "model.moe.num_experts"},
                               "sequence parallelism with experts is not supported yet: the MoE "
                               "blocks run on every tp rank's full micro-batch (set "
                               "parallel.sequence_parallel: false)");
  }
  if (par.virtual_stages > 1 && par.pp < 2) {
    return ctx.CrossFieldError({"parallel.virtual_stages", "parallel.pp"},
                               "virtual_stages=" + N(par.virtual_stages) +
                                   " interleaves model chunks across pipeline ranks, but pp=" +
                                   N(par.pp) + " (set parallel.pp >= 2, or virtual_stages 1)");
  }
  // Pipeline: the schedule must be able to run the micro-batches and the layers must split.
  if (par.pp > 1 || par.virtual_stages > 1 || !par.pipeline_split.empty() ||
      par.account_for_embedding_and_head) {
    if (Status s = CheckPipelineSchedule(par.pipeline_schedule, par.pp,
                                         static_cast<int>(c.train.grad_accum_steps),
                                         par.virtual_stages);
        !s.ok()) {
      return ctx.CrossFieldError({"parallel.pipeline_schedule", "parallel.virtual_stages",
                                  "parallel.pp", "train.grad_accum_steps"},
                                 s.message());
    }
    if (auto split = PipelineLayerSplit(c.model.num_layers, par.pp * par.virtual_stages,
                                        par.pipeline_split, par.account_for_embedding_and_head);
        !split.ok()) {
      return ctx.CrossFieldError({"parallel.pipeline_split", "parallel.pp", "model.num_layers"},
                                 split.status().message());
    }
  }
  if (par.tp > 1) {
    // Heads, kv heads and the MLP width must split evenly; the vocabulary is padded.
    if (Status s = ValidateTensorParallel(c.model, par.tp); !s.ok()) {
      return ctx.CrossFieldError({"parallel.tp"}, s.message());
    }
    if (par.sequence_parallel && (c.train.micro_batch_size * c.train.seq_len) % par.tp != 0) {
      return ctx.CrossFieldError(
          {"parallel.sequence_parallel", "parallel.tp"},
          "sequence parallelism splits each micro-batch's micro_batch_size x seq_len = " +
              N(c.train.micro_batch_size * c.train.seq_len) + " tokens among tp=" + N(par.tp) +
              " ranks, which does not divide them (change train.seq_len or micro_batch_size)");
    }
  }
  if (par.zero == 3 && par.dp * par.ep < 2) {  // ep ranks are data ranks of the dense state
    return ctx.CrossFieldError({"parallel.zero", "parallel.dp"},
                               "zero=3 partitions the parameters across the data-parallel ranks, "
                               "but dp=1: with one rank there is nothing to partition (use zero "
                               "0, or set parallel.dp and launch that many ranks)");
  }
  if (static_cast<int64_t>(par.dp) * par.tp * par.pp * par.ep > kMaxRanks) {
    return ctx.CrossFieldError({"parallel.dp"}, "dp*tp*pp*ep exceeds " + N(kMaxRanks) + " ranks");
  }
  return Status::Ok();
}

Status CheckMixedPrecision(const YamlContext& ctx, const Config& c) {
  // Loss scales are powers of two so that multiplying the loss by one and the gradients by
  // its inverse is exact (only the exponent changes).
  const MixedPrecisionConfig& mp = c.mixed_precision;
  for (const auto& [key, value] : {std::pair<const char*, float>{"mixed_precision.initial_scale",
                                                                 mp.initial_scale},
                                   {"mixed_precision.min_scale", mp.min_scale}}) {
    int exponent = 0;
    if (std::frexp(value, &exponent) != 0.5f) {
      return ctx.CrossFieldError({key}, std::string(key + 16) + "=" + FormatYamlFloat(value) +
                                            " must be a power of two (e.g. 65536), so that "
                                            "removing the scale from the gradients is exact");
    }
  }
  if (c.precision == Precision::kFp16 && mp.loss_scale == LossScaleMode::kDynamic &&
      mp.min_scale > mp.initial_scale) {
    return ctx.CrossFieldError({"mixed_precision.min_scale", "mixed_precision.initial_scale"},
                               "min_scale=" + FormatYamlFloat(mp.min_scale) +
                                   " exceeds initial_scale=" + FormatYamlFloat(mp.initial_scale));
  }
  return Status::Ok();
}

// optimizer.offload: nvme needs a directory, and not one inside the checkpoint root (scratch
// files beside committed state; retention and the sweep of half-written saves own that tree).
// Whether it exists, is writable and has room is checked when the files are created.
Status CheckOffload(const YamlContext& ctx, const Config& c) {
  const AdamWConfig& o = c.optimizer;
  if (o.offload != OptimizerOffload::kNvme) {
    if (o.offload_dir.empty()) return Status::Ok();
    return ctx.CrossFieldError({"optimizer.offload_dir", "optimizer.offload"},
                               "offload_dir is set but offload=" +
                                   std::string(OptimizerOffloadName(o.offload)) +
                                   " keeps the optimizer state in memory (use offload: nvme)");
  }
  if (o.offload_dir.empty()) {
    return ctx.CrossFieldError({"optimizer.offload", "optimizer.offload_dir"},
                               "offload=nvme needs offload_dir (a local directory for each "
                               "rank's optimizer state file)");
  }
  // The scratch files stay out of both checkpoint tiers' trees (the memory tier's only when
  // it is on: its default root is shared by every run of the host).
  const struct {
    const char* key;
    const std::string& root;
    bool on;
  } trees[] = {{"checkpoint.dir", c.checkpoint.dir, !c.checkpoint.dir.empty()},
               {"checkpoint.memory_dir", c.checkpoint.memory_dir, c.checkpoint.MemoryTierOn()}};
  for (const auto& tree : trees) {
    if (!tree.on) continue;
    std::error_code ec;
    const auto dir = std::filesystem::weakly_canonical(o.offload_dir, ec);
    const auto root = std::filesystem::weakly_canonical(tree.root, ec);
    auto d = dir.begin();
    auto r = root.begin();
    for (; r != root.end() && d != dir.end() && *r == *d; ++r, ++d) {}
    if (!ec && r == root.end()) {
      return ctx.CrossFieldError({"optimizer.offload_dir", tree.key},
                                 "offload_dir=" + o.offload_dir + " is inside " + tree.key + "=" +
                                     tree.root + ": the offload files are scratch, keep them "
                                     "out of the checkpoint tree");
    }
  }
  return Status::Ok();
}

Status CheckRun(const YamlContext& ctx, const Config& c) {
  if (c.checkpoint.MemoryTierOn() && c.checkpoint.dir.empty()) {
    return ctx.CrossFieldError({c.checkpoint.memory_interval_steps > 0 ? "checkpoint.memory_interval_steps"
                                                                       : "checkpoint.memory_interval",
                                "checkpoint.dir"},
                               "the memory tier needs checkpoint.dir (the disk tier behind it, and "
                               "the home of the run line id that names its snapshots)");
  }
  if (c.checkpoint.MemoryTierOn() &&
      (c.checkpoint.memory_dir.empty() || c.checkpoint.memory_dir.front() != '/')) {
    return ctx.CrossFieldError({"checkpoint.memory_dir"},
                               "checkpoint.memory_dir must be an absolute path (each host's own "
                               "directory, /dev/shm/tessera by default)");
  }
  if (c.resume == ResumeMode::kAuto && c.checkpoint.dir.empty()) {
    return ctx.CrossFieldError({"resume", "checkpoint.dir"},
                               "resume=auto needs checkpoint.dir (where to look for checkpoints)");
  }
  RETURN_IF_ERROR(CheckOffload(ctx, c));
  if (c.model.lora.enabled() && c.parallel.ep > 1) {
    return ctx.CrossFieldError({"finetune.lora.rank", "parallel.ep"},
                               "LoRA with expert parallelism is not built (the adapters would "
                               "train over the dense group while the frozen experts split over "
                               "ep): use ep=1");
  }
  if (c.model.lora.enabled() && c.init_optimizer) {
    return ctx.CrossFieldError({"init_optimizer", "finetune.lora.rank"},
                               "init_optimizer=true takes the optimizer state of all parameters, "
                               "but under finetune.lora only the adapters have one (fresh)");
  }
  if (c.init_optimizer && c.init_from.empty()) {
    return ctx.CrossFieldError({"init_optimizer", "init_from"},
                               "init_optimizer=true needs init_from (a checkpoint to take the "
                               "optimizer state from)");
  }
  const LrScheduleConfig& s = c.schedule;
  // warmup_steps > train.steps is allowed: a short smoke run (--set train.steps=5) of a
  // config tuned for a long one should just run, still warming up, as Megatron and
  // TorchTitan do.
  if (s.decay_steps > 0 && s.decay_steps < s.warmup_steps) {
    return ctx.CrossFieldError({"schedule.decay_steps", "schedule.warmup_steps"},
                               "decay_steps=" + N(s.decay_steps) +
                                   " ends the decay before warmup_steps=" + N(s.warmup_steps) +
                                   " ends the warmup");
  }
  return Status::Ok();
}

// A config is a few KiB; the bound keeps a path such as /dev/zero or a huge file from being
// read into memory (ReadInputFile also refuses FIFOs and devices before reading).
constexpr uint64_t kMaxConfigBytes = uint64_t{1} << 20;

Result<std::string> ReadConfigFile(const std::string& path) {
  return ReadInputFile(path, kMaxConfigBytes, "config");
}

// `path` names the text in errors and in Config::path (a file, or where the text came from).
Result<Config> LoadConfigImpl(const std::string& text, const std::string& path,
                              const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(YamlNode root, ParseYaml(text, path));  // strict: yaml_tree.h
  YamlContext ctx(path);
  if (root.IsNull()) {
    return InvalidArgument(path + ": config is empty (expected a map with sections model, "
                                  "optimizer, schedule, data, train, parallel, comm)");
  }
  if (!root.IsMap()) {
    return InvalidArgument(ctx.Where(root) +
                           ": expected a map of sections (model, optimizer, schedule, data, "
                           "train, parallel, comm, init_from) at the top level, got " +
                           DescribeYaml(root));
  }
  for (const std::string& o : overrides) RETURN_IF_ERROR(ApplyYamlOverride(root, o));

  Config cfg;
  cfg.path = path;
  RETURN_IF_ERROR(ReadConfig(&ctx, root, &cfg));
  RETURN_IF_ERROR(TakeHfModel(ctx, &cfg));
  RETURN_IF_ERROR(CheckModelAndData(ctx, cfg));
  RETURN_IF_ERROR(CheckParallel(ctx, cfg));
  RETURN_IF_ERROR(CheckMixedPrecision(ctx, cfg));
  RETURN_IF_ERROR(CheckRun(ctx, cfg));
  cfg.resolved_yaml = EmitResolvedYaml(cfg, overrides);
  return cfg;
}

Result<Config> LoadConfigGuarded(const std::string& text, const std::string& path,
                                 const std::vector<std::string>& overrides) {
  // Nothing below should throw (yaml-cpp's exceptions are caught where it is called), but a
  // config must never take the process down: anything else becomes an error.
  try {
    return LoadConfigImpl(text, path, overrides);
  } catch (const std::exception& e) {
    return Internal(path + ": error while reading config: " + e.what());
  }
}

}  // namespace

Result<Config> LoadConfig(const std::string& path, const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(std::string text, ReadConfigFile(path));
  return LoadConfigGuarded(text, path, overrides);
}

Result<Config> LoadConfigFromText(const std::string& text, const std::string& origin) {
  return LoadConfigGuarded(text, origin, {});
}

}  // namespace tessera
