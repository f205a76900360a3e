// runtime/train/pipeline.cc — the pipeline executor of pipeline.h: walks this rank's schedule,
// feeding each chunk's ForwardStage / BackwardStage from the neighbouring stages.
#include "runtime/train/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/core/random.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

std::vector<int> PipelineContextsPerChunk(const PipelineOptions& o) {
  std::vector<int> in_flight(static_cast<size_t>(o.virtual_stages), 0);
  std::vector<int> most(static_cast<size_t>(o.virtual_stages), 1);
  for (const PipeOp& op : BuildPipelineSchedule(o.schedule, o.pp, o.micro_batches,
                                                o.virtual_stages, o.stage)) {
    int& n = in_flight[static_cast<size_t>(op.chunk)];
    n += op.kind == PipeOp::Kind::kForward ? 1 : -1;
    most[static_cast<size_t>(op.chunk)] = std::max(most[static_cast<size_t>(op.chunk)], n);
  }
  return most;
}

PipelineRunner::PipelineRunner(const PipelineOptions& options, std::vector<Transformer*> chunks,
                               ParamState* shards)
    : options_(options), chunks_(std::move(chunks)), shards_(shards) {}

PipelineRunner::~PipelineRunner() { (void)DrainSends(); }

Result<std::unique_ptr<PipelineRunner>> PipelineRunner::Create(const PipelineOptions& options,
                                                               Communicator* pp,
                                                               std::vector<Transformer*> chunks,
                                                               ParamState* shards,
                                                               std::function<void()> before_micro_batch) {
  RETURN_IF_ERROR(CheckPipelineSchedule(options.schedule, options.pp, options.micro_batches,
                                        options.virtual_stages));
  TESSERA_CHECK(static_cast<int>(chunks.size()) == options.virtual_stages);
  std::unique_ptr<PipelineRunner> r(new PipelineRunner(options, std::move(chunks), shards));
  r->before_micro_batch_ = std::move(before_micro_batch);
  r->ops_ = BuildPipelineSchedule(options.schedule, options.pp, options.micro_batches,
                                  options.virtual_stages, options.stage);
  if (pp == nullptr) {
    TESSERA_CHECK(options.pp == 1 && options.virtual_stages == 1 &&
                  options.schedule == PipelineSchedule::k1F1B);
    const Transformer& m = *r->chunks_.front();
    r->tokens_ = m.batch_size() * m.seq_len();
    return r;
  }
  TESSERA_CHECK(pp != nullptr && pp->size() == options.pp && pp->rank() == options.stage);
  r->pp_ = pp;
  for (int c = 0; c < options.virtual_stages; ++c) {
    for (int dir = 0; dir < 2; ++dir) {
      CommOptions co = pp->options();
      co.name = pp->name() + (dir == 0 ? ".fwd" : ".bwd") + std::to_string(c);
      ASSIGN_OR_RETURN(auto channel, pp->Split(0, pp->rank(), co));
      (dir == 0 ? r->forward_ : r->backward_).push_back(std::move(channel));
    }
  }
  if (r->chunks_.front()->config().tie_embeddings && options.pp > 1) {
    CommOptions co = pp->options();
    co.name = pp->name() + ".embedding";
    ASSIGN_OR_RETURN(r->embedding_, pp->Split(0, pp->rank(), co));
  }
  const Transformer& m = *r->chunks_.front();
  r->elems_ = m.stage_rows() * m.config().hidden_size;
  r->tokens_ = m.batch_size() * m.seq_len();
  r->recv_.resize(static_cast<size_t>(r->elems_));
  return r;
}

Status PipelineRunner::Send(Communicator& channel, const float* data, int peer) {
  std::vector<float> buffer;
  if (!free_buffers_.empty()) {
    buffer = std::move(free_buffers_.back());
    free_buffers_.pop_back();
  }
  buffer.assign(data, data + elems_);
  Tensor t(buffer.data(), DType::kF32, {elems_});
  PendingSend s{channel.Send(t, peer), std::move(buffer)};
  sends_.push_back(std::move(s));
  // Reclaim finished sends (their buffers are reused), oldest first.
  while (!sends_.empty() && sends_.front().work->IsCompleted()) {
    RETURN_IF_ERROR(sends_.front().work->Wait());
    free_buffers_.push_back(std::move(sends_.front().buffer));
    sends_.pop_front();
  }
  return Status::Ok();
}

Status PipelineRunner::Recv(Communicator& channel, float* data, int peer) {
  Tensor t(data, DType::kF32, {elems_});
  return channel.Recv(t, peer)->Wait();
}

Status PipelineRunner::DrainSends() {
  Status first = Status::Ok();
  while (!sends_.empty()) {
    Status s = sends_.front().work->Wait();
    if (!s.ok() && first.ok()) first = s;
    free_buffers_.push_back(std::move(sends_.front().buffer));
    sends_.pop_front();
  }
  return first;
}

Status PipelineRunner::PassStatus(const Transformer& model) const {
  RETURN_IF_ERROR(shards_->status());
  return model.comm_status();
}

Result<double> PipelineRunner::TrainOneStage(const int32_t* inputs, const int32_t* targets,
                                             float grad_scale, double* busy) {
  Transformer& model = *chunks_.front();
  double loss = 0;
  for (size_t i = 0; i < ops_.size(); i += 2) {
    // 1F1B on one stage alternates: micro k's forward, then its backward.
    TESSERA_CHECK(i + 1 < ops_.size() && ops_[i].kind == PipeOp::Kind::kForward &&
                  ops_[i + 1].kind == PipeOp::Kind::kBackward && ops_[i].micro == ops_[i + 1].micro);
    const int k = ops_[i].micro;
    if (before_micro_batch_) before_micro_batch_();
    shards_->BeginMicroBatch(k);
    model.SetDropoutKey(MicroKey(k));
    const auto t0 = Clock::now();
    loss += model.ForwardBackward(inputs + k * tokens_, targets + k * tokens_, grad_scale);
    *busy += Since(t0);
    RETURN_IF_ERROR(PassStatus(model));
  }
  return loss;
}

// The schedule over several virtual stages: each pass fed from its neighbour and sent on.
Result<double> PipelineRunner::TrainStages(const int32_t* inputs, const int32_t* targets,
                                           float grad_scale, double* busy) {
  double loss = 0;
  // (chunk, micro) -> activation context; each chunk's free contexts.
  std::map<std::pair<int, int>, int> ctx_of;
  std::vector<std::vector<int>> free_ctx(chunks_.size());
  for (size_t c = 0; c < chunks_.size(); ++c) {
    for (int k = chunks_[c]->contexts() - 1; k >= 0; --k) free_ctx[c].push_back(k);
  }
  std::vector<float> out(static_cast<size_t>(elems_));
  for (const PipeOp& op : ops_) {
    const int c = op.chunk, k = op.micro;
    Transformer& model = *chunks_[static_cast<size_t>(c)];
    const int32_t* in = inputs + k * tokens_;
    const int32_t* tg = targets + k * tokens_;
    if (op.kind == PipeOp::Kind::kForward) {
      if (!first_vs(c)) RETURN_IF_ERROR(Recv(*forward_[prev_chunk(c)], recv_.data(), prev_rank()));
      TESSERA_CHECK_MSG(!free_ctx[c].empty(), "pipeline: chunk %d has no free context", c);
      const int ctx = free_ctx[c].back();
      free_ctx[c].pop_back();
      ctx_of[{c, k}] = ctx;
      model.SetDropoutKey(MicroKey(k));
      const auto t0 = Clock::now();
      loss += model.ForwardStage(ctx, in, tg, recv_.data(), out.data());
      *busy += Since(t0);
      RETURN_IF_ERROR(PassStatus(model));
      if (!last_vs(c)) RETURN_IF_ERROR(Send(*forward_[c], out.data(), next_rank()));
    } else {
      if (!last_vs(c)) RETURN_IF_ERROR(Recv(*backward_[c], recv_.data(), next_rank()));
      const int ctx = ctx_of.at({c, k});
      ctx_of.erase({c, k});
      shards_->BeginMicroBatch(k);
      const auto t0 = Clock::now();
      model.BackwardStage(ctx, recv_.data(), out.data(), grad_scale);
      *busy += Since(t0);
      free_ctx[c].push_back(ctx);
      RETURN_IF_ERROR(PassStatus(model));
      if (!first_vs(c)) RETURN_IF_ERROR(Send(*backward_[prev_chunk(c)], out.data(), prev_rank()));
    }
  }
  return loss;
}

uint64_t PipelineRunner::MicroKey(int k) const {
  return step_key_ == 0 ? 0 : StreamKey(step_key_, static_cast<uint64_t>(options_.first_micro + k));
}

Result<double> PipelineRunner::TrainStep(const int32_t* inputs, const int32_t* targets,
                                         float grad_scale, uint64_t dropout_key) {
  const auto t_step = Clock::now();
  double busy = 0, loss = 0;
  step_key_ = dropout_key;
  Result<double> trained = one_stage() ? TrainOneStage(inputs, targets, grad_scale, &busy)
                                       : TrainStages(inputs, targets, grad_scale, &busy);
  step_key_ = 0;
  for (Transformer* chunk : chunks_) chunk->SetDropoutKey(0);  // evaluation drops nothing
  ASSIGN_OR_RETURN(loss, std::move(trained));
  RETURN_IF_ERROR(DrainSends());
  stats_.busy_seconds = busy;
  stats_.step_seconds = Since(t_step);
  if (stats_.steps++ > 0) {
    stats_.total_busy_seconds += stats_.busy_seconds;
    stats_.total_step_seconds += stats_.step_seconds;
  }
  return loss;
}

Result<double> PipelineRunner::Forward(const int32_t* inputs, const int32_t* targets) {
  if (one_stage()) {
    const double loss = chunks_.front()->Forward(inputs, targets);
    RETURN_IF_ERROR(PassStatus(*chunks_.front()));
    return loss;
  }
  std::vector<float> out(static_cast<size_t>(elems_));
  double loss = 0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const int ci = static_cast<int>(c);
    if (!first_vs(ci)) RETURN_IF_ERROR(Recv(*forward_[prev_chunk(ci)], recv_.data(), prev_rank()));
    chunks_[c]->RecordRouting(false);  // evaluation: no routing statistics
    loss += chunks_[c]->ForwardStage(0, inputs, targets, recv_.data(), out.data());
    chunks_[c]->RecordRouting(true);
    RETURN_IF_ERROR(PassStatus(*chunks_[c]));
    if (!last_vs(ci)) RETURN_IF_ERROR(Send(*forward_[c], out.data(), next_rank()));
  }
  RETURN_IF_ERROR(DrainSends());
  return loss;
}

Status PipelineRunner::SyncTiedEmbeddings() {
  if (!embedding_) return Status::Ok();
  const int p = options_.pp, stage = options_.stage;
  if (stage != 0 && stage != p - 1) return Status::Ok();
  // The first stage's embedding unit is its chunk 0's unit 0; the last stage's copy is the
  // unit 0 of its last chunk. Their layouts are the same, so are the ZeRO pieces.
  const Transformer& chunk = stage == 0 ? *chunks_.front() : *chunks_.back();
  const int chunk_index = stage == 0 ? 0 : options_.virtual_stages - 1;
  const int unit = chunk.partition().chunk_unit_begin(chunk_index);
  std::span<float> mine = shards_->ReducedGrads(unit);
  std::vector<float> other(mine.size());
  const int peer = stage == 0 ? p - 1 : 0;
  Tensor out(mine.data(), DType::kF32, {static_cast<int64_t>(mine.size())});
  Tensor in(other.data(), DType::kF32, {static_cast<int64_t>(other.size())});
  auto send = embedding_->Send(out, peer);
  auto recv = embedding_->Recv(in, peer);
  RETURN_IF_ERROR(recv->Wait());
  RETURN_IF_ERROR(send->Wait());
  // a + b == b + a in IEEE arithmetic: both stages get the same bits.
  for (size_t i = 0; i < mine.size(); ++i) mine[i] += other[i];
  return Status::Ok();
}

}  // namespace tessera
