// runtime/train/checkpointer.cc — asynchronous sharded saves, the cross-rank commit, and
// verified loading (see checkpointer.h for the contract).
#include "runtime/train/checkpointer.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdlib>
#include <cstring>

#include "checkpoint/commit.h"
#include "checkpoint/retention.h"
#include "runtime/train/checkpoint_interval.h"
#include "runtime/train/env_info.h"
#include "runtime/train/grad_sync.h"
#include "runtime/train/host_tier.h"
#include "runtime/train/rank_layout.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// "dp=4 zero=3 precision=bf16" from the layout object (for `tessera ckpt ls`).
std::string SerializeLayout(const JsonValue& layout) {
  std::string out;
  for (const auto& [k, v] : layout.members()) {
    out += (out.empty() ? "" : " ") + k + "=";
    out += v.is_string() ? v.as_string() : v.is_integer() ? std::to_string(v.as_int()) : "?";
  }
  return out;
}

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}


}  // namespace

// The save in flight: what the writer thread writes and what it reports.
struct Checkpointer::Pending {
  int64_t step = 0;
  std::string staging_dir;
  struct Segment {
    int tensor = 0;          // canonical tensor index
    int64_t begin = 0, end = 0;
    size_t offset = 0;       // in staging_
    const float* source = nullptr;  // the live state it is copied from; null: streamed
    // Streamed (state on disk, optimizer.offload: nvme): read(kind, read_offset + i, ...)
    // gives element begin + i; the writer reads and appends it through the stream buffer.
    ParamState::SpanRead read;
    int kind = 0;
    int64_t read_offset = 0;
  };
  std::vector<Segment> segments;
  size_t stream_offset = 0;   // in staging_: the stream buffer (stream_elems floats)
  int64_t stream_elems = 0;
  size_t last_streamed = 0;   // index + 1 of the last streamed segment (0: none)
  JsonValue state, layout;
  double stall_seconds = 0;
  Clock::time_point write_start;
  std::thread thread;
  std::mutex mu;
  std::condition_variable copied_cv;
  bool copied = false;  // the staging copy and the streamed reads are complete (guarded by mu)
  bool memory_copied = false, streamed_read = false;  // its two halves (guarded by mu)
  size_t copied_segments = 0;  // segments[0, copied_segments) are in staging_ (guarded by mu)
  std::thread copier;          // joined by `thread` before it reports done
  std::atomic<bool> done{false};
  Status status = Status::Ok();  // written by the thread before `done`
  ShardRecord record;
  double write_seconds = 0;
};

Checkpointer::Checkpointer(const Config& config, Communicator* dp, FILE* log, FileSystem& fs,
                           MemoryTracker* tracker, CheckpointTier tier)
    : config_(config), tier_(tier), root_(config.checkpoint.dir), dp_(dp), log_(log), fs_(fs),
      tracker_(tracker) {
  rank_ = dp != nullptr ? dp->rank() : 0;
  ranks_ = dp != nullptr ? dp->size() : 1;
  decls_ = PartParameters(config.model, ParamPart::kTrainable);  // what a checkpoint holds
}

Checkpointer::~Checkpointer() {
  if (pending_ && pending_->thread.joinable()) pending_->thread.join();
}

std::vector<int> SavedParameterIndex(const ModelConfig& model) {
  std::vector<int> index;
  int saved = 0;
  for (const ParamDecl& d : DeclareParameters(model)) index.push_back(d.frozen ? -1 : saved++);
  return index;
}

Result<std::unique_ptr<Checkpointer>> Checkpointer::Create(const Config& config, Communicator* dp,
                                                           FILE* log, FileSystem& fs,
                                                           MemoryTracker* tracker,
                                                           CatalogSink* external_catalog,
                                                           CheckpointTier tier) {
  std::unique_ptr<Checkpointer> c(new Checkpointer(config, dp, log, fs, tracker, tier));
  ASSIGN_OR_RETURN(ModelPartition partition, RankPartition(config, c->rank_));
  c->partition_.emplace(std::move(partition));
  for (size_t i = 0; i < c->decls_.size(); ++i) {
    for (int k = 0; k < 3; ++k) c->tensor_index_[kSavedTensorKinds[k] + c->decls_[i].name] = static_cast<int>(3 * i + k);
  }
  c->saved_index_ = SavedParameterIndex(config.model);
  if (c->enabled() && c->AutoInterval()) {
    const Mtbf mtbf = ChooseMtbf(config.checkpoint.mtbf_s, config.checkpoint.measured_mtbf_s);
    c->Event("interval", std::string(c->memory() ? "memory_interval" : "checkpoint.interval") +
                             " auto (Young/Daly): a first save " +
                             std::to_string(kFirstAutoSaveSteps) +
                             " steps in measures the cost; then every max(sqrt(2 x cost x MTBF), "
                             "write time); MTBF " + FormatSeconds(mtbf.seconds) + ", " + mtbf.source);
  }
  if (c->memory()) {
    // Each host's own directory, its leader its single writer: what a killed snapshot left
    // half-written there is swept as on disk.
    ASSIGN_OR_RETURN(c->host_, HostTier::Start(config, dp, log, HostTierKind::kMemory));
    c->root_ = c->host_->root();
    if (c->rank_ == 0) c->sink_ = external_catalog;  // events, and steps held (no entries)
    if (c->host_->leader()) (void)SweepRoot(c->root_, fs);
    RETURN_IF_ERROR(c->Gather({1.0}).status());
    return c;
  }
  if (c->enabled() && config.checkpoint.local) {
    // Every host's own root, made durable before the server would create it plainly; every
    // rank learns whether all could (one failing alone would leave the others in a collective).
    const Status made = MakeDirsDurably(c->root_, fs);
    ASSIGN_OR_RETURN(const std::vector<double> made_all, c->Gather({made.ok() ? 1.0 : 0.0}));
    if (!made.ok()) return made;
    if (std::find(made_all.begin(), made_all.end(), 0.0) != made_all.end()) {
      return FailedPrecondition("checkpoint.local: another host could not create " + c->root_ +
                                " (see its messages)");
    }
    ASSIGN_OR_RETURN(c->host_, HostTier::Start(config, dp, log, HostTierKind::kLocalDisk));
  }
  if (c->enabled() && c->rank_ == 0 && !c->host_) {
    RETURN_IF_ERROR(MakeDirsDurably(c->root_, fs));  // a new root must survive a power loss
  }
  if (c->enabled() && c->rank_ == 0) {
    if (external_catalog != nullptr) {
      // Under a supervisor, the catalog's single writer: opening ours would contend for its
      // lock, and repairing a damaged one is the owner's job.
      c->sink_ = external_catalog;
    } else {
      // Only the coordinator writes the catalog (RocksDB allows one writer process).
      ASSIGN_OR_RETURN(OpenedCatalog opened, OpenCatalogForWriting(c->root_, fs));
      c->owned_catalog_ = std::move(opened.catalog);
      c->sink_ = c->owned_catalog_.get();
      if (!opened.recreated.empty()) c->Event("catalog_recreated", opened.recreated);
    }
  }
  if (c->enabled() && c->coordinates()) {
    // The single writer's sweep (commit.h SweepRoot; with checkpoint.local each host's leader
    // sweeps its own root): what an earlier run left half-written (a save killed or failed
    // midway) never lingers, and the log says it was there; a crash
    // between the two renames of a re-run's commit leaves that committed checkpoint as
    // step_<N>.old, which a resume listing would otherwise skip for an older one.
    Result<std::vector<std::string>> swept = SweepRoot(c->root_, fs);
    if (!swept.ok()) {
      c->Event("sweep_failed", swept.status().ToString());
    } else if (!swept->empty()) {
      std::string names;
      for (const std::string& n : *swept) names += (names.empty() ? "" : ", ") + n;
      c->Event("swept", "removed " + names + " (saves that never committed)");
    }
  }
  // No rank lists the root (resume) before the coordinator's sweep is done.
  if (c->enabled()) RETURN_IF_ERROR(c->Gather({1.0}).status());
  return c;
}

bool Checkpointer::coordinates() const { return host_ ? host_->leader() : rank_ == 0; }

bool Checkpointer::AutoInterval() const {
  return (memory() ? config_.checkpoint.memory_interval : config_.checkpoint.interval) ==
         CheckpointInterval::kAuto;
}

bool Checkpointer::Due(int64_t step, int64_t total) const {
  if (!enabled()) return false;
  if (memory() && step == total) return false;  // the end of the run is the disk tier's
  if (memory() && !AutoInterval()) {
    const int64_t every = config_.checkpoint.memory_interval_steps;
    return every > 0 && step % every == 0;
  }
  if (AutoInterval()) {
    if (step == total) return config_.checkpoint.at_end;  // the end is at_end's, as with steps
    if (next_due_ < 0) next_due_ = step - 1 + kFirstAutoSaveSteps;
    return step >= next_due_;
  }
  const int64_t every = config_.checkpoint.interval_steps;
  if (every > 0 && step % every == 0) return true;
  return step == total && config_.checkpoint.at_end;
}

Result<std::vector<double>> Checkpointer::Gather(const std::vector<double>& mine) {
  if (dp_ == nullptr) return mine;
  return AllGatherDoubles(dp_, mine);
}

void Checkpointer::Event(const std::string& kind, const std::string& message) {
  if (rank_ != 0) return;
  if (log_ != nullptr) {
    std::fprintf(log_, "%s: %s\n", memory() ? "memory tier" : "checkpoint", message.c_str());
    std::fflush(log_);
  }
  if (sink_) {
    if (Status s = sink_->AddEvent(kind, message); !s.ok() && log_ != nullptr) {
      std::fprintf(log_, "checkpoint: catalog: %s\n", s.ToString().c_str());
    }
  }
}

void Checkpointer::RecordAttempt(int64_t step, CheckpointStatus status, const std::string& note) {
  if (!sink_ || memory()) return;  // the catalog is the disk tier's
  // A step saved again after a fallback (a restart re-runs the steps after the checkpoint it
  // resumed from) may still have its earlier committed directory: until the new save commits
  // in its place, the catalog keeps saying that one is committed (it is, and it verifies).
  if (auto fd = fs_.OpenForRead(ManifestPath(root_ + "/" + StepDirName(step))); fd.ok()) {
    (void)fs_.Close(*fd, root_);
    return;
  }
  CheckpointEntry e;
  e.step = step;
  e.status = status;
  e.dir = StepDirName(step);
  e.note = note;
  if (Status s = sink_->Put(e); !s.ok()) Event("catalog_error", s.ToString());
}

// Save, in four steps: wait for (or skip) the save in flight, let rank 0 prepare the staging
// directory, plan what this rank saves, then start the copy and the write in the background.
Status Checkpointer::Save(int64_t step, ParamState& shards, const JsonValue& state,
                          const JsonValue& layout) {
  if (pending_) {
    if (config_.checkpoint.on_busy == CheckpointOnBusy::kSkip) {
      ++stats_.skipped;
      Event("save_skipped", "step " + std::to_string(step) + ": skipped, the save of step " +
                                std::to_string(pending_->step) + " is still writing");
      return Status::Ok();
    }
    RETURN_IF_ERROR(Poll(/*block=*/true));  // counts its own wait as stall
  }
  const auto t_setup = Clock::now();
  ++stats_.saves;
  // Auto interval: no other save until this one's commit has measured what it cost (a save
  // that could not even be staged tries again as after the first).
  const bool auto_interval = AutoInterval();
  if (auto_interval) next_due_ = step + kFirstAutoSaveSteps;
  ASSIGN_OR_RETURN(const bool prepared, PrepareSave(step));
  if (!prepared) return Status::Ok();
  if (auto_interval) next_due_ = INT64_MAX;

  auto p = std::make_unique<Pending>();
  p->step = step;
  p->staging_dir = root_ + "/" + StagingDirName(step);
  p->state = state;
  p->layout = layout;
  size_t staging_bytes = PlanSegments(shards, *p);
  if (memory()) {  // written straight from the live state: only the stream buffer is staged
    p->stream_offset = 0;
    staging_bytes = static_cast<size_t>(p->stream_elems) * sizeof(float);
  }
  if (tracker_ != nullptr && staging_bytes > staged_bytes_) {  // accounted here: one thread
    const int64_t grow = static_cast<int64_t>(staging_bytes - staged_bytes_);
    tracker_->OnReserve(MemoryKind::kCheckpointStaging, grow);
    tracker_->OnUse(MemoryKind::kCheckpointStaging, grow);
    staged_bytes_ = staging_bytes;
  }
  p->write_start = Clock::now();
  StartCopyAndWrite(*p, staging_bytes);
  p->stall_seconds = Since(t_setup);
  stats_.stall_seconds += p->stall_seconds;
  pending_ = std::move(p);
  if (!config_.checkpoint.async) return Poll(/*block=*/true);
  return Status::Ok();
}

// Rank 0 prepares the staging directory; everyone learns whether it could. False (after
// counting the failure) when it could not; an error once max_failures saves failed in a row.
Result<bool> Checkpointer::PrepareSave(int64_t step) {
  Status prep = Status::Ok();
  if (coordinates()) {
    prep = PrepareStaging(root_, step, fs_);
    if (prep.ok()) RecordAttempt(step, CheckpointStatus::kWriting, "");
  }
  ASSIGN_OR_RETURN(std::vector<double> prepared, Gather({prep.ok() ? 1.0 : 0.0}));
  if (std::find(prepared.begin(), prepared.end(), 0.0) == prepared.end()) return true;
  if (prep.ok()) prep = IoError("the save could not be prepared on another host (see its messages)");
  ++stats_.failed;
  ++consecutive_failures_;
  RecordAttempt(step, CheckpointStatus::kFailed, prep.ToString());
  Event("save_failed", "save of step " + std::to_string(step) + " failed: " + prep.ToString());
  if (!memory() && consecutive_failures_ >= config_.checkpoint.max_failures) {
    return IoError("checkpoint: " + std::to_string(consecutive_failures_) +
                   " consecutive saves failed (last: " + prep.ToString() + ")");
  }
  return false;
}

// What this rank saves: its spans, param / m / v per parameter, laid out in the staging
// buffer; returns the buffer's size. Tensor / pipeline parallel: each local piece is a run of
// elements of one global tensor; only main replicas are saved (sharded_tensor.h: not tp rank >
// 0's copy of a tensor every tp rank holds whole, not the last pipeline stage's copy of tied
// embeddings) and the dp ranks' spans are disjoint, so the ranks' shares cover every tensor
// exactly once.
// State on disk is not staged: the writer streams it through one buffer of at most
// kStreamElems floats at the end of the staging buffer.
size_t Checkpointer::PlanSegments(ParamState& shards, Pending& p) const {
  constexpr int64_t kStreamElems = int64_t{1} << 20;  // 4 MiB
  size_t off = 0;
  for (const auto& span : shards.SaveSpans()) {
    partition_->ForEachGlobalPiece(
        span.begin, span.end,
        [&](const TpParam& param, int64_t global_begin, int64_t length, int64_t local) {
          const int saved = saved_index_[static_cast<size_t>(param.global_index)];
          if (!param.tensor.IsMainReplica() || saved < 0) return;
          const float* src[3] = {span.values, span.exp_avg, span.exp_avg_sq};
          for (int k = 0; k < 3; ++k) {
            Pending::Segment s;
            s.tensor = 3 * saved + k;
            s.begin = global_begin;
            s.end = global_begin + length;
            s.offset = off;
            if (src[k] != nullptr) {
              s.source = src[k] + (local - span.begin);
              off += static_cast<size_t>(length) * sizeof(float);
            } else {
              s.read = span.read;
              s.kind = k;
              s.read_offset = local - span.begin;
              p.stream_elems = std::max(p.stream_elems, std::min(length, kStreamElems));
            }
            p.segments.push_back(std::move(s));
            if (src[k] == nullptr) p.last_streamed = p.segments.size();
          }
        });
  }
  p.stream_offset = off;
  return off + static_cast<size_t>(p.stream_elems) * sizeof(float);
}

// The copy runs on its own thread, overlapping the next step's forward and backward; the next
// optimizer update waits for it (WaitForStateCopy) because it is the first thing that changes
// this state. Two threads so that the disk is busy while the copy goes on: the copier fills
// the staging buffer segment by segment (and says when all of it is copied: the optimizer may
// then go on), the writer checksums and writes each segment as soon as it is copied.
void Checkpointer::StartCopyAndWrite(Pending& pending, size_t staging_bytes) {
  Pending* raw = &pending;
  // The state copy is complete once the copier is done and the writer has read the last
  // streamed segment (the next optimizer step may then change both).
  auto finish_half = [raw](bool Pending::*half) {
    {
      std::lock_guard<std::mutex> lock(raw->mu);
      raw->*half = true;
      raw->copied = raw->memory_copied && raw->streamed_read;
    }
    raw->copied_cv.notify_all();
  };
  const bool direct = memory();  // written from the live state (see Save)
  if (direct) raw->copied_segments = raw->segments.size();
  if (!direct) raw->copier = std::thread([this, raw, staging_bytes, finish_half] {
    // Grown only when the state grows (zero-filled: the page faults are paid here, on this
    // thread, once), then reused across saves.
    if (staging_.size() < staging_bytes) staging_.resize(staging_bytes);
    for (size_t k = 0; k < raw->segments.size(); ++k) {
      const Pending::Segment& s = raw->segments[k];
      if (s.source != nullptr) {
        std::memcpy(staging_.data() + s.offset, s.source,
                    static_cast<size_t>(s.end - s.begin) * sizeof(float));
      }
      {
        std::lock_guard<std::mutex> lock(raw->mu);
        raw->copied_segments = k + 1;
      }
      raw->copied_cv.notify_all();
    }
    finish_half(&Pending::memory_copied);
  });
  raw->thread = std::thread([this, raw, finish_half, direct, staging_bytes] {
    if (direct && staging_.size() < staging_bytes) staging_.resize(staging_bytes);
    if (raw->last_streamed == 0) finish_half(&Pending::streamed_read);
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(auto writer, ShardWriter::Create(raw->staging_dir, rank_, fs_));
      for (size_t k = 0; k < raw->segments.size(); ++k) {
        {
          std::unique_lock<std::mutex> lock(raw->mu);
          raw->copied_cv.wait(lock, [&] { return raw->copied_segments > k; });
        }
        const Pending::Segment& s = raw->segments[k];
        const std::string name = kSavedTensorKinds[s.tensor % 3] + decls_[s.tensor / 3].name;
        if (s.source != nullptr) {
          RETURN_IF_ERROR(writer->Append(name, s.begin, s.end, DType::kF32,
                                         direct ? static_cast<const void*>(s.source)
                                                : staging_.data() + s.offset));
        } else {
          // On disk: through the stream buffer, read (verified), then appended.
          float* buf = reinterpret_cast<float*>(staging_.data() + raw->stream_offset);
          for (int64_t at = s.begin; at < s.end; at += raw->stream_elems) {
            const int64_t n = std::min(raw->stream_elems, s.end - at);
            RETURN_IF_ERROR(s.read(s.kind, s.read_offset + (at - s.begin), n, buf));
            RETURN_IF_ERROR(writer->Append(name, at, at + n, DType::kF32, buf));
          }
          if (k + 1 == raw->last_streamed) finish_half(&Pending::streamed_read);
        }
      }
      if (direct) finish_half(&Pending::memory_copied);  // the live state is no longer read
      ASSIGN_OR_RETURN(raw->record, writer->Finish());
      if (memory()) RETURN_IF_ERROR(host_->Replicate(raw->step));
      return Status::Ok();
    };
    raw->status = run();
    finish_half(&Pending::streamed_read);  // also after a failure: nobody waits forever
    if (direct) finish_half(&Pending::memory_copied);
    // Whatever happened, the copy finishes (the training thread may be waiting for it).
    if (raw->copier.joinable()) raw->copier.join();
    raw->write_seconds = Since(raw->write_start);
    raw->done.store(true, std::memory_order_release);
  });
}

void Checkpointer::WaitForStateCopy() {
  if (!pending_) return;
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(pending_->mu);
  if (pending_->copied) return;
  pending_->copied_cv.wait(lock, [&] { return pending_->copied; });
  const double waited = Since(t0);
  pending_->stall_seconds += waited;
  stats_.stall_seconds += waited;
}

Status Checkpointer::Poll(bool block) {
  if (!pending_) return Status::Ok();
  const auto t0 = Clock::now();
  if (block && pending_->thread.joinable()) pending_->thread.join();
  const bool done = pending_->done.load(std::memory_order_acquire);
  const double mine = !done ? 0.0 : pending_->status.ok() ? 1.0 : 2.0;
  ASSIGN_OR_RETURN(std::vector<double> flags, Gather({mine}));
  if (block) stats_.stall_seconds += Since(t0);
  if (std::find(flags.begin(), flags.end(), 0.0) != flags.end()) return Status::Ok();
  if (pending_->thread.joinable()) pending_->thread.join();
  return Complete();
}

// Complete, in four steps: gather every rank's outcome and shard record, refuse a non-finite
// state, let rank 0 commit what every rank wrote, then account the verdict on every rank.
Status Checkpointer::Complete() {
  // The commit runs on rank 0's training thread and the others wait for its verdict: all of
  // this is training stall.
  const auto t_complete = Clock::now();
  struct CountStall {
    CheckpointStats& stats;
    Clock::time_point t;
    ~CountStall() { stats.stall_seconds += Since(t); }
  } count_stall{stats_, t_complete};
  std::unique_ptr<Pending> p = std::move(pending_);
  const int64_t step = p->step;
  std::vector<double> mine = EncodeOutcome(*p);
  ASSIGN_OR_RETURN(std::vector<double> lens, Gather({static_cast<double>(mine.size())}));
  const size_t width = static_cast<size_t>(*std::max_element(lens.begin(), lens.end()));
  mine.resize(width, 0.0);
  ASSIGN_OR_RETURN(std::vector<double> all, Gather(mine));

  std::vector<int> failed_ranks, nonfinite_ranks;
  for (int r = 0; r < ranks_; ++r) {
    if (all[r * width] != 1.0) failed_ranks.push_back(r);
    if (all[r * width] == -1.0) nonfinite_ranks.push_back(r);
  }
  if (!nonfinite_ranks.empty()) return RefuseNonFinite(*p, nonfinite_ranks);
  Status outcome = Status::Ok();
  if (!failed_ranks.empty()) {
    outcome = p->status.ok() ? IoError("shard write failed on rank(s) " + RankList(failed_ranks) +
                                       " (see their messages)")
                             : p->status;
  } else if (coordinates()) {
    outcome = CommitGathered(*p, all, width);
  }
  // Host tiers: every host leader's verdict decides (below); nothing is published before it.
  // The coordinators' verdict for everyone (a failed commit counts like a failed write): rank
  // 0's on disk, every host leader's in memory.
  ASSIGN_OR_RETURN(std::vector<double> verdict, Gather({outcome.ok() ? 1.0 : 0.0}));
  const bool committed = host_ ? std::find(verdict.begin(), verdict.end(), 0.0) == verdict.end()
                                : verdict[0] == 1.0;
  if (renamed_) {  // a host leader whose part is in place
    Manifest m = std::move(*renamed_);
    renamed_.reset();
    if (committed && failed_ranks.empty()) {
      (void)(memory() ? PublishInMemory(m) : Publish(m));
    } else if (Status d = DeleteCheckpoint(root_, step, fs_); !d.ok()) {
      Event("cleanup_failed", d.ToString());
    }
  }
  if (committed && failed_ranks.empty()) {
    if (memory() && sink_) sink_->NoteHeldInMemory(step);
    consecutive_failures_ = 0;
    ++stats_.committed;
    stats_.last_committed_step = step;
    return ScheduleNextSave(step, all, width);
  }
  return CountFailedSave(step, outcome);
}

// This rank's outcome and shard record, flattened to doubles (all integers < 2^53):
// [ok, stall, write, bytes, nseg, (tensor, begin, end, offset, crc) x nseg].
// ok: 1 written, 0 failed, -1 refused because the state is non-finite.
std::vector<double> Checkpointer::EncodeOutcome(const Pending& p) const {
  const double ok = p.status.ok() ? 1.0 : p.status.code() == StatusCode::kNonFinite ? -1.0 : 0.0;
  std::vector<double> mine = {ok, p.stall_seconds, p.write_seconds,
                              static_cast<double>(p.record.bytes),
                              static_cast<double>(p.record.segments.size())};
  if (p.status.ok()) {
    for (const SegmentRecord& s : p.record.segments) {
      const auto it = tensor_index_.find(s.tensor);
      const int index = it == tensor_index_.end() ? -1 : it->second;
      mine.insert(mine.end(), {static_cast<double>(index), static_cast<double>(s.begin),
                               static_cast<double>(s.end), static_cast<double>(s.offset),
                               static_cast<double>(s.crc32c)});
    }
  } else if (rank_ != 0) {
    std::fprintf(stderr, "tessera: rank %d: checkpoint step %lld: %s\n", rank_,
                 static_cast<long long>(p.step), p.status.ToString().c_str());
  }
  return mine;
}

std::string Checkpointer::RankList(const std::vector<int>& ranks) {
  std::string who;
  for (int r : ranks) who += (who.empty() ? "" : ", ") + std::to_string(r);
  return who;
}

// Not a failed save to retry: the state itself is poisoned. Nothing is committed (the newest
// committed checkpoint stays the newest, so retention cannot delete it) and the run stops.
Status Checkpointer::RefuseNonFinite(const Pending& p, const std::vector<int>& ranks) {
  ++stats_.failed;
  if (coordinates()) {
    (void)AbandonStaging(root_, p.step, fs_);
    RecordAttempt(p.step, CheckpointStatus::kFailed, "non-finite state");
  }
  const Status refused = NonFinite(
      "checkpoint of step " + std::to_string(p.step) + " refused: rank(s) " + RankList(ranks) +
      " hold NaN/Inf parameters or optimizer state" +
      (p.status.code() == StatusCode::kNonFinite ? " (" + p.status.message() + ")" : ""));
  Event("save_refused", refused.message());
  return refused;
}

// Rank 0, every rank's shard written: decode the gathered records (EncodeOutcome's layout,
// `width` doubles per rank) into the manifest's shards and commit.
Status Checkpointer::CommitGathered(const Pending& p, const std::vector<double>& all,
                                    size_t width) {
  std::vector<ShardRecord> shards;
  double stall = 0, write = 0;
  for (int r = 0; r < ranks_; ++r) {
    const double* v = all.data() + r * width;
    stall = std::max(stall, v[1]);
    write = std::max(write, v[2]);
    ShardRecord rec;
    rec.rank = r;
    rec.file = ShardFileName(r);
    rec.bytes = static_cast<uint64_t>(v[3]);
    const int64_t nseg = static_cast<int64_t>(v[4]);
    for (int64_t k = 0; k < nseg; ++k) {
      const double* s = v + 5 + 5 * k;
      const int index = static_cast<int>(s[0]);
      if (index < 0) return Internal("shard " + std::to_string(r) + ": a segment of unknown tensor");
      rec.segments.push_back({kSavedTensorKinds[index % 3] + decls_[index / 3].name,
                              static_cast<int64_t>(s[1]), static_cast<int64_t>(s[2]),
                              static_cast<uint64_t>(s[3]), static_cast<uint32_t>(s[4])});
    }
    shards.push_back(std::move(rec));
  }
  Manifest m;
  m.step = p.step;
  m.shards = std::move(shards);
  m.state = p.state;
  m.layout = p.layout;
  m.stall_seconds = stall;
  m.write_seconds = write;
  return Commit(std::move(m));
}

// checkpoint.interval: auto, every rank after a commit: the next save's step from the save's
// cost (stall), its write time and the step time — each the maximum over the ranks, so every
// rank schedules the same step — and the MTBF.
Status Checkpointer::ScheduleNextSave(int64_t step, const std::vector<double>& all, size_t width) {
  if (!AutoInterval()) return Status::Ok();
  // Rank 0's MTBF for everyone: a rank whose environment differed must not schedule another step.
  ASSIGN_OR_RETURN(std::vector<double> mine,
                   Gather({step_seconds_, config_.checkpoint.measured_mtbf_s}));
  AutoIntervalInputs in;
  for (int r = 0; r < ranks_; ++r) {
    in.cost_s = std::max(in.cost_s, all[r * width + 1]);
    in.write_s = std::max(in.write_s, all[r * width + 2]);
    in.step_s = std::max(in.step_s, mine[2 * r]);
  }
  const Mtbf mtbf = ChooseMtbf(config_.checkpoint.mtbf_s, mine[1]);
  in.mtbf_s = mtbf.seconds;
  const int64_t every = YoungDalySteps(in);
  next_due_ = step + every;
  if (every != last_interval_) {  // said when it changes, not at every save
    Event("interval", std::string(memory() ? "memory_interval" : "checkpoint.interval") +
                          " auto: next save at step " + std::to_string(next_due_) +
                          ", " + DescribeAutoInterval(in, every) + "; MTBF " + mtbf.source);
    last_interval_ = every;
  }
  return Status::Ok();
}

// Every rank, after a save that did not commit: count it, let rank 0 clean up and record it;
// an error once max_failures saves failed in a row, else training goes on.
Status Checkpointer::CountFailedSave(int64_t step, const Status& outcome) {
  ++stats_.failed;
  // Auto interval: nothing measured; try again as after the first save.
  if (AutoInterval()) next_due_ = step + kFirstAutoSaveSteps;
  ++consecutive_failures_;
  if (coordinates()) {
    if (Status s = AbandonStaging(root_, step, fs_); !s.ok()) Event("cleanup_failed", s.ToString());
    RecordAttempt(step, CheckpointStatus::kFailed, outcome.ToString());
    Event("save_failed", "save of step " + std::to_string(step) + " failed: " + outcome.ToString() +
                             " (" + std::to_string(consecutive_failures_) + " in a row; training goes on)");
  }
  // A failed snapshot in memory never stops the run: the disk tier is the safety.
  if (!memory() && consecutive_failures_ >= config_.checkpoint.max_failures) {
    return IoError("checkpoint: " + std::to_string(consecutive_failures_) +
                   " consecutive saves failed (last: " + outcome.ToString() +
                   "); stopping rather than training on without checkpoints");
  }
  return Status::Ok();
}

// Rank 0, every shard durable: the manifest, the directory rename, the catalog, retention.
Status Checkpointer::Commit(Manifest m) {
  for (size_t i = 0; i < decls_.size(); ++i) {
    for (const char* kind : kSavedTensorKinds) {
      m.tensors.push_back({kind + decls_[i].name, decls_[i].shape.dims(), DType::kF32});
    }
  }
  m.config_yaml = config_.resolved_yaml;
  if (auto env = ParseJson(EnvironmentFingerprintJson()); env.ok()) m.environment = *env;
  for (const ShardRecord& s : m.shards) m.total_bytes += s.bytes;
  if (host_) {
    // Each host's part now; the rest (catalog, retention) once every host has committed its
    // part (Complete), else this part is taken back: no host keeps a step the others lack.
    const std::vector<bool> here = host_->ShardsHere(/*with_replicas=*/memory());
    RETURN_IF_ERROR(CommitCheckpoint(root_, m, fs_, &here));
    renamed_ = std::move(m);
    return Status::Ok();
  }
  if (Status c = CommitCheckpoint(root_, m, fs_); !c.ok()) {
    // After the final rename the checkpoint is committed, whatever failed later (the root's
    // fsync): the directory is the ground truth.
    auto fd = fs_.OpenForRead(ManifestPath(root_ + "/" + StepDirName(m.step)));
    if (!fd.ok()) return c;
    (void)fs_.Close(*fd, root_);
    Event("commit_warning", "step " + std::to_string(m.step) + " is committed, but: " + c.ToString());
  }
  return Publish(m);
}

// A committed step's record: stats, the log line, the catalog entry, then retention.
Status Checkpointer::Publish(const Manifest& m) {
  stats_.last_bytes = m.total_bytes;
  stats_.last_write_seconds = m.write_seconds;
  char line[256];
  std::snprintf(line, sizeof line,
                "step %lld committed: %.1f MiB in %d shard(s), stall %.1f ms, write %.2f s (%.0f MiB/s)",
                static_cast<long long>(m.step), m.total_bytes / 1048576.0,
                static_cast<int>(m.shards.size()), 1e3 * m.stall_seconds, m.write_seconds,
                m.write_seconds > 0 ? m.total_bytes / 1048576.0 / m.write_seconds : 0.0);
  if (sink_) {
    CheckpointEntry e;
    e.step = m.step;
    e.status = CheckpointStatus::kCommitted;
    e.dir = StepDirName(m.step);
    e.bytes = m.total_bytes;
    e.stall_seconds = m.stall_seconds;
    e.write_seconds = m.write_seconds;
    e.commit_unix_s = UnixSeconds();
    e.layout = SerializeLayout(m.layout);
    // The directory is the ground truth; a catalog that cannot record it is reported only.
    if (Status s = sink_->Put(e); !s.ok()) Event("catalog_error", s.ToString());
  }
  Event("commit", line);
  // Retention, only now that a newer checkpoint is durable; never the newest.
  auto listed = CommittedSteps(root_, fs_);
  if (!listed.ok()) {
    Event("retention_failed", listed.status().ToString());
    return Status::Ok();
  }
  std::vector<int64_t> committed = std::move(*listed);
  // Only this run's line of checkpoints up to the one just committed is retention's business:
  // never a newer-numbered one, and never one the catalog knows to be corrupt (either could
  // otherwise take the place of the checkpoint just saved).
  std::erase_if(committed, [&](int64_t step) {
    if (step > m.step) return true;
    if (!sink_) return false;
    auto e = sink_->Get(step);
    return e.ok() && e->status == CheckpointStatus::kCorrupt;
  });
  RetentionPolicy policy;
  policy.keep_last = config_.checkpoint.keep_last;
  policy.keep_every = config_.checkpoint.keep_every;
  for (int64_t old : StepsToDelete(committed, policy)) {
    // The record first, and out of this process before the directory goes: a rank killed
    // between the two leaves "deleted" beside a directory the next pass removes — never
    // "committed" beside a directory that is gone (a relayed record is queued: without the
    // flush it could die with the rank). Not known to be out: the directory stays for now.
    if (sink_) {
      (void)sink_->SetStatus(old, CheckpointStatus::kDeleted, "retention");
      if (Status f = sink_->Flush(); !f.ok()) {
        (void)sink_->SetStatus(old, CheckpointStatus::kCommitted, "retention deferred: " + f.ToString());
        Event("retention_deferred", "step " + std::to_string(old) + " kept for now: " + f.ToString());
        continue;
      }
    }
    if (Status s = DeleteCheckpoint(root_, old, fs_); !s.ok()) {
      if (sink_) (void)sink_->SetStatus(old, CheckpointStatus::kCommitted, "retention failed: " + s.ToString());
      Event("retention_failed", s.ToString());
    }
  }
  return Status::Ok();
}

}  // namespace tessera

namespace tessera {

// A host leader of the memory tier, the step in place on every host: the log line, then this
// host's retention (memory_keep newest).
Status Checkpointer::PublishInMemory(const Manifest& m) {
  stats_.last_bytes = m.total_bytes;
  stats_.last_write_seconds = m.write_seconds;
  char line[256];
  std::snprintf(line, sizeof line,
                "step %lld held: %.1f MiB in %d shard(s) on %d host(s), stall %.1f ms, write + "
                "replicate %.2f s",
                static_cast<long long>(m.step), m.total_bytes / 1048576.0,
                static_cast<int>(m.shards.size()), host_->ring().hosts, 1e3 * m.stall_seconds,
                m.write_seconds);
  // The first snapshot and every tenth are said (one every few steps would drown the log).
  if (stats_.committed % 10 == 0) Event("commit", line);
  auto listed = CommittedSteps(root_, fs_);
  if (!listed.ok()) return Status::Ok();
  RetentionPolicy policy;
  policy.keep_last = config_.checkpoint.memory_keep;
  std::erase_if(*listed, [&](int64_t step) { return step > m.step; });
  for (int64_t old : StepsToDelete(*listed, policy)) (void)DeleteCheckpoint(root_, old, fs_);
  return Status::Ok();
}

void Checkpointer::Discard() {
  if (memory() && host_->leader()) (void)fs_.RemoveTree(root_);
}

}  // namespace tessera
