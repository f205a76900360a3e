// runtime/train/config.cc — LoadConfig: YAML file + `--set` overrides -> validated Config.
//
// Owns: the only use of yaml-cpp for reading config. Flow: read the file, parse it, apply each
// override to the tree, then walk the tree section by section into the typed structs (every
// key optional, unknown keys rejected with a suggestion), then the cross-field checks, then
// Config::resolved_yaml. Every error is "WHERE: dotted.key: problem", WHERE being
// "file:line:col" (1-based) for file content or "--set key=value" for what an override wrote.
// yaml-cpp exceptions are caught here and never escape. Thread-safety: no shared state.
#include "runtime/train/config.h"

#include "runtime/train/data/markov_chain.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "models/partition.h"
#include "runtime/core/file_util.h"
#include "runtime/core/yaml_input.h"
#include "runtime/train/config_emit.h"
#include "runtime/train/pipeline_schedule.h"
#include "runtime/train/config_suggest.h"

namespace tessera {
namespace {

// Where each part of the tree came from, and where each key that was read sits (so that
// cross-field errors can point at a key a user can find).
class Context {
 public:
  explicit Context(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }

  // Marks `dotted` (and everything below it) as written by the override `origin`.
  void AddOverride(const std::string& dotted, const std::string& origin) {
    override_origin_[dotted] = origin;
  }

  // "--set ..." if an override wrote `dotted` or a section above it, else "file:line:col".
  std::string Where(const YAML::Mark& mark, const std::string& dotted) const {
    std::string key = dotted;
    while (true) {
      auto it = override_origin_.find(key);
      if (it != override_origin_.end()) return it->second;
      const size_t dot = key.rfind('.');
      if (dot == std::string::npos) break;
      key.resize(dot);
    }
    return mark.is_null() ? file_ : YamlWhere(file_, mark.line, mark.column);
  }

  void RecordPosition(const std::string& dotted, std::string where) {
    positions_[dotted] = std::move(where);
  }

  // Error at the first of `keys` the config actually set (they are listed most specific
  // first); if none was set, at the file itself, naming the first key.
  Status CrossFieldError(const std::vector<std::string>& keys, const std::string& problem) const {
    for (const std::string& k : keys) {
      auto it = positions_.find(k);
      if (it != positions_.end()) return InvalidArgument(it->second + ": " + k + ": " + problem);
    }
    return InvalidArgument(file_ + ": " + keys.front() + ": " + problem);
  }

 private:
  std::string file_;
  std::map<std::string, std::string> override_origin_;
  std::map<std::string, std::string> positions_;
};

std::string Join(const std::vector<std::string>& words, const char* sep) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? sep : "") + words[i];
  return out;
}

// How a node looks in a "got ..." clause.
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Null: return "nothing (null)";
    case YAML::NodeType::Scalar: {
      std::string s = node.Scalar();
      if (s.size() > 60) s = s.substr(0, 57) + "...";
      return "\"" + s + "\"";
    }
    default: return "an undefined value";
  }
}

// A quoted scalar ("5", '5') is a string in YAML even when it looks like a number; numbers and
// booleans must be written plain. yaml-cpp tags quoted scalars "!".
bool IsQuoted(const YAML::Node& node) { return node.Tag() == "!"; }

bool LooksLikeInteger(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

struct FloatRange {
  double min;
  bool min_inclusive;
  double max;  // +inf when unbounded
  bool max_inclusive;
};
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr FloatRange kPositive{0.0, false, kInf, false};
constexpr FloatRange kBucketRange{1.0 / 1024, true, 65536.0, true};  // comm.bucket_mb, MiB
constexpr FloatRange kNonNegative{0.0, true, kInf, false};
constexpr FloatRange kUnitOpen{0.0, true, 1.0, false};    // [0, 1)
constexpr FloatRange kUnitClosed{0.0, true, 1.0, true};   // [0, 1]

bool InRange(double v, const FloatRange& r) {
  const bool low = r.min_inclusive ? v < r.min : v <= r.min;
  const bool high = r.max_inclusive ? v > r.max : v >= r.max;
  return !low && !high;
}

std::string RangeText(const FloatRange& r) {
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  if (r.max == kInf) return std::string(r.min_inclusive ? ">= " : "> ") + num(r.min);
  return std::string("in ") + (r.min_inclusive ? "[" : "(") + num(r.min) + ", " + num(r.max) +
         (r.max_inclusive ? "]" : ")");
}

// One map of the tree (a section such as `model` or `data.synthetic`). Readers look keys up,
// convert and range-check them, and remember which keys they asked for; Finish() then rejects
// whatever nobody asked for. A missing or null section reads as empty (all defaults).
class Section {
 public:
  static Result<Section> Make(Context* ctx, const YAML::Node& node, std::string prefix) {
    Section s(ctx, std::move(prefix));
    if (!node.IsDefined() || node.IsNull()) return s;
    if (!node.IsMap()) {
      return InvalidArgument(ctx->Where(node.Mark(), s.prefix_) + ": " + s.prefix_ +
                             ": expected a map, got " + Describe(node));
    }
    std::set<std::string> seen;
    for (const auto& kv : node) {  // a temporary pair; copy the handles, never refer into it
      const YAML::Node key = kv.first;
      if (!key.IsScalar()) {
        return InvalidArgument(ctx->Where(key.Mark(), s.prefix_) + ": " + s.prefix_ +
                               ": keys must be plain words, got " + Describe(key));
      }
      const std::string dotted = s.Dotted(key.Scalar());
      if (!seen.insert(key.Scalar()).second) {
        return InvalidArgument(ctx->Where(key.Mark(), dotted) + ": " + dotted +
                               ": duplicate key (each key may appear once)");
      }
      s.entries_.push_back({key.Scalar(), key.Mark(), kv.second});
    }
    return s;
  }

  // The sub-map `key` (e.g. data.synthetic).
  Result<Section> Child(const std::string& key) {
    const Entry* e = Lookup(key);
    return Make(ctx_, e == nullptr ? YAML::Node() : e->value, Dotted(key));
  }

  Status Int(const std::string& key, int64_t min, int64_t max, int64_t* out) {
    const Entry* e = Lookup(key);
    if (e == nullptr) return Status::Ok();
    const std::string& text = e->value.IsScalar() ? e->value.Scalar() : std::string();
    if (!e->value.IsScalar() || IsQuoted(e->value) || !LooksLikeInteger(text)) {
      return TypeError(*e, "an integer");
    }
    errno = 0;
    const long long v = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE) return Error(*e, "integer out of range, got " + Describe(e->value));
    RETURN_IF_ERROR(CheckIntRange(*e, v, min, max));
    *out = v;
    return Status::Ok();
  }

  Status Int(const std::string& key, int64_t min, int64_t max, int* out) {
    int64_t v = *out;
    RETURN_IF_ERROR(Int(key, min, std::min<int64_t>(max, std::numeric_limits<int>::max()), &v));
    *out = static_cast<int>(v);
    return Status::Ok();
  }

  // A sequence of integers, each in [min, max] ([] or absent: empty).
  Status IntList(const std::string& key, int64_t min, int64_t max, std::vector<int64_t>* out) {
    const Entry* e = Lookup(key);
    if (e == nullptr || e->value.IsNull()) return Status::Ok();
    if (!e->value.IsSequence()) return TypeError(*e, "a list of integers, e.g. [2, 3, 3]");
    std::vector<int64_t> values;
    for (const YAML::Node& item : e->value) {
      const std::string text = item.IsScalar() ? item.Scalar() : std::string();
      if (!item.IsScalar() || IsQuoted(item) || !LooksLikeInteger(text)) {
        return TypeError(*e, "a list of integers, e.g. [2, 3, 3]");
      }
      errno = 0;
      const long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return Error(*e, "integer out of range, got " + text);
      RETURN_IF_ERROR(CheckIntRange(*e, v, min, max));
      values.push_back(v);
    }
    *out = std::move(values);
    return Status::Ok();
  }

  Status Uint(const std::string& key, uint64_t* out) {
    const Entry* e = Lookup(key);
    if (e == nullptr) return Status::Ok();
    const std::string& text = e->value.IsScalar() ? e->value.Scalar() : std::string();
    if (!e->value.IsScalar() || IsQuoted(e->value) || !LooksLikeInteger(text) || text[0] == '-') {
      return TypeError(*e, "a non-negative integer");
    }
    errno = 0;
    const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
    if (errno == ERANGE) return Error(*e, "integer out of range, got " + Describe(e->value));
    *out = v;
    return Status::Ok();
  }

  Status Float(const std::string& key, const FloatRange& range, float* out) {
    const Entry* e = Lookup(key);
    if (e == nullptr) return Status::Ok();
    if (!e->value.IsScalar() || IsQuoted(e->value)) return TypeError(*e, "a number");
    const std::string& text = e->value.Scalar();
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(text.c_str(), &end);
    // strtod also takes "inf", "nan" and hex floats; a config value must be an ordinary number.
    const bool ordinary = text.find_first_of("iInNxX") == std::string::npos;
    if (text.empty() || *end != '\0' || !ordinary) return TypeError(*e, "a number");
    // Values are kept as 32-bit floats: the float must be finite (a double just above
    // FLT_MAX rounds to FLT_MAX, which is what the resolved config then writes back).
    const float f = static_cast<float>(v);
    if (errno == ERANGE || !std::isfinite(f)) {
      return Error(*e, "number out of range for a 32-bit float, got " + Describe(e->value));
    }
    if (!InRange(v, range)) return Error(*e, "must be " + RangeText(range) + ", got " + text);
    // The range holds for the double; it must still hold for the float we keep (1e-46 > 0,
    // but as a float it is 0, and an Adam eps of 0 divides 0 by 0; 0.99999999999 < 1, but as
    // a float it is 1.0, and a beta of 1 never forgets).
    if (v != 0 && (f == 0 || !std::isnormal(f))) {
      return Error(*e, "number too small for a 32-bit float, got " + text);
    }
    if (!InRange(f, range)) {
      return Error(*e, "must be " + RangeText(range) + ", got " + text + ", which is " +
                           FormatConfigFloat(f) + " as the 32-bit float training uses");
    }
    *out = f;
    return Status::Ok();
  }

  // `present` (optional) says whether the key was given, for family-dependent defaults.
  Status Bool(const std::string& key, bool* out, bool* present = nullptr) {
    if (present != nullptr) *present = false;
    const Entry* e = Lookup(key);
    if (e == nullptr) return Status::Ok();
    const std::string text = e->value.IsScalar() ? e->value.Scalar() : std::string();
    const bool plain = e->value.IsScalar() && !IsQuoted(e->value);
    if (plain && (text == "true" || text == "True" || text == "TRUE")) {
      *out = true;
    } else if (plain && (text == "false" || text == "False" || text == "FALSE")) {
      *out = false;
    } else {
      return TypeError(*e, "a boolean (true or false)");
    }
    if (present != nullptr) *present = true;
    return Status::Ok();
  }

  // Any scalar of printable text is taken as written; null (`key:` with no value) is the empty
  // string. Escapes in a quoted scalar can spell bytes the file itself may not hold
  // (yaml_input.h): a NUL would cut a path short where the OS reads it, and a DEL would be
  // written raw into the resolved config, which would then not load. Both are refused.
  Status String(const std::string& key, std::string* out) {
    const Entry* e = Lookup(key);
    if (e == nullptr) return Status::Ok();
    if (e->value.IsNull()) {
      out->clear();
    } else if (e->value.IsScalar()) {
      const std::string& text = e->value.Scalar();
      if (const std::optional<NonTextByte> bad = FindNonTextByte(text)) {
        return Error(*e, bad->name + " at offset " + std::to_string(bad->offset) +
                             " of the value is a control character or not UTF-8 (write "
                             "printable text)");
      }
      *out = text;
    } else {
      return TypeError(*e, "a string");
    }
    return Status::Ok();
  }

  // For strings that must be set when given (after String() read them).
  Status NonEmpty(const std::string& key, const std::string& value) {
    const Entry* e = Lookup(key);
    if (e == nullptr || !value.empty()) return Status::Ok();
    return Error(*e, "must not be empty");
  }

  template <typename E>
  Status Enum(const std::string& key, const std::vector<std::pair<std::string, E>>& names, E* out) {
    const Entry* e = Lookup(key);
    if (e == nullptr) return Status::Ok();
    std::vector<std::string> allowed;
    for (const auto& [name, value] : names) {
      allowed.push_back(name);
      if (e->value.IsScalar() && e->value.Scalar() == name) {
        *out = value;
        return Status::Ok();
      }
    }
    std::string problem = "expected one of " + Join(allowed, " | ") + ", got " + Describe(e->value);
    if (e->value.IsScalar()) {
      const std::string guess = ClosestConfigWord(e->value.Scalar(), allowed);
      if (!guess.empty()) problem += " (did you mean \"" + guess + "\"?)";
    }
    return Error(*e, problem);
  }

  // Rejects every key no reader asked for, suggesting the closest known one.
  Status Finish() const {
    for (const Entry& e : entries_) {
      if (known_.count(e.key)) continue;
      const std::string dotted = Dotted(e.key);
      std::string problem = "unknown key";
      const std::string guess = ClosestConfigWord(e.key, known_order_);
      if (!guess.empty()) {
        problem += " (did you mean \"" + guess + "\"?)";
      } else {
        problem += " (valid keys" + std::string(prefix_.empty() ? "" : " of " + prefix_) + ": " +
                   Join(known_order_, ", ") + ")";
      }
      return InvalidArgument(ctx_->Where(e.key_mark, dotted) + ": " + dotted + ": " + problem);
    }
    return Status::Ok();
  }

 private:
  struct Entry {
    std::string key;
    YAML::Mark key_mark;
    YAML::Node value;
  };

  Section(Context* ctx, std::string prefix) : ctx_(ctx), prefix_(std::move(prefix)) {}

  std::string Dotted(const std::string& key) const {
    return prefix_.empty() ? key : prefix_ + "." + key;
  }

  // Registers `key` as known and returns its entry, or nullptr when the config omits it.
  const Entry* Lookup(const std::string& key) {
    if (known_.insert(key).second) known_order_.push_back(key);
    for (const Entry& e : entries_) {
      if (e.key != key) continue;
      ctx_->RecordPosition(Dotted(key), WhereValue(e));
      return &e;
    }
    return nullptr;
  }

  // The value's position; for a null value (`key:` alone) yaml-cpp marks the next token, so
  // the key's position is the useful one.
  std::string WhereValue(const Entry& e) const {
    const YAML::Mark mark = e.value.IsNull() ? e.key_mark : e.value.Mark();
    return ctx_->Where(mark, Dotted(e.key));
  }

  Status Error(const Entry& e, const std::string& problem) const {
    return InvalidArgument(WhereValue(e) + ": " + Dotted(e.key) + ": " + problem);
  }

  Status TypeError(const Entry& e, const std::string& expected) const {
    std::string got = Describe(e.value);
    if (e.value.IsScalar() && IsQuoted(e.value)) got = "the quoted string " + got;
    return Error(e, "expected " + expected + ", got " + got);
  }

  Status CheckIntRange(const Entry& e, int64_t v, int64_t min, int64_t max) const {
    if (v < min) return Error(e, "must be >= " + std::to_string(min) + ", got " + std::to_string(v));
    if (v > max) return Error(e, "must be <= " + std::to_string(max) + ", got " + std::to_string(v));
    return Status::Ok();
  }

  Context* ctx_;
  std::string prefix_;
  std::vector<Entry> entries_;
  std::set<std::string> known_;
  std::vector<std::string> known_order_;  // documented order, for suggestions and listings
};

// Upper bounds of the sizes: far beyond any real model, low enough that products of them
// (V*C, B*T*C, ...) never overflow int64 before the model's memory check refuses them.
constexpr int64_t kMaxVocab = int64_t{1} << 24;      // 16.7M tokens
constexpr int64_t kMaxSeqLen = int64_t{1} << 20;     // 1M tokens
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxWidth = int64_t{1} << 17;      // hidden size 131072
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxBatch = int64_t{1} << 20;
constexpr int64_t kMaxSyntheticTokens = int64_t{1} << 30;  // 4 GiB of int32 per split
constexpr int64_t kMaxSteps = int64_t{1} << 40;

Status ReadModel(Section& s, ModelConfig* m) {
  RETURN_IF_ERROR(s.Enum<ModelFamily>(
      "family", {{"gpt2", ModelFamily::kGpt2}, {"llama", ModelFamily::kLlama}}, &m->family));
  RETURN_IF_ERROR(s.Int("vocab_size", 2, kMaxVocab, &m->vocab_size));
  RETURN_IF_ERROR(s.Int("max_seq_len", 1, kMaxSeqLen, &m->max_seq_len));
  RETURN_IF_ERROR(s.Int("num_layers", 1, kMaxLayers, &m->num_layers));
  RETURN_IF_ERROR(s.Int("hidden_size", 1, kMaxWidth, &m->hidden_size));
  RETURN_IF_ERROR(s.Int("num_heads", 1, kMaxHeads, &m->num_heads));
  RETURN_IF_ERROR(s.Int("num_kv_heads", 0, kMaxHeads, &m->num_kv_heads));
  RETURN_IF_ERROR(s.Int("ffn_hidden_size", 0, kMaxWidth * 8, &m->ffn_hidden_size));
  RETURN_IF_ERROR(s.Float("norm_eps", kPositive, &m->norm_eps));
  RETURN_IF_ERROR(s.Float("rope_theta", kPositive, &m->rope_theta));
  bool tie_given = false;
  RETURN_IF_ERROR(s.Bool("tie_embeddings", &m->tie_embeddings, &tie_given));
  if (!tie_given) m->tie_embeddings = m->family == ModelFamily::kGpt2;  // GPT-2 ties, Llama not
  RETURN_IF_ERROR(s.Float("init_std", kPositive, &m->init_std));
  RETURN_IF_ERROR(s.Enum<RecomputePolicy>("recompute",
                                          {{"none", RecomputePolicy::kNone},
                                           {"selective", RecomputePolicy::kSelective},
                                           {"full", RecomputePolicy::kFull}},
                                          &m->recompute));
  return s.Finish();
}

Status ReadOptimizer(Section& s, AdamWConfig* o) {
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
      "offload", {{"none", OptimizerOffload::kNone}, {"cpu", OptimizerOffload::kCpu}},
      &o->offload));
  return s.Finish();
}

Status ReadSchedule(Section& s, LrScheduleConfig* c) {
  RETURN_IF_ERROR(s.Int("warmup_steps", 0, kMaxSteps, &c->warmup_steps));
  RETURN_IF_ERROR(s.Enum<LrDecay>(
      "decay",
      {{"cosine", LrDecay::kCosine}, {"linear", LrDecay::kLinear}, {"constant", LrDecay::kConstant}},
      &c->decay));
  RETURN_IF_ERROR(s.Float("min_lr_ratio", kUnitClosed, &c->min_lr_ratio));
  RETURN_IF_ERROR(s.Int("decay_steps", 0, kMaxSteps, &c->decay_steps));
  return s.Finish();
}

Status ReadData(Section& s, DataConfig* d) {
  RETURN_IF_ERROR(s.Enum<DataSource>(
      "source", {{"synthetic", DataSource::kSynthetic}, {"shards", DataSource::kShards}},
      &d->source));
  RETURN_IF_ERROR(s.String("train", &d->train_path));
  RETURN_IF_ERROR(s.String("val", &d->val_path));
  ASSIGN_OR_RETURN(Section syn, s.Child("synthetic"));
  SyntheticDataConfig& c = d->synthetic;
  RETURN_IF_ERROR(syn.Int("branching", 1, kMaxVocab, &c.branching));
  RETURN_IF_ERROR(syn.Int("order", 1, 2, &c.order));
  RETURN_IF_ERROR(syn.Float("concentration", kPositive, &c.concentration));
  RETURN_IF_ERROR(syn.Uint("seed", &c.seed));
  RETURN_IF_ERROR(syn.Int("num_tokens", 2, kMaxSyntheticTokens, &c.num_tokens));
  RETURN_IF_ERROR(syn.Finish());
  return s.Finish();
}

Status ReadTrain(Section& s, TrainConfig* t) {
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
  RETURN_IF_ERROR(s.String("out_dir", &t->out_dir));
  RETURN_IF_ERROR(s.NonEmpty("out_dir", t->out_dir));  // "" would scatter outputs into the cwd
  RETURN_IF_ERROR(s.Enum<NonFinitePolicy>(
      "on_nonfinite", {{"stop", NonFinitePolicy::kStop}, {"skip", NonFinitePolicy::kSkip}},
      &t->on_nonfinite));
  RETURN_IF_ERROR(s.Int("max_nonfinite_skips", 1, kMaxSteps, &t->max_nonfinite_skips));
  RETURN_IF_ERROR(s.Float("spike_zscore", kNonNegative, &t->spike_zscore));
  RETURN_IF_ERROR(s.Int("spike_window", 2, 65536, &t->spike_window));
  RETURN_IF_ERROR(s.Enum<SpikeAction>(
      "spike_action", {{"report", SpikeAction::kReport}, {"skip", SpikeAction::kSkip}},
      &t->spike_action));
  return s.Finish();
}

constexpr int64_t kMaxRanks = int64_t{1} << 20;

Status ReadParallel(Section& s, ParallelConfig* p) {
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

Status ReadMixedPrecision(Section& s, MixedPrecisionConfig* m) {
  RETURN_IF_ERROR(s.Enum<bool>("reduce_dtype", {{"fp32", false}, {"low", true}}, &m->reduce_in_low));
  RETURN_IF_ERROR(s.Enum<LossScaleMode>(
      "loss_scale", {{"dynamic", LossScaleMode::kDynamic}, {"static", LossScaleMode::kStatic}},
      &m->loss_scale));
  RETURN_IF_ERROR(s.Float("initial_scale", kPositive, &m->initial_scale));
  RETURN_IF_ERROR(s.Int("growth_interval", 1, kMaxSteps, &m->growth_interval));
  RETURN_IF_ERROR(s.Float("min_scale", kPositive, &m->min_scale));
  return s.Finish();
}

Status ReadCheckpoint(Section& s, CheckpointConfig* c) {
  RETURN_IF_ERROR(s.String("dir", &c->dir));
  RETURN_IF_ERROR(s.Int("interval_steps", 0, kMaxSteps, &c->interval_steps));
  RETURN_IF_ERROR(s.Bool("at_end", &c->at_end));
  RETURN_IF_ERROR(s.Int("keep_last", 1, kMaxSteps, &c->keep_last));
  RETURN_IF_ERROR(s.Int("keep_every", 0, kMaxSteps, &c->keep_every));
  RETURN_IF_ERROR(s.Bool("async", &c->async));
  RETURN_IF_ERROR(s.Enum<CheckpointOnBusy>(
      "on_busy", {{"wait", CheckpointOnBusy::kWait}, {"skip", CheckpointOnBusy::kSkip}},
      &c->on_busy));
  RETURN_IF_ERROR(s.Int("max_failures", 1, kMaxSteps, &c->max_failures));
  return s.Finish();
}

Status ReadComm(Section& s, CommConfig* c) {
  RETURN_IF_ERROR(s.Float("timeout_s", kPositive, &c->timeout_s));
  // At least 1 KiB per bucket: smaller buckets would mean one collective per few elements.
  RETURN_IF_ERROR(s.Float("bucket_mb", kBucketRange, &c->bucket_mb));
  return s.Finish();
}

// The whole tree: sections in documented order, then unknown top-level keys.
Status ReadConfig(Context* ctx, const YAML::Node& root, Config* cfg) {
  ASSIGN_OR_RETURN(Section top, Section::Make(ctx, root, ""));
  ASSIGN_OR_RETURN(Section model, top.Child("model"));
  RETURN_IF_ERROR(ReadModel(model, &cfg->model));
  ASSIGN_OR_RETURN(Section optimizer, top.Child("optimizer"));
  RETURN_IF_ERROR(ReadOptimizer(optimizer, &cfg->optimizer));
  ASSIGN_OR_RETURN(Section schedule, top.Child("schedule"));
  RETURN_IF_ERROR(ReadSchedule(schedule, &cfg->schedule));
  ASSIGN_OR_RETURN(Section data, top.Child("data"));
  RETURN_IF_ERROR(ReadData(data, &cfg->data));
  ASSIGN_OR_RETURN(Section train, top.Child("train"));
  RETURN_IF_ERROR(ReadTrain(train, &cfg->train));
  ASSIGN_OR_RETURN(Section parallel, top.Child("parallel"));
  RETURN_IF_ERROR(ReadParallel(parallel, &cfg->parallel));
  ASSIGN_OR_RETURN(Section comm, top.Child("comm"));
  RETURN_IF_ERROR(ReadComm(comm, &cfg->comm));
  RETURN_IF_ERROR(top.Enum<Precision>(
      "precision",
      {{"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}, {"fp16", Precision::kFp16}},
      &cfg->precision));
  ASSIGN_OR_RETURN(Section mixed, top.Child("mixed_precision"));
  RETURN_IF_ERROR(ReadMixedPrecision(mixed, &cfg->mixed_precision));
  ASSIGN_OR_RETURN(Section checkpoint, top.Child("checkpoint"));
  RETURN_IF_ERROR(ReadCheckpoint(checkpoint, &cfg->checkpoint));
  RETURN_IF_ERROR(top.Enum<ResumeMode>("resume", {{"none", ResumeMode::kNone}, {"auto", ResumeMode::kAuto}},
                                       &cfg->resume));
  RETURN_IF_ERROR(top.String("init_from", &cfg->init_from));
  RETURN_IF_ERROR(top.Bool("init_optimizer", &cfg->init_optimizer));
  return top.Finish();
}

std::string N(int64_t v) { return std::to_string(v); }

// Constraints between keys, each reported at the most specific key the config set.
Status CheckCrossField(const Context& ctx, const Config& c) {
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
  // Expert parallelism is not built yet: refused here, before any rank does work, rather than
  // silently trained as something else.
  const ParallelConfig& par = c.parallel;
  if (par.ep > 1) {
    return ctx.CrossFieldError({"parallel.ep"}, "ep=" + N(par.ep) +
                                                    ": not supported yet (only 1; data, tensor "
                                                    "and pipeline parallelism are)");
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
  if (par.zero == 3 && par.dp < 2) {
    return ctx.CrossFieldError({"parallel.zero", "parallel.dp"},
                               "zero=3 partitions the parameters across the data-parallel ranks, "
                               "but dp=1: with one rank there is nothing to partition (use zero "
                               "0, or set parallel.dp and launch that many ranks)");
  }
  // Loss scales are powers of two so that multiplying the loss by one and the gradients by
  // its inverse is exact (only the exponent changes).
  const MixedPrecisionConfig& mp = c.mixed_precision;
  for (const auto& [key, value] : {std::pair<const char*, float>{"mixed_precision.initial_scale",
                                                                 mp.initial_scale},
                                   {"mixed_precision.min_scale", mp.min_scale}}) {
    int exponent = 0;
    if (std::frexp(value, &exponent) != 0.5f) {
      return ctx.CrossFieldError({key}, std::string(key + 16) + "=" + FormatConfigFloat(value) +
                                            " must be a power of two (e.g. 65536), so that "
                                            "removing the scale from the gradients is exact");
    }
  }
  if (c.precision == Precision::kFp16 && mp.loss_scale == LossScaleMode::kDynamic &&
      mp.min_scale > mp.initial_scale) {
    return ctx.CrossFieldError({"mixed_precision.min_scale", "mixed_precision.initial_scale"},
                               "min_scale=" + FormatConfigFloat(mp.min_scale) +
                                   " exceeds initial_scale=" + FormatConfigFloat(mp.initial_scale));
  }
  if (static_cast<int64_t>(par.dp) * par.tp * par.pp * par.ep > kMaxRanks) {
    return ctx.CrossFieldError({"parallel.dp"}, "dp*tp*pp*ep exceeds " + N(kMaxRanks) + " ranks");
  }
  if (c.resume == ResumeMode::kAuto && c.checkpoint.dir.empty()) {
    return ctx.CrossFieldError({"resume", "checkpoint.dir"},
                               "resume=auto needs checkpoint.dir (where to look for checkpoints)");
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

// Applies one "a.b.c=value" to the tree, creating missing maps on the way, and records the
// override as the origin of what it wrote.
Status ApplyOverride(const std::string& spec, YAML::Node& root, Context* ctx) {
  const std::string origin = "--set " + spec;
  const size_t eq = spec.find('=');
  if (eq == std::string::npos) {
    return InvalidArgument(origin + ": expected key.path=value (missing '=')");
  }
  const std::string key = spec.substr(0, eq);
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
  if (key.empty() || key.back() == '.') parts.push_back("");
  for (const std::string& p : parts) {
    if (p.empty() || p.find_first_of(" \t") != std::string::npos) {
      return InvalidArgument(origin + ": malformed key path \"" + key +
                             "\" (expected words joined by '.', e.g. train.steps=5)");
    }
  }
  YAML::Node value;
  try {
    value = YAML::Load(spec.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(origin + ": " + key + ": malformed value: " + e.msg);
  }
  if (auto p = FindYamlProblem(spec.substr(eq + 1))) {  // a tag, a second document, ...
    return InvalidArgument(origin + ": " + key + ": " + p->problem);
  }
  YAML::Node cur = root;  // handles share the tree; reset() moves the handle, = would write
  std::string dotted;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    dotted += (i ? "." : "") + parts[i];
    YAML::Node next = cur[parts[i]];
    if (!next.IsDefined() || next.IsNull()) {
      next = YAML::Node(YAML::NodeType::Map);
      ctx->AddOverride(dotted, origin);
    } else if (!next.IsMap()) {
      return InvalidArgument(origin + ": " + dotted + ": is " + Describe(next) +
                             ", not a map, so it has no key \"" + parts[i + 1] + "\"");
    }
    cur.reset(next);
  }
  cur[parts.back()] = value;
  ctx->AddOverride(key, origin);
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
  RETURN_IF_ERROR(CheckYamlInput(text, path));  // one document, no tags (yaml_input.h)
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    const std::string where = e.mark.is_null() ? path : YamlWhere(path, e.mark.line, e.mark.column);
    return InvalidArgument(where + ": malformed YAML: " + e.msg);
  }
  Context ctx(path);
  if (root.IsNull()) {
    return InvalidArgument(path + ": config is empty (expected a map with sections model, "
                                  "optimizer, schedule, data, train, parallel, comm)");
  }
  if (!root.IsMap()) {
    return InvalidArgument(ctx.Where(root.Mark(), "") +
                           ": expected a map of sections (model, optimizer, schedule, data, "
                           "train, parallel, comm, init_from) at the top level, got " + Describe(root));
  }
  for (const std::string& o : overrides) RETURN_IF_ERROR(ApplyOverride(o, root, &ctx));

  Config cfg;
  cfg.path = path;
  RETURN_IF_ERROR(ReadConfig(&ctx, root, &cfg));
  RETURN_IF_ERROR(CheckCrossField(ctx, cfg));
  cfg.resolved_yaml = EmitResolvedYaml(cfg, overrides);
  return cfg;
}

Result<Config> LoadConfigGuarded(const std::string& text, const std::string& path,
                                 const std::vector<std::string>& overrides) {
  // yaml-cpp reports misuse by exception; none may escape (STYLE.md, Errors).
  try {
    return LoadConfigImpl(text, path, overrides);
  } catch (const YAML::Exception& e) {
    return Internal(path + ": yaml-cpp error while reading config: " + e.what());
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
