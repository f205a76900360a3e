// runtime/train/grad_sync.cc — bucketed all-reduce, ZeRO-2 reduce-scatter, partitioned norm,
// parameter all-gather (see grad_sync.h for the contract).
#include "runtime/train/grad_sync.h"

#include <chrono>
#include <cstring>

#include "optimizer/grad_clip.h"
#include "runtime/core/check.h"

namespace tessera {
namespace {

Tensor F32View(float* p, int64_t n) { return Tensor(p, DType::kF32, {n}); }

// Waits for every handle, bounded by ONE timeout in all: after the first failure (a hung
// peer makes every later op of the group time out too) the rest are only polled, so a job
// with many buckets still fails after comm.timeout_s, not after buckets x timeout_s.
Status WaitAll(std::vector<std::unique_ptr<Work>>& work) {
  Status first = Status::Ok();
  for (auto& w : work) {
    if (w == nullptr) continue;
    Status s = first.ok() ? w->Wait() : w->Wait(std::chrono::milliseconds(0));
    if (!s.ok() && first.ok()) first = s;
  }
  work.clear();
  return first;
}

}  // namespace

// ---- BucketedAllReduce ------------------------------------------------------------------------

BucketedAllReduce::BucketedAllReduce(Communicator* comm, float* grads, int64_t n,
                                     int64_t bucket_elems)
    : comm_(comm), grads_(grads), n_(n), bucket_(std::max<int64_t>(1, bucket_elems)) {
  TESSERA_CHECK(comm_ != nullptr && n_ >= 0);
  const int64_t buckets = (n_ + bucket_ - 1) / bucket_;
  remaining_.resize(static_cast<size_t>(buckets));
  Begin();
}

void BucketedAllReduce::Begin() {
  for (size_t k = 0; k < remaining_.size(); ++k) {
    remaining_[k] = BucketEnd(static_cast<int64_t>(k)) - BucketBegin(static_cast<int64_t>(k));
  }
  work_.clear();
  work_.resize(remaining_.size());
  launched_early_ = 0;
}

void BucketedAllReduce::Launch(int64_t k) {
  if (work_[k] != nullptr) return;
  const int64_t b = BucketBegin(k), e = BucketEnd(k);
  Tensor view = F32View(grads_ + b, e - b);
  work_[k] = comm_->AllReduce(view, ReduceOp::kSum, ReduceOrder::kRankOrder);
}

void BucketedAllReduce::OnReady(int64_t begin, int64_t end) {
  TESSERA_CHECK(0 <= begin && begin <= end && end <= n_);
  if (end == begin) return;
  // Buckets are numbered from the end: element x is in bucket (n - 1 - x) / bucket_.
  const int64_t first = (n_ - end) / bucket_, last = (n_ - 1 - begin) / bucket_;
  for (int64_t k = first; k <= last; ++k) {
    const int64_t overlap = std::min(end, BucketEnd(k)) - std::max(begin, BucketBegin(k));
    remaining_[k] -= overlap;
    TESSERA_CHECK_MSG(remaining_[k] >= 0, "gradient range [%lld, %lld) reported twice",
                      static_cast<long long>(begin), static_cast<long long>(end));
    if (remaining_[k] == 0) {
      Launch(k);
      ++launched_early_;
    }
  }
}

Status BucketedAllReduce::Finish() {
  // Launch order must be the same on every rank: the hook's order is (same model, same code),
  // and the rest go in bucket order.
  for (int64_t k = 0; k < num_buckets(); ++k) Launch(k);
  return WaitAll(work_);
}

// ---- PartitionReduceScatter -------------------------------------------------------------------

PartitionReduceScatter::PartitionReduceScatter(Communicator* comm, const Partitioning& part,
                                               int64_t piece_elems, MemoryTracker* tracker)
    : comm_(comm),
      part_(part),
      piece_(std::clamp<int64_t>(piece_elems, 1, part.padded_size())),
      scratch_(MemoryKind::kWorkspace,
               2 * (static_cast<size_t>(part.ranks() * piece_) * sizeof(float) + Arena::kAlignment),
               tracker) {
  TESSERA_CHECK(comm_ != nullptr && comm_->size() == part.ranks());
  for (Tensor& t : pack_) t = scratch_.Allocate(DType::kF32, {part.ranks() * piece_});
}

Status PartitionReduceScatter::Run(const float* grads, float* out) {
  const int dp = part_.ranks();
  const int64_t P = part_.padded_size(), n = part_.num_params();
  std::unique_ptr<Work> in_flight[2];
  int64_t index = 0;
  for (int64_t off = 0; off < P; off += piece_, ++index) {
    const int64_t len = std::min(piece_, P - off);
    const int slot = static_cast<int>(index % 2);
    if (in_flight[slot] != nullptr) {  // the buffer is reused two pieces later
      RETURN_IF_ERROR(in_flight[slot]->Wait());
      in_flight[slot].reset();
    }
    float* pack = pack_[slot].f32();
    for (int r = 0; r < dp; ++r) {  // piece [off, off+len) of partition r, zeros past n
      const int64_t src = part_.begin(r) + off;
      const int64_t real = std::clamp<int64_t>(n - src, 0, len);
      if (real > 0) std::memcpy(pack + r * len, grads + src, real * sizeof(float));
      if (real < len) std::memset(pack + r * len + real, 0, (len - real) * sizeof(float));
    }
    Tensor in = F32View(pack, dp * len);
    Tensor dst = F32View(out + off, len);
    in_flight[slot] = comm_->ReduceScatter(in, dst, ReduceOp::kSum, ReduceOrder::kRankOrder);
  }
  std::vector<std::unique_ptr<Work>> rest;
  for (auto& w : in_flight) rest.push_back(std::move(w));
  return WaitAll(rest);
}

// ---- norm, all-gather, scalars ------------------------------------------------------------------

Result<double> PartitionedSumOfSquares(Communicator* comm, const Partitioning& part,
                                       const float* part_grads) {
  TESSERA_CHECK(part.padded_size() % kNormBlock == 0);
  // This rank's real elements start block-aligned, so its partials are the global blocks
  // [begin / B, ...) of SumOfSquares; blocks past the real end (padding) stay 0.
  const int64_t real = part.real_size(comm->rank());
  std::vector<double> partial(static_cast<size_t>(NumNormBlocks(part.padded_size())), 0.0);
  BlockSumsOfSquares(part_grads, real, partial.data());
  ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(comm, partial));
  double total = 0.0;
  for (double p : all) total += p;  // global block order, as SumOfSquares adds them
  return total;
}

Status GatherPartitions(Communicator* comm, const Partitioning& part, float* params) {
  std::vector<std::unique_ptr<Work>> work;
  for (int r = 0; r < part.ranks(); ++r) {
    const int64_t b = part.real_begin(r), len = part.real_size(r);
    if (len == 0) continue;  // same decision on every rank
    Tensor view = F32View(params + b, len);
    work.push_back(comm->Broadcast(view, r));
  }
  return WaitAll(work);
}

Result<std::vector<double>> AllGatherDoubles(Communicator* comm, const std::vector<double>& mine) {
  static_assert(sizeof(double) == 2 * sizeof(int32_t));
  const int64_t m = static_cast<int64_t>(mine.size());
  std::vector<double> send(mine), all(static_cast<size_t>(m * comm->size()));
  if (m == 0) return all;
  Tensor in(send.data(), DType::kI32, {2 * m});
  Tensor out(all.data(), DType::kI32, {2 * m * comm->size()});
  RETURN_IF_ERROR(comm->AllGather(in, out)->Wait());
  return all;
}

}  // namespace tessera
