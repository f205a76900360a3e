// runtime/train/expert_split_state.cc — dense and expert parameter state over their own
// groups (expert_split_state.h).
#include "runtime/train/expert_split_state.h"

#include <algorithm>
#include <cstring>

#include "runtime/core/check.h"
#include "runtime/train/grad_sync.h"

namespace tessera {

Result<std::unique_ptr<ExpertSplitState>> ExpertSplitState::Create(
    const ParamShardsOptions& options, const AdamWConfig& adamw, std::vector<int64_t> bounds,
    const std::vector<ParamRange>& ranges, Communicator* dense_dp, Communicator* expert_dp,
    Communicator* ep, MemoryTracker* tracker) {
  TESSERA_CHECK(ep != nullptr && ep->size() >= 2 && bounds.size() >= 2);
  std::unique_ptr<ExpertSplitState> s(new ExpertSplitState());
  const int U = static_cast<int>(bounds.size()) - 1;
  s->is_expert_.assign(static_cast<size_t>(U), false);
  for (int u : options.expert_units) s->is_expert_[static_cast<size_t>(u)] = true;
  s->expert_dp_ = expert_dp;
  s->ep_ = ep;
  // Each part's bounds: its own units at their sizes, the other kind's empty.
  std::vector<bool> dense_units(s->is_expert_.size());
  for (size_t u = 0; u < dense_units.size(); ++u) dense_units[u] = !s->is_expert_[u];
  s->dense_.units = UnitSubset(bounds, dense_units);
  s->experts_.units = UnitSubset(bounds, s->is_expert_);
  const std::vector<ParamRange> dense_ranges = s->dense_.units.ToPart(ranges);
  const std::vector<ParamRange> expert_ranges = s->experts_.units.ToPart(ranges);
  // On disk, each part has its own file and half the rank's buffer pool.
  ParamShardsOptions dense_options = options, expert_options = options;
  if (options.disk) {
    dense_options.disk->path += "-dense";
    expert_options.disk->path += "-experts";
    dense_options.disk->pool_bytes /= 2;
    expert_options.disk->pool_bytes /= 2;
  }
  ASSIGN_OR_RETURN(s->dense_.shards, ParamShards::Create(dense_options, adamw, s->dense_.units.bounds(),
                                                          dense_ranges, dense_dp, tracker));
  ASSIGN_OR_RETURN(s->experts_.shards, ParamShards::Create(expert_options, adamw, s->experts_.units.bounds(),
                                                            expert_ranges, expert_dp, tracker));
  return s;
}

Status ExpertSplitState::Fail(const Status& s) {
  if (status_.ok()) {
    status_ = s;
    ep_->Abort(s);
  }
  return s;
}

const Status& ExpertSplitState::status() const {
  if (!dense_.shards->status().ok()) return dense_.shards->status();
  if (!experts_.shards->status().ok()) return experts_.shards->status();
  return status_;
}

Status ExpertSplitState::Load(const Fill& fill) {
  RETURN_IF_ERROR(dense_.shards->Load(dense_.units.ToModel(fill)));
  return experts_.shards->Load(experts_.units.ToModel(fill));
}

Status ExpertSplitState::LoadMoments(const Fill& fill_m, const Fill& fill_v, int64_t adamw_step) {
  for (Part* part : {&dense_, &experts_}) {
    RETURN_IF_ERROR(part->shards->LoadMoments(part->units.ToModel(fill_m), part->units.ToModel(fill_v), adamw_step));
  }
  return Status::Ok();
}

std::vector<const OffloadFile*> ExpertSplitState::OffloadFiles() const {
  std::vector<const OffloadFile*> files = dense_.shards->OffloadFiles();
  for (const OffloadFile* f : experts_.shards->OffloadFiles()) files.push_back(f);
  return files;
}

void ExpertSplitState::BeginStep() {
  dense_.shards->BeginStep();
  experts_.shards->BeginStep();
}

void ExpertSplitState::BeginMicroBatch(int64_t micro) {
  dense_.shards->BeginMicroBatch(micro);
  experts_.shards->BeginMicroBatch(micro);
}

Status ExpertSplitState::FinishGradients() {
  const Status dense = dense_.shards->FinishGradients();
  const Status experts = experts_.shards->FinishGradients();
  return !dense.ok() ? dense : experts;
}

Result<double> ExpertSplitState::GradSumOfSquares() { return GradSumOfSquaresExcluding({}); }

Result<double> ExpertSplitState::GradSumOfSquaresExcluding(
    const std::vector<std::pair<int64_t, int64_t>>& exclude) {
  // A part's failure aborts the ep group too, so ep peers waiting below fail at once.
  auto dense = dense_.shards->GradSumOfSquaresExcluding(dense_.units.ToPart(exclude));
  if (!dense.ok()) return Fail(dense.status());
  auto mine = experts_.shards->GradSumOfSquaresExcluding(experts_.units.ToPart(exclude));
  if (!mine.ok()) return Fail(mine.status());
  auto all = AllGatherDoubles(ep_, {*mine});
  if (!all.ok()) return Fail(all.status());
  double experts = 0.0;
  for (double v : *all) experts += v;  // ep rank order: the same sum on every rank
  return *dense + experts;
}

std::span<float> ExpertSplitState::ReducedGrads(int unit) {
  return Owner(unit).shards->ReducedGrads(unit);
}

void ExpertSplitState::ScaleGradients(float factor) {
  dense_.shards->ScaleGradients(factor);
  experts_.shards->ScaleGradients(factor);
}

Status ExpertSplitState::Step(float lr, float grad_scale) {
  RETURN_IF_ERROR(dense_.shards->Step(lr, grad_scale));
  return experts_.shards->Step(lr, grad_scale);
}

Result<std::vector<float>> ExpertSplitState::GatherFull(int root) {
  TESSERA_CHECK(root == 0);
  auto dense_or = dense_.shards->GatherFull(root);
  if (!dense_or.ok()) return Fail(dense_or.status());
  auto experts_or = experts_.shards->GatherFull(root);
  if (!experts_or.ok()) return Fail(experts_or.status());
  std::vector<float> dense = std::move(*dense_or), experts = std::move(*experts_or);
  if (expert_dp_ != nullptr && expert_dp_->rank() != root) return std::vector<float>();
  // The dense values reached (dp 0, ep 0) only: it broadcasts them over its ep group, in
  // pieces (one MPI message holds at most INT_MAX elements).
  constexpr int64_t kPiece = int64_t{1} << 28;
  const int64_t n_dense = dense_.units.size();
  dense.resize(static_cast<size_t>(n_dense));
  for (int64_t at = 0; at < n_dense; at += kPiece) {
    Tensor t(dense.data() + at, DType::kF32, {std::min(kPiece, n_dense - at)});
    if (Status st = ep_->Broadcast(t, 0)->Wait(); !st.ok()) return Fail(st);
  }
  std::vector<float> full(static_cast<size_t>(dense_.units.model_bounds().back()));
  dense_.units.Place(dense, full.data());
  experts_.units.Place(experts, full.data());
  return full;
}

std::vector<ParamState::SaveSpan> ExpertSplitState::SaveSpans() const {
  std::vector<SaveSpan> spans;
  for (const Part* part : {&dense_, &experts_}) part->units.AppendModelSpans(part->shards->SaveSpans(), &spans);
  std::sort(spans.begin(), spans.end(),
            [](const SaveSpan& a, const SaveSpan& b) { return a.begin < b.begin; });
  return spans;
}

std::string ExpertSplitState::Describe() const {
  return "dense: " + dense_.shards->Describe() + "; experts (ep=" + std::to_string(ep_->size()) +
         "): " + experts_.shards->Describe();
}

}  // namespace tessera
