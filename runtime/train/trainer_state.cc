// runtime/train/trainer_state.cc — the Trainer's state beyond the step (trainer.h): resume and
// the state saved with a checkpoint, the global weights gathered for the final export, the
// last pipeline stage's values shared with every stage, and the supervisor's step-boundary
// requests (save now, stop). Split from trainer.cc, which keeps the loop itself.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "checkpoint/commit.h"
#include "runtime/train/rank_layout.h"
#include "runtime/train/trainer.h"

namespace tessera {

Status Trainer::ResumeFromCheckpoint() {
  ASSIGN_OR_RETURN(std::optional<LoadedCheckpoint> loaded, checkpointer_->Resume(*shards_));
  if (!loaded) return Status::Ok();
  return RestoreState(loaded->state, loaded->dir + "/manifest.json");
}

// The manifest's state object is untrusted: every field is checked before it is used.
Status Trainer::RestoreState(const JsonValue& state, const std::string& where) {
  auto count = [&](const char* key) -> Result<int64_t> {
    const JsonValue* v = state.Find(key);
    if (v == nullptr || !v->is_integer() || v->as_int() < 0) {
      return DataLoss(where + ": state." + key + " missing or not a non-negative integer");
    }
    return v->as_int();
  };
  ASSIGN_OR_RETURN(start_step_, count("step"));
  ASSIGN_OR_RETURN(const int64_t seed, count("seed"));
  if (static_cast<uint64_t>(seed) != config_.train.seed) {
    return InvalidArgument(where + ": saved with train.seed=" + std::to_string(seed) +
                           " but this config has " + std::to_string(config_.train.seed) +
                           ": the data order would differ from the run being resumed");
  }
  ASSIGN_OR_RETURN(const int64_t epoch, count("data_epoch"));
  ASSIGN_OR_RETURN(const int64_t index, count("data_index"));
  if (Status s = train_data_->Seek({epoch, index}); !s.ok()) {
    return DataLoss(where + ": data position does not fit this run's data: " + s.message());
  }
  if (loss_scaler_ && state.Find("loss_scale") == nullptr) {
    // Saved by an fp32 or bf16 run: fp16 starts from the configured scale.
    std::printf("tessera: %s has no fp16 loss scale (saved in another precision): starting from "
                "mixed_precision.initial_scale %g\n", where.c_str(), loss_scaler_->scale());
  } else if (loss_scaler_) {
    const JsonValue* scale = state.Find("loss_scale");
    ASSIGN_OR_RETURN(const int64_t good, count("loss_scale_good_steps"));
    ASSIGN_OR_RETURN(const int64_t skipped, count("loss_scale_skipped"));
    int exponent = 0;
    if (scale == nullptr || !scale->is_number() || !(scale->as_double() > 0) ||
        !std::isfinite(scale->as_double()) || std::frexp(scale->as_double(), &exponent) != 0.5) {
      return DataLoss(where + ": state.loss_scale missing or not a positive power of two "
                              "(was the checkpoint saved by an fp16 run?)");
    }
    loss_scaler_->Restore(scale->as_double(), good, skipped);
  }
  return Status::Ok();
}

JsonValue Trainer::StateJson(int64_t step) const {
  const DataPosition pos = train_data_->position();
  std::vector<std::pair<std::string, JsonValue>> m = {
      {"step", JsonValue::Integer(step)},
      {"data_epoch", JsonValue::Integer(pos.epoch)},
      {"data_index", JsonValue::Integer(pos.index)},
      {"adamw_step", JsonValue::Integer(shards_->adamw_step())},
      {"seed", JsonValue::Integer(static_cast<int64_t>(config_.train.seed))}};
  if (loss_scaler_) {
    m.push_back({"loss_scale", JsonValue::Number(loss_scaler_->scale())});
    m.push_back({"loss_scale_good_steps", JsonValue::Integer(loss_scaler_->good_steps())});
    m.push_back({"loss_scale_skipped", JsonValue::Integer(loss_scaler_->skipped_steps())});
  }
  return JsonValue::Object(std::move(m));
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
// its local pieces on its dp rank 0; those ranks (one per tp rank and pipeline stage) send
// their local buffers to rank 0, which places every element where that rank's partition says
// (rank_layout.h). Copies (replicated tensors, the tied embedding copy) land on the same
// global elements with the same bits.
Result<std::vector<float>> Trainer::GatherGlobalWeights() {
  ASSIGN_OR_RETURN(std::vector<float> local, shards_->GatherFull(/*root=*/0));
  if ((tp_ == nullptr && pp_ == nullptr) || dp_rank_ != 0) return local;
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

// The value the last pipeline stage has (the loss), on every stage.
Result<double> Trainer::FromLastStage(double value) {
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
  if (!checkpointer_->enabled()) {
    if (root) {
      std::fprintf(out, stop_requested
                            ? "tessera: stopped at step %lld on the supervisor's request (no "
                              "checkpoint.dir: nothing saved)\n"
                            : "tessera: checkpoint requested at step %lld, but checkpoint.dir is "
                              "not set: nothing saved\n",
                   n);
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
                 "tessera: stopped at step %lld on the supervisor's request (checkpoint step "
                 "%lld committed)\n", n, n);
  } else if (committed.ok() && !committed->empty()) {
    std::fprintf(out,
                 "tessera: stopped at step %lld on the supervisor's request (its checkpoint "
                 "failed; newest committed: step %lld)\n",
                 n, static_cast<long long>(committed->front()));
  } else {
    std::fprintf(out,
                 "tessera: stopped at step %lld on the supervisor's request (its checkpoint "
                 "failed; nothing committed under %s)\n", n, dir.c_str());
  }
  std::fflush(out);
  return Status::Ok();
}

}  // namespace tessera
