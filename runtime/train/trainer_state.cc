// runtime/train/trainer_state.cc — the Trainer's state beyond the step (trainer.h): resume and
// the state saved with a checkpoint, the global weights gathered for the final export, the
// last pipeline stage's values shared with every stage, and the supervisor's step-boundary
// requests (save now, stop). Split from trainer.cc, which keeps the loop itself.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "checkpoint/commit.h"
#include "checkpoint/file_names.h"
#include "runtime/train/saved_state.h"
#include "runtime/train/rank_layout.h"
#include "runtime/train/trainer.h"

namespace tessera {

Status Trainer::ResumeFromCheckpoint() {
  // Each candidate's saved state first: damaged (no run could have saved it) or not for this
  // run (saved_state.h); the checkpointer falls back past either.
  const int64_t windows = train_data_->num_windows();
  auto check = [&](const Manifest& m, const std::string& where) -> Status {
    ASSIGN_OR_RETURN(SavedTrainerState saved, ParseSavedState(m.state, m.step, where));
    RETURN_IF_ERROR(CheckStateFitsRun(saved, config_, windows, where));
    if (saved.lora_base != lora_base_) {  // adapters belong to the base they were trained on
      const std::string theirs = saved.lora_base.empty() ? "none recorded" : saved.lora_base;
      const std::string mine = lora_base_.empty() ? "none: no finetune.lora" : lora_base_;
      return OutOfRange(where + ": its LoRA adapters were trained on the base \"" + theirs +
                        "\", this run's is \"" + mine +
                        "\" (a checkpoint root resolves to its newest step: name the step "
                        "directory the run started from)");
    }
    return Status::Ok();
  };
  // The memory tier first when it holds a step at least as new as the newest on disk (the
  // disk tier sweeps its root when it is created, so the listing is of committed ones; with
  // checkpoint.local, the newest step the hosts hold whole between them).
  std::optional<LoadedCheckpoint> loaded;
  const bool local = config_.checkpoint.local;
  bool dirtied = false;  // a memory step loaded on some ranks, not on all
  if (memory_tier_) {
    ASSIGN_OR_RETURN(const int64_t on_disk, checkpointer_->NewestCommitted(/*any=*/false));
    ASSIGN_OR_RETURN(loaded, memory_tier_->ResumeFromHosts(*shards_, check, on_disk, &dirtied));
  }
  if (!loaded && local) {
    ASSIGN_OR_RETURN(loaded, checkpointer_->ResumeFromHosts(*shards_, check, -1));
  } else if (!loaded) {
    ASSIGN_OR_RETURN(loaded, checkpointer_->Resume(*shards_, check));
  }
  if (!loaded && dirtied) {
    // Some ranks hold the memory step's state, the others the initial one, and no checkpoint
    // overwrote both: not a state to train from. The failed snapshot is gone (ResumeFromHosts
    // removed it), so the restart starts clean from step 0.
    return IoError("the memory tier's snapshot loaded on some ranks only and the disk holds no "
                   "checkpoint: stopping so that a restart starts from a clean state");
  }
  if (!loaded) return Status::Ok();
  const std::string where = ManifestPath(loaded->dir);
  ASSIGN_OR_RETURN(SavedTrainerState saved, ParseSavedState(loaded->state, loaded->step, where));
  return RestoreState(saved, where);
}

Status Trainer::InitFromCheckpoint() {
  // Only the weights (and with init_optimizer the moments and AdamW step) are taken, but a
  // state no run could have saved still marks a candidate as damaged.
  auto check = [](const Manifest& m, const std::string& where) -> Status {
    return ParseSavedState(m.state, m.step, where).status();
  };
  return checkpointer_->InitFrom(config_.init_from, *shards_, config_.init_optimizer, check);
}

// `s` passed ParseSavedState and CheckStateFitsRun.
Status Trainer::RestoreState(const SavedTrainerState& s, const std::string& where) {
  start_step_ = s.step;
  if (Status st = train_data_->Seek({s.data_epoch, s.data_index}); !st.ok()) {
    return DataLoss(where + ": data position does not fit this run's data: " + st.message());
  }
  guard_->Restore(s.nonfinite_streak, s.loss_window);
  if (!s.moe_bias.empty()) {  // CheckStateFitsRun matched it to this run's MoE blocks
    moe_bias_ = s.moe_bias;
    for (Transformer* m : Models()) SetMoeBias(config_.model, *m, moe_bias_);
  }
  if (loss_scaler_ && !s.loss_scale) {
    // Saved by an fp32 or bf16 run: fp16 starts from the configured scale.
    std::printf("tessera: %s has no fp16 loss scale (saved in another precision): starting from "
                "mixed_precision.initial_scale %g\n", where.c_str(), loss_scaler_->scale());
  } else if (loss_scaler_) {
    loss_scaler_->Restore(s.loss_scale->scale, s.loss_scale->good_steps, s.loss_scale->skipped);
  }
  return Status::Ok();
}

JsonValue Trainer::StateJson(int64_t step) const {
  const DataPosition pos = train_data_->position();
  SavedTrainerState s;
  s.step = step;
  s.seed = config_.train.seed;
  s.data_epoch = pos.epoch;
  s.data_index = pos.index;
  s.adamw_step = shards_->adamw_step();
  s.nonfinite_streak = guard_->nonfinite_streak();
  s.loss_window = guard_->loss_window();
  s.moe_bias = moe_bias_;  // empty for a dense model
  s.lora_base = lora_base_;  // empty without finetune.lora
  if (loss_scaler_) {
    s.loss_scale = SavedLossScale{loss_scaler_->scale(), loss_scaler_->good_steps(),
                                  loss_scaler_->skipped_steps()};
  }
  return SavedStateJson(s);
}

Status Trainer::StopNonFinite(int64_t step, const StepResult& r, const Status& why,
                              MetricsFile* metrics, FILE* out) {
  // A save in flight holds the state from before this step: let it commit (collective; every
  // rank reached this same verdict at this same step).
  RETURN_IF_ERROR(checkpointer_->Poll(/*block=*/true));
  if (!is_root()) return why;
  if (metrics != nullptr) {
    StepMetrics m;
    m.step = step;
    m.total_steps = config_.train.steps;
    m.loss = r.loss;
    m.grad_norm = r.grad_norm;
    m.skipped = true;
    m.nonfinite = true;
    RETURN_IF_ERROR(metrics->Append(m));
  }
  std::string newest = "no checkpoint.dir";
  if (checkpointer_->enabled()) {
    auto committed = CommittedSteps(config_.checkpoint.dir);
    newest = committed.ok() && !committed->empty()
                 ? "newest committed checkpoint: step " + std::to_string(committed->front()) +
                       " (resume: auto continues from it)"
                 : "no committed checkpoint";
  }
  std::fprintf(out,
               "tessera: %s: stopped before applying it; the weights are those after step %lld "
               "(not exported); %s. Lower optimizer.lr or lengthen schedule.warmup_steps, or set "
               "train.on_nonfinite: skip to step over isolated bad batches.\n",
               why.message().c_str(), static_cast<long long>(step - 1), newest.c_str());
  std::fflush(out);
  return why;
}

JsonValue Trainer::LayoutJson() const {
  const ParallelConfig& p = config_.parallel;
  return JsonValue::Object({{"dp", JsonValue::Integer(p.dp)},
                            {"tp", JsonValue::Integer(p.tp)},
                            {"pp", JsonValue::Integer(p.pp)},
                            {"ep", JsonValue::Integer(p.ep)},
                            {"zero", JsonValue::Integer(p.zero)},
                            {"precision", JsonValue::String(PrecisionName(config_.precision))}});
}

// The global fp32 (master) weights on world rank 0 (empty elsewhere): each dp group gathers
// its local pieces on its dp rank 0; those ranks (one per tp rank, ep rank and stage) send
// their local buffers to rank 0, which places every element where that rank's partition says
// (rank_layout.h). Copies (replicated tensors, the tied embedding copy) land on the same
// global elements with the same bits.
Result<std::vector<float>> Trainer::GatherGlobalWeights() {
  ASSIGN_OR_RETURN(std::vector<float> local, shards_->GatherFull(/*root=*/0));
  if ((tp_ == nullptr && pp_ == nullptr && ep_ == nullptr) ||
      DpRankOf(config_.parallel, world_rank_) != 0) {
    return local;
  }
  // In pieces: one MPI message holds at most INT_MAX elements.
  constexpr int64_t kPiece = int64_t{1} << 28;
  if (!is_root()) {
    for (int64_t at = 0; at < static_cast<int64_t>(local.size()); at += kPiece) {
      const int64_t n = std::min<int64_t>(kPiece, static_cast<int64_t>(local.size()) - at);
      Tensor t(local.data() + at, DType::kF32, {n});
      RETURN_IF_ERROR(all_->Send(t, 0)->Wait());
    }
    return std::vector<float>();
  }
  std::vector<float> global(static_cast<size_t>(UnitBounds(config_.model).back()));
  auto place = [&](const ModelPartition& part, const float* values) {
    part.ForEachGlobalPiece(0, part.num_local(), [&](const TpParam& p, int64_t global_begin,
                                                     int64_t length, int64_t local_flat) {
      std::memcpy(global.data() + p.global_offset + global_begin, values + local_flat,
                  static_cast<size_t>(length) * sizeof(float));
    });
  };
  place(*partition_, local.data());
  std::vector<float> theirs;
  for (int r = 1; r < all_->size(); ++r) {
    if (DpRankOf(config_.parallel, r) != 0) continue;
    ASSIGN_OR_RETURN(ModelPartition part, RankPartition(config_, r));
    theirs.resize(static_cast<size_t>(part.num_local()));
    for (int64_t at = 0; at < part.num_local(); at += kPiece) {
      const int64_t n = std::min<int64_t>(kPiece, part.num_local() - at);
      Tensor t(theirs.data() + at, DType::kF32, {n});
      RETURN_IF_ERROR(all_->Recv(t, r)->Wait());
    }
    place(part, theirs.data());
  }
  return global;
}

// The value the last pipeline stage has (the loss), on every stage (one stage: its own).
Result<double> Trainer::FromLastStage(double value) {
  if (pp_ == nullptr) return value;
  ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(pp_, {value}));
  return all.back();
}

Status Trainer::SaveNow(int64_t steps_done) {
  RETURN_IF_ERROR(checkpointer_->Poll(/*block=*/true));
  return checkpointer_->Save(steps_done, *shards_, StateJson(steps_done), LayoutJson());
}

Status Trainer::HandleLinkRequests(int64_t steps_done, bool saved_this_step, FILE* out,
                                   bool* stop) {
  // Requests reach ranks at different moments: the max over ranks makes one rank's request
  // everyone's, at this same boundary.
  int32_t flags[2] = {link_->TakeCheckpointRequest() ? 1 : 0, link_->StopRequested() ? 1 : 0};
  if (agree_comm_ != nullptr) {
    Tensor t(flags, DType::kI32, {2});
    RETURN_IF_ERROR(agree_comm_->AllReduce(t, ReduceOp::kMax)->Wait());
  }
  const bool checkpoint_requested = flags[0] != 0, stop_requested = flags[1] != 0;
  *stop = stop_requested;
  if (!checkpoint_requested && !stop_requested) return Status::Ok();
  const bool root = is_root();
  const std::string& dir = config_.checkpoint.dir;
  const long long n = static_cast<long long>(steps_done);
  const std::string source = link_->RequestSource();
  if (!checkpointer_->enabled()) {
    if (root) {
      std::fprintf(out, stop_requested
                            ? "tessera: stopped at step %lld on %s (no checkpoint.dir: nothing "
                              "saved)\n"
                            : "tessera: checkpoint requested at step %lld by %s, but checkpoint.dir "
                              "is not set: nothing saved\n",
                   n, source.c_str());
      std::fflush(out);
    }
    return Status::Ok();
  }
  Phase(TrainPhase::kCheckpoint);
  if (!saved_this_step) RETURN_IF_ERROR(SaveNow(steps_done));
  if (!stop_requested) {
    Phase(TrainPhase::kIdle);
    return Status::Ok();
  }
  RETURN_IF_ERROR(checkpointer_->Poll(/*block=*/true));  // committed (or failed) on every rank
  Phase(TrainPhase::kIdle);
  if (!root) return Status::Ok();
  // Rank 0 committed it, so its view of the directory is the ground truth.
  auto committed = CommittedSteps(dir);
  if (committed.ok() && std::find(committed->begin(), committed->end(), steps_done) !=
                            committed->end()) {
    std::fprintf(out,
                 "tessera: stopped at step %lld on %s (checkpoint step %lld committed)\n", n,
                 source.c_str(), n);
  } else if (committed.ok() && !committed->empty()) {
    std::fprintf(out,
                 "tessera: stopped at step %lld on %s (its checkpoint failed; newest "
                 "committed: step %lld)\n",
                 n, source.c_str(), static_cast<long long>(committed->front()));
  } else {
    std::fprintf(out,
                 "tessera: stopped at step %lld on %s (its checkpoint failed; nothing "
                 "committed under %s)\n", n, source.c_str(), dir.c_str());
  }
  std::fflush(out);
  return Status::Ok();
}

}  // namespace tessera
