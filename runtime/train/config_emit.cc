// runtime/train/config_emit.cc — writes a Config back as YAML with YAML::Emitter.
//
// Keys and order mirror the loader's (config.cc) and the field comments in the headers; a key
// added there must be added here too, which the round-trip test in config_test.cc enforces.
// Pure functions; thread-safe.
#include "runtime/train/config_emit.h"

#include "runtime/core/yaml_reader.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tessera {
namespace {

const char* DataSourceName(DataSource s) { return s == DataSource::kShards ? "shards" : "synthetic"; }

// Plain-scalar helpers keep call sites one line per key.
void Put(YAML::Emitter& out, const char* key, int64_t v) {
  out << YAML::Key << key << YAML::Value << static_cast<long long>(v);
}
void PutU64(YAML::Emitter& out, const char* key, uint64_t v) {
  out << YAML::Key << key << YAML::Value << static_cast<unsigned long long>(v);
}
void Put(YAML::Emitter& out, const char* key, float v) {
  out << YAML::Key << key << YAML::Value << FormatYamlFloat(v);
}
void Put(YAML::Emitter& out, const char* key, bool v) {
  out << YAML::Key << key << YAML::Value << (v ? "true" : "false");
}
void PutName(YAML::Emitter& out, const char* key, const char* name) {
  out << YAML::Key << key << YAML::Value << name;
}
// Paths are always quoted: a path such as "null", "~" or "123" must stay a string.
void PutPath(YAML::Emitter& out, const char* key, const std::string& v) {
  out << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << v;
}

void EmitModel(YAML::Emitter& out, const ModelConfig& m) {
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  PutName(out, "family", ModelFamilyName(m.family));
  Put(out, "vocab_size", m.vocab_size);
  Put(out, "max_seq_len", m.max_seq_len);
  Put(out, "num_layers", m.num_layers);
  Put(out, "hidden_size", m.hidden_size);
  Put(out, "num_heads", m.num_heads);
  Put(out, "num_kv_heads", m.num_kv_heads);
  Put(out, "head_dim", m.head_dim);
  Put(out, "ffn_hidden_size", m.ffn_hidden_size);
  Put(out, "norm_eps", m.norm_eps);
  Put(out, "rope_theta", m.rope_theta);
  if (m.rope_scaling.type != RopeScalingType::kNone) {  // none: no section (the default)
    const RopeScaling& r = m.rope_scaling;
    out << YAML::Key << "rope_scaling" << YAML::Value << YAML::BeginMap;
    PutName(out, "type", RopeScalingName(r.type));
    Put(out, "factor", r.factor);
    Put(out, "low_freq_factor", r.low_freq_factor);
    Put(out, "high_freq_factor", r.high_freq_factor);
    Put(out, "original_max_position", r.original_max_position);
    out << YAML::EndMap;
  }
  Put(out, "sliding_window", m.sliding_window);
  Put(out, "qkv_bias", m.qkv_bias);
  Put(out, "qk_norm", m.qk_norm);
  Put(out, "tie_embeddings", m.tie_embeddings);
  Put(out, "init_std", m.init_std);
  PutName(out, "recompute", RecomputePolicyName(m.recompute));
  const MoeConfig& e = m.moe;
  if (!e.enabled()) {  // a dense model: no section (it reads back as the defaults)
    out << YAML::EndMap;
    return;
  }
  out << YAML::Key << "moe" << YAML::Value << YAML::BeginMap;
  Put(out, "num_experts", e.num_experts);
  Put(out, "top_k", e.top_k);
  Put(out, "expert_ffn_size", e.expert_ffn_size);
  Put(out, "shared_experts", e.shared_experts);
  Put(out, "shared_expert_gate", e.shared_expert_gate);
  Put(out, "first_dense_layers", e.first_dense_layers);
  Put(out, "layer_interval", e.layer_interval);
  PutName(out, "score", RouterScoreName(e.score));
  Put(out, "normalize_gates", e.normalize_gates);
  Put(out, "route_scale", e.route_scale);
  Put(out, "groups", e.groups);
  Put(out, "groups_kept", e.groups_kept);
  if (e.capacity_factor > 0) {
    Put(out, "capacity_factor", e.capacity_factor);
  } else {
    PutName(out, "capacity_factor", "dropless");
  }
  Put(out, "aux_loss", e.aux_loss);
  Put(out, "seq_aux_loss", e.seq_aux_loss);
  Put(out, "z_loss", e.z_loss);
  Put(out, "bias_update_rate", e.bias_update_rate);
  out << YAML::EndMap;
  out << YAML::EndMap;
}

void EmitOptimizer(YAML::Emitter& out, const AdamWConfig& o, const LrScheduleConfig& s) {
  out << YAML::Key << "optimizer" << YAML::Value << YAML::BeginMap;
  Put(out, "lr", o.lr);
  Put(out, "beta1", o.beta1);
  Put(out, "beta2", o.beta2);
  Put(out, "eps", o.eps);
  Put(out, "weight_decay", o.weight_decay);
  Put(out, "decay_norms", o.decay_norms);
  Put(out, "decay_biases", o.decay_biases);
  Put(out, "decay_embeddings", o.decay_embeddings);
  Put(out, "grad_clip", o.grad_clip);
  PutName(out, "offload", OptimizerOffloadName(o.offload));
  PutPath(out, "offload_dir", o.offload_dir);
  Put(out, "offload_buffer_mb", o.offload_buffer_mb);
  out << YAML::EndMap;

  out << YAML::Key << "schedule" << YAML::Value << YAML::BeginMap;
  Put(out, "warmup_steps", s.warmup_steps);
  PutName(out, "decay", LrDecayName(s.decay));
  Put(out, "min_lr_ratio", s.min_lr_ratio);
  Put(out, "decay_steps", s.decay_steps);
  out << YAML::EndMap;
}

void EmitData(YAML::Emitter& out, const DataConfig& d) {
  out << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  PutName(out, "source", DataSourceName(d.source));
  PutPath(out, "train", d.train_path);
  PutPath(out, "val", d.val_path);
  out << YAML::Key << "synthetic" << YAML::Value << YAML::BeginMap;
  Put(out, "branching", d.synthetic.branching);
  Put(out, "order", d.synthetic.order);
  Put(out, "concentration", d.synthetic.concentration);
  PutU64(out, "seed", d.synthetic.seed);
  Put(out, "num_tokens", d.synthetic.num_tokens);
  out << YAML::EndMap;
  out << YAML::EndMap;
}

void EmitTrain(YAML::Emitter& out, const TrainConfig& t) {
  out << YAML::Key << "train" << YAML::Value << YAML::BeginMap;
  Put(out, "steps", t.steps);
  Put(out, "micro_batch_size", t.micro_batch_size);
  Put(out, "grad_accum_steps", t.grad_accum_steps);
  Put(out, "seq_len", t.seq_len);
  PutU64(out, "seed", t.seed);
  Put(out, "log_interval", t.log_interval);
  Put(out, "eval_interval", t.eval_interval);
  Put(out, "eval_batches", t.eval_batches);
  Put(out, "threads", static_cast<int64_t>(t.threads));
  Put(out, "peak_gflops", t.peak_gflops);
  PutName(out, "device", ComputeDeviceName(t.device));
  Put(out, "memory_limit_mb", t.memory_limit_mb);
  PutPath(out, "out_dir", t.out_dir);
  PutName(out, "on_nonfinite", NonFinitePolicyName(t.on_nonfinite));
  Put(out, "max_nonfinite_skips", t.max_nonfinite_skips);
  Put(out, "spike_zscore", t.spike_zscore);
  Put(out, "spike_window", t.spike_window);
  PutName(out, "spike_action", SpikeActionName(t.spike_action));
  Put(out, "strict_env", t.strict_env);
  out << YAML::EndMap;
}

void EmitParallel(YAML::Emitter& out, const ParallelConfig& p, const CommConfig& c) {
  out << YAML::Key << "parallel" << YAML::Value << YAML::BeginMap;
  Put(out, "dp", static_cast<int64_t>(p.dp));
  Put(out, "tp", static_cast<int64_t>(p.tp));
  Put(out, "pp", static_cast<int64_t>(p.pp));
  Put(out, "ep", static_cast<int64_t>(p.ep));
  Put(out, "zero", static_cast<int64_t>(p.zero));
  Put(out, "sequence_parallel", p.sequence_parallel);
  out << YAML::Key << "pipeline_schedule" << YAML::Value
      << PipelineScheduleName(p.pipeline_schedule);
  Put(out, "virtual_stages", static_cast<int64_t>(p.virtual_stages));
  out << YAML::Key << "pipeline_split" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (int64_t n : p.pipeline_split) out << n;
  out << YAML::EndSeq;
  Put(out, "account_for_embedding_and_head", p.account_for_embedding_and_head);
  out << YAML::EndMap;
  out << YAML::Key << "comm" << YAML::Value << YAML::BeginMap;
  Put(out, "timeout_s", c.timeout_s);
  Put(out, "bucket_mb", c.bucket_mb);
  out << YAML::EndMap;
}

}  // namespace

std::string EmitResolvedYaml(const Config& config, const std::vector<std::string>& overrides) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  EmitModel(out, config.model);
  EmitOptimizer(out, config.optimizer, config.schedule);
  EmitData(out, config.data);
  EmitTrain(out, config.train);
  EmitParallel(out, config.parallel, config.comm);
  PutName(out, "precision", PrecisionName(config.precision));
  const MixedPrecisionConfig& mp = config.mixed_precision;
  out << YAML::Key << "mixed_precision" << YAML::Value << YAML::BeginMap;
  PutName(out, "reduce_dtype", mp.reduce_in_low ? "low" : "fp32");
  PutName(out, "loss_scale", LossScaleModeName(mp.loss_scale));
  Put(out, "initial_scale", mp.initial_scale);
  Put(out, "growth_interval", mp.growth_interval);
  Put(out, "min_scale", mp.min_scale);
  out << YAML::EndMap;
  const CheckpointConfig& ck = config.checkpoint;
  out << YAML::Key << "checkpoint" << YAML::Value << YAML::BeginMap;
  PutPath(out, "dir", ck.dir);
  Put(out, "interval_steps", ck.interval_steps);
  PutName(out, "interval", ck.interval == CheckpointInterval::kAuto ? "auto" : "steps");
  Put(out, "mtbf_s", static_cast<float>(ck.mtbf_s));
  Put(out, "at_end", ck.at_end);
  Put(out, "keep_last", ck.keep_last);
  Put(out, "keep_every", ck.keep_every);
  Put(out, "async", ck.async);
  PutName(out, "on_busy", ck.on_busy == CheckpointOnBusy::kSkip ? "skip" : "wait");
  Put(out, "max_failures", ck.max_failures);
  Put(out, "memory_interval_steps", ck.memory_interval_steps);
  PutName(out, "memory_interval", ck.memory_interval == CheckpointInterval::kAuto ? "auto" : "steps");
  PutPath(out, "memory_dir", ck.memory_dir);
  Put(out, "memory_keep", ck.memory_keep);
  Put(out, "local", ck.local);
  out << YAML::EndMap;
  PutName(out, "resume", ResumeModeName(config.resume));
  PutPath(out, "init_from", config.init_from);
  Put(out, "init_optimizer", config.init_optimizer);
  const LoraConfig& l = config.model.lora;
  out << YAML::Key << "finetune" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "lora" << YAML::Value << YAML::BeginMap;
  Put(out, "rank", l.rank);
  Put(out, "alpha", l.alpha);
  Put(out, "dropout", l.dropout);
  out << YAML::Key << "targets" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const std::string& t : l.targets) out << t;
  out << YAML::EndSeq;
  PutName(out, "base_dtype", l.base_bf16 ? "bf16" : "f32");
  out << YAML::EndMap << YAML::EndMap;
  out << YAML::EndMap;

  std::string header = "# Resolved Tessera config: every key, defaults included.\n";
  header += "# source: " + config.path + "\n";
  for (std::string o : overrides) {
    for (size_t i = 0; (i = o.find('\n', i)) != std::string::npos;) o.replace(i, 1, "\\n");
    header += "# --set " + o + "\n";
  }
  return header + out.c_str() + "\n";
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}

DType PrecisionDType(Precision p) {
  switch (p) {
    case Precision::kFp32: return DType::kF32;
    case Precision::kBf16: return DType::kBF16;
    case Precision::kFp16: return DType::kF16;
  }
  return DType::kF32;
}

const char* ResumeModeName(ResumeMode m) { return m == ResumeMode::kAuto ? "auto" : "none"; }

const char* LossScaleModeName(LossScaleMode m) {
  return m == LossScaleMode::kStatic ? "static" : "dynamic";
}

const char* NonFinitePolicyName(NonFinitePolicy p) {
  return p == NonFinitePolicy::kSkip ? "skip" : "stop";
}

const char* ComputeDeviceName(ComputeDevice d) {
  return d == ComputeDevice::kCuda ? "cuda" : "cpu";
}

const char* SpikeActionName(SpikeAction a) { return a == SpikeAction::kSkip ? "skip" : "report"; }

}  // namespace tessera
