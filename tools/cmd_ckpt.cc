// tools/cmd_ckpt.cc — `tessera ckpt ls | verify | export | gc`: inspect, check, export and prune
// the checkpoints under a checkpoint root (checkpoint.dir of a run).
//
// The directory on disk is the ground truth (a step_<N> directory holding manifest.json is a
// committed checkpoint, checkpoint/commit.h); the catalog (checkpoint/catalog.h) adds history
// and timings. ls and verify only read: the catalog is opened read-only, so they work while a
// training run holds it for writing. gc writes the catalog and therefore refuses to run while
// a training run holds it (the run applies its own retention anyway).
// Exit codes (runtime/core/exit_codes.h): 0 ok, 2 usage, 4 missing or unreadable input,
// 5 verification failed (corrupt checkpoint), 1 anything else (e.g. the catalog is locked).
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "checkpoint/file_names.h"
#include "checkpoint/retention.h"
#include "checkpoint/shard_file.h"
#include "models/hf_export.h"
#include "models/lora.h"
#include "models/lora_export.h"
#include "models/param_layout.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/memory.h"
#include "runtime/train/checkpointer.h"
#include "runtime/train/config.h"
#include "runtime/train/rank_layout.h"
#include "runtime/train/saved_state.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/output_path.h"

namespace tessera::cli {
namespace {

void PrintCkptHelp(FILE* out) {
  std::fprintf(out,
      "usage: tessera ckpt ls DIR [--events]\n"
      "       tessera ckpt verify DIR [--step N]\n"
      "       tessera ckpt export DIR [--step N] --out FILE.safetensors|OUT_DIR [--dtype f32|bf16|f16]\n"
      "                               [--max-shard-size SIZE] [--adapter]\n"
      "       tessera ckpt gc DIR [--keep-last K] [--keep-every E] [--dry-run]\n\n"
      "DIR is a checkpoint root (checkpoint.dir of a run): committed checkpoints are the\n"
      "step_<N> directories holding a manifest.json; DIR/catalog records their history.\n\n"
      "  ls       one line per checkpoint: step, status, size, layout, training stall and\n"
      "           background write time of the save, commit time. Merges the catalog with the\n"
      "           disk and flags disagreements (a committed directory the catalog lacks, an\n"
      "           entry whose directory is gone). Safe while training runs (read-only).\n"
      "           --events adds the run's history from the catalog: saves, commits, resumes,\n"
      "           corruption and, under tessera launch, launches, failures and restarts.\n"
      "  verify   reads every segment of one checkpoint and checks its CRC-32C (default: the\n"
      "           newest committed). Exit 0 if intact, 5 naming the file and tensor if not —\n"
      "           then resume from an older step. Read-only.\n"
      "  export   the model parameters of one checkpoint (default: the newest committed) as\n"
      "           a Hugging Face safetensors file, or (--out not ending in .safetensors) a\n"
      "           model directory: shards of --max-shard-size (default 5GB) with their index,\n"
      "           and config.json where a Hugging Face model type computes the model (see\n"
      "           tessera export --help); uses the config saved in the checkpoint. A LoRA\n"
      "           run's checkpoint (finetune.lora) holds the adapters only: it is merged\n"
      "           with the base its config's init_from names (read again), or with\n"
      "           --adapter written as PEFT's adapter directory (--out DIR).\n"
      "  gc       deletes committed checkpoints by the retention policy, keeping the K newest\n"
      "           (default 3) and every step that is a multiple of E (default 0 = none); the\n"
      "           newest is never deleted. Records the deletions in the catalog, so it refuses\n"
      "           to run while a training run holds the catalog. --dry-run only prints.\n\n"
      "Examples:\n"
      "  tessera ckpt ls runs/tiny/ckpt\n"
      "  tessera ckpt verify runs/tiny/ckpt --step 1000\n"
      "  tessera ckpt export runs/tiny/ckpt --step 1000 --out tiny-1000.safetensors --dtype bf16\n"
      "  tessera ckpt gc runs/tiny/ckpt --keep-last 2 --keep-every 1000\n");
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return kExitUsage;
}

int Fail(const char* sub, const Status& s, int code) {
  std::fprintf(stderr, "tessera ckpt %s: %s\n", sub, s.ToString().c_str());
  return code;
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

std::string FormatUnixTime(double unix_s) {
  if (unix_s <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

// {"dp":4,"zero":3,"precision":"bf16"} -> "dp=4 zero=3 precision=bf16".
std::string FormatLayout(const JsonValue& layout) {
  std::string out;
  for (const auto& [key, v] : layout.members()) {
    std::string value = v.is_string() ? v.as_string()
                        : v.is_integer() ? std::to_string(v.as_int())
                        : v.is_bool()    ? (v.as_bool() ? "true" : "false")
                        : v.is_number()  ? std::to_string(v.as_double())
                                         : "?";
    out += (out.empty() ? "" : " ") + key + "=" + value;
  }
  return out.empty() ? "-" : out;
}

// The committed checkpoint directory to work on: --step N, or the newest. kNotFound naming
// what exists when there is no such checkpoint.
Result<int64_t> PickStep(const std::string& root, const ParsedArgs& p) {
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, CommittedSteps(root));  // newest first
  if (!p.Has("--step")) {
    if (steps.empty()) return NotFound("no committed checkpoint under " + root);
    return steps.front();
  }
  ASSIGN_OR_RETURN(int64_t step, ParseIntFlag("--step", p.Get("--step")));
  for (int64_t s : steps) {
    if (s == step) return step;
  }
  std::string have;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    have += (have.empty() ? "" : ", ") + std::to_string(*it);
  }
  return NotFound("no committed checkpoint for step " + std::to_string(step) + " under " + root +
                  " (committed: " + (have.empty() ? "none" : have) + ")");
}

// Parses args after the subcommand: exactly one positional DIR. Prints and returns nullopt +
// sets *exit_code on a usage error.
std::optional<ParsedArgs> ParseSub(const Args& rest, const std::string& sub,
                                   const std::set<std::string>& values,
                                   const std::set<std::string>& switches, int* exit_code) {
  auto parsed = ParseArgs(rest, "ckpt " + sub, values, switches);
  if (!parsed.ok()) {
    *exit_code = Usage(parsed.status().ToString());
    return std::nullopt;
  }
  if (parsed->positional.size() != 1) {
    *exit_code = Usage("tessera ckpt " + sub +
                       ": expected exactly one checkpoint root DIR (see tessera ckpt --help)");
    return std::nullopt;
  }
  if (parsed->Has("--step") && !ParseIntFlag("--step", parsed->Get("--step")).ok()) {
    *exit_code = Usage("tessera ckpt " + sub + ": --step: expected a non-negative integer, got \"" +
                       parsed->Get("--step") + "\"");
    return std::nullopt;
  }
  return std::move(parsed).value();
}

// ---- ls ----------------------------------------------------------------------------------------

struct Row {
  std::optional<CheckpointEntry> catalog;
  bool on_disk = false;
};

// Size, layout and timings of a committed directory the catalog does not know, from its
// manifest (validated, but shards are not read).
std::optional<CheckpointEntry> EntryFromManifest(const std::string& root, int64_t step) {
  const std::string path = ManifestPath(root + "/" + StepDirName(step));
  auto text = ReadFileToString(path, kMaxManifestBytes);
  if (!text.ok()) return std::nullopt;
  auto m = ParseManifest(*text, path);
  if (!m.ok()) return std::nullopt;
  CheckpointEntry e;
  e.step = step;
  e.status = CheckpointStatus::kCommitted;
  e.dir = StepDirName(step);
  e.bytes = m->total_bytes;
  e.layout = FormatLayout(m->layout);
  e.stall_seconds = m->stall_seconds;
  e.write_seconds = m->write_seconds;
  // The manifest is the last file written before the commit's rename: its mtime is when the
  // checkpoint committed, give or take the rename.
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0) e.commit_unix_s = st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
  return e;
}

int RunLs(const ParsedArgs& p) {
  const std::string root = p.positional[0];
  if (!IsDirectory(root)) return Fail("ls", NotFound(root + ": no such directory"), kExitBadInput);
  auto on_disk = CommittedSteps(root);
  if (!on_disk.ok()) return Fail("ls", on_disk.status(), kExitBadInput);

  std::map<int64_t, Row> rows;
  for (int64_t s : *on_disk) rows[s].on_disk = true;
  std::string catalog_note;
  auto catalog = Catalog::Open(root, /*read_only=*/true);
  if (!catalog.ok()) {
    catalog_note = catalog.status().code() == StatusCode::kNotFound
                       ? "no catalog at " + root + "/" + std::string(kCatalogDirName) + ": listing from disk only"
                       : "catalog unusable (" + catalog.status().message() + "): listing from disk only";
  } else {
    auto entries = (*catalog)->List();
    if (!entries.ok()) {
      catalog_note = "catalog unreadable (" + entries.status().message() + "): listing from disk only";
    } else {
      for (auto& e : *entries) rows[e.step].catalog = std::move(e);
    }
  }

  // Rows are formatted first: the LAYOUT column is as wide as its widest value.
  struct Line {
    int64_t step;
    std::string status, size, layout, stall, write, committed, note;
  };
  std::vector<Line> lines;
  int flagged = 0;
  for (auto& [step, row] : rows) {
    CheckpointEntry e;
    std::string note;
    if (row.catalog) {
      e = *row.catalog;
      note = e.note;
      const bool says_on_disk = e.status == CheckpointStatus::kCommitted ||
                                e.status == CheckpointStatus::kCorrupt;
      if (says_on_disk && !row.on_disk) {
        note = "MISSING: catalog says " + std::string(CheckpointStatusName(e.status)) + " but " +
               StepDirName(step) + " is not on disk" + (note.empty() ? "" : "; " + note);
        ++flagged;
      } else if (!says_on_disk && row.on_disk) {
        // A save that committed after the catalog was last written (or a deletion that did
        // not finish) is worth a look, not an alarm.
        note = "on disk as committed, catalog says " + std::string(CheckpointStatusName(e.status)) +
               (note.empty() ? "" : "; " + note);
        ++flagged;
      }
    } else {
      auto from_manifest = EntryFromManifest(root, step);
      if (from_manifest) e = *from_manifest;
      e.step = step;
      e.status = CheckpointStatus::kCommitted;
      note = catalog_note.empty() ? "NOT IN CATALOG: committed on disk" : "";
      if (!from_manifest) note += std::string(note.empty() ? "" : "; ") + "manifest unreadable (run verify)";
      if (catalog_note.empty()) ++flagged;
    }
    // A save that never wrote anything (failed early, or unknown) has no timings to show.
    const bool timed = e.bytes > 0 || e.stall_seconds > 0 || e.write_seconds > 0;
    lines.push_back({step, CheckpointStatusName(e.status), e.bytes ? FormatBytes(e.bytes) : "-",
                     e.layout.empty() ? "-" : e.layout,
                     timed ? FormatSeconds(e.stall_seconds) : "-",
                     timed ? FormatSeconds(e.write_seconds) : "-", FormatUnixTime(e.commit_unix_s),
                     note});
  }
  int layout_width = 6;
  for (const Line& l : lines) layout_width = std::max(layout_width, static_cast<int>(l.layout.size()));
  std::printf("%10s  %-9s  %10s  %-*s  %9s  %9s  %-19s  %s\n", "STEP", "STATUS", "SIZE", layout_width,
              "LAYOUT", "STALL", "WRITE", "COMMITTED", "NOTE");
  for (const Line& l : lines) {
    std::printf("%10lld  %-9s  %10s  %-*s  %9s  %9s  %-19s  %s\n", static_cast<long long>(l.step),
                l.status.c_str(), l.size.c_str(), layout_width, l.layout.c_str(), l.stall.c_str(),
                l.write.c_str(), l.committed.c_str(), l.note.c_str());
  }
  std::printf("%zu checkpoint(s), %zu committed on disk under %s", rows.size(), on_disk->size(),
              root.c_str());
  if (flagged) std::printf("; %d flagged", flagged);
  std::printf("\n");
  if (!catalog_note.empty()) std::printf("%s\n", catalog_note.c_str());
  // What a resume passes over, and saves in flight or cut short, as a resume would see them.
  for (const std::string& name : UnusableCheckpointNames(root, *on_disk)) {
    std::printf("not a checkpoint, a resume passes over it: %s\n", name.c_str());
  }
  if (auto names = DefaultFileSystem().ListDir(root); names.ok()) {
    for (const std::string& name : *names) {
      if (ParseSuffixedStepDirName(name, kStagingSuffix) < 0) continue;
      std::printf("being written, or cut short: %s (a save not committed; the next run's start "
                  "sweeps an interrupted one)\n", name.c_str());
    }
  }
  if (p.Has("--events") && catalog.ok()) {
    // The run's history: saves, commits, resumes, corruption, and under `tessera launch` the
    // supervisor's launches, failures and restarts (kinds "supervisor_*").
    auto events = (*catalog)->Events();
    if (!events.ok()) {
      std::printf("events unreadable: %s\n", events.status().ToString().c_str());
    } else {
      std::printf("\n%-19s  %-22s  %s\n", "TIME", "EVENT", "MESSAGE");
      for (const CatalogEvent& ev : *events) {
        std::printf("%-19s  %-22s  %s\n", FormatUnixTime(ev.unix_s).c_str(), ev.kind.c_str(),
                    ev.message.c_str());
      }
    }
  }
  return kExitOk;
}

// ---- verify ------------------------------------------------------------------------------------

// ParseSavedState, and the saved step within the train.steps of the config saved with it (a
// run never saves beyond its end). A config that this build cannot load is not checked.
Status CheckSavedStateAsSaved(const Manifest& m, const std::string& where) {
  ASSIGN_OR_RETURN(SavedTrainerState state, ParseSavedState(m.state, m.step, where));
  auto config = LoadConfigFromText(m.config_yaml, where + " config_yaml");
  if (config.ok() && state.step > config->train.steps) {
    return DataLoss(where + ": state.step " + std::to_string(state.step) +
                    " is beyond the train.steps=" + std::to_string(config->train.steps) +
                    " of the config saved with it");
  }
  return Status::Ok();
}

int RunVerify(const ParsedArgs& p) {
  const std::string root = p.positional[0];
  auto step = PickStep(root, p);
  if (!step.ok()) return Fail("verify", step.status(), kExitBadInput);
  const std::string dir = root + "/" + StepDirName(*step);
  const auto t0 = std::chrono::steady_clock::now();
  auto reader = CheckpointReader::Open(dir);
  if (!reader.ok()) {
    const bool corrupt = reader.status().code() == StatusCode::kDataLoss;
    std::fprintf(stderr, "tessera ckpt verify: %s: %s\n", corrupt ? "CORRUPT" : "cannot open",
                 reader.status().ToString().c_str());
    return ExitCodeFor(reader.status(), ExitPhase::kCheckpointVerify);
  }
  auto bytes = (*reader)->VerifyAll();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!bytes.ok()) {
    const bool corrupt = bytes.status().code() == StatusCode::kDataLoss;
    std::fprintf(stderr, "tessera ckpt verify: %s: %s\n", corrupt ? "CORRUPT" : "read failed",
                 bytes.status().ToString().c_str());
    return ExitCodeFor(bytes.status(), ExitPhase::kCheckpointVerify);
  }
  const Manifest& m = (*reader)->manifest();
  // The metadata as a resume reads it: the trainer's state (saved_state.h) must be one a run
  // could have saved, and consistent with the config the checkpoint was saved under.
  if (Status st = CheckSavedStateAsSaved(m, ManifestPath(dir)); !st.ok()) {
    std::fprintf(stderr, "tessera ckpt verify: CORRUPT: %s\n", st.ToString().c_str());
    return kExitCorruptCheckpoint;
  }
  size_t segments = 0;
  for (const auto& sh : m.shards) segments += sh.segments.size();
  std::printf("verified %s: %zu tensors, %zu shard file(s), %zu segments, %s in %.3f s (%.1f MB/s): OK\n",
              dir.c_str(), m.tensors.size(), m.shards.size(), segments, FormatBytes(*bytes).c_str(),
              seconds, seconds > 0 ? *bytes / seconds / 1e6 : 0.0);
  return kExitOk;
}

// ---- export ------------------------------------------------------------------------------------

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The checkpoint must hold exactly the parameters its config declares, as f32 in our layout.
Status CheckParamTensors(const Manifest& m, const std::vector<ParamDecl>& decls, const std::string& dir) {
  std::set<std::string> declared;
  for (const ParamDecl& d : decls) {
    const std::string name = "param/" + d.name;
    declared.insert(name);
    const TensorRecord* t = m.FindTensor(name);
    if (!t) return DataLoss(dir + ": no tensor " + name + " (the checkpoint's config declares it)");
    std::vector<int64_t> want;
    for (int i = 0; i < d.shape.rank(); ++i) want.push_back(d.shape[i]);
    if (t->shape != want || t->dtype != DType::kF32) {
      return DataLoss(dir + ": tensor " + name + " is " + std::string(DTypeName(t->dtype)) + " " +
                      ShapeText(t->shape) + ", its config declares f32 " + ShapeText(want));
    }
  }
  for (const TensorRecord& t : m.tensors) {
    if (t.name.rfind("param/", 0) == 0 && !declared.count(t.name)) {
      return DataLoss(dir + ": tensor " + t.name + " is not a parameter of the checkpoint's config");
    }
  }
  return Status::Ok();
}

int RunExportCkpt(const ParsedArgs& p) {
  if (!p.Has("--out")) {
    return Usage("tessera ckpt export: --out FILE is required (see tessera ckpt --help)");
  }
  DType dtype = DType::kF32;
  if (p.Has("--dtype") && (!ParseDType(p.Get("--dtype"), &dtype) || dtype == DType::kI32)) {
    return Usage("tessera ckpt export: --dtype must be f32, bf16 or f16");
  }
  uint64_t shard_bytes = kHfDefaultShardBytes;
  if (p.Has("--max-shard-size")) {
    auto size = ParseShardSize(p.Get("--max-shard-size"));
    if (!size.ok()) return Usage(size.status().message());
    shard_bytes = *size;
  }
  const std::string root = p.positional[0];
  // --adapter writes PEFT's two files into a directory that may hold others (a run's adapter/).
  const Status target = p.Has("--adapter") ? CheckOutputPath(p.Get("--out"), {root})
                                           : CheckExportOutput(p.Get("--out"), {root});
  if (!target.ok()) return Fail("export", target, kExitBadInput);
  auto step = PickStep(root, p);
  if (!step.ok()) return Fail("export", step.status(), kExitBadInput);
  const std::string dir = root + "/" + StepDirName(*step);
  auto reader = CheckpointReader::Open(dir);
  if (!reader.ok()) {
    return Fail("export", reader.status(), ExitCodeFor(reader.status(), ExitPhase::kCheckpointExport));
  }
  const Manifest& m = (*reader)->manifest();
  auto config = LoadConfigFromText(m.config_yaml, ManifestPath(dir) + " config_yaml");
  if (!config.ok()) return Fail("export", config.status(), kExitBadInput);

  // What the checkpoint holds: every parameter, or under finetune.lora the adapters.
  Status fits = CheckParamTensors(m, PartParameters(config->model, ParamPart::kTrainable), dir);
  if (!fits.ok()) return Fail("export", fits, kExitBadInput);
  int64_t total = 0;
  for (const ParamDecl& d : DeclareParameters(config->model)) total += d.shape.numel();

  std::vector<float> values(static_cast<size_t>(total));
  // The one-rank model's parameters (whole ShardedTensors) over `values`, read tensor by tensor.
  std::vector<Parameter> params = GlobalViews(config->model, values.data());
  const std::vector<ParamDecl> decls = DeclareParameters(config->model);
  for (size_t i = 0; i < params.size(); ++i) {
    if (decls[i].frozen) continue;  // a LoRA base: not in the checkpoint
    const Parameter& prm = params[i];
    Status s = (*reader)->Read("param/" + prm.name(), 0, prm.numel(), prm.value.f32());
    if (!s.ok()) {
      return Fail("export", s, ExitCodeFor(s, ExitPhase::kCheckpointExport));
    }
  }
  const std::string out = p.Get("--out");
  ModelConfig model = config->model;
  if (p.Has("--adapter") && !model.lora.enabled()) {
    return Fail("export", InvalidArgument(dir + " is not a LoRA run's checkpoint (its config has "
                                          "no finetune.lora): --adapter has nothing to write"),
                kExitBadInput);
  }
  if (model.lora.enabled()) {
    if (p.Has("--adapter")) {  // the adapters alone, as PEFT lays them out
      Status s = ExportLoraAdapter(out, model, values, config->init_from);
      if (!s.ok()) return Fail("export", s, ExitCodeFor(s));
      std::printf("exported the LoRA adapters of %s to %s/{adapter_model.safetensors,"
                  "adapter_config.json}\n", dir.c_str(), out.c_str());
      return kExitOk;
    }
    // The merged model: the frozen base from where the run took it, plus the adapters.
    Status base = LoadLoraBase(*config, values.data());
    if (!base.ok()) return Fail("export", base, ExitCodeFor(base, ExitPhase::kCheckpointExport));
    values = MergeLoraWeights(model, values);
    model = BaseModelConfig(model);
    params = GlobalViews(model, values.data());
    total = UnitBounds(model).back();
    std::printf("%s: a LoRA checkpoint: merged with its base %s\n", dir.c_str(),
                config->init_from.empty() ? "(the seed's init)" : config->init_from.c_str());
  }
  HfExtras extras;  // the MoE blocks' routing bias, from the saved trainer state
  if (auto state = ParseSavedState(m.state, m.step, ManifestPath(dir)); state.ok()) {
    extras.moe_bias = state->moe_bias;
  }
  auto written = ExportHf(out, model, params, dtype, &extras, shard_bytes);
  if (!written.ok()) return Fail("export", written.status(), ExitCodeFor(written.status()));
  std::printf("exported %zu tensors (%.2fM parameters, %s) of %s to %s\n", params.size(), total / 1e6,
              std::string(DTypeName(dtype)).c_str(), dir.c_str(), written->c_str());
  return kExitOk;
}

// ---- gc ----------------------------------------------------------------------------------------

int RunGc(const ParsedArgs& p) {
  RetentionPolicy policy;
  if (p.Has("--keep-last")) {
    auto k = ParseIntFlag("--keep-last", p.Get("--keep-last"));
    if (!k.ok() || *k < 1) return Usage("tessera ckpt gc: --keep-last must be an integer >= 1");
    policy.keep_last = *k;
  }
  if (p.Has("--keep-every")) {
    auto e = ParseIntFlag("--keep-every", p.Get("--keep-every"));
    if (!e.ok()) return Usage("tessera ckpt gc: --keep-every must be an integer >= 0");
    policy.keep_every = *e;
  }
  const bool dry_run = p.Has("--dry-run");
  const std::string root = p.positional[0];
  if (!IsDirectory(root)) return Fail("gc", NotFound(root + ": no such directory"), kExitBadInput);
  auto steps = CommittedSteps(root);
  if (!steps.ok()) return Fail("gc", steps.status(), kExitBadInput);
  const std::vector<int64_t> doomed = StepsToDelete(*steps, policy);

  // Open for writing before deleting anything: if a run holds the catalog, stop here.
  std::unique_ptr<Catalog> catalog;
  const bool has_catalog = IsDirectory(root + "/" + std::string(kCatalogDirName));
  if (has_catalog && !dry_run) {
    auto c = Catalog::Open(root, /*read_only=*/false);
    if (!c.ok()) return Fail("gc", c.status(), kExitRestartable);
    catalog = std::move(c).value();
  }
  const std::string why = "tessera ckpt gc (keep_last=" + std::to_string(policy.keep_last) +
                          " keep_every=" + std::to_string(policy.keep_every) + ")";
  std::set<int64_t> deleted;
  for (int64_t step : doomed) {
    if (dry_run) {
      std::printf("would delete %s\n", StepDirName(step).c_str());
      continue;
    }
    Status s = DeleteCheckpoint(root, step);
    if (!s.ok()) return Fail("gc", s, ExitCodeFor(s));
    deleted.insert(step);
    std::printf("deleted %s\n", StepDirName(step).c_str());
    if (!catalog) continue;
    Status rec = catalog->SetStatus(step, CheckpointStatus::kDeleted, why);
    if (rec.code() == StatusCode::kNotFound) {
      CheckpointEntry e;
      e.step = step;
      e.status = CheckpointStatus::kDeleted;
      e.dir = StepDirName(step);
      e.note = why + "; was not in the catalog";
      rec = catalog->Put(e);
    }
    if (rec.ok()) rec = catalog->AddEvent("gc", "deleted " + StepDirName(step) + " by " + why);
    if (!rec.ok()) {
      return Fail("gc", rec.WithPrefix("deleted " + StepDirName(step) + " but could not record it"),
                  ExitCodeFor(rec));
    }
  }
  std::string kept;
  for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
    if (!std::count(doomed.begin(), doomed.end(), *it)) kept += " " + std::to_string(*it);
  }
  std::printf("%s %zu, kept %zu:%s\n", dry_run ? "would delete" : "deleted", doomed.size(),
              steps->size() - doomed.size(), kept.empty() ? " none" : kept.c_str());
  if (!has_catalog) std::printf("no catalog at %s/catalog: nothing recorded\n", root.c_str());
  return kExitOk;
}

}  // namespace

int RunCkpt(const Args& args) {
  if (args.empty()) {
    PrintCkptHelp(stderr);
    return kExitUsage;
  }
  const std::string sub = args[0];
  if (sub == "-h" || sub == "--help" || sub == "help") {
    PrintCkptHelp(stdout);
    return kExitOk;
  }
  Args rest(args.begin() + 1, args.end());
  if (WantsHelp(rest)) {
    PrintCkptHelp(stdout);
    return kExitOk;
  }
  int code = kExitUsage;
  if (sub == "ls") {
    auto p = ParseSub(rest, sub, {}, {"--events"}, &code);
    return p ? RunLs(*p) : code;
  }
  if (sub == "verify") {
    auto p = ParseSub(rest, sub, {"--step"}, {}, &code);
    return p ? RunVerify(*p) : code;
  }
  if (sub == "export") {
    auto p = ParseSub(rest, sub, {"--step", "--out", "--dtype", "--max-shard-size"}, {"--adapter"}, &code);
    return p ? RunExportCkpt(*p) : code;
  }
  if (sub == "gc") {
    auto p = ParseSub(rest, sub, {"--keep-last", "--keep-every"}, {"--dry-run"}, &code);
    return p ? RunGc(*p) : code;
  }
  return Usage("tessera ckpt: unknown subcommand '" + sub +
               "' (ls, verify, export, gc; see tessera ckpt --help)");
}

}  // namespace tessera::cli
