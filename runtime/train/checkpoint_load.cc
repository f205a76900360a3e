// runtime/train/checkpoint_load.cc — the Checkpointer's loading side (contract in
// checkpointer.h): resume and init_from, which both look for the newest usable checkpoint of a
// root and fall back past the others, and the verified, layout-independent tensor load.
//
// What "usable" means, per candidate, decided by all ranks together (each reads other bytes):
//   loaded      the manifest opened, the candidate check passed, every tensor read verified;
//   damaged     any rank found bad bytes or metadata (checksum, truncation, a missing or
//               non-regular file, a state no run could save): resume moves it aside to
//               step_<N>.corrupt and marks it corrupt in the catalog; init_from reports it
//               and leaves it (the root belongs to another run);
//   unfit       healthy, but not for this run (the check said kOutOfRange: a step beyond
//               train.steps, a data position outside this run's data): skipped and reported,
//               left in place;
//   error       anything else (a model that does not match, an I/O error, another seed):
//               not the checkpoint's fault, so nothing is marked and the search stops there.
// No usable candidate at all is kCorruptCheckpoint (exit 5) listing why each was passed over.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "checkpoint/commit.h"
#include "checkpoint/file_names.h"
#include "models/hf_weights.h"
#include "models/lora.h"
#include "runtime/train/checkpointer.h"
#include "runtime/train/env_info.h"
#include "runtime/train/host_tier.h"
#include "runtime/train/rank_layout.h"

namespace tessera {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A candidate's outcome on one rank, as the value the ranks exchange.
enum Verdict : int { kLoaded = 1, kDamaged = 0, kOtherError = 2, kUnfit = 3 };

Verdict VerdictOf(const Status& st) {
  if (st.ok()) return kLoaded;
  if (st.code() == StatusCode::kDataLoss || st.code() == StatusCode::kNotFound) return kDamaged;
  if (st.code() == StatusCode::kOutOfRange) return kUnfit;
  return kOtherError;
}

std::string Join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

// "environment differs from DIR's (the run that saved it): git_commit: a -> b; hostname: ..."
std::string EnvironmentNote(const std::vector<EnvironmentDifference>& env, const std::string& dir) {
  std::vector<std::string> parts;
  for (const EnvironmentDifference& d : env) parts.push_back(DescribeDifference(d));
  const bool placement_only =
      std::all_of(env.begin(), env.end(), [](const EnvironmentDifference& d) { return d.placement; });
  return "environment differs from " + dir + "'s (the run that saved it" +
         (placement_only ? ", where it ran only" : "") + "): " + Join(parts, "; ");
}

}  // namespace

// With train.strict_env, a checkpoint saved by other code, compiler, libraries or CPU is
// refused (kInvalidArgument: not damage, so no fallback to an older one, which the same
// environment saved); where it ran (hostname, cores, threads, kernel) may differ.
Status Checkpointer::StrictEnvironment(const std::vector<EnvironmentDifference>& env,
                                       const std::string& dir) const {
  if (!config_.train.strict_env) return Status::Ok();
  std::vector<std::string> parts;
  for (const EnvironmentDifference& d : env) {
    if (!d.placement) parts.push_back(DescribeDifference(d));
  }
  if (parts.empty()) return Status::Ok();
  return InvalidArgument("train.strict_env: " + dir + " was saved in another environment (" +
                         Join(parts, "; ") + "); without strict_env the differences are "
                         "printed and the checkpoint loads");
}

// Any unusable name means checkpoints existed, so "none" must not become a fresh start.
std::vector<std::string> Checkpointer::UnusableDirs(const std::vector<int64_t>& committed) const {
  return UnusableCheckpointNames(root_, committed, fs_);
}

Result<std::optional<LoadedCheckpoint>> Checkpointer::LoadNewestUsable(const Candidates& c,
                                                                       ParamState& shards) {
  std::vector<std::string> passed_over;  // "step N: why", for the final error
  int damaged = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t k = 0; k < c.steps.size(); ++k) {
    const std::string dir = c.root + "/" + StepDirName(c.steps[k]);
    LoadedCheckpoint loaded;
    std::vector<EnvironmentDifference> env;
    Status st = Status::Ok();
    auto reader = CheckpointReader::Open(dir, fs_);
    if (!reader.ok()) {
      st = reader.status();
    } else {
      const Manifest& m = (*reader)->manifest();
      if (c.check) st = c.check(m, ManifestPath(dir));
      env = CompareEnvironment(m.environment);
      if (st.ok()) st = StrictEnvironment(env, dir);
      if (st.ok()) st = LoadCheckpointInto(**reader, *partition_, shards, c.with_optimizer, c.part);
      loaded.step = m.step;
      loaded.dir = dir;
      loaded.state = m.state;
    }
    const Verdict mine = VerdictOf(st);
    ASSIGN_OR_RETURN(std::vector<double> flags, Gather({static_cast<double>(mine)}));
    auto any = [&](Verdict v) {
      return std::find(flags.begin(), flags.end(), static_cast<double>(v)) != flags.end();
    };
    if (!any(kDamaged) && !any(kOtherError) && !any(kUnfit)) {
      char took[48];
      std::snprintf(took, sizeof took, ", loaded in %.2f s",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      Event(c.purpose, (c.purpose == "resume" ? "resuming from " : "init_from: weights from ") +
                           dir + " (step " + std::to_string(loaded.step) + took + ")");
      if (!env.empty()) Event(c.purpose, EnvironmentNote(env, dir));
      return std::optional<LoadedCheckpoint>(std::move(loaded));
    }
    std::string who;
    for (int r = 0; r < ranks_; ++r) {
      if (flags[r] != static_cast<double>(kLoaded)) who += (who.empty() ? "" : ", ") + std::to_string(r);
    }
    if (!st.ok() && rank_ != 0) {
      std::fprintf(stderr, "tessera: rank %d: %s: %s\n", rank_, dir.c_str(), st.ToString().c_str());
    }
    if (any(kOtherError)) {
      if (mine == kOtherError) return st;
      return FailedPrecondition(dir + ": loading failed on rank(s) " + who +
                                " for a reason other than damage (see their messages); nothing "
                                "was marked corrupt");
    }
    const std::string next = k + 1 < c.steps.size()
                                 ? "; falling back to step " + std::to_string(c.steps[k + 1])
                                 : "";
    if (!any(kDamaged)) {  // unfit everywhere: the same manifest, the same verdict
      passed_over.push_back("step " + std::to_string(c.steps[k]) + ": " + st.message());
      Event(c.purpose, dir + " does not fit this run (" + st.message() + "), left in place" + next);
      continue;
    }
    ++damaged;
    const std::string why = mine == kDamaged ? st.ToString() : "failed verification on rank(s) " + who;
    std::string moved = c.set_aside ? "" : "; left in place (not this run's checkpoint root)";
    if (c.set_aside && rank_ == 0) {
      // Out of the committed namespace, kept for inspection: never tried or counted again.
      const std::string aside = dir + std::string(kCorruptSuffix);
      Status mv = fs_.RemoveTree(aside);
      if (mv.ok()) mv = fs_.Rename(dir, aside);
      if (mv.ok()) mv = fs_.SyncDir(c.root);
      moved = mv.ok() ? "; moved to " + CorruptDirName(c.steps[k]) : "; " + mv.ToString();
      if (sink_) (void)sink_->SetStatus(c.steps[k], CheckpointStatus::kCorrupt, why + moved);
    }
    passed_over.push_back("step " + std::to_string(c.steps[k]) + ": damaged");
    Event("corrupt", dir + " is unusable (" + why + ")" + moved + next);
  }
  return CorruptCheckpoint(
      "no usable checkpoint under " + c.root + " among " + std::to_string(c.steps.size()) +
      " committed (" + Join(passed_over, "; ") + ")" +
      (damaged > 0 && c.set_aside ? "; the damaged ones were moved aside as step_<N>.corrupt" : ""));
}

Result<std::optional<LoadedCheckpoint>> Checkpointer::Resume(ParamState& shards,
                                                             const CandidateCheck& check) {
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, CommittedSteps(root_, fs_));
  const std::vector<std::string> unusable = UnusableDirs(steps);
  const std::string unusable_list = Join(unusable, ", ");
  if (steps.empty()) {
    if (!unusable.empty()) {
      return CorruptCheckpoint("no usable checkpoint under " + root_ + ", only unusable ones (" +
                               unusable_list + "): repair or remove them, or set resume: none "
                               "with another checkpoint.dir to start from scratch");
    }
    Event("resume", "no committed checkpoint under " + root_ + ": starting from step 0");
    return std::optional<LoadedCheckpoint>();
  }
  if (!unusable.empty()) Event("resume", "not considered (unusable): " + unusable_list);
  return LoadNewestUsable({root_, steps, /*set_aside=*/true, /*with_optimizer=*/true, check,
                           "resume"},
                          shards);
}

// One candidate held on the hosts, loaded through a file system that fetches what this host
// lacks from a host that has it, opening only the shards this rank's part of the state needs
// (lazy_shards). Every rank's verdict comes back (collective), with the files and bytes fetched.
Result<Checkpointer::HostLoad> Checkpointer::LoadHeld(const HeldChoice& choice, ParamState& shards,
                                                      const CandidateCheck& check) {
  HostLoad out;
  std::unique_ptr<FetchingFileSystem> fetching = host_->FetchingFor(choice, fs_);
  const std::string dir = root_ + "/" + StepDirName(choice.step);
  Status st = Status::Ok();
  {
    auto reader = CheckpointReader::Open(dir, *fetching, /*lazy_shards=*/true);
    if (!reader.ok()) {
      st = reader.status();
    } else {
      const Manifest& m = (*reader)->manifest();
      if (check) st = check(m, ManifestPath(dir));
      if (st.ok()) st = LoadCheckpointInto(**reader, *partition_, shards, /*with_optimizer=*/true);
      out.loaded = {m.step, dir, m.state};
    }
  }
  ASSIGN_OR_RETURN(std::vector<double> flags,
                   Gather({static_cast<double>(VerdictOf(st)), static_cast<double>(fetching->files_fetched()),
                           static_cast<double>(fetching->bytes_fetched())}));
  for (int r = 0; r < ranks_; ++r) {
    if (flags[3 * r] != static_cast<double>(kLoaded)) {
      out.failed_ranks += (out.failed_ranks.empty() ? "" : ", ") + std::to_string(r);
      ++out.failed;
    }
    out.files += flags[3 * r + 1];
    out.bytes += flags[3 * r + 2];
  }
  if (!st.ok()) {
    std::fprintf(stderr, "tessera: rank %d: %s: %s\n", rank_, dir.c_str(), st.ToString().c_str());
    out.why = st.ToString();
  }
  return out;
}

Result<std::optional<LoadedCheckpoint>> Checkpointer::ResumeFromHosts(ParamState& shards,
                                                                      const CandidateCheck& check,
                                                                      int64_t at_least, bool* dirtied) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> passed_over;
  int64_t newest_any = -1;
  ASSIGN_OR_RETURN(std::vector<HeldChoice> candidates, host_->Choose(at_least, &passed_over, &newest_any));
  const bool held_any = newest_any >= 0;
  const std::string tier = memory() ? "the memory tier" : "the hosts' local checkpoints";
  for (const HeldChoice& choice : candidates) {
    ASSIGN_OR_RETURN(HostLoad load, LoadHeld(choice, shards, check));
    if (load.failed_ranks.empty()) {
      char line[400];
      std::snprintf(line, sizeof line,
                    "resuming from %s: step %lld%s, %.0f file(s), %.1f MiB fetched from other hosts, "
                    "loaded in %.2f s",
                    tier.c_str(), static_cast<long long>(choice.step),
                    memory() ? (" (the newest on disk: " +
                                (at_least >= 0 ? "step " + std::to_string(at_least) : std::string("none")) + ")").c_str()
                             : "",
                    load.files, load.bytes / 1048576.0,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      // "memory_resume": the supervisor reads the step from it (incarnation.cc).
      Event(memory() ? "memory_resume" : "resume", line);
      return std::optional<LoadedCheckpoint>(std::move(load.loaded));
    }
    const std::string why = "step " + std::to_string(choice.step) + ": could not be loaded on rank(s) " +
                            load.failed_ranks + (load.why.empty() ? " (see their messages)" : " (" + load.why + ")");
    passed_over.push_back(why);
    Event("resume", "passed over " + why);
    if (load.failed < ranks_ && dirtied != nullptr) {
      // Loaded somewhere: the state is mixed now. A snapshot that does not load is scratch:
      // removed everywhere, so no later restart tries it again.
      *dirtied = true;
    }
    if (memory() && coordinates()) (void)DeleteCheckpoint(root_, choice.step, fs_);
  }
  for (const std::string& why : passed_over) {
    if (why.find("could not be loaded") == std::string::npos) Event("resume", "passed over " + why);
  }
  if (memory()) {  // the disk tier is next; said only when something was there
    if (held_any && !passed_over.empty()) Event("resume", "nothing usable in memory: the disk tier resumes");
    return std::optional<LoadedCheckpoint>();
  }
  if (!held_any) {
    Event("resume", "no committed checkpoint under " + root_ + " on any host: starting from step 0");
    return std::optional<LoadedCheckpoint>();
  }
  std::string list;
  for (const std::string& why : passed_over) list += (list.empty() ? "" : "; ") + why;
  return CorruptCheckpoint("no usable checkpoint under " + root_ + " on the hosts of this run (" + list +
                           "): a lost host's shards are gone with it (checkpoint.local keeps no "
                           "replica); run on hosts that hold them, or set resume: none with another "
                           "checkpoint.dir to start from scratch");
}

Result<int64_t> Checkpointer::NewestCommitted(bool any) {
  if (host_) {
    int64_t newest_any = -1;
    ASSIGN_OR_RETURN(std::vector<HeldChoice> c, host_->Choose(-1, nullptr, &newest_any));
    if (any) return newest_any;
    return c.empty() ? int64_t{-1} : c.front().step;
  }
  Result<std::vector<int64_t>> steps = CommittedSteps(root_, fs_);
  const double mine = !steps.ok() ? -2.0 : steps->empty() ? -1.0 : static_cast<double>(steps->front());
  ASSIGN_OR_RETURN(std::vector<double> all, Gather({mine}));
  if (all[0] == -2.0) {
    return rank_ == 0 ? steps.status() : IoError(root_ + ": rank 0 could not list the checkpoints");
  }
  return static_cast<int64_t>(all[0]);
}

Status Checkpointer::InitFrom(const std::string& path, ParamState& shards, bool with_optimizer,
                              const CandidateCheck& check) {
  ASSIGN_OR_RETURN(const FileKind manifest, fs_.Kind(ManifestPath(path)));
  if (manifest != FileKind::kMissing) {
    // One checkpoint named explicitly: that one or nothing (damage is exit 5, no fallback).
    Status st = Status::Ok();
    auto reader = CheckpointReader::Open(path, fs_);
    if (!reader.ok()) st = reader.status();
    if (st.ok() && check) st = check((*reader)->manifest(), ManifestPath(path));
    if (st.ok()) st = LoadCheckpointInto(**reader, *partition_, shards, with_optimizer, InitPart());
    ASSIGN_OR_RETURN(std::vector<double> flags, Gather({static_cast<double>(VerdictOf(st))}));
    if (VerdictOf(st) == kDamaged) return CorruptCheckpoint("init_from " + st.message());
    if (!st.ok()) return st;
    // This rank loaded it. Damage another rank met is damage (exit 5); any other failure there
    // (an I/O error) is not, and must not be reported as a corrupt checkpoint.
    auto any_rank = [&](Verdict v) {
      return std::find(flags.begin(), flags.end(), static_cast<double>(v)) != flags.end();
    };
    if (any_rank(kDamaged)) {
      return CorruptCheckpoint("init_from " + path + ": damaged on another rank (see its message)");
    }
    if (std::any_of(flags.begin(), flags.end(), [](double f) { return f != static_cast<double>(kLoaded); })) {
      return FailedPrecondition("init_from " + path +
                                ": loading failed on another rank for a reason other than damage "
                                "(see its message)");
    }
    Event("init_from", "weights from " + path);
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, CommittedSteps(path, fs_));
  if (steps.empty()) {
    return NotFound(path + ": neither a checkpoint (no manifest.json) nor a checkpoint root "
                           "with a committed step_<N> directory");
  }
  return LoadNewestUsable({path, steps, /*set_aside=*/false, with_optimizer, check,
                                     "init_from", InitPart()},
                                    shards)
      .status();
}

Status LoadCheckpointInto(const CheckpointReader& reader, const ModelConfig& model,
                          ParamState& shards, bool with_optimizer, ParamPart part) {
  ASSIGN_OR_RETURN(ModelPartition whole, ModelPartition::Create(model, 1, 0));
  return LoadCheckpointInto(reader, whole, shards, with_optimizer, part);
}

std::vector<ParamDecl> PartParameters(const ModelConfig& model, ParamPart part) {
  std::vector<ParamDecl> out;
  for (ParamDecl& d : DeclareParameters(model)) {
    if (d.frozen == (part == ParamPart::kFrozen)) out.push_back(std::move(d));
  }
  return out;
}

namespace {

// Every parameter of the model is in the checkpoint with its shape (and, with_optimizer, its
// moments), and the checkpoint has no parameter the model lacks; else an error naming both.
// A LoRA run's checkpoint: adapter tensors and nothing else.
bool HoldsAdaptersOnly(const Manifest& m) {
  bool any = false;
  for (const TensorRecord& t : m.tensors) {
    if (t.name.rfind("param/", 0) != 0) continue;
    if (t.name.find(".lora_") == std::string::npos) return false;
    any = true;
  }
  return any;
}

Status CheckTensorsMatch(const CheckpointReader& reader, const std::vector<ParamDecl>& decls,
                         bool with_optimizer) {
  const Manifest& m = reader.manifest();
  for (const ParamDecl& d : decls) {
    for (int k = 0; k < (with_optimizer ? 3 : 1); ++k) {
      const std::string name = kSavedTensorKinds[k] + d.name;
      const TensorRecord* t = m.FindTensor(name);
      if (t == nullptr) {
        if (HoldsAdaptersOnly(m)) {
          return InvalidArgument(reader.dir() + ": is a LoRA run's checkpoint (finetune.lora): it "
                                 "holds the adapters only, not " + name + "; start from that "
                                 "run's merged model.safetensors (or tessera ckpt export of "
                                 "this checkpoint) instead");
        }
        return InvalidArgument(reader.dir() + ": has no tensor " + name +
                               " that this config's model needs (a different model family, "
                               "layer count or tying?)");
      }
      if (t->shape != d.shape.dims() || t->dtype != DType::kF32) {
        return InvalidArgument(reader.dir() + ": tensor " + name + " is " +
                               std::string(DTypeName(t->dtype)) + " " + ShapeText(t->shape) +
                               " there but f32 " + ShapeText(d.shape.dims()) +
                               " in this config's model");
      }
    }
  }
  for (const TensorRecord& t : m.tensors) {  // a larger model's extra parameters
    if (t.name.rfind("param/", 0) != 0) continue;
    const std::string name = t.name.substr(6);
    if (std::none_of(decls.begin(), decls.end(), [&](const ParamDecl& d) { return d.name == name; })) {
      if (name.find(".lora_") != std::string::npos) {
        return InvalidArgument(reader.dir() + ": holds LoRA adapters (" + name + ") that this "
                               "config does not declare: resume it with its finetune.lora "
                               "settings, or start from that run's merged model.safetensors");
      }
      return InvalidArgument(reader.dir() + ": has parameter " + name +
                             " that this config's model does not (a different model?)");
    }
  }
  return Status::Ok();
}

// Reads local flat ranges of one saved tensor kind (param / m / v): each local element from the
// global element it maps to (vocabulary padding is zero). The first error is kept and stops
// further reads.
// A tensor-parallel piece can be one row of a column-split tensor, and a read verifies every
// segment it touches whole: reading row by row would checksum each saved segment once per row.
// So consecutive pieces of one tensor are read as their covering global range (at most kMaxSpan
// elements of scratch) and scattered from there: each segment is verified once per span.
class LocalRangeReader {
 public:
  LocalRangeReader(const CheckpointReader& reader, const ModelPartition& partition)
      : reader_(reader), partition_(partition) {}

  // A ParamShards fill for kind k.
  ParamState::Fill Fill(int k) {
    return [this, k](int64_t b, int64_t e, float* out) { Read(k, b, e, out); };
  }
  const Status& status() const { return first_; }

 private:
  static constexpr int64_t kMaxSpan = int64_t{16} << 20;  // 64 MiB of fp32 scratch
  struct Piece {
    int64_t global, length, local;
  };

  void Read(int k, int64_t b, int64_t e, float* out) {
    std::memset(out, 0, static_cast<size_t>(e - b) * sizeof(float));
    const TpParam* tensor = nullptr;
    std::vector<Piece> batch;
    partition_.ForEachGlobalPiece(
        b, e, [&](const TpParam& param, int64_t global_begin, int64_t length, int64_t local) {
          // Pieces of one tensor come in increasing global order.
          if (!batch.empty() &&
              (&param != tensor || global_begin + length - batch.front().global > kMaxSpan)) {
            Flush(k, *tensor, batch, out, b);
          }
          tensor = &param;
          batch.push_back({global_begin, length, local});
        });
    if (tensor != nullptr) Flush(k, *tensor, batch, out, b);
  }

  // Reads `batch` (pieces of `tensor`) into out[local - b ...] and empties it.
  void Flush(int k, const TpParam& tensor, std::vector<Piece>& batch, float* out, int64_t b) {
    if (batch.empty() || !first_.ok()) {
      batch.clear();
      return;
    }
    const std::string name = kSavedTensorKinds[k] + tensor.local.name;
    const int64_t g0 = batch.front().global;
    const int64_t g1 = batch.back().global + batch.back().length;
    if (batch.size() == 1) {
      first_ = reader_.Read(name, g0, g1, out + (batch.front().local - b));
    } else {
      scratch_.resize(static_cast<size_t>(g1 - g0));
      first_ = reader_.Read(name, g0, g1, scratch_.data());
      for (const Piece& pc : batch) {
        if (!first_.ok()) break;
        std::memcpy(out + (pc.local - b), scratch_.data() + (pc.global - g0),
                    static_cast<size_t>(pc.length) * sizeof(float));
      }
    }
    batch.clear();
  }

  const CheckpointReader& reader_;
  const ModelPartition& partition_;
  Status first_ = Status::Ok();
  std::vector<float> scratch_;
};

}  // namespace

Status LoadCheckpointInto(const CheckpointReader& reader, const ModelPartition& partition,
                          ParamState& shards, bool with_optimizer, ParamPart part) {
  RETURN_IF_ERROR(CheckTensorsMatch(reader, PartParameters(partition.config(), part), with_optimizer));
  LocalRangeReader read(reader, partition);
  Status loaded = part == ParamPart::kFrozen ? shards.LoadFrozen(read.Fill(0))
                                             : shards.LoadTrainable(read.Fill(0));
  RETURN_IF_ERROR(read.status());
  RETURN_IF_ERROR(loaded);
  if (with_optimizer) {
    const JsonValue* t = reader.manifest().state.Find("adamw_step");
    if (t == nullptr || !t->is_integer() || t->as_int() < 0) {
      return DataLoss(ManifestPath(reader.dir()) + ": state.adamw_step missing or not a count");
    }
    Status moments = shards.LoadMoments(read.Fill(1), read.Fill(2), t->as_int());
    RETURN_IF_ERROR(read.status());
    RETURN_IF_ERROR(moments);
  }
  return Status::Ok();
}

Status LoadLoraBase(const Config& config, float* values) {
  const ModelConfig base = BaseModelConfig(config.model);
  std::vector<Parameter> views = GlobalViews(base, values);
  if (config.init_from.empty()) {
    InitParameterRange(base, config.train.seed, 0, UnitBounds(base).back(), values);
    return Status::Ok();
  }
  if (auto ckpt = ResolveCheckpointDir(config.init_from); ckpt.ok()) {
    ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(*ckpt));
    for (const Parameter& prm : views) {
      RETURN_IF_ERROR(reader->Read("param/" + prm.name(), 0, prm.numel(), prm.value.f32()));
    }
    return Status::Ok();
  }
  HfExtras extras;
  return LoadHfWeights(config.init_from, base, views, &extras);
}

Result<std::string> LoraBaseIdentity(const Config& config) {
  namespace fs = std::filesystem;
  if (config.init_from.empty()) return "init seed " + std::to_string(config.train.seed);
  std::error_code ec;
  if (auto ckpt = ResolveCheckpointDir(config.init_from); ckpt.ok()) {
    return "checkpoint " + fs::weakly_canonical(*ckpt, ec).string();
  }
  const fs::path path = fs::weakly_canonical(config.init_from, ec);
  // The weights' bytes: the file, or every .safetensors of its directory (an index's shards).
  const bool dir = fs::is_directory(path, ec);
  const bool index = !dir && path.extension() == ".json";
  uintmax_t bytes = 0;
  if (dir || index) {
    for (const fs::directory_entry& e : fs::directory_iterator(dir ? path : path.parent_path(), ec)) {
      if (e.path().extension() == ".safetensors") bytes += e.file_size(ec);
    }
  } else {
    bytes = fs::file_size(path, ec);
  }
  if (ec) return IoError("finetune.lora: cannot read the base " + config.init_from + ": " + ec.message());
  return path.string() + " (" + std::to_string(bytes) + " bytes)";
}

Result<std::string> ResolveCheckpointDir(const std::string& path, FileSystem& fs) {
  // A directory with a manifest entry of any kind is a checkpoint (a damaged one if the entry
  // is not a regular file: CheckpointReader::Open says so), never mistaken for a root.
  ASSIGN_OR_RETURN(const FileKind manifest, fs.Kind(ManifestPath(path)));
  if (manifest != FileKind::kMissing) return path;
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, CommittedSteps(path, fs));
  if (steps.empty()) {
    return NotFound(path + ": neither a checkpoint (no manifest.json) nor a checkpoint root "
                           "with a committed step_<N> directory");
  }
  return path + "/" + StepDirName(steps.front());
}

}  // namespace tessera
