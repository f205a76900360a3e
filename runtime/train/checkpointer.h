// runtime/train/checkpointer.h — the trainer's side of checkpoints: what goes in, the
// asynchronous save with its commit protocol across ranks, and loading (resume, init_from).
//
// Contents (checkpoint/manifest.h): for every model parameter <name> (Hugging Face names) three
// fp32 global tensors "param/<name>" (the fp32 parameters, or the fp32 master weights under
// mixed precision: the low-precision parameters are their rounding), "exp_avg/<name>" and
// "exp_avg_sq/<name>"; the trainer's state (a JSON object: step, data position, AdamW step,
// loss scale), the layout, the resolved config and the environment fingerprint. Each rank
// writes its pieces (ParamShards::SaveSpans), so the shares of all ranks cover every tensor
// exactly once (under tensor parallelism each local piece maps to global element ranges,
// models/partition.h, and replicated tensors are saved by tp rank 0 only); the loader reads
// global ranges, so a checkpoint loads under any dp, tp and ZeRO stage (and any precision:
// master weights are fp32).
//
// Save (at step N, on every rank at the same point of the loop):
//   1. the previous save is still writing: wait for it (checkpoint.on_busy: wait) or skip;
//   2. rank 0 prepares <root>/step_N.tmp (checkpoint/commit.h), records "writing" in the
//      catalog; every rank learns whether that worked (one small collective);
//   3. a background thread copies this rank's spans into a reused, pre-faulted staging
//      buffer while the next step's forward and backward run — the next optimizer update,
//      the first thing that changes that state, waits for the copy (WaitForStateCopy): the
//      only stall — then writes the buffer as shard_<rank>.bin (checksummed), fsyncs it and
//      stops; training goes on (checkpoint.async: false waits for all of it right here).
// Poll (every step end, all ranks): when every rank's writer has finished (a small all-gather
// of flags), each rank's shard record goes to rank 0, which validates coverage, writes the
// manifest, renames the directory into place, fsyncs the root, records the commit and applies
// retention (checkpoint/retention.h). A failed write or commit on any rank abandons the
// staging directory, records "failed" and training goes on; checkpoint.max_failures
// consecutive failures stop the run (Status). The previous committed checkpoint is never
// touched by a save.
// Load (checkpoint_load.cc): CheckpointReader (verified reads, metadata checksum). Resume
// tries the newest committed checkpoint: the caller's check of its saved state first, then its
// tensors. If any rank finds it damaged (checksum, truncation, a missing or non-regular file,
// malformed metadata, a state no run could have saved), it is marked corrupt in the catalog,
// moved aside to step_<N>.corrupt, the run says so and the next-newest is tried; one that is
// healthy but does not fit this run (the check says kOutOfRange) is skipped and left in place;
// every rank decides together. Other load errors (a model that does not match, an I/O error)
// are returned as they are and mark nothing. No usable checkpoint is an error
// (kCorruptCheckpoint: exit 5) listing why each was passed over, never a fresh start; so is a
// root holding only step_<N> directories without manifest, set-aside ones, or files named like
// checkpoints. init_from a checkpoint root falls back the same way but leaves damaged ones
// where they are (the root is another run's). At start the coordinator sweeps what an earlier
// run left half-written (step_<N>.tmp, .old, .deleting) and says so.
// The memory tier (checkpoint.memory_interval_steps; runtime/train/host_tier.h) is a second
// Checkpointer of kind CheckpointTier::kMemory over each host's tier directory: the same save,
// written straight from the live state into the host's memory (no staging copy: the shard file
// in tmpfs is the copy) and sent to the buddy; each host's leader prepares and commits the step
// in its own directory; no catalog; a failed snapshot never stops the run (the disk tier is
// the safety); ResumeFromHosts picks the newest step the survivors hold.
// checkpoint.local (each host's own disk under checkpoint.dir) uses the same host-tier
// machinery for the disk tier: each host's leader prepares and commits its own root (a
// commit needs every rank's shard; the manifest lands on every host), rank 0 keeps the
// catalog, and a resume goes through ResumeFromHosts (gathering missing shards from the hosts
// that hold them, falling back past steps a lost host took with it, and saying so).
// Retention after a commit only considers committed checkpoints up to the one just saved
// that the catalog does not know to be corrupt (a relaying sink knows none: under a
// supervisor, set-aside step_<N>.corrupt directories are what keeps them out).
// Thread-safety: driven by the trainer's thread; the writer thread only touches the staging
// buffer and its own result.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"
#include "comm/communicator.h"
#include "models/param_layout.h"
#include "models/partition.h"
#include "runtime/core/file_util.h"
#include "runtime/core/json.h"
#include "runtime/core/memory.h"
#include "runtime/train/config.h"
#include "runtime/train/env_info.h"
#include "runtime/train/param_state.h"

namespace tessera {

// Which parameters a load reads: those that train (what a checkpoint saves: all of them, or
// under finetune.lora the adapters), or the frozen ones (finetune.lora's base, from a checkpoint
// of the base model: init_from).
enum class ParamPart { kTrainable, kFrozen };

// The saved tensors of parameter <name>, in canonical order (index 3 * parameter + kind):
// "param/<name>", "exp_avg/<name>", "exp_avg_sq/<name>".
inline constexpr const char* kSavedTensorKinds[3] = {"param/", "exp_avg/", "exp_avg_sq/"};

// How Resume and InitFrom test a candidate checkpoint before loading its tensors: OK (use
// it), kDataLoss (damaged: set aside), kOutOfRange (healthy, not for this run: skipped), any
// other error (ends the search with it). `where` names the manifest for messages. May be
// empty: every candidate fits.
using CandidateCheck = std::function<Status(const Manifest& m, const std::string& where)>;

struct CheckpointStats {
  int64_t saves = 0, committed = 0, failed = 0, skipped = 0;
  double stall_seconds = 0;  // total training stall for saves (setup, waits for the copy or
                             //   for a previous save)
  double last_write_seconds = 0;
  uint64_t last_bytes = 0;   // all ranks' shards of the last committed checkpoint
  int64_t last_committed_step = -1;  // the step of the last save this run committed (-1: none)
};

// What a loaded checkpoint brings besides the tensors.
struct LoadedCheckpoint {
  int64_t step = 0;
  std::string dir;
  JsonValue state;  // as saved
};

class HostTier;
struct HeldChoice;
enum class CheckpointTier { kDisk, kMemory };

// Per DeclareParameters(model) index, the parameter's index among the saved ones (a
// checkpoint's tensors), or -1 for a frozen one (finetune.lora's base), which is not saved.
std::vector<int> SavedParameterIndex(const ModelConfig& model);

class Checkpointer {
 public:
  // `config` must outlive the Checkpointer (it is kept by reference). `dp`: every rank that
  // saves — the data-parallel group of a dp-only job, the world group (in mesh order, tp
  // fastest) once parallel.tp > 1 — or null for one process; rank 0 of it coordinates and
  // owns the catalog, and rank r % parallel.tp is its tp rank. Writes go
  // through `fs` (tests inject faults). `log` gets rank 0's event lines.
  // The staging buffer is accounted to `tracker` (may be null) as kCheckpointStaging.
  // `external_catalog` (rank 0; must outlive the Checkpointer): when set, every catalog write
  // goes there (under a supervisor: a sink relaying to it, the catalog's single writer) and
  // the local catalog is neither opened nor repaired (setting a damaged one aside is its
  // owner's job). Null: rank 0 opens `<root>/catalog` itself (a standalone run).
  static Result<std::unique_ptr<Checkpointer>> Create(const Config& config, Communicator* dp,
                                                      FILE* log, FileSystem& fs = DefaultFileSystem(),
                                                      MemoryTracker* tracker = nullptr,
                                                      CatalogSink* external_catalog = nullptr,
                                                      CheckpointTier tier = CheckpointTier::kDisk);
  ~Checkpointer();  // waits for a writer thread still running (never leaves it detached)

  bool enabled() const { return !root_.empty(); }
  // Whether a save is due after `step` optimizer steps (1-based count) of `total`.
  // With checkpoint.interval: auto, when the measured schedule says (checkpoint_interval.h).
  bool Due(int64_t step, int64_t total) const;
  // This rank's step time, for checkpoint.interval: auto (the trainer, every step; smoothed:
  // a moving average that forgets a slow first step).
  void NoteStepSeconds(double s) { step_seconds_ = step_seconds_ > 0 ? 0.8 * step_seconds_ + 0.2 * s : s; }

  // Starts the save of the state after `step` steps (see the file comment). `state` is the
  // trainer's JSON object; `layout` describes dp/zero/precision.
  Status Save(int64_t step, ParamState& shards, const JsonValue& state, const JsonValue& layout);
  // Blocks until the save in flight has copied the state it saves (call before anything
  // changes parameters, master weights or moments: the optimizer step). Counted as stall.
  void WaitForStateCopy();
  // Completes the save in flight if every rank's writer is done (block: wait for it).
  // Collective: every rank calls it at the same points.
  Status Poll(bool block);

  // Resume (resume: auto): loads the newest usable committed checkpoint under checkpoint.dir
  // into `shards` (parameters and optimizer), falling back past damaged and unfit ones (file
  // comment). nullopt when the root holds no committed checkpoint. Collective.
  Result<std::optional<LoadedCheckpoint>> Resume(ParamState& shards, const CandidateCheck& check = {});
  // init_from = a checkpoint: its weights (and, with_optimizer, its AdamW moments and step).
  // A step_<N> directory: that one (damaged: kCorruptCheckpoint). A root: its newest usable
  // committed checkpoint, falling back past damaged ones (reported, left in place).
  // Collective.
  Status InitFrom(const std::string& path, ParamState& shards, bool with_optimizer,
                  const CandidateCheck& check);

  // A tier kept on each host (the memory tier, or checkpoint.local): loads the newest step the
  // hosts hold whole between them that is at least as new as `at_least` (-1: any), fetching
  // what this host lacks, falling back past ones that do not load. nullopt when none was held
  // (memory: also when none loaded: the disk tier is next); checkpoint.local with steps held
  // but none usable is kCorruptCheckpoint naming why each was passed over. Collective.
  // `dirtied` (may be null): set when a step loaded on some ranks and not on others, the step
  // then removed from every host (the state is mixed until something else loads).
  Result<std::optional<LoadedCheckpoint>> ResumeFromHosts(ParamState& shards,
                                                          const CandidateCheck& check,
                                                          int64_t at_least, bool* dirtied = nullptr);
  // The newest committed step on disk (-1: none), the same on every rank: rank 0's listing of
  // a shared root; with checkpoint.local the newest step the hosts hold whole, or with `any`
  // the newest any host holds. Collective.
  Result<int64_t> NewestCommitted(bool any);
  // Memory tier, at the end of a run that finished: each host's leader frees the tier's memory.
  void Discard();

  const CheckpointStats& stats() const { return stats_; }

 private:
  struct Pending;
  Checkpointer(const Config& config, Communicator* dp, FILE* log, FileSystem& fs,
               MemoryTracker* tracker, CheckpointTier tier);
  bool memory() const { return tier_ == CheckpointTier::kMemory; }
  // This tier's schedule is Young/Daly's (checkpoint.interval / memory_interval: auto).
  bool AutoInterval() const;
  // Whether this rank prepares, commits and prunes its root: rank 0 of the shared disk root,
  // each host's leader of its own memory directory.
  bool coordinates() const;
  // Save's steps (the .cc says what each does).
  Result<bool> PrepareSave(int64_t step);
  size_t PlanSegments(ParamState& shards, Pending& p) const;
  void StartCopyAndWrite(Pending& p, size_t staging_bytes);
  Status Complete();  // all writers done: gather records, commit on rank 0, account
  // Complete's steps.
  std::vector<double> EncodeOutcome(const Pending& p) const;
  Status RefuseNonFinite(const Pending& p, const std::vector<int>& ranks);
  Status CommitGathered(const Pending& p, const std::vector<double>& all, size_t width);
  Status CountFailedSave(int64_t step, const Status& outcome);
  static std::string RankList(const std::vector<int>& ranks);  // "0, 2"
  Status Commit(Manifest m);  // rank 0: tensors, manifest, rename, catalog, retention
  Status Publish(const Manifest& m);          // Commit's part after the rename
  Status PublishInMemory(const Manifest& m);  // the memory tier's (a host leader)
  struct HostLoad {
    LoadedCheckpoint loaded;
    std::string failed_ranks, why;  // "" when every rank loaded it; this rank's error
    int failed = 0;                 // ranks that did not load it
    double files = 0, bytes = 0;    // fetched, over all ranks
  };
  Result<HostLoad> LoadHeld(const HeldChoice& choice, ParamState& shards, const CandidateCheck& check);
  std::vector<std::string> UnusableDirs(const std::vector<int64_t>& committed) const;
  // The candidates of a search for the newest usable checkpoint (checkpoint_load.cc).
  // What init_from a checkpoint reads: the base model's weights under finetune.lora (its
  // adapters start fresh), else every parameter.
  ParamPart InitPart() const {
    return config_.model.lora.enabled() ? ParamPart::kFrozen : ParamPart::kTrainable;
  }
  struct Candidates {
    std::string root;
    std::vector<int64_t> steps;  // committed, newest first
    bool set_aside = false;      // damaged ones: move to .corrupt and mark in the catalog
    bool with_optimizer = true;
    CandidateCheck check;
    std::string purpose;         // "resume" | "init_from": the event kind and the log word
    ParamPart part = ParamPart::kTrainable;
  };
  Result<std::optional<LoadedCheckpoint>> LoadNewestUsable(const Candidates& c, ParamState& shards);
  // train.strict_env's verdict on a candidate saved in the environment `env` differs by.
  Status StrictEnvironment(const std::vector<EnvironmentDifference>& env, const std::string& dir) const;
  void Event(const std::string& kind, const std::string& message);
  // Rank 0: the catalog record of a save attempt (writing / failed), unless the step's earlier
  // committed directory is still there (see the .cc).
  void RecordAttempt(int64_t step, CheckpointStatus status, const std::string& note);
  Result<std::vector<double>> Gather(const std::vector<double>& mine);

  const Config& config_;
  CheckpointTier tier_;
  // The memory tier's, or the disk tier's with checkpoint.local; else null (a shared root).
  std::unique_ptr<HostTier> host_;
  std::optional<Manifest> renamed_;  // host tiers: this host's part of the save in flight is in
                                     //   place, waiting for every host's verdict
  std::string root_;
  Communicator* dp_;
  int rank_ = 0, ranks_ = 1;
  FILE* log_;
  FileSystem& fs_;
  std::unique_ptr<Catalog> owned_catalog_;  // rank 0 of a standalone run
  CatalogSink* sink_ = nullptr;  // rank 0: owned_catalog_ or the external one; else null
  std::vector<ParamDecl> decls_;      // the saved parameters (PartParameters kTrainable)
  std::vector<int> saved_index_;      // per DeclareParameters index: its index in decls_, or -1
  std::optional<ModelPartition> partition_;  // this rank's layout relative to them
  std::unordered_map<std::string, int> tensor_index_;  // saved tensor name -> 3 * decl + kind
  std::unique_ptr<Pending> pending_;  // the save in flight
  std::vector<char> staging_;         // reused between saves; resized by the writer thread
  MemoryTracker* tracker_;
  size_t staged_bytes_ = 0;           // accounted to tracker_
  int64_t consecutive_failures_ = 0;
  CheckpointStats stats_;
  // checkpoint.interval: auto — the next save's step (-1: kFirstAutoSaveSteps after the first
  // step seen), set at each commit from every rank's measurements.
  mutable int64_t next_due_ = -1;
  double step_seconds_ = 0;
  int64_t last_interval_ = 0;  // the interval last said in the log
  Status ScheduleNextSave(int64_t step, const std::vector<double>& all, size_t width);
};

// The parameters of `part` in DeclareParameters order.
std::vector<ParamDecl> PartParameters(const ModelConfig& model, ParamPart part);

// Loads a checkpoint's parameters (and, with_optimizer, its AdamW moments and step counter)
// into `shards`, checking that every parameter of `model` is there with the same shape (a
// clear error naming the tensor and both shapes otherwise). Every byte read is verified.
Status LoadCheckpointInto(const CheckpointReader& reader, const ModelConfig& model,
                          ParamState& shards, bool with_optimizer,
                          ParamPart part = ParamPart::kTrainable);
// The same for a tensor-parallel rank: `shards` holds the local layout of `partition`; each
// local element is read from the global element it maps to (models/partition.h), so a
// checkpoint saved under any (dp, tp, ZeRO) layout loads under any other.
Status LoadCheckpointInto(const CheckpointReader& reader, const ModelPartition& partition,
                          ParamState& shards, bool with_optimizer,
                          ParamPart part = ParamPart::kTrainable);

// finetune.lora's frozen base, as a run starts from it, into the first elements of `values`
// (the LoRA model's flat global layout starts with the base model's, rank_layout.h
// GlobalViews): read from config.init_from (a weights file or directory, or a checkpoint of the
// base), or the seed's init without one. fp32, whatever finetune.lora.base_dtype stores.
Status LoadLoraBase(const Config& config, float* values);
// What identifies that base, for the check on resume: "init seed N", the checkpoint's step
// directory, or the weights' canonical path and total bytes. A checkpoint root resolves to its
// newest committed step, so a root that gained a step since names another base.
Result<std::string> LoraBaseIdentity(const Config& config);

// The checkpoint directory `path` names: a step_<N> directory holding manifest.json, or a root
// (its newest committed checkpoint). kNotFound if neither.
Result<std::string> ResolveCheckpointDir(const std::string& path, FileSystem& fs = DefaultFileSystem());

}  // namespace tessera
